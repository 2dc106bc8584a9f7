"""Writing files so that a reader, or a run stopped at any instant, never sees half of one;
and room on the disk for the writes that must not fail (:class:`Room`)."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """A temporary file beside ``path``, fsync, then os.replace: readers never see half a file.
    The file keeps the mode of the one it replaces (a new one gets the umask's default), not
    the temporary file's 0600: a server running as another user must still read a config."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """:func:`write_text_atomic` for bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), _mode_for(path))
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_atomic(source: Path, dest: Path) -> None:
    """Copy a file byte for byte the way :func:`write_text_atomic` writes one (a new file
    replaces ``dest``: a reader, or a process holding it open, sees the old content or the new,
    whole, never a mix)."""
    write_bytes_atomic(dest, source.read_bytes())


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask, read without setting it (os.umask would change it for every thread
    in between, and servers are stopped from background threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- room on the disk

ROOM_NAME = ".room"  # a run directory's reserved space (see Room)


def free_bytes(path: Path) -> int:
    """Bytes free for this user on the file system that holds ``path`` (or its nearest
    existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def disk_full(exc: BaseException | None) -> BaseException | None:
    """The exception, ``exc`` or one it was raised from, that says the disk is full (an OSError
    ENOSPC or EDQUOT, or SQLite's "database or disk is full", which reaches us wrapped); None
    when none does."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc
        if "database or disk is full" in str(exc):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def mib(size: float) -> str:
    """``12.5 MiB``."""
    return f"{size / 2**20:.1f} MiB"


class Room:
    """Space kept free on a disk for the writes that must not fail: a file of ``size`` bytes
    allocated now (:data:`ROOM_NAME` in ``folder``) and given back by :meth:`release` just
    before them. A disk that fills up meanwhile (another program, a log) then still has room
    for what this file held."""

    def __init__(self, folder: Path, size: int) -> None:
        self.path = folder / ROOM_NAME
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            _allocate(fd, size)
        except OSError:  # not enough even for this: the writes that follow will say so
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def _allocate(fd: int, size: int) -> None:
    """``size`` bytes of disk for the file: allocated, or (a file system that cannot) written."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise
    block = bytes(1 << 20)
    for start in range(0, size, len(block)):
        os.pwrite(fd, block[: size - start], start)
