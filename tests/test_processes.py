"""Owners of runs, servers and containers (processes.py), and a child that dies with its parent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from autotune.processes import Owner, pid_alive, start_time


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


CHILD = """
import os, subprocess, sys
from autotune.processes import die_with_parent
proc = subprocess.Popen(["sleep", "60"], preexec_fn=die_with_parent(os.getpid()), start_new_session=True)
print(proc.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_parent_even_on_kill_9() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert pid_alive(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while pid_alive(child) and _state(child) != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(child) or _state(child) == "Z", "the child outlived its parent"
    finally:
        if pid_alive(child):
            os.kill(child, 9)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
