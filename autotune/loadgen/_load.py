"""Requests from one event loop: closed-loop slots or an open-loop schedule.

Closed loop: ``concurrency`` slots, each with its own connection, send the next request
as soon as the previous answer is back; latency runs from send to answer. Each slot starts
sending as soon as its connection is open, before the clock starts, so every connection
after the first opens while requests flow, as perf_analyzer's do: Triton's HTTP server
hands a new connection to the first of its HTTP threads with no work pending, so
connections opened one after another on an idle server all land on one thread. That
thread then reads and answers every request, and at saturation the batcher gets them one
or two at a time: noop at concurrency 16 over HTTP ran batches of 2.2, against 6.9-7.1
with the connections opened this way (benchmarks/experiments/http_threads.py at commit f7b0666)
and 6.0 under perf_analyzer (docs/loadgen.md).

Open loop: a timer (:mod:`._timer`) wakes at each due time of a :class:`Schedule` and
hands the request to an idle connection; when none is idle the due time waits in a
backlog and a new connection is opened, so the pool grows with the requests in flight
(HTTP/1.1 carries one request per connection at a time), up to ``max_connections``.
Latency runs from the **scheduled** time, so time a request spent waiting for the
generator counts; lateness (actual send minus scheduled time) is recorded separately.

Requests run on callbacks, not tasks or futures: per request the work is a clock read or
two, histogram increments and the send; nothing is kept per request. :meth:`Load.rotate`
closes a window and returns its :class:`Tally`.

A watcher wakes every ``STALL_TICK_NS`` and counts each wake over ``STALL_NS`` late as a
stall of the loop (:attr:`Tally.stalls`, :attr:`Tally.stall_s`): the loop was not running,
so every answer in flight waited with it, and in a closed loop every client then sends at
once. On two shared cores a busy server keeps this thread waiting for a core now and then
(the embedder at 26 clients: 90% of a stall's time in the run queue, and up to 15 stalls
of up to 89 ms in 6.4 s, which decide a p99: benchmarks/experiments/client_stalls.py at
commit f7b0666).
perf_analyzer reads each answer on a thread of its own, so a wait delays one request.
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
STALL_TICK_NS = 5_000_000  # the stall watcher's period
STALL_NS = 15_000_000  # a watcher wake this late is a stall of the loop


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
    stalls: int = 0  # the loop's stalls (see the module docstring); several processes: all of theirs
    stall_s: float = 0.0  # how late the watcher woke in those stalls, in all

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
        stalls=sum(p.stalls for p in parts), stall_s=sum(p.stall_s for p in parts),
    )  # fmt: skip


class Recorder:
    """The current window's counters; senders write, :meth:`rotate` swaps them out."""

    __slots__ = (
        "due", "errors", "first_error", "latency", "lateness", "sent", "stall_ns", "stalls", "started"
    )  # fmt: skip

    def __init__(self) -> None:
        self.latency = LatencyHistogram()
        self.lateness = LatencyHistogram()
        self.due = self.sent = self.errors = self.stalls = self.stall_ns = 0
        self.first_error = ""
        self.started = clock()

    def fail(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    def rotate(self, connections: int) -> Tally:
        now = clock()
        tally = Tally(
            (now - self.started) / 1e9,
            self.latency,
            self.lateness,
            self.due,
            self.sent,
            self.errors,
            self.first_error,
            connections,
            self.stalls,
            self.stall_ns / 1e9,
        )
        self.latency, self.lateness = LatencyHistogram(), LatencyHistogram()
        self.due = self.sent = self.errors = self.stalls = self.stall_ns = 0
        self.first_error = ""
        self.started = now
        return tally


class Load:
    """The load of one event loop: :meth:`prepare` (connections; closed loop, requests start
    flowing), :meth:`start` (the clock starts), :meth:`wait` (surfaces failures),
    :meth:`rotate` (a window), :meth:`stop`.

    Requests run on callbacks, not tasks: an answer's callback records it and, closed loop,
    sends the next request at once; open loop, the timer's callback sends what is due on
    idle connections. Tasks only open connections."""

    def __init__(self, connect: Connector, max_connections: int = MAX_CONNECTIONS) -> None:
        self.recorder = Recorder()
        self.running = False
        self._connect = connect
        self._max_connections = max_connections
        self._connections: list[Connection] = []
        self._slots: list[_Slot] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # open loop
        self._idle: list[_Sender] = []
        self._backlog: deque[int] = deque()
        self._opening = 0
        self._offsets: Iterator[int] = iter(())
        self._start_ns = self._next_ns = 0
        self._timer: DueTimer | None = None
        self._watcher: asyncio.TimerHandle | None = None

    async def prepare(self, job: Job) -> None:
        """Open the connections the job starts with. Closed loop, each slot starts sending as
        soon as its connection is open (see the module docstring); what it measures before
        :meth:`start` is dropped. Open loop, the connections wait idle for the schedule."""
        if job.schedule is None:
            self.running = True
            for _ in range(job.concurrency):
                slot = _Slot(self, await self._open())
                self._slots.append(slot)
                slot.resume()
        else:
            for _ in range(job.pool):
                self._idle.append(_Sender(self, await self._open()))

    def start(self, job: Job, start_ns: int) -> None:
        """The clock starts: a fresh window (closed loop, the slots are already sending)."""
        self.running = True
        self.recorder = Recorder()
        self._watch(clock())
        if job.schedule is None:
            return
        self._offsets = job.schedule.offsets()
        self._start_ns = start_ns
        self._next_ns = start_ns + next(self._offsets)
        self._timer = DueTimer()
        self._tick()

    def _watch(self, due: int) -> None:
        """Count a stall if this wake is over ``STALL_NS`` late; wake again in ``STALL_TICK_NS``."""
        now = clock()
        if now - due > STALL_NS:
            self.recorder.stalls += 1
            self.recorder.stall_ns += now - due
        if self.running:
            loop = asyncio.get_running_loop()
            self._watcher = loop.call_at(loop.time() + STALL_TICK_NS / 1e9, self._watch, now + STALL_TICK_NS)

    async def _open(self) -> Connection:
        conn = await self._connect()
        self._connections.append(conn)
        return conn

    # ------------------------------------------------------------ open loop

    def _tick(self) -> None:
        if not self.running or self._timer is None:
            return
        now = clock()
        self._dispatch_due(now)
        self._timer.arm(max(self._next_ns, now + TICK_NS), self._tick)

    def _dispatch_due(self, now: int) -> None:
        due, idle, backlog, recorder = self._next_ns, self._idle, self._backlog, self.recorder
        offsets, start = self._offsets, self._start_ns
        while due <= now:
            recorder.due += 1
            if idle:
                idle.pop().fire(due)
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
            conn = await self._open()
        finally:
            self._opening -= 1
        self.ready(_Sender(self, conn))

    def ready(self, sender: _Sender) -> None:
        """An open-loop connection is free: the oldest waiting request, or idle."""
        if self._backlog:
            sender.fire(self._backlog.popleft())
        else:
            self._idle.append(sender)

    # ------------------------------------------------------------ both

    def replace(self, worker: _Conn) -> None:
        """The worker's connection broke: open another, then carry on."""

        async def reopen() -> None:
            old = worker.conn
            self._connections = [c for c in self._connections if c is not old]
            await old.close()
            worker.conn = await self._open()
            if self.running:
                worker.resume()

        self._spawn(reopen())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        """The first failure fails the load; each task's exception is retrieved, the later
        ones too (a server that died breaks every connection at once: each reconnect fails,
        and asyncio printed "Task exception was never retrieved" for all but the first)."""
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not self._failed.done():
            self._failed.set_exception(exc)

    @property
    def failed(self) -> asyncio.Future[None]:
        """Done (with the exception) when the load failed beyond an error answer."""
        return self._failed

    async def wait(self, seconds: float) -> None:
        """Sleep, but surface a failure (e.g. the server went away) at once."""
        await asyncio.wait({self._failed}, timeout=seconds)
        if self._failed.done():
            self._failed.result()

    async def collect(self) -> Tally:
        return self.rotate()

    def rotate(self) -> Tally:
        if self._timer is not None and self.running:
            self._dispatch_due(clock())  # what fell due while the loop was busy counts in this window
        return self.recorder.rotate(len(self._connections))

    async def stop(self) -> None:
        self.running = False
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        if self._timer is not None:
            self._timer.close()
            self._timer = None
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


class _Conn:
    """One connection of a load. ``answered`` records the latency from ``start`` (the send,
    or in open loop the scheduled send) and hands the connection on with ``resume``."""

    __slots__ = ("conn", "load", "start")

    def __init__(self, load: Load, conn: Connection) -> None:
        self.load, self.conn, self.start = load, conn, 0

    def resume(self) -> None:
        raise NotImplementedError

    def answered(self, error: InferError | None) -> None:
        load = self.load
        if not load.running:
            return
        if error is None:
            load.recorder.latency.record(clock() - self.start)
        else:
            load.recorder.fail(str(error))
            if error.closed:
                load.replace(self)
                return
        self.resume()


class _Slot(_Conn):
    """Closed loop: one connection that sends again as soon as it is answered."""

    __slots__ = ()

    def resume(self) -> None:
        self.start = clock()
        self.conn.send(self.answered)


class _Sender(_Conn):
    """Open loop: one connection that sends a request when handed its due time (latency
    is counted from that due time, not from the actual send)."""

    __slots__ = ()

    def fire(self, due: int) -> None:
        self.start = due
        recorder = self.load.recorder
        recorder.lateness.record(clock() - due)
        recorder.sent += 1
        self.conn.send(self.answered)

    def resume(self) -> None:
        self.load.ready(self)
