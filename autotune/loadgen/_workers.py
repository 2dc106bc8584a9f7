"""Several worker processes, when one core cannot drive the load.

Each worker runs its share of the job (:meth:`Job.split`) in its own event loop and
process. The parent keeps the windows: on each window's end it asks every worker for its
:class:`Tally` and merges them; histograms cross the pipe as arrays of bucket counts
(see :mod:`._histogram`), never per request. All workers start on one ``go`` carrying
a common start time (CLOCK_MONOTONIC is shared by the processes of a machine), so open-
loop schedules interleave as planned.

Messages, parent -> worker: ("go", start_ns), ("collect", None), ("stop", None);
worker -> parent: ("ready", None), ("tally", Tally), ("error", text).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import time
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from typing import Any

from autotune.errors import AutotuneError, MeasurementError
from autotune.loadgen._endpoint import Endpoint
from autotune.loadgen._load import Job, Load, Tally, clock

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 5.0
START_DELAY_NS = 20_000_000  # the common start lies this far after "go" is sent


class ProcessLoad:
    """Worker processes seen as one load source (wait / collect / stop)."""

    def __init__(self) -> None:
        self._procs: list[BaseProcess] = []
        self._pipes: list[Pipe] = []
        self._inboxes: list[asyncio.Queue[tuple[str, Any]]] = []
        self._failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def start(self, endpoint: Endpoint, jobs: list[Job]) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        loop = asyncio.get_running_loop()
        for index, job in enumerate(jobs):
            ours, theirs = context.Pipe()
            proc = context.Process(target=worker_main, args=(theirs, endpoint, job), daemon=True,
                                   name=f"autotune-loadgen-{index}")
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._pipes.append(ours)
            self._inboxes.append(asyncio.Queue())
            loop.add_reader(ours.fileno(), self._on_message, index)
        try:
            await asyncio.wait_for(self._replies("ready"), READY_TIMEOUT_S)
        except asyncio.TimeoutError as exc:
            raise MeasurementError(f"load generator workers not ready in {READY_TIMEOUT_S:.0f} s") from exc
        self._send_all(("go", clock() + START_DELAY_NS))

    def _on_message(self, index: int) -> None:
        pipe = self._pipes[index]
        try:
            message: tuple[str, Any] = pipe.recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(pipe.fileno())
            message = ("error", f"load generator worker {index} exited unexpectedly")
        if message[0] == "error":
            if not self._failed.done():
                self._failed.set_exception(MeasurementError(message[1]))
            return
        self._inboxes[index].put_nowait(message)

    async def _replies(self, kind: str) -> list[Any]:
        out = []
        for inbox in self._inboxes:
            getter = asyncio.ensure_future(inbox.get())
            await _first(getter, self._failed)
            if self._failed.done():
                getter.cancel()
                self._failed.result()
            message = getter.result()
            if message[0] != kind:
                raise MeasurementError(f"load generator worker answered {message[0]!r}, expected {kind!r}")
            out.append(message[1])
        return out

    def _send_all(self, message: tuple[str, Any]) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(BrokenPipeError, OSError):  # a gone worker is reported by its reader
                pipe.send(message)

    async def wait(self, seconds: float) -> None:
        await asyncio.wait({self._failed}, timeout=seconds)
        if self._failed.done():
            self._failed.result()

    async def collect(self) -> Tally:
        self._send_all(("collect", None))
        tallies: list[Tally] = await self._replies("tally")
        return Tally.parallel(tallies)

    async def stop(self) -> None:
        self._send_all(("stop", None))
        loop = asyncio.get_running_loop()
        for pipe in self._pipes:
            loop.remove_reader(pipe.fileno())
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(p.is_alive() for p in self._procs) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
            proc.join(1.0)
        for pipe in self._pipes:
            pipe.close()
        if not self._failed.done():
            self._failed.cancel()


# ---------------------------------------------------------------- in the worker process


def worker_main(pipe: Pipe, endpoint: Endpoint, job: Job) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    asyncio.run(_serve(pipe, endpoint, job))


async def _serve(pipe: Pipe, endpoint: Endpoint, job: Job) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def readable() -> None:
        try:
            inbox.put_nowait(pipe.recv())
        except (EOFError, OSError):  # the parent is gone
            loop.remove_reader(pipe.fileno())
            inbox.put_nowait(("stop", None))

    loop.add_reader(pipe.fileno(), readable)
    load = Load(endpoint.connector())
    try:
        await load.prepare(job)
        pipe.send(("ready", None))
        while True:
            command, argument = await _next(inbox, load)
            if command == "go":
                load.start(job, argument)
            elif command == "collect":
                pipe.send(("tally", load.rotate()))
            else:
                break
    except Exception as exc:  # sent to the parent, which raises it as a MeasurementError
        text = str(exc) if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: {exc}"
        _send_quietly(pipe, ("error", f"load generator worker: {text}"))
    finally:
        loop.remove_reader(pipe.fileno())
        await load.stop()


async def _next(inbox: asyncio.Queue[tuple[str, Any]], load: Load) -> tuple[str, Any]:
    getter = asyncio.ensure_future(inbox.get())
    await _first(getter, load.failed)
    if load.failed.done():
        getter.cancel()
        load.failed.result()
    return getter.result()


async def _first(*futures: asyncio.Future[Any]) -> None:
    await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)


def _send_quietly(pipe: Pipe, message: tuple[str, str]) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):  # the parent is gone; nobody to tell
        pipe.send(message)
