"""Writing files so that a reader, or a run stopped at any instant, never sees half of one."""

from __future__ import annotations

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
