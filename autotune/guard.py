"""Run a server so that nothing of it outlives the autotune process that started it.

    python -m autotune.guard PARENT_PID -- tritonserver ARGS...

The local launcher starts this guard in a new session, so the guard leads the server's process
group, and its parent is the autotune process (PARENT_PID). The guard asks the kernel for
SIGUSR1 when the thread that started it ends (PR_SET_PDEATHSIG: even on ``kill -9`` of
autotune, which no handler can catch), and answers it with SIGKILL to the whole group:
tritonserver, and the python backend's stub processes. A stub does not watch its parent: one
whose tritonserver was killed lives on, holding its model's memory (and, on a GPU, GPU memory).

A graceful stop is the launcher's SIGTERM to the group: tritonserver unloads its models and
ends its stubs; the guard waits for it and exits with its exit code (128 + N for signal N).
It imports nothing but the standard library and :mod:`autotune.processes`: it starts with
every server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from autotune.processes import on_parent_death

USAGE = "usage: python -m autotune.guard PARENT_PID -- COMMAND [ARGS...]"


def _kill_group(signum: int = 0, frame: object = None) -> None:
    os.killpg(0, signal.SIGKILL)  # the guard too: nothing of the server is left


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[0].isdigit() or argv[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    signal.signal(signal.SIGUSR1, _kill_group)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a graceful stop is the server's to do
    on_parent_death(signal.SIGUSR1, int(argv[0]), _kill_group)
    try:
        server = subprocess.Popen(argv[2:])
    except OSError as exc:
        print(f"cannot start {argv[2]}: {exc}", file=sys.stderr)
        return 127
    code = server.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
