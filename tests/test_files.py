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
