"""Several workers on one study through Optuna's RDB storage on a real PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import CLI, toy_run_args
from tests.postgres import binaries, postgres_server

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture(scope="module")
def postgres_url():  # type: ignore[no-untyped-def]
    if binaries() is None:
        pytest.skip(
            "PostgreSQL server binaries not installed (apt-get install postgresql; make test-env does)"
        )
    root = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # pytest's tmp dirs are closed to other users
    try:
        with postgres_server(root) as url:
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_share_one_study(
    postgres_url: str, toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    from autotune.reload import reload_outcome

    def worker(i: int) -> subprocess.Popen[str]:
        reports = tmp_path / f"worker{i}"
        extra = ["--max-trials", "4", "--repeats", "1"]
        extra += ["--storage", postgres_url, "--study-name", "toy-shared"]
        argv = [*CLI, *toy_run_args(toy_repo, small_space, reports, *extra)]
        # workers of one study run on machines of their own: each has its machine's lock
        env = {**os.environ, "AUTOTUNE_LOCK_FILE": str(tmp_path / f"machine{i}.lock")}
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env,
        )  # fmt: skip

    procs = [worker(0), worker(1)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n\n".join(outputs)
    run_dir = next((tmp_path / "worker0" / "toy").iterdir())
    outcome = reload_outcome(run_dir, postgres_url)
    finished = [t for t in outcome.trials if t.state in ("COMPLETE", "FAIL")]
    assert 4 <= len(finished) <= 5  # the budget is shared (each worker may start one as it ends)
    assert sum(t.baseline for t in outcome.trials) == 1  # the baseline was queued once
    import optuna

    study = optuna.load_study(study_name="toy-shared", storage=postgres_url)
    workers = {t.user_attrs.get("worker") for t in study.trials}
    assert len(workers) == 2, "both workers ran trials of the one study"
