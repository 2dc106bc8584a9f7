"""Several worker processes, when one core cannot drive the load.

Each worker is ``python -m autotune.loadgen._workers FD``: a fresh interpreter (nothing
forked from a process with threads, nothing re-imported from the caller's ``__main__``)
that runs its share of the job (:meth:`Job.split`) in its own event loop. The parent keeps
the windows: at each window's end it asks every worker for its :class:`Tally` and merges
them; histograms cross the socket as arrays of bucket counts (see :mod:`._histogram`),
never per request. All workers start on one ``go`` carrying a common start time
(CLOCK_MONOTONIC is shared by the processes of a machine), so open-loop schedules
interleave as planned.

Messages (length-prefixed pickles over a socketpair), parent -> worker: (Endpoint, Job)
first, then ("go", start_ns), ("collect", None), ("stop", None); worker -> parent:
("ready", None), ("tally", Tally), ("error", text). A worker whose parent goes away
reads end-of-file and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, MeasurementError
from autotune.loadgen._endpoint import Endpoint
from autotune.loadgen._load import Job, Load, Tally, clock

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 5.0
START_DELAY_NS = 20_000_000  # the common start lies this far after "go" is sent
_LENGTH = struct.Struct(">I")


async def send(writer: asyncio.StreamWriter, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def receive(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))


class _Worker:
    def __init__(
        self, proc: subprocess.Popen[bytes], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.proc, self.reader, self.writer = proc, reader, writer
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()


class ProcessLoad:
    """Worker processes seen as one load source (wait / collect / stop)."""

    def __init__(self) -> None:
        self._workers: list[_Worker] = []
        self._listeners: list[asyncio.Task[None]] = []
        self._failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def start(self, endpoint: Endpoint, jobs: list[Job]) -> None:
        for index, job in enumerate(jobs):
            worker = await _spawn(index)
            self._workers.append(worker)
            self._listeners.append(asyncio.ensure_future(self._listen(index, worker)))
            await send(worker.writer, (endpoint, job))
        try:
            await asyncio.wait_for(self._replies("ready"), READY_TIMEOUT_S)
        except asyncio.TimeoutError as exc:
            raise MeasurementError(f"load generator workers not ready in {READY_TIMEOUT_S:.0f} s") from exc
        await self._send_all(("go", clock() + START_DELAY_NS))

    async def _listen(self, index: int, worker: _Worker) -> None:
        while True:
            try:
                message: tuple[str, Any] = await receive(worker.reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                message = ("error", f"load generator worker {index} exited unexpectedly")
            if message[0] == "error":
                if not self._failed.done():
                    self._failed.set_exception(MeasurementError(message[1]))
                return
            worker.inbox.put_nowait(message)

    async def _replies(self, kind: str) -> list[Any]:
        out = []
        for worker in self._workers:
            message = await _first_of(worker.inbox, self._failed)
            if message[0] != kind:
                raise MeasurementError(f"load generator worker answered {message[0]!r}, expected {kind!r}")
            out.append(message[1])
        return out

    async def _send_all(self, message: tuple[str, Any]) -> None:
        for worker in self._workers:
            with contextlib.suppress(ConnectionError):  # a gone worker is reported by its listener
                await send(worker.writer, message)

    async def wait(self, seconds: float) -> None:
        await asyncio.wait({self._failed}, timeout=seconds)
        if self._failed.done():
            self._failed.result()

    async def collect(self) -> Tally:
        await self._send_all(("collect", None))
        tallies: list[Tally] = await self._replies("tally")
        return Tally.parallel(tallies)

    async def stop(self) -> None:
        for task in self._listeners:  # workers that exit from here on are not failures
            task.cancel()
        await asyncio.gather(*self._listeners, return_exceptions=True)
        await self._send_all(("stop", None))
        for worker in self._workers:
            await _reap(worker.proc)
            worker.writer.close()
        _settle(self._failed)


def _settle(failed: asyncio.Future[None]) -> None:
    """Mark a failure as seen (it was raised, or the run is over anyway)."""
    if failed.done():
        if not failed.cancelled():
            failed.exception()
    else:
        failed.cancel()


async def _spawn(index: int) -> _Worker:
    ours, theirs = socket.socketpair()
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.loadgen._workers", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
        )
    except OSError as exc:
        ours.close()
        raise MeasurementError(f"cannot start load generator worker {index}: {exc}") from exc
    finally:
        theirs.close()
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    return _Worker(proc, reader, writer)


async def _reap(proc: subprocess.Popen[bytes]) -> None:
    for _ in range(int(STOP_TIMEOUT_S / 0.02)):
        if proc.poll() is not None:
            return
        await asyncio.sleep(0.02)
    proc.kill()
    proc.wait()


async def _first_of(inbox: asyncio.Queue[tuple[str, Any]], failed: asyncio.Future[None]) -> tuple[str, Any]:
    """The next message, unless ``failed`` completes first (then its exception)."""
    getter: asyncio.Future[Any] = asyncio.ensure_future(inbox.get())
    await asyncio.wait([getter, failed], return_when=asyncio.FIRST_COMPLETED)
    if failed.done() and not getter.done():
        getter.cancel()
        failed.result()
    result: tuple[str, Any] = getter.result()
    return result


# ---------------------------------------------------------------- in the worker process


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    asyncio.run(_serve(socket.socket(fileno=int(argv[1]))))


async def _serve(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    endpoint, job = await receive(reader)
    load = Load(endpoint.connector())
    inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    reading = asyncio.ensure_future(_read_into(reader, inbox))
    try:
        await load.prepare(job)
        await send(writer, ("ready", None))
        while True:
            command, argument = await _first_of(inbox, load.failed)
            if command == "go":
                load.start(job, argument)
            elif command == "collect":
                await send(writer, ("tally", load.rotate()))
            else:
                break
    except Exception as exc:  # sent to the parent, which raises it as a MeasurementError
        text = str(exc) if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(ConnectionError):  # the parent is gone: nobody to tell
            await send(writer, ("error", f"load generator worker: {text}"))
    finally:
        reading.cancel()
        await load.stop()
        writer.close()


async def _read_into(reader: asyncio.StreamReader, inbox: asyncio.Queue[tuple[str, Any]]) -> None:
    try:
        while True:
            inbox.put_nowait(await receive(reader))
    except (asyncio.IncompleteReadError, ConnectionError):  # the parent is gone
        inbox.put_nowait(("stop", None))


if __name__ == "__main__":
    main(sys.argv)
