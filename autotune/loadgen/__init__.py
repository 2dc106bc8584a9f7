"""The embedded load generator: closed-loop concurrency and open-loop request rate.

    gen = LoadGenerator.connect("127.0.0.1", http_port, grpc_port, "bertQA")
    point = gen.at_concurrency(8)            # a points.Point, measured to stability
    point = gen.at_rate(200.0, "poisson")    # latency counted from the scheduled send time
    point = gen.with_workers(2).at_concurrency(64)   # two worker processes, merged
    point = gen.with_gpu_probe(MetricsProbe(server.metrics_url)).at_concurrency(8)  # point.gpus

See docs/loadgen.md for what is measured and how it compares with perf_analyzer.
"""

from __future__ import annotations

import asyncio
import gc
import queue
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from autotune.control import AsyncStatistics, ServerControl
from autotune.errors import ControlError, MeasurementError, ModelNotFoundError, UsageError, WorkloadError
from autotune.gpu import GpuProbe
from autotune.loadgen._endpoint import PROTOCOLS, Endpoint
from autotune.loadgen._histogram import LatencyHistogram
from autotune.loadgen._inputs import ModelIO, Payload, WorkloadData, read_workload
from autotune.loadgen._load import Job, Load, Tally, clock
from autotune.loadgen._schedule import DISTRIBUTIONS, Schedule, read_intervals
from autotune.loadgen._stats import StatsSnapshot, breakdown
from autotune.loadgen._windows import Source, Window, run_windows, summarise
from autotune.points import Point, WindowPlan
from autotune.settings import Workload

__all__ = [
    "DISTRIBUTIONS",
    "PROTOCOLS",
    "Beside",
    "LatencyHistogram",
    "LoadGenerator",
    "ModelIO",
    "Payload",
    "Schedule",
    "StatsSnapshot",
    "WindowPlan",
    "WorkloadData",
    "breakdown",
    "model_io",
    "read_intervals",
    "read_workload",
]


PREFLIGHT_MOST = 32  # requests the preflight sends at most (every distinct shape first)


