"""Trials on a real Ray cluster (autotune.fleet): two nodes on this machine, real raylets, each
node offering one trial at a time; the toy model served by the local launcher on the nodes."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.errors import UsageError
from autotune.launch import free_ports
from autotune.objective import Sla
from autotune.search_space import Candidate
from autotune.settings import RunSettings
from autotune.traffic import check_rates
from tests.conftest import CLI, servers_of, toy_run_args

# every process of the cluster (head, node, driver, workers) on 127.0.0.1, never the interface
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
SAME = ("--max-trials", "4", "--seed", "1")  # the space's four configs, each measured
NODE = {"num_cpus": 1, "resources": {"autotune": 1}, "object_store_memory": 100 * 2**20}


@contextlib.contextmanager
def _cluster(head: dict[str, str] | None = None, second: bool = True) -> Iterator[Any]:
    """Two nodes (one without ``second``); ``head``: environment variables of the head node's
    processes alone."""
    before = {k: os.environ.get(k) for k in LOOPBACK}
    os.environ.update(LOOPBACK)  # before Ray is imported: it reads them then
    pytest.importorskip("ray", reason="Ray is the optional extra autotune[ray] (make install has it)")
    from ray.cluster_utils import Cluster

    made = Cluster(
        initialize_head=True, head_node_args={**NODE, "include_dashboard": False, "env_vars": head}
    )
    try:
        if second:
            made.add_node(**NODE)
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def cluster() -> Iterator[Any]:
    with _cluster() as made:
        yield made


def _run(
    cluster: Any, repo: Path, space: Path, reports: Path, *extra: str, check: bool = False
) -> subprocess.Popen[str]:
    """``autotune run --ray`` on the toy model; with ``check``, its winner's open-loop check too."""
    argv = [*CLI, *toy_run_args(repo, space, reports, "--repeats", "1", "--ray", cluster.address, *extra)]
    argv = [a for a in argv if a != "--no-open-loop-check"] if check else argv
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **LOOPBACK},
    )  # fmt: skip


def _trials(run_dir: Path) -> list[Any]:
    """The run's trials as Optuna holds them (their start and end times included)."""
    import optuna

    name = json.loads((run_dir / "run.json").read_text())["study_name"]
    return optuna.load_study(study_name=name, storage=f"sqlite:///{run_dir / 'study.db'}").trials


def test_a_trial_asks_ray_for_the_gpus_its_candidate_runs_on() -> None:
    from autotune.fleet import gpus_of

    prep: Any = SimpleNamespace(server_gpus=4)
    cpu = Candidate(2, "KIND_CPU", (), 8, True, (), 0, False)
    assert gpus_of(prep, cpu) == 0  # Ray hides every GPU from it
    assert gpus_of(prep, replace(cpu, kind="KIND_GPU", gpus=(0, 1))) == 2
    assert gpus_of(prep, replace(cpu, kind="KIND_GPU")) == 4  # on every GPU: the server's count
    from autotune.finals import OpenLoopJob
    from autotune.fleet import RayWorkers

    winner: Any = SimpleNamespace(candidate=replace(cpu, kind="KIND_GPU", gpus=(0, 1)))
    workers: Any = SimpleNamespace(prep=prep)
    assert RayWorkers._round_gpus(workers, OpenLoopJob(winner, 100.0)) == 2  # the open-loop check's too


def test_trials_at_once_need_a_cluster() -> None:
    with pytest.raises(UsageError, match="needs --ray"):
        RunSettings(model="toy", repository=Path("."), sla=Sla(95, 60.0), trials_at_once=2)
    with pytest.raises(UsageError, match=">= 1"):
        RunSettings(model="toy", repository=Path("."), sla=Sla(95, 60.0), ray="auto", trials_at_once=0)


# Ray's tasks that ended, then a cancel of each, as the race's rounds were: Ray 2.60 aborted the
# driver ("Tried to complete task that was not pending") within 20 rounds in five of five tries.
ENDED_THEN_CANCELLED = """
import os, signal, sys, time, ray
from autotune.fleet import RayWorkers
# Ray's cancel raises KeyboardInterrupt in the task; a worker that inherits an ignored SIGINT (a
# shell's background job, as in CI) never sees it. Ray's workers start from this driver here.
signal.signal(signal.SIGINT, signal.default_int_handler)
# address="local": a cluster of its own, though a stale /tmp/ray/ray_current_cluster names another
ray.init(address="local", num_cpus=2, log_to_driver=False, logging_level="ERROR")
quick = ray.remote(max_retries=3, retry_exceptions=False)(lambda s: time.sleep(s))
workers = RayWorkers.__new__(RayWorkers)
workers.ray = ray
for _ in range(300):
    refs = [quick.remote(0.01) for _ in range(2)]
    ray.get(refs)
    workers._cancel(refs)
started = sys.argv[1]
def busy():  # a trial in flight: says it runs, then works for a minute (Ray interrupts Python code)
    open(started, "w").close()
    for _ in range(600):
        time.sleep(0.1)
slow = ray.remote(busy).remote()
while not os.path.exists(started):
    time.sleep(0.05)
began = time.monotonic()
workers._cancel([slow])
print("cancelled in", round(time.monotonic() - began, 1), "s")
"""


