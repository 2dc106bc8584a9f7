"""Requests from one event loop: closed-loop slots or an open-loop schedule.

Closed loop: ``concurrency`` slots, each with its own connection, send the next request
as soon as the previous answer is back; latency runs from send to answer.

Open loop: a dispatcher hands each due time of a :class:`Schedule` to an idle sender (a
connection waiting for work); when none is idle the due time waits in a backlog and a new
connection is opened, so the pool grows with the requests in flight (HTTP/1.1 carries one
request per connection at a time), up to ``max_connections``. Latency runs from the
**scheduled** time, so time a request spent waiting for the generator counts; lateness
(actual send minus scheduled time) is recorded separately.

Per request the work is a clock read or two and histogram increments; nothing is kept
per request. :meth:`Load.rotate` closes a window and returns its :class:`Tally`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from autotune.loadgen._histogram import LatencyHistogram
from autotune.loadgen._schedule import Schedule
from autotune.loadgen._timer import DueTimer
from autotune.loadgen._transport import Connection, Connector, InferError

clock = time.monotonic_ns  # CLOCK_MONOTONIC: the same clock in every process of the machine
MAX_CONNECTIONS = 2000
TICK_NS = 200_000  # the dispatcher wakes at most this often: above 5000 req/s sends go in small bursts


@dataclass(frozen=True)
class Job:
    """What one event loop runs: closed-loop slots, or an open-loop schedule."""

    concurrency: int = 0
    schedule: Schedule | None = None
    pool: int = 2  # open loop: connections opened before the start

    def split(self, workers: int) -> list[Job]:
        """Shares for ``workers`` processes (closed loop: no process without a slot)."""
        if self.schedule is not None:
            pool = max(1, -(-self.pool // workers))
            return [Job(0, self.schedule.share(i, workers), pool) for i in range(workers)]
        base, extra = divmod(self.concurrency, workers)
        shares = [base + (1 if i < extra else 0) for i in range(workers)]
        return [Job(c) for c in shares if c > 0]


@dataclass
class Tally:
    """One window of load from one event loop (or several, merged): small and picklable."""

    duration_s: float
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    lateness: LatencyHistogram = field(default_factory=LatencyHistogram)
    due: int = 0  # open loop: requests whose scheduled time fell in the window
    sent: int = 0
    errors: int = 0
    first_error: str = ""
    connections: int = 0

    @property
    def completions(self) -> int:
        return self.latency.count

    def then(self, later: Tally) -> Tally:
        """This window extended by the next stretch of time (durations add)."""
        return _combine([self, later], self.duration_s + later.duration_s, later.connections)

    @classmethod
    def parallel(cls, parts: list[Tally]) -> Tally:
        """The same window from several processes (durations overlap: their mean)."""
        duration = sum(p.duration_s for p in parts) / len(parts)
        return _combine(parts, duration, sum(p.connections for p in parts))


def _combine(parts: list[Tally], duration_s: float, connections: int) -> Tally:
    return Tally(
        duration_s=duration_s,
        latency=LatencyHistogram.merged(p.latency for p in parts),
        lateness=LatencyHistogram.merged(p.lateness for p in parts),
        due=sum(p.due for p in parts), sent=sum(p.sent for p in parts),
        errors=sum(p.errors for p in parts),
        first_error=next((p.first_error for p in parts if p.first_error), ""),
        connections=connections,
    )  # fmt: skip


class Recorder:
    """The current window's counters; senders write, :meth:`rotate` swaps them out."""

    __slots__ = ("due", "errors", "first_error", "latency", "lateness", "sent", "started")

    def __init__(self) -> None:
        self.latency = LatencyHistogram()
        self.lateness = LatencyHistogram()
        self.due = self.sent = self.errors = 0
        self.first_error = ""
        self.started = clock()

    def fail(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    def rotate(self, connections: int) -> Tally:
        now = clock()
        tally = Tally((now - self.started) / 1e9, self.latency, self.lateness, self.due, self.sent,
                      self.errors, self.first_error, connections)
        self.latency, self.lateness = LatencyHistogram(), LatencyHistogram()
        self.due = self.sent = self.errors = 0
        self.first_error = ""
        self.started = now
        return tally


class Load:
    """The load of one event loop. Start it with :meth:`open_closed` + :meth:`start_closed`
    or :meth:`start_open`; watch it with :meth:`wait`; end it with :meth:`stop`."""

    def __init__(self, connect: Connector, max_connections: int = MAX_CONNECTIONS) -> None:
        self.recorder = Recorder()
        self._connect = connect
        self._max_connections = max_connections
        self._connections: list[Connection] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # open loop
        self._idle: list[asyncio.Future[int]] = []
        self._backlog: deque[int] = deque()
        self._opening = 0
        self._offsets: Iterator[int] = iter(())
        self._start_ns = 0
        self._next_ns = 0

    async def prepare(self, job: Job) -> None:
        """Open the connections the job starts with (before the clock starts)."""
        if job.schedule is None:
            await self.open_closed(job.concurrency)
        else:
            await self.open_pool(job.pool)

    def start(self, job: Job, start_ns: int) -> None:
        if job.schedule is None:
            self.start_closed()
        else:
            self.start_open(job.schedule, start_ns)

    # ------------------------------------------------------------ closed loop

    async def open_closed(self, concurrency: int) -> None:
        """Open the slots' connections (before the clock starts)."""
        self._connections = [await self._connect() for _ in range(concurrency)]

    def start_closed(self) -> None:
        for index in range(len(self._connections)):
            self._spawn(self._slot(index))

    async def _slot(self, index: int) -> None:
        conn = self._connections[index]
        while True:
            start = clock()
            try:
                await conn.infer()
            except InferError as exc:
                self.recorder.fail(str(exc))
                if exc.closed:
                    conn = await self._reconnect(conn)
                continue
            self.recorder.latency.record(clock() - start)

    # ------------------------------------------------------------ open loop

    async def open_pool(self, connections: int) -> None:
        """Open the first idle senders of an open-loop run (more open as needed)."""
        for _ in range(connections):
            conn = await self._connect()
            self._connections.append(conn)
            self._spawn(self._sender(conn))

    def start_open(self, schedule: Schedule, start_ns: int) -> None:
        self._offsets = schedule.offsets()
        self._start_ns = start_ns
        self._next_ns = start_ns + next(self._offsets)
        self.recorder.started = clock()
        self._spawn(self._dispatcher())

    async def _dispatcher(self) -> None:
        timer = DueTimer()
        try:
            while True:
                now = clock()
                self._dispatch_due(now)
                await timer.until(max(self._next_ns, now + TICK_NS))
        finally:
            timer.close()

    def _dispatch_due(self, now: int) -> None:
        due, idle, backlog, recorder = self._next_ns, self._idle, self._backlog, self.recorder
        offsets, start = self._offsets, self._start_ns
        while due <= now:
            recorder.due += 1
            if idle:
                idle.pop().set_result(due)
            else:
                backlog.append(due)
                if self._opening < len(backlog) and self._room():
                    self._opening += 1
                    self._spawn(self._grow())
            due = start + next(offsets)
        self._next_ns = due

    def _room(self) -> bool:
        return len(self._connections) + self._opening < self._max_connections

    async def _grow(self) -> None:
        try:
            conn = await self._connect()
        finally:
            self._opening -= 1
        self._connections.append(conn)
        await self._sender(conn)

    async def _sender(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        idle, backlog = self._idle, self._backlog
        while True:
            if backlog:
                due = backlog.popleft()
            else:
                waiter: asyncio.Future[int] = loop.create_future()
                idle.append(waiter)
                due = await waiter
            recorder = self.recorder
            recorder.lateness.record(clock() - due)
            recorder.sent += 1
            try:
                await conn.infer()
            except InferError as exc:
                self.recorder.fail(str(exc))
                if exc.closed:
                    conn = await self._reconnect(conn)
                continue
            self.recorder.latency.record(clock() - due)

    # ------------------------------------------------------------ both

    async def _reconnect(self, conn: Connection) -> Connection:
        await conn.close()
        fresh = await self._connect()
        self._connections = [fresh if c is conn else c for c in self._connections]
        return fresh

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or self._failed.done():
            return
        exc = task.exception()
        if exc is not None:
            self._failed.set_exception(exc)

    @property
    def failed(self) -> asyncio.Future[None]:
        """Done (with the exception) when a sender failed beyond an error answer."""
        return self._failed

    async def wait(self, seconds: float) -> None:
        """Sleep, but surface a failure (e.g. the server went away) at once."""
        await asyncio.wait({self._failed}, timeout=seconds)
        if self._failed.done():
            self._failed.result()

    async def collect(self) -> Tally:
        return self.rotate()

    def rotate(self) -> Tally:
        if self._next_ns:
            self._dispatch_due(clock())  # what fell due while the loop was busy counts in this window
        return self.recorder.rotate(len(self._connections))

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in self._connections:
            await conn.close()
        self._connections = []
        if not self._failed.done():
            self._failed.cancel()
        elif not self._failed.cancelled():
            self._failed.exception()  # seen: it was raised, or the run is over anyway
