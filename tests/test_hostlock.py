"""One measurement at a time on a machine (autotune.hostlock), with real processes holding the lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autotune import hostlock, stopping
from autotune.cli import main
from autotune.hostlock import Holder, MachineBusyError, measuring

HOLD = """
import sys, time
from autotune import hostlock
with hostlock.measuring("autotune run") as lease:
    lease.name(sys.argv[1])
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "measure.lock"
    monkeypatch.setenv(hostlock.ENV, str(path))
    return path


def _holder(run_dir: str, seconds: float) -> subprocess.Popen[str]:
    """Another process that holds the lock for ``seconds``, naming ``run_dir``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, run_dir, str(seconds)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_measurement_is_refused_naming_the_first(lock: Path) -> None:
    other = _holder("reports/toy/20261127-101010", 30)
    try:
        with pytest.raises(MachineBusyError) as refused, measuring("autotune run"):
            pass
        message = str(refused.value)
        assert f"autotune run (pid {other.pid}, reports/toy/20261127-101010)" in message
        assert refused.value.exit_code == 2 and "--wait" in refused.value.hint
    finally:
        other.kill()
        other.wait()


def test_a_waiting_measurement_starts_when_the_first_ends(lock: Path) -> None:
    other = _holder("reports/toy/1", 1.5)
    told: list[Holder | None] = []
    start = time.monotonic()
    with measuring("autotune run", wait=True, waiting=told.append) as lease:
        waited = time.monotonic() - start
        assert lease.holder.owner.pid == os.getpid()
        assert other.wait(10) == 0  # it held the lock to its end
    assert waited > 1.0 and len(told) == 1 and told[0] is not None and told[0].owner.pid == other.pid
    with measuring("autotune run"):  # released: taken again at once
        pass


def test_kill_9_leaves_no_lock_behind(lock: Path) -> None:
    other = _holder("reports/toy/1", 60)
    os.kill(other.pid, signal.SIGKILL)
    other.wait()
    with measuring("autotune run") as lease:  # at once: the kernel let go with the process
        assert lease.holder.owner.pid == os.getpid()


def test_a_stop_request_ends_the_wait(lock: Path) -> None:
    """As in a command: its handlers installed (not whatever an earlier test left), and Ctrl-C
    sent to the main thread, which a signal to the process may not interrupt when another
    thread takes it."""
    other = _holder("reports/toy/1", 30)
    restore = stopping.install()
    try:
        main_thread = threading.main_thread().ident
        assert main_thread is not None
        timer = threading.Timer(0.5, signal.pthread_kill, (main_thread, signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt), measuring("autotune run", wait=True):
            pass
        assert time.monotonic() - start < 10  # the wait ended, not the other's 30 s hold
    finally:
        restore()
        other.kill()
        other.wait()


def test_bench_refuses_while_a_run_measures(lock: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = _holder("reports/toy/1", 30)
    try:
        code = main(["bench", "--model", "toy", "--url", "127.0.0.1:1"])
    finally:
        other.kill()
        other.wait()
    err = capsys.readouterr().err
    assert code == 2 and f"autotune run (pid {other.pid}, reports/toy/1) is measuring" in err


def test_the_lock_file_is_shared_by_every_user(lock: Path) -> None:
    with measuring("autotune run"):
        assert lock.stat().st_mode & 0o777 == 0o666
