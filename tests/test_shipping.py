"""autotune.shipping: the run's models packed for nodes that share no path, unpacked once each."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from autotune import model_config as mcfg
from autotune import shipping
from autotune.objective import Sla
from autotune.prepare import Prepared
from autotune.rundir import RunDir, RunRecord
from autotune.search_space import Candidate, bundled, load_search_space
from autotune.settings import Launch, RunSettings, Traffic
from autotune.traffic import Loader

SLA = Sla(95, 60.0)


def _record(run_id: str = "20261205-101010") -> RunRecord:
    return RunRecord(
        run_id=run_id, model="toy", repository=Path("."), sla=SLA, launch=Launch(),
        protocol="http", study_name="s", storage=None, original_config="", original_digest="", started="",
    )  # fmt: skip


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "toy" / "1").mkdir(parents=True)
    (repo / "toy" / "config.pbtxt").write_text('name: "toy"\n')
    (tmp_path / "weights.bin").write_bytes(b"\x00\x01")
    (repo / "toy" / "1" / "model.py").write_text("print('toy')\n")
    (repo / "toy" / "1" / "weights.bin").symlink_to(tmp_path / "weights.bin")  # a link: its file goes
    (repo / "other").mkdir()  # a model the run does not serve: it stays
    return repo


def test_a_run_is_packed_once_and_unpacked_once_per_machine_with_a_run_directory_of_its_own(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    data = shipping.pack(repo, ["toy"])
    fetched: list[object] = []

    def fetch(ref: object) -> bytes:
        fetched.append(ref)
        return data

    bundle = shipping.Bundle(_record(), ["ref"], len(data), shipping.digest_of(data))
    repo_here, run_here = shipping.unpack(bundle, fetch, tmp_path / "node")
    assert (repo_here / "toy" / "1" / "weights.bin").read_bytes() == b"\x00\x01"
    assert not (repo_here / "toy" / "1" / "weights.bin").is_symlink()
    assert not (repo_here / "other").exists()
    assert RunDir.load(run_here).record.run_id == bundle.record.run_id
    assert shipping.unpack(bundle, fetch, tmp_path / "node") == (repo_here, run_here) and fetched == ["ref"]
    assert sorted(p.name for p in repo_here.parent.iterdir()) == ["repo-" + bundle.digest[:12], "run"]
    assert shipping.forget(bundle.record.run_id, tmp_path / "node") == 1  # the run ended: it all goes
    assert not repo_here.parent.exists()  # its logs went back with each task
    assert shipping.unpack(bundle, fetch, tmp_path / "node") == (repo_here, run_here)  # --resume: again
    assert repo_here.is_dir() and fetched == ["ref", "ref"]


def test_a_machine_sees_a_run_only_with_its_model_and_its_record_at_the_drivers_paths(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    run = RunDir.create(tmp_path / "reports" / "run", _record("r1"))
    assert shipping.sees(str(repo / "toy"), str(run.path), "r1")
    assert not shipping.sees(str(repo / "toy"), str(run.path), "r2")  # another run's folder
    assert not shipping.sees(str(tmp_path / "gone" / "toy"), str(run.path), "r1")
    assert not shipping.sees(str(repo / "toy"), str(tmp_path / "gone"), "r1")


def test_a_bundle_with_an_entry_outside_the_repository_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        entry = tarfile.TarInfo("../escaped.txt")
        tar.addfile(entry, io.BytesIO(b""))
    data = buffer.getvalue()
    bundle = shipping.Bundle(_record(), ["ref"], len(data), shipping.digest_of(data))
    with pytest.raises(ValueError, match="escaped"):
        shipping.unpack(bundle, lambda _: data, tmp_path / "node")
    assert not (tmp_path / "escaped.txt").exists()
    assert [p.name for p in (tmp_path / "node" / bundle.record.run_id).iterdir()] == ["run"]


def test_a_node_reads_the_models_it_unpacked(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    settings = RunSettings(model="toy", repository=repo, sla=SLA)
    space = load_search_space(bundled("default"))
    base = Candidate(1, "KIND_CPU", (), 8, False, (), 0, False)
    prep = Prepared(
        settings, mcfg.ModelConfig(name="toy"), repo / "toy", space, base, None, Loader(Traffic())
    )
    assert shipping.served_models(prep) == ["toy"]
    moved = shipping.here(prep, tmp_path / "node" / "repo-1")
    assert moved.settings.repository == tmp_path / "node" / "repo-1"
    assert moved.model_dir == tmp_path / "node" / "repo-1" / "toy" and moved.space == prep.space


def test_a_task_brings_back_the_logs_it_wrote_and_no_other(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", _record())
    run.log("trial-000.log").parent.mkdir(parents=True, exist_ok=True)
    run.log("trial-000.log").write_text("before\n")
    before = shipping.logs_in(run.path)
    run.log("trial-001.log").write_text("served\n")
    run.log("trial-000.log").write_text("before, and more\n")  # another task's: not this one's
    assert shipping.new_logs(run.path, before) == {"trial-001.log": b"served\n"}
    assert shipping.logs_in(tmp_path / "none") == set()