@pytest.mark.integration
@pytest.mark.ray
def test_tasks_that_ended_are_not_cancelled_and_one_in_flight_is(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is the optional extra autotune[ray] (make install has it)")
    done = subprocess.run(
        [sys.executable, "-c", ENDED_THEN_CANCELLED, str(tmp_path / "started")], capture_output=True,
        text=True, timeout=300, env={**os.environ, **LOOPBACK},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    took = float(done.stdout.split()[-2])
    assert took < 30  # the task in flight was cancelled: its minute of work did not run out


@pytest.mark.integration
@pytest.mark.ray
def test_two_nodes_measure_two_trials_at_once_each_names_its_node_and_the_winner_is_a_local_runs(
    cluster: Any, toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    proc = _run(cluster, toy_repo, small_space, tmp_path / "reports", *SAME, check=True)
    out = proc.communicate(timeout=500)[0]
    assert proc.returncode == 0, out
    run_dir = next((tmp_path / "reports" / "toy").iterdir())
    trials = [t for t in _trials(run_dir) if t.state.name == "COMPLETE"]
    assert len(trials) >= 2, out
    nodes = {t.user_attrs["node"] for t in trials}
    check = json.loads((run_dir / "run.json").read_text())["open_loop"]  # two rates at once, one a node
    rates = [p["request_rate"] for p in check["points"]]
    assert rates == check_rates(check["credited_rate"])[: len(rates)] and len(rates) >= 2, check
    assert {p["node"] for p in check["points"][:2]} == nodes, check
    assert len(nodes) == 2 and all(nodes), nodes  # both nodes measured, each trial names its own
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), spans  # two at once
    record = json.loads((run_dir / "run.json").read_text())
    assert {str(t.number): t.user_attrs["node"] for t in trials}.items() <= record["nodes"].items()
    assert record["made"]["triton"]  # the nodes' servers' version, though only this process writes run.json
    for t in trials:  # each point names the node that measured it, each race round too
        assert {p["node"] for p in t.user_attrs["measurement"]["points"]} == {t.user_attrs["node"]}
    rounds = [p for v in record["verifications"] for p in v["points"]]
    assert rounds and all(p["node"] in nodes for p in rounds), rounds
    csv = (run_dir / "trials.csv").read_text().splitlines()
    column = csv[0].split(",").index("node")
    assert all(row.split(",")[column] for row in csv[1:] if ",COMPLETE," in row), csv
    assert servers_of(run_dir) == []
    alone = toy_run_args(toy_repo, small_space, tmp_path / "local", "--repeats", "1", *SAME)
    local = subprocess.run(  # the same tuning on this machine alone, one trial at a time
        [*CLI, *alone], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=500
    )
    assert local.returncode == 0, local.stderr
    here = next((tmp_path / "local" / "toy").iterdir())
    assert (run_dir / "winner.pbtxt").read_text() == (here / "winner.pbtxt").read_text()  # the same winner


@pytest.mark.integration
@pytest.mark.ray
def test_a_node_that_cannot_serve_the_model_fails_its_trial_and_is_left_out_of_the_run(
    toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    lib = tmp_path / "lib"  # a module the model needs: only the head node has it
    lib.mkdir()
    (lib / "toy_needs_this.py").write_text("", encoding="utf-8")
    config = toy_repo / "toy" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "needs_module" value { string_value: "toy_needs_this" } }\n'
    )
    with _cluster(head={"TOY_MODULE_PATH": str(lib)}) as made:
        proc = _run(made, toy_repo, small_space, tmp_path / "reports", *SAME)
        out = proc.communicate(timeout=500)[0]
    assert proc.returncode == 0, out
    run_dir = next((tmp_path / "reports" / "toy").iterdir())
    trials = _trials(run_dir)
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert failed, out  # two at once: the other node got a trial
    assert all("No module named 'toy_needs_this'" in t.user_attrs["reason"] for t in failed), failed
    assert all("not used again in this run" in t.user_attrs["reason"] for t in failed), failed
    left_out = {t.user_attrs["node"] for t in failed}
    assert len(left_out) == 1 and f"node {next(iter(left_out))} is left out of this run" in out, out
    measured = [t for t in trials if t.state.name == "COMPLETE"]
    assert measured and all(t.user_attrs["node"] not in left_out for t in measured)
    ended = [t.user_attrs["candidate"] for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert all(t.user_attrs["candidate"] in ended for t in failed)  # each measured again elsewhere
    assert (run_dir / "winner.pbtxt").exists()
    assert servers_of(run_dir) == []


@contextlib.contextmanager
def _blind_node(made: Any, hidden: Path) -> Iterator[Path]:
    """A second node that does not see ``hidden``: its raylet started in a mount namespace of its
    own, with an empty file system mounted over that folder (root only; else the test skips).
    Yields where this process sees that node's ``hidden`` (through /proc)."""
    import ray

    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.decode().strip()}")
    script = 'mount -t tmpfs tmpfs "$0" && exec "$1" "$2" "$3"'
    env = {**os.environ, **LOOPBACK, "XDG_CACHE_HOME": str(hidden / "cache")}  # its cache in the tmpfs too
    unshare = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]
    node = subprocess.Popen(
        [*unshare, str(hidden), sys.executable, str(Path(__file__).with_name("fleet_node.py")), made.address],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        ray.init(address=made.address, log_to_driver=False, logging_level="ERROR")
        try:
            deadline = time.monotonic() + 60
            while sum(n["Alive"] for n in ray.nodes()) < 2:
                assert time.monotonic() < deadline and node.poll() is None, "the second node did not join"
                time.sleep(0.2)
        finally:
            ray.shutdown()
        yield Path(f"/proc/{node.pid}/root") / hidden.relative_to("/")
    finally:
        node.terminate()  # the node stops its raylet and its workers
        node.wait(timeout=60)


@pytest.mark.integration
@pytest.mark.ray
def test_a_node_that_shares_no_path_gets_the_models_through_the_object_store(
    toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    with _cluster(second=False) as made, _blind_node(made, tmp_path) as seen_there:
        proc = _run(made, toy_repo, small_space, tmp_path / "reports", *SAME)
        out = proc.communicate(timeout=500)[0]
        kept_there = list((seen_there / "cache" / "autotune" / "shipped").iterdir())
    assert proc.returncode == 0, out
    assert "1 of the cluster's 2 nodes do not see this run's files" in out, out
    run_dir = next((tmp_path / "reports" / "toy").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["shipped"]["bytes"] > 0 and record["shipped"]["nodes"] == 1
    trials = [t for t in _trials(run_dir) if t.state.name == "COMPLETE"]
    assert len({t.user_attrs["node"] for t in trials}) == 2, out  # the blind node measured too
    assert all(run_dir.joinpath("logs", f"trial-{t.number:03d}.log").stat().st_size for t in trials)
    assert kept_there == []  # the run ended: the node keeps nothing of it, its logs came back
    assert (run_dir / "winner.pbtxt").exists()
    assert servers_of(run_dir) == []


@pytest.mark.integration
@pytest.mark.ray
def test_a_node_that_joins_during_the_run_is_asked_whether_it_sees_the_files_and_offers_trials(
    toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    space = tmp_path / "wider.yaml"  # eight configs: trials left for the node that joins
    space.write_text(small_space.read_text().replace("count: [1, 2]", "count: [1, 2, 3, 4]"), "utf-8")
    with _cluster(second=False) as made:
        proc = _run(made, toy_repo, space, tmp_path / "reports", "--max-trials", "8", "--patience", "8")
        run_dir = _when_serving(proc, tmp_path / "reports", 1)  # one node, one trial: then one joins
        with _blind_node(made, tmp_path):
            out = proc.communicate(timeout=500)[0]
    assert proc.returncode == 0, out
    assert "1 node that joined does not see this run's files" in out, out
    assert json.loads((run_dir / "run.json").read_text())["shipped"]["nodes"] == 1
    trials = [t for t in _trials(run_dir) if t.state.name == "COMPLETE"]
    assert len({t.user_attrs["node"] for t in trials}) == 2, out  # the node that joined measured too
    assert all(run_dir.joinpath("logs", f"trial-{t.number:03d}.log").stat().st_size for t in trials)
    assert servers_of(run_dir) == []


def _when_serving(proc: subprocess.Popen[str], reports: Path, servers: int) -> Path:
    """The run's directory, once ``servers`` of its servers run at once."""
    deadline, runs = time.monotonic() + 300, reports / "toy"
    while time.monotonic() < deadline and proc.poll() is None:
        run_dir = next(runs.iterdir(), None) if runs.exists() else None
        if run_dir is not None and len(servers_of(run_dir)) >= servers:
            return run_dir
        time.sleep(0.2)
    raise AssertionError(proc.communicate()[0])


def _when_both_nodes_serve(proc: subprocess.Popen[str], reports: Path) -> Path:
    """The run's directory, once a server runs on each node (two trials at once)."""
    return _when_serving(proc, reports, 2)


@pytest.mark.integration
@pytest.mark.ray
def test_a_node_lost_mid_trial_the_run_completes_every_trial_counted_once(
    cluster: Any, toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    proc = _run(cluster, toy_repo, small_space, tmp_path / "reports", "--max-trials", "4", "--seed", "2")
    run_dir = _when_both_nodes_serve(proc, tmp_path / "reports")
    cluster.remove_node(cluster.list_all_nodes()[-1])  # the second node, mid-trial
    out = proc.communicate(timeout=500)[0]
    assert proc.returncode == 0, out
    trials = _trials(run_dir)
    assert all(t.state.name in ("COMPLETE", "PRUNED", "FAIL") for t in trials), trials
    assert len(trials) <= 4  # the lost trial ran again within its own trial: counted once
    assert servers_of(run_dir) == []


@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.parametrize("sig", [signal.SIGINT])  # kill -9: see docs/fleet.md, Faults
def test_the_driver_stopped_leaves_no_server_on_a_node_and_the_same_command_resumes(
    sig: signal.Signals, cluster: Any, toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    args = (cluster, toy_repo, small_space, tmp_path / "reports", "--max-trials", "4", "--seed", "3")
    proc = _run(*args)
    run_dir = _when_both_nodes_serve(proc, tmp_path / "reports")
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0]
    if sig == signal.SIGINT:  # kill -9 says nothing: its trials in flight stay RUNNING, asked again
        assert proc.returncode == 130 and "--resume" in out, out
    deadline = time.monotonic() + 10
    while servers_of(run_dir) and time.monotonic() < deadline:  # each node's guard ends its server
        time.sleep(0.2)
    assert servers_of(run_dir) == []
    flying = [t for t in _trials(run_dir) if t.user_attrs.get("interrupted") or t.state.name == "RUNNING"]
    assert len(flying) >= 2  # both trials in flight: measured again
    again = _run(*args)
    out = again.communicate(timeout=500)[0]
    assert again.returncode == 0 and "resuming the unfinished run" in out, out
    trials = _trials(run_dir)
    assert all(t.state.name != "RUNNING" for t in trials)
    assert sum(not t.user_attrs.get("interrupted") for t in trials) <= 4
    assert servers_of(run_dir) == []


@pytest.mark.integration
@pytest.mark.ray
def test_a_cluster_with_token_authentication_admits_a_driver_that_names_it_once_told_how(
    toy_repo: Path, small_space: Path, tmp_path: Path
) -> None:
    """A cluster made by ``ray start --head`` where Ray's token authentication is on: a driver that
    names its address sends no token unless RAY_AUTH_MODE=token. The error says so; so told, it runs."""
    pytest.importorskip("ray", reason="Ray is the optional extra autotune[ray] (make install has it)")
    (port,) = free_ports(1)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: its sockets' paths must fit 107 bytes
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address",
         "127.0.0.1", "--port", str(port), "--num-cpus", "1", "--resources", '{"autotune": 1}',
         "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", temp],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**plain, **LOOPBACK, **token},
    )  # fmt: skip
    try:
        address = f"127.0.0.1:{port}"
        argv = [*CLI, *toy_run_args(toy_repo, small_space, tmp_path / "reports", "--max-trials", "1")]
        argv += ["--repeats", "0", "--ray", address]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        time.sleep(3)  # the raylet registers after the GCS answers
        run = functools.partial(
            subprocess.run, argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
        )
        refused = run(env={**plain, **LOOPBACK})
        assert refused.returncode == 3, refused.stderr
        assert f"no Ray cluster at {address}" in refused.stderr and "RAY_AUTH_MODE=token" in refused.stderr
        assert not (tmp_path / "reports" / "toy").exists() or not any(
            (tmp_path / "reports" / "toy").iterdir()
        )
        told = run(env={**plain, **LOOPBACK, **token})
        assert told.returncode == 0, told.stderr
        run_dir = next((tmp_path / "reports" / "toy").iterdir())
        assert json.loads((run_dir / "run.json").read_text())["nodes"], told.stdout  # measured on the node
    finally:
        head.send_signal(signal.SIGTERM)  # --block: the cluster's processes end with it
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)
