"""Which step of an ensemble to tune when the user names none: the one with the least capacity.

The pipeline is served as the repository has it and measured at one client (no request waits
in a queue there, so each step's time is its own work): a step's capacity is its instances over
its compute time per request, and a pipeline serves no more than its step of least capacity
(``autotune run --model ENSEMBLE`` without ``--step`` tunes that one first). After each round
of such a run, the step that limits the pipeline is read off the round winner's own operating
point, under load: the one where a request spends the most time (:func:`next_step`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Collection
from pathlib import Path

from autotune import hostlock
from autotune import model_config as mcfg
from autotune.launch import make_launcher
from autotune.loadgen import LoadGenerator
from autotune.pipeline import Pipeline, tuned_configs
from autotune.points import Point
from autotune.settings import RunSettings
from autotune.staging import Stages, stage_members


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


def find(settings: RunSettings, found: Pipeline, *, wait: bool = False) -> tuple[str, str]:
    """The step to tune (:func:`slowest`) and what it was read from (:func:`line`): the pipeline served
    from the user's repository (linked, never written; the steps of ``settings.tuned_steps`` with
    the configs earlier rounds chose) at one client, holding the machine's
    measurement lock; the server is stopped before this returns."""

    tuned = tuned_configs(settings.tuned_steps)

    def instances(model: str) -> int:  # a GPU config's per GPU, times its GPUs
        config = tuned.get(model) or mcfg.load_config(settings.repository, model)
        count, _, gpus = mcfg.instances_of(config)
        return count * max(1, len(gpus))

    counts = {m: instances(m) for m in found.members}
    name = f"bottleneck-{os.getpid()}"
    with hostlock.measuring("autotune run (finding the bottleneck)", wait=wait):
        launcher = make_launcher(settings.launch, name)
        stages = Stages.for_run(name)
        view = stages.path("pipeline")
        stage_members(settings.repository, found.models, view, tuned)
        with tempfile.TemporaryDirectory(prefix="autotune-bottleneck-") as logs:
            try:
                with launcher.serve(view, settings.model, Path(logs) / "server.log") as server:
                    gen = LoadGenerator.connect(
                        server.host, server.http_port, server.grpc_port, settings.model,
                        protocol=settings.protocol, plan=settings.plan, workload=settings.workload,
                        preflight=True,
                    )  # fmt: skip
                    point = gen.with_steps(found.members).at_concurrency(1)
            finally:
                stages.remove()
    return slowest(point, counts), line(point, counts)
