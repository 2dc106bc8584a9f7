"""Which step of a pipeline to tune when the user names none: the one that limits it under load.

Before round 1 the pipeline is served as the repository has it and its goodput searched as a
trial's is; at that operating point, under load, the step where a request spends the most time
(queued and computed) is the one requests wait for, and round 1 tunes it (:func:`find`). A
step's compute at one client alone can name another: a decoder of less compute per request can
still be where requests queue. After each round, the next step is read off that round winner's
operating point the same way (:func:`next_step`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from autotune import hostlock
from autotune import model_config as mcfg
from autotune.launch import make_launcher
from autotune.loadgen import LoadGenerator
from autotune.pipeline import Pipeline, tuned_configs
from autotune.points import Point
from autotune.search.level_search import judged_at
from autotune.search.noise import RAMP_S
from autotune.search_space import bundled, load_search_space
from autotune.settings import RunSettings
from autotune.staging import Stages, stage_members
from autotune.traffic import Loader, requests_per_s


def slowest(point: Point, instances: dict[str, int]) -> str:
    """The step whose compute per request over its instances (``instances``, by name) is the
    most; "" for a point without steps."""
    steps = point.server.steps
    return max(steps, key=lambda name: _load_us(point, name, instances)) if steps else ""


def next_step(point: Point, tuned: Collection[str]) -> str:
    """After a round of an ensemble tuned in rounds: the step where a request spends the most time,
    queued and computed, at that round winner's operating point ``point``
    (:meth:`~autotune.points.ServerBreakdown.bottleneck`: under load the step of least capacity
    is the one requests queue for), when no round tuned it yet; "" when the rounds are done."""
    name = point.server.bottleneck()
    return "" if not name or name in tuned else name


def line(point: Point, instances: dict[str, int]) -> str:
    """Each step's compute per request and instances, as people read them:
    ``toy 4.8 ms x1, slow 6.4 ms x1``."""
    steps = point.server.steps
    return ", ".join(f"{n} {steps[n].compute_us / 1000:.1f} ms x{max(1, instances.get(n, 1))}" for n in steps)


def _load_us(point: Point, name: str, instances: dict[str, int]) -> float:
    step = point.server.steps[name]
    return step.compute_us / max(1, instances.get(name, 1))


def find(settings: RunSettings, found: Pipeline, *, wait: bool = False) -> tuple[str, Point]:
    """The step to tune first and the operating point it was read at: the pipeline served from the user's
    repository (linked, never written; the steps of ``settings.tuned_steps`` with the configs
    earlier rounds chose), its goodput searched as a trial's is (:meth:`Loader.search`, at the
    run's SLA, within the search space's load), and at that operating point, under load, the
    step where a request spends the most time (:func:`next_step`; a point without step figures:
    :func:`slowest`). It holds the machine's measurement lock; the server is stopped before this
    returns."""
    tuned = tuned_configs(settings.tuned_steps)

    def instances(model: str) -> int:  # a GPU config's per GPU, times its GPUs
        config = tuned.get(model) or mcfg.load_config(settings.repository, model)
        count, _, gpus = mcfg.instances_of(config)
        return count * max(1, len(gpus))

    counts = {m: instances(m) for m in found.members}
    space = load_search_space(settings.search_space or bundled("default"))
    loader, sla = Loader.read(settings.traffic), settings.search_sla
    name = f"bottleneck-{os.getpid()}"
    with hostlock.measuring("autotune run (finding the bottleneck)", wait=wait):
        launcher = make_launcher(settings.launch, name)
        stages = Stages.for_run(name)
        view = stages.path("pipeline")
        stage_members(settings.repository, found.models, view, tuned)
        with tempfile.TemporaryDirectory(prefix="autotune-bottleneck-") as logs:
            try:
                with launcher.serve(view, settings.model, Path(logs) / "server.log") as server:
                    plan = judged_at(settings.plan, sla.limit_ms)
                    first = LoadGenerator.connect(
                        server.host, server.http_port, server.grpc_port, settings.model,
                        protocol=settings.protocol, plan=plan, workload=settings.workload, preflight=True,
                    ).with_steps(found.members)  # fmt: skip
                    later = first.with_plan(replace(plan, warmup_s=min(plan.warmup_s, RAMP_S)))
                    done: list[Point] = []

                    def at(level: float) -> Point:
                        done.append(loader.point(later if done else first, level))
                        return done[-1]

                    def one_client() -> float:
                        return requests_per_s(at(1.0))

                    measured = loader.search(at, sla, space, None, None, one_client)
            finally:
                stages.remove()
    point = measured.closest(sla)
    return next_step(point, ()) or slowest(point, counts), point
