"""Processes we watch or start: who owns a run, a server or a container, and whether it is alive.

One answer everywhere: an :class:`Owner` names a process by host, pid and start time, so a
pid that the kernel handed to a new process is not taken for the old one. Run directories,
studies shared by workers, server pid records and container labels all record one and ask
:meth:`Owner.gone`.

:func:`on_parent_death` lets a process we start (the guard of a tritonserver, :mod:`autotune.guard`)
know the moment the thread that started it ends, even by ``kill -9`` of the tuner, which no
handler can catch: a server left running would hold a port, CPU and GPU memory, and skew the
next measurement.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; "" where /proc cannot tell (not
    Linux); None when there is no such process."""
    fields = _stat(Path(f"/proc/{pid}"))
    if fields is None:
        if Path("/proc/self/stat").exists():
            return None
        return "" if pid_alive(pid) else None
    return fields[19]


def _stat(proc: Path) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); None when gone."""
    try:
        return (proc / "stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[-1].split()
    except OSError:
        return None


@dataclass(frozen=True)
class Owner:
    """A process, named so that it can be recognised later, from another process."""

    host: str
    pid: int
    started: str = ""  # start time ("" unknown: then only the pid is checked)

    @classmethod
    def current(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), start_time(os.getpid()) or "")

    def is_me(self) -> bool:
        return self.host == socket.gethostname() and self.pid == os.getpid()

    def gone(self) -> bool:
        """True when this process no longer runs. Never for another host: we cannot look there,
        so its processes are taken to be alive."""
        if self.host != socket.gethostname():
            return False
        now = start_time(self.pid)
        return now is None or bool(self.started and now and now != self.started)

    def text(self) -> str:
        """``host:pid:started``, for places that hold one string (labels, attributes)."""
        return f"{self.host}:{self.pid}:{self.started}"

    @classmethod
    def parse(cls, text: str | int) -> Owner | None:
        """Read :meth:`text` back; also the older ``host:pid``, and a bare pid (of this host);
        None when it is none of these."""
        if isinstance(text, int) or text.isdigit():
            return cls(socket.gethostname(), int(text))
        parts = text.split(":")
        if len(parts) == 2:
            parts.append("")
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2])


def _prctl() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's prctl, from the symbols this process has loaded. Not ``ctypes.util.find_library``:
    it runs ``ldconfig -p``, and the guard's first child must be its server (:func:`child_of`)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl
    return None


_PRCTL = _prctl()


def on_parent_death(signum: int, parent: int, act: Callable[[], None]) -> bool:
    """Have the kernel send ``signum`` to this process when the thread that started it ends
    (PR_SET_PDEATHSIG: also on ``kill -9`` of ``parent``); should ``parent`` be gone already
    (it died before the request took effect), ``act`` now. False where the kernel offers no
    such thing (not Linux): then :mod:`autotune.launch` reaps leftovers on the next start."""
    if _PRCTL is None:
        return False
    _PRCTL(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent:
        act()
    return True


def kill_group(pid: int) -> None:
    """SIGKILL a process group and its leader; a gone one is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes (zombies left out) in process group ``pgid``, read from /proc;
    [] where there is no /proc (not Linux)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(entry)
        if fields and len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
            found.append(int(entry.name))
    return found


def child_of(pid: int, timeout_s: float = 2.0, poll_s: float = 0.01) -> int | None:
    """The first child of process ``pid`` to appear within ``timeout_s``, read from /proc; None
    when none does (``pid`` ended first, or there is no /proc)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_alive(pid):
        for entry in Path("/proc").glob("[0-9]*"):
            fields = _stat(entry)
            if fields and len(fields) > 1 and fields[1] == str(pid):
                return int(entry.name)
        time.sleep(poll_s)
    return None


def cmdline(pid: int) -> str:
    """The process's command line, arguments joined by spaces ("" when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
