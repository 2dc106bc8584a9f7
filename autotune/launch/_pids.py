"""A record of the servers we started, so that a later start can reap what a killed run left.

Each started server gets a small JSON file ``<pid>.json`` naming its owner (the autotune
process, as a :class:`~autotune.processes.Owner`), its command and its start time. :func:`reap`
ends the servers whose owner is gone and that are still the process recorded: the same start
time and command line (every server of ours has the same command prefix, so a pid the kernel
handed to another run's server is never hit). On Linux a server dies with its owner anyway
(:mod:`autotune.guard`); the records are for the rest, and for servers started by older versions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autotune.processes import Owner, cmdline, kill_group, start_time


def default_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "autotune" / "servers"


def remember(directory: Path | None, pid: int, command: str) -> None:
    folder = directory or default_dir()
    folder.mkdir(parents=True, exist_ok=True)
    started = start_time(pid) or ""
    record = {"pid": pid, "owner": Owner.current().text(), "command": command, "started": started}
    (folder / f"{pid}.json").write_text(json.dumps(record), encoding="utf-8")


def forget(directory: Path | None, pid: int) -> None:
    ((directory or default_dir()) / f"{pid}.json").unlink(missing_ok=True)


def reap(directory: Path | None = None) -> list[int]:
    """End leftover servers of dead owners; return their pids."""
    folder = directory or default_dir()
    reaped: list[int] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = _read(path)
        owner = Owner.parse(str(record.get("owner", ""))) if record else None
        if record is None or owner is None or not owner.gone():
            continue
        pid = int(str(record["pid"]))
        server = Owner(owner.host, pid, str(record.get("started", "")))  # "" in older records
        if not server.gone() and cmdline(pid).startswith(str(record["command"])):
            kill_group(pid)
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
