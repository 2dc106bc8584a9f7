"""A record of the servers we started, so that a later start can reap what a killed run left.

Each started server gets a small JSON file ``<pid>.json`` naming its owner (the autotune
process) and its command. :func:`reap` ends the servers whose owner is gone and whose
command line still matches (so a reused pid is never hit).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path


def default_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "autotune" / "servers"


def remember(directory: Path | None, pid: int, command: str) -> None:
    folder = directory or default_dir()
    folder.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "owner": os.getpid(), "command": command}
    (folder / f"{pid}.json").write_text(json.dumps(record), encoding="utf-8")


def forget(directory: Path | None, pid: int) -> None:
    ((directory or default_dir()) / f"{pid}.json").unlink(missing_ok=True)


def reap(directory: Path | None = None) -> list[int]:
    """End leftover servers of dead owners; return their pids."""
    folder = directory or default_dir()
    reaped: list[int] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = _read(path)
        if record is None or pid_alive(int(str(record["owner"]))):
            continue
        pid = int(str(record["pid"]))
        if _cmdline(pid).startswith(str(record["command"])):
            _kill_group(pid)
            reaped.append(pid)
        path.unlink(missing_ok=True)
    return reaped


def _read(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
