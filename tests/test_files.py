"""Atomic writes: the whole text or the old file, never half; the mode a reader needs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from autotune.files import write_text_atomic


def test_replaces_whole_and_keeps_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "config.pbtxt"
    target.write_text("old\n")
    target.chmod(0o640)
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pbtxt"]  # no temporary left


def test_a_new_file_gets_the_umask_default_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "sub" / "run.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "sub" / "run.json").stat().st_mode) == 0o644


def test_a_full_disk_is_told_from_other_errors() -> None:
    import errno

    import sqlalchemy.exc

    from autotune.files import disk_full

    full = OSError(errno.ENOSPC, "No space left on device", "/runs/x/run.json")
    assert disk_full(full) is full
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None
    wrapped = sqlalchemy.exc.OperationalError("INSERT ...", {}, Exception("database or disk is full"))
    try:
        raise RuntimeError("telling the study failed") from wrapped
    except RuntimeError as exc:
        assert disk_full(exc) is wrapped


def test_room_is_kept_on_a_real_small_disk_until_released(tmp_path: Path) -> None:
    """On a tmpfs of 8 MiB: the room (4 MiB) is taken at once, a file filling the disk leaves it,
    and once released those 4 MiB can be written."""
    import os
    import subprocess

    import pytest

    from autotune.files import Room, free_bytes, write_bytes_atomic

    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)]
    mounting = subprocess.run(command, capture_output=True)
    if mounting.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounting.stderr.decode(errors='replace').strip()}")
    try:
        room = Room(disk, 4 * 2**20)
        assert free_bytes(disk) <= 4 * 2**20 + 2**16
        with (disk / "filler").open("wb") as handle, pytest.raises(OSError):
            while True:
                handle.write(bytes(2**20))
                handle.flush()
        with pytest.raises(OSError):
            write_bytes_atomic(disk / "report.html", bytes(3 * 2**20))
        room.release()
        write_bytes_atomic(disk / "report.html", bytes(3 * 2**20))
        assert (disk / "report.html").stat().st_size == 3 * 2**20
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
