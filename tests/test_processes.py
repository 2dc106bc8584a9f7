"""Owners of runs, servers and containers (processes.py), and a child that dies with its parent."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.processes import Owner, group_members, pid_alive, start_time


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_owner_text_is_read_back_and_older_forms_too() -> None:
    me = Owner.current()
    assert Owner.parse(me.text()) == me and me.started
    assert Owner.parse("h:12") == Owner("h", 12, "")
    assert Owner.parse("12") == Owner.parse(12) == Owner(socket.gethostname(), 12, "")
    for bad in ("", "h", "h:x", ":12", "a:b:c:d"):
        assert Owner.parse(bad) is None


def test_an_owner_is_gone_when_its_process_is_or_its_pid_was_reused() -> None:
    me = Owner.current()
    assert not me.gone() and me.is_me()
    assert Owner(me.host, _dead_pid(), "").gone()
    assert Owner(me.host, me.pid, "1").gone()  # the pid now belongs to a process started later
    assert not Owner("another-host", _dead_pid(), "").gone()  # never judged: we cannot look there
    assert start_time(_dead_pid()) is None and not pid_alive(_dead_pid())


# A stand-in for autotune: starts a "server" under the guard, as the local launcher does. The
# server is a shell whose own child (like a python backend stub) would outlive it.
AUTOTUNE = """
import os, subprocess, sys
server = ["sh", "-c", "sleep 60 & echo $! ; exec sleep 60"]
proc = subprocess.Popen([sys.executable, "-m", "autotune.guard", str(os.getpid()), "--", *server],
                        stdout=subprocess.PIPE, text=True, start_new_session=True)
print(proc.pid, proc.stdout.readline().strip(), flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_autotune_takes_the_whole_server_group_with_it() -> None:
    autotune = subprocess.Popen(
        [sys.executable, "-c", AUTOTUNE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert autotune.stdout is not None
    guard, stub = (int(x) for x in autotune.stdout.readline().split())
    try:
        assert pid_alive(stub) and len(group_members(guard)) == 3  # guard, "server", "stub"
        autotune.kill()
        autotune.wait()
        deadline = time.monotonic() + 5
        while group_members(guard) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group_members(guard) == [], "a process of the server's group outlived autotune"
    finally:
        for pid in group_members(guard):
            os.kill(pid, 9)


def test_the_guard_passes_on_a_graceful_stop_and_the_exit_code() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune.guard",
            str(os.getpid()),
            "--",
            "sh",
            "-c",
            "trap 'exit 7' TERM; sleep 60 & wait",
        ],
        start_new_session=True,
    )
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)  # what the launcher's stop does
    assert proc.wait(10) == 7
    crashed = subprocess.run(
        [sys.executable, "-m", "autotune.guard", str(os.getpid()), "--", "sh", "-c", "kill -9 $$"], timeout=10
    )
    assert crashed.returncode == 128 + 9
    assert subprocess.run([sys.executable, "-m", "autotune.guard", "x"], capture_output=True).returncode == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("timeout_s", [0.0, 5.0])
def test_a_stopped_server_s_group_is_gone_when_the_stop_returns(timeout_s: float) -> None:
    """The launcher's stop (SIGKILL at once, or SIGTERM first) returns only once no process of
    the server's group is alive: its stubs included, which die after their server."""
    from autotune.launch.local import stop_process

    server = ["sh", "-c", "sleep 60 & sleep 60 & exec sleep 60"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.guard", str(os.getpid()), "--", *server], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 5
        while len(group_members(proc.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(group_members(proc.pid)) == 4  # the guard, the "server", two "stubs"
        stop_process(proc, timeout_s=timeout_s)
        assert group_members(proc.pid) == []
    finally:
        for pid in group_members(proc.pid):
            os.kill(pid, 9)


class _Reaped:
    """A handle whose process ended and was reaped long ago: its pid now another's."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int:
        return 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stop_long_after_the_server_ended_leaves_the_pid_s_new_group_alone() -> None:
    """A server's pid handed to another server (its guard leads a group of that id): a late stop
    of the first must not kill the second."""
    from autotune.launch.local import stop_process

    other = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 60"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while len(group_members(other.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop_process(_Reaped(other.pid), timeout_s=0.0)  # type: ignore[arg-type]
        assert len(group_members(other.pid)) == 2 and other.poll() is None
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()


@pytest.mark.parametrize("same_start", [True, False])
def test_a_dead_run_s_server_record_reaps_only_the_process_it_recorded(
    same_start: bool, tmp_path: Path
) -> None:
    """A record of a run that is gone ends its server, if that server still runs; a process that
    got its pid since (the same command: every server of ours has one) is left alone."""
    from autotune.launch import _pids

    server = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        _pids.remember(tmp_path, server.pid, "sleep")
        record = tmp_path / f"{server.pid}.json"
        data = json.loads(record.read_text())
        data["owner"] = Owner(socket.gethostname(), _dead_pid()).text()  # the run was killed
        if not same_start:
            data["started"] = str(int(data["started"]) - 1)  # its server ended; the pid is reused
        record.write_text(json.dumps(data))
        assert _pids.reap(tmp_path) == ([server.pid] if same_start else [])
        assert not record.exists()
        assert (server.wait(5) == -signal.SIGKILL) if same_start else server.poll() is None
    finally:
        server.kill()
        server.wait()


def test_the_guard_starts_no_process_before_its_server() -> None:
    """The local launcher names a server by the guard's first child (processes.child_of), so
    the guard starts nothing else: ctypes.util.find_library("c") once ran ldconfig there, and a
    server was named by ldconfig's pid. Here any process started before the server fails."""
    code = (
        "import subprocess\n"
        "def refused(*args, **kwargs):\n"
        "    raise SystemExit(f'started {args[0]!r} before the server')\n"
        "subprocess.Popen = refused\n"
        "import autotune.guard, autotune.processes\n"
        "assert autotune.processes._PRCTL is not None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
