"""The open-file limit (``ulimit -n``): a machine's limit, never a candidate's failure.

Each client of the load holds one connection, so one file in this process and one in the
server (which inherits this process's limit). A run raises its soft limit to the hard one
(:func:`raise_limit`); it refuses up front a space whose clients cannot fit under the hard
limit beside the files this process holds (:func:`check_room`); it checks each server it starts
against its own idle count (:func:`check_server`); and a trial that fails with "Too many open
files" ends the run, naming the limit (:func:`exhausted`). Every count is read from /proc, not
assumed.
"""

from __future__ import annotations

import errno
import os
import resource
from dataclasses import dataclass

from autotune.errors import MachineLimitError, UsageError

SAID = "Too many open files"  # strerror(EMFILE), as a server log or an OSError words it
HINT = (
    "raise it (ulimit -n 65536; the hard limit is set in /etc/security/limits.conf), "
    "or lower load.concurrency max"
)


@dataclass(frozen=True)
class Limit:
    soft: int
    hard: int  # resource.RLIM_INFINITY: none


def raise_limit() -> Limit:
    """The soft limit raised to the hard one where the kernel allows it; the limits after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (hard, _nr_open()):
        if target == resource.RLIM_INFINITY or target <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            break
        except (ValueError, OSError):
            continue
    return Limit(*resource.getrlimit(resource.RLIMIT_NOFILE))


def open_count(pid: int | None = None) -> int:
    """Files process ``pid`` (default: this one) holds open now; 0 where /proc cannot tell."""
    try:
        return len(os.listdir(f"/proc/{pid or os.getpid()}/fd"))
    except OSError:
        return 0


def check_room(clients: int) -> None:
    """A UsageError, before anything starts, when ``clients`` connections and the files this
    process holds now do not fit under the hard limit (the most the soft one can be raised to)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = max(soft, hard) if hard != resource.RLIM_INFINITY else None
    need = clients + open_count()
    if ceiling is not None and need > ceiling:
        raise UsageError(
            f"the open-file limit (ulimit -n) is {ceiling}: the search space's {clients} clients need "
            f"about {need} here (a connection each, beside the {need - clients} files autotune holds), "
            "and as many more in the server",
            hint=HINT,
        )


def check_server(pid: int, clients: int, description: str) -> None:
    """A MachineLimitError when server ``pid`` (started by us: it has our limit), holding what it
    holds idle, cannot take ``clients`` more connections."""
    held = open_count(pid)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if held and soft != resource.RLIM_INFINITY and held + clients > soft:
        raise MachineLimitError(
            f"the open-file limit (ulimit -n) is {soft}: {description} holds {held} files idle, and "
            f"{clients} clients need {held + clients}",
            hint=HINT,
        )


def exhausted(exc: BaseException | None, *texts: str) -> bool:
    """Whether an error (or one it was raised from), or a log line, says the open-file limit ran out."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
            return True
        if SAID in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return any(SAID in text for text in texts)


def limit_error(reason: str) -> MachineLimitError:
    """The run's end when a trial ran out of files: the limit and the trial's own words."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return MachineLimitError(
        f"the machine's open-file limit (ulimit -n {soft}) ran out, not the config: {reason}", hint=HINT
    )


def _nr_open() -> int:
    """The kernel's ceiling for any process's limit (``fs.nr_open``); 1 Mi where it cannot be read."""
    try:
        with open("/proc/sys/fs/nr_open", encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 1 << 20