@dataclass(frozen=True)
class LoadGenerator:
    host: str
    http_port: int
    grpc_port: int
    io: ModelIO
    data: WorkloadData  # the requests, sent in turn
    protocol: str = "http"
    plan: WindowPlan = field(default_factory=WindowPlan)
    workers: int = 1  # worker processes; 1 runs in this process
    seed: int = 0  # Poisson schedules
    gpu_probe: GpuProbe | None = None  # samples the server's GPUs at each window's end (None: no sampling)
    steps: tuple[str, ...] = ()  # an ensemble's steps: each point has their statistics too
    beside: tuple[Beside, ...] = ()  # models served beside this one, loaded at the same time
    weight: float = 1.0  # with ``beside``: this model's weight in a point's throughput

    @classmethod
    def connect(
        cls,
        host: str,
        http_port: int,
        grpc_port: int,
        model: str,
        *,
        protocol: str = "http",
        plan: WindowPlan | None = None,
        workers: int = 1,
        seed: int = 0,
        workload: Workload | None = None,
        data: WorkloadData | None = None,
        preflight: bool = False,
    ) -> LoadGenerator:
        """Read the model's metadata, build the requests once and check one answer. The
        workload: ``workload`` (default random data), or ``data`` read before (by
        :func:`read_workload`: a large input file is read once for a whole tuning run).
        ``preflight``: send the requests :meth:`preflight` picks instead of checking the first
        answer, and raise a WorkloadError when the data does not fit or the model refuses it."""
        if protocol not in PROTOCOLS:
            raise UsageError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if workers < 1:
            raise UsageError(f"workers must be >= 1, got {workers}")
        io = model_io(host, http_port, model)
        try:
            # data read from the config.pbtxt: the server's view of the model wins
            data = read_workload(io, workload or Workload(), seed) if data is None else data.for_model(io)
        except UsageError as exc:
            if not preflight:
                raise
            raise WorkloadError(str(exc)) from exc
        gen = cls(host, http_port, grpc_port, io, data, protocol, plan or WindowPlan(), workers, seed)
        if not preflight:
            gen.check_answer(gen.payloads[0])
            return gen
        try:
            gen.preflight()
        except MeasurementError as exc:
            raise WorkloadError(str(exc)) from exc
        return gen

    @property
    def payloads(self) -> tuple[Payload, ...]:
        return self.data.payloads()

    def with_plan(self, plan: WindowPlan) -> LoadGenerator:
        return replace(self, plan=plan)

    def with_seed(self, seed: int) -> LoadGenerator:
        """The same load, an open loop's arrivals drawn with ``seed``."""
        return replace(self, seed=seed)

    def with_gpu_probe(self, probe: GpuProbe | None) -> LoadGenerator:
        return replace(self, gpu_probe=probe)

    def with_steps(self, steps: tuple[str, ...]) -> LoadGenerator:
        """Each point also breaks down the time of these models (an ensemble's steps)."""
        return replace(self, steps=steps)

    def with_beside(self, beside: Sequence[Beside], weight: float = 1.0) -> LoadGenerator:
        """Each point also loads the models of ``beside`` (several models on one server), over
        the same windows (:func:`_combined`)."""
        return replace(self, beside=tuple(beside), weight=weight)

    def with_workers(self, workers: int) -> LoadGenerator:
        if workers < 1:
            raise UsageError(f"workers must be >= 1, got {workers}")
        return replace(self, workers=workers)

    def endpoint(self, concurrency: int = 0) -> Endpoint:
        """Where the load goes, with the requests in the workload's order for ``concurrency``
        clients (0: an open loop)."""
        requests = self.data.encoded(self.protocol, self.host)
        stride = self.data.stride(concurrency)
        return Endpoint(self.host, self.http_port, self.grpc_port, self.protocol, requests, stride)

    def at_concurrency(self, concurrency: int) -> Point:
        """Closed loop: ``concurrency`` requests always in flight."""
        if concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {concurrency}")
        return asyncio.run(self._measure(Job(concurrency=concurrency), concurrency=concurrency, rate=0.0))

    def at_rate(self, rate: float, distribution: str = "constant") -> Point:
        """Open loop: requests sent on a schedule of ``rate`` per second, whatever the answers."""
        return self._open_loop(Schedule(rate, distribution, self.seed))

    def at_intervals(self, intervals_us: Sequence[int], rate: float | None = None) -> Point:
        """Open loop on a recorded pattern: gaps in microseconds, looped (perf_analyzer's
        ``--request-intervals``), at the pattern's mean rate or scaled to ``rate``."""
        return self._open_loop(Schedule.replay(intervals_us, rate))

    def _open_loop(self, schedule: Schedule) -> Point:
        if self.beside:
            raise UsageError("several models on one server are measured in a closed loop only")
        job = Job(schedule=schedule, pool=max(8, min(64, int(schedule.rate * 0.01) + 1)))
        return asyncio.run(self._measure(job, concurrency=0, rate=schedule.rate))

    async def _measure(self, job: Job, *, concurrency: int, rate: float) -> Point:
        endpoint = self.endpoint(concurrency)
        every = bool(self.steps or self.beside)  # the statistics of every model, in one answer
        statistics = AsyncStatistics(self.host, self.http_port, "" if every else self.io.name)
        # every answer, for the models beside: the snapshot before the windows, then each one's end
        answers: list[Any] = []

        async def stats() -> StatsSnapshot:
            try:
                answer = await statistics()
            except ControlError as exc:
                raise MeasurementError(str(exc), hint=exc.hint or None) from exc
            answers.append(answer)
            return StatsSnapshot.parse(answer, model=self.io.name, steps=self.steps)

        plans = [b.judged(self.plan) for b in self.beside]
        try:
            with _quiet_gc():
                async with AsyncExitStack() as stack:
                    source = await stack.enter_async_context(_running(endpoint, job, self.workers))
                    theirs = [
                        (
                            await stack.enter_async_context(
                                _running(b.gen.endpoint(concurrency), Job(concurrency=concurrency), 1)
                            ),
                            plan,
                        )
                        for b, plan in zip(self.beside, plans, strict=True)
                    ]
                    before, windows = await run_windows(source, stats, self.plan, self.gpu_probe, theirs)
        finally:
            await statistics.close()
        point = summarise(
            before, windows, self.plan, concurrency=concurrency, rate=rate, batch=self.payloads[0].batch_size
        )
        if not self.beside:
            return point
        besides = [
            b.point(answers, [w.beside[i] for w in windows], plans[i], concurrency)
            for i, b in enumerate(self.beside)
        ]
        return _combined(point, self.io.name, self.weight, self.beside, besides)

    def check_answer(self, payload: Payload, what: str = "") -> None:
        """One request through tritonclient: every output must come back non-empty. ``what``
        names the request in the error (e.g. an entry of the input data)."""
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        client = httpclient.InferenceServerClient(f"{self.host}:{self.http_port}", network_timeout=120.0)
        where = f" to {what}" if what else ""
        try:
            result = client.infer(self.io.name, _infer_inputs(payload))
        except InferenceServerException as exc:
            raise MeasurementError(
                f"model {self.io.name!r} answered an error{where}: {exc.message()}"
            ) from exc
        finally:
            client.close()
        for name in payload.outputs:
            out: Any = result.as_numpy(name)
            if out is None or np.size(out) == 0:
                raise MeasurementError(f"model {self.io.name!r} returned an empty output {name!r}{where}")

    def answers(self, payloads: Sequence[Payload]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Each request's outputs, by name ({} for a request answered with an error: errors are
        the measurement's to judge), with each output's data type: the requests sent all at
        once over gRPC, each answer awaited in its own callback (a config with dynamic batching
        batches them). No answer within a minute is a MeasurementError."""
        import tritonclient.grpc as grpcclient

        done: queue.Queue[tuple[int, Any]] = queue.Queue()
        client = grpcclient.InferenceServerClient(f"{self.host}:{self.grpc_port}")
        try:
            for index, payload in enumerate(payloads):
                inputs = [
                    grpcclient.InferInput(spec.name, list(array.shape), spec.datatype).set_data_from_numpy(
                        array
                    )
                    for spec, array in payload.tensors
                ]
                client.async_infer(self.io.name, inputs, partial(_answered, done, index))
            results = [done.get(timeout=60.0) for _ in payloads]
        except queue.Empty as exc:
            raise MeasurementError(
                f"model {self.io.name!r} did not answer the output check's requests"
            ) from exc
        finally:
            client.close()
        ordered = [result for _, result in sorted(results, key=lambda r: r[0])]
        names = [o.name for o in self.io.outputs]
        answers = [{} if result is None else {n: result.as_numpy(n) for n in names} for result in ordered]
        answered = next((result for result in ordered if result is not None), None)
        types = {} if answered is None else {n: str(answered.get_output(n).datatype) for n in names}
        return answers, types

    def check_sample(self, workload: Workload, seed: int, count: int) -> list[tuple[Payload, str]]:
        """The requests of the output check (:mod:`autotune.outputs`), each with its name for
        people: ``count`` requests of ``workload`` (:func:`autotune.outputs.check_requests`), the
        same every time for the same workload and seed. Random data: ``count`` requests of their
        own values (seeds ``seed`` on); data of a file: its distinct requests as the preflight
        picks them (every distinct shape first), over again until there are ``count``."""
        if workload.input_data == "random":
            return [
                (
                    read_workload(self.io, workload, seed + i).payloads()[0],
                    f"request {i} (random data, seed {seed + i})",
                )
                for i in range(count)
            ]
        payloads, data = self.payloads, self.data
        picks = preflight_requests(payloads, count)
        chosen = [picks[i % len(picks)] for i in range(count)]
        return [(payloads[k], f"request {i} ({_entries(data, k, short=True)})") for i, k in enumerate(chosen)]

    def preflight(self, most: int = PREFLIGHT_MOST) -> int:
        """Requests of the workload sent once each before anything is measured, so that data
        the model cannot take fails here, naming its entries, instead of in every trial: one of
        each distinct shape, then others spread evenly over the data, ``most`` in all (a file of
        100 MB holds tens of thousands of entries: sending each would take longer than tuning).
        Returns how many requests were sent."""
        data = self.data
        payloads, n = data.payloads(), len(data.entries)
        chosen = preflight_requests(payloads, most)
        for number in chosen:
            self.check_answer(payloads[number], _entries(data, number) if n > 1 else data.source)
        return len(chosen)


@dataclass(frozen=True)
class Beside:
    """A model served beside the measured one (several models on one server): its own load
    generator (its workload), as many clients as the measured model, its weight in a point's
    throughput, and the percentile its SLA reads (its windows' latencies are kept at it)."""

    gen: LoadGenerator
    weight: float = 1.0
    percentile: int = 95
    limit_share: float = 1.0  # its SLA's limit over the tuned model's

    def judged(self, plan: WindowPlan) -> WindowPlan:
        """The tuned model's ``plan`` for this model's windows: its percentile, and its limit in
        the same proportion to the plan's as its SLA's to the tuned model's (the same headroom).
        The race's earlier rounds are the tuned model's, so none are pooled."""
        return replace(
            plan, percentile=self.percentile, limit_ms=plan.limit_ms * self.limit_share,
            before_ms=(), before_figures_ms=(),
        )  # fmt: skip

    def point(
        self, answers: Sequence[Any], tallies: Sequence[Tally], plan: WindowPlan, clients: int
    ) -> Point:
        """Its figures over the measured model's windows (``answers``: the statistics before
        them and at each one's end), judged by ``plan`` (its :meth:`judged` plan); a model that
        completed nothing in them breaks any SLA."""
        name = self.gen.io.name
        snaps = [StatsSnapshot.parse(a, model=name) for a in answers]
        windows = [Window(t, snaps[i + 1]) for i, t in enumerate(tallies)]
        try:
            return summarise(
                snaps[0], windows, plan, concurrency=clients,
                rate=0.0, batch=self.gen.payloads[0].batch_size,
            )  # fmt: skip
        except MeasurementError as exc:  # starved: nothing came back
            forever = float("inf")
            seconds = sum(t.duration_s for t in tallies)
            return Point(clients, 0.0, 0.0, forever, forever, forever, forever, forever, 0,
                         sum(t.errors for t in tallies), seconds, len(tallies), True,
                         first_error=str(exc)[:300])  # fmt: skip


def _combined(
    mine: Point, name: str, weight: float, beside: Sequence[Beside], theirs: Sequence[Point]
) -> Point:
    """The measured model's point with the models beside it: its throughput (and each window's)
    the weighted sum of every model's, its errors every model's, every model's own figures kept
    (:attr:`Point.others`, the measured one's first); its latencies stay its own."""
    weights = [weight, *(b.weight for b in beside)]
    points = [mine, *theirs]
    windows = tuple(
        sum(w * t for w, t in zip(weights, row, strict=True))
        for row in zip(*(p.window_throughputs for p in points), strict=False)
    )
    return replace(
        mine,
        throughput=sum(w * p.throughput for w, p in zip(weights, points, strict=True)),
        window_throughputs=windows if mine.window_throughputs else (),
        errors=sum(p.errors for p in points),
        first_error=next((p.first_error for p in points if p.first_error), ""),
        others=((name, mine), *((b.gen.io.name, p) for b, p in zip(beside, theirs, strict=True))),
    )


def _entries(data: WorkloadData, number: int, short: bool = False) -> str:
    """Which entries request ``number`` of the workload carries, for people: ``entry 3 of
    input.json`` (``short``: the file's name, not its path)."""
    n, b = len(data.entries), data.batch_size
    picks = sorted({(number * b + i) % n for i in range(b)})
    source = Path(data.source).name if short else data.source
    return f"entr{'y' if len(picks) == 1 else 'ies'} {', '.join(map(str, picks))} of {source}"


def _answered(done: queue.Queue[tuple[int, Any]], index: int, result: Any, error: Any) -> None:
    done.put((index, None if error is not None else result))


def _infer_inputs(payload: Payload) -> list[Any]:
    """A request's tensors as tritonclient's HTTP inputs (binary data)."""
    import tritonclient.http as httpclient

    inputs = []
    for spec, array in payload.tensors:
        item = httpclient.InferInput(spec.name, list(array.shape), spec.datatype)
        item.set_data_from_numpy(array, binary_data=True)
        inputs.append(item)
    return inputs


def preflight_requests(payloads: Sequence[Payload], most: int = PREFLIGHT_MOST) -> list[int]:
    """Which requests a preflight sends: the first of each distinct shape, then others spread
    evenly over the rest, ``most`` in all, in order."""
    shapes: dict[tuple[tuple[str, tuple[int, ...]], ...], int] = {}
    for number, payload in enumerate(payloads):
        shapes.setdefault(tuple((s.name, a.shape) for s, a in payload.tensors), number)
    chosen = set(list(shapes.values())[:most])
    step = max(1, len(payloads) // max(1, most - len(chosen)))
    spread = [k for k in range(0, len(payloads), step) if k not in chosen]
    return sorted(chosen | set(spread[: most - len(chosen)]))


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """Keep the garbage collector's pauses out of the latencies: what exists before the load
    is moved out of its reach (``gc.freeze``), so a collection only scans the few objects
    made while measuring. A process with a large heap (the tuner's) otherwise stalls its
    event loop for milliseconds now and then."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def model_io(host: str, http_port: int, model: str) -> ModelIO:
    """The model's inputs and outputs as the server serves them."""
    with ServerControl(host, http_port) as control:
        try:
            return ModelIO.from_metadata(control.metadata(model), control.config(model))
        except ControlError as exc:
            if exc.status in (400, 404):
                raise ModelNotFoundError(
                    f"model {model!r} is not loaded on the server at {host}:{http_port}", hint="check --model"
                ) from exc
            raise MeasurementError(str(exc), hint=exc.hint or None) from exc


@asynccontextmanager
async def _running(endpoint: Endpoint, job: Job, workers: int) -> AsyncIterator[Source]:
    """The job's load, running in this event loop or in worker processes."""
    if workers == 1:
        load = Load(endpoint.connector())
        try:
            await load.prepare(job)
            load.start(job, clock())
            yield load
        finally:
            await load.stop()
        return
    from autotune.loadgen._workers import ProcessLoad  # not at import: it is also a __main__

    processes = ProcessLoad()
    try:
        await processes.start(endpoint, job.split(workers))
        yield processes
    finally:
        await processes.stop()
