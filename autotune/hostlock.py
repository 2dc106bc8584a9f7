"""One measurement at a time on a machine.

Two runs measuring on the same cores at the same time both read the other's load as their
candidates' cost, and each crowns a winner the other contradicts. So every command that
measures (``autotune run``, ``autotune bench``) holds :func:`measuring` for as long as it does:
an exclusive ``flock`` on one file of the machine (:func:`lock_path`). The kernel releases it
when its holder ends, however it ends (``kill -9`` included), so a killed run never leaves it
stuck. While held, the file names its holder (pid, command, run directory), so a second
command can say who it waits for, or refuse (:class:`MachineBusyError`) naming it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from autotune.errors import UsageError
from autotune.processes import Owner

ENV = "AUTOTUNE_LOCK_FILE"  # another lock file: a test, or machines that share /tmp
DEFAULT = Path("/tmp/autotune-measure.lock")  # one per machine, for every user


class MachineBusyError(UsageError):
    """Another autotune command is measuring on this machine."""

    hint = "add --wait to wait for it, or stop it"


@dataclass(frozen=True)
class Holder:
    """Who holds the lock: a process, what it runs, where its results go."""

    owner: Owner
    command: str
    run_dir: str = ""

    @property
    def line(self) -> str:
        """``autotune run (pid 123, reports/toy/2026...)``."""
        where = f", {self.run_dir}" if self.run_dir else ""
        return f"{self.command} (pid {self.owner.pid}{where})"

    def to_json(self) -> str:
        return json.dumps({"owner": self.owner.text(), "command": self.command, "run_dir": self.run_dir})

    @classmethod
    def from_json(cls, text: str) -> Holder | None:
        try:
            data = json.loads(text)
            owner = Owner.parse(str(data["owner"]))
        except (ValueError, KeyError, TypeError):
            return None
        if owner is None:
            return None
        return cls(owner, str(data.get("command", "autotune")), str(data.get("run_dir", "")))


def lock_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT)


class Lease:
    """The lock, held: :meth:`name` tells later comers where this run's results go."""

    def __init__(self, fd: int, holder: Holder) -> None:
        self._fd, self.holder = fd, holder
        _write(fd, holder.to_json())

    def name(self, run_dir: str) -> None:
        self.holder = replace(self.holder, run_dir=run_dir)
        _write(self._fd, self.holder.to_json())


Waiting = Callable[[Holder | None], None]


@contextmanager
def measuring(command: str, *, wait: bool = False, waiting: Waiting | None = None) -> Iterator[Lease]:
    """Hold the machine's measurement lock for ``command`` (``autotune run``). Held by another:
    a :class:`MachineBusyError` naming it, or with ``wait``, ``waiting(holder)`` is told once
    and this blocks until it is free (a stop request ends the wait)."""
    fd = _open(lock_path())
    try:
        if not _try_lock(fd):
            holder = _read(fd)
            if not wait:
                who = holder.line if holder else "another autotune command"
                raise MachineBusyError(
                    f"{who} is measuring on this machine: two measurements at once would each "
                    f"read the other's load as their own (lock: {lock_path()})"
                )
            if waiting is not None:
                waiting(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)  # a signal handler's KeyboardInterrupt ends the wait
        lease = Lease(fd, Holder(Owner.current(), command))
        try:
            yield lease
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


def waiting(holder: Holder | None) -> str:
    """The line a command that waits for the lock prints."""
    who = holder.line if holder is not None else "another autotune command"
    return f"waiting for {who} to finish measuring on this machine (Ctrl-C gives up)"


def _open(path: Path) -> int:
    """The lock file, opened for writing; made (readable and writable by every user, so that
    one user's run and another's see each other) when it is not there. Opened first without
    O_CREAT: a file of another user in a sticky /tmp cannot be opened with it where the kernel
    protects such files (fs.protected_regular)."""
    for _ in range(5):
        with contextlib.suppress(FileNotFoundError):
            return os.open(path, os.O_RDWR)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot make the measurement lock {path}: {exc.strerror}") from exc
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)
        return fd
    raise UsageError(f"cannot open the measurement lock {path}", hint=f"set {ENV} to another file")


def _try_lock(fd: int, kind: int = fcntl.LOCK_EX) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _read(fd: int) -> Holder | None:
    """The holder the file names (its writer may be writing it: read again once)."""
    for _ in range(2):
        os.lseek(fd, 0, os.SEEK_SET)
        found = Holder.from_json(os.read(fd, 65536).decode("utf-8", "replace"))
        if found is not None:
            return found
        time.sleep(0.05)
    return None


def _write(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode("utf-8"), 0)
