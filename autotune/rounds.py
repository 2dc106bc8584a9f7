"""Runs in rounds: a pipeline tuned step by step, and several models on one server tuned one
after another.

Each round is a run of its own. These functions choose the next round's settings from the last
round's outcome. They say why through ``say``, which the command line prints."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from autotune import bottleneck
from autotune.pipeline import ENSEMBLE, TunedStep, read_pipeline
from autotune.points import bottleneck_line
from autotune.results import Outcome
from autotune.rundir import WINNER_CONFIG, RunDir, find_unfinished
from autotune.search.level_search import search_plan
from autotune.settings import CoModel, RunSettings, serving
from autotune.writeback import models_written


def first_round(settings: RunSettings, wait: bool, say: Callable[[str], None]) -> RunSettings:
    """The first round's settings. A pipeline without ``--step`` is tuned in rounds. Its first
    round tunes the step that requests wait for at your config's operating point, under load
    (:func:`autotune.bottleneck.find`). That step is an ensemble's step, or a model a BLS model
    calls. The BLS model is served with at least as many instances as each model it calls
    (:func:`autotune.pipeline.caller_served`). Any other model keeps ``settings`` as they are."""
    found = read_pipeline(settings.repository, settings.model, settings.composing)  # broken: its one line
    if found is None:
        return settings
    flow = " -> ".join(found.members) if found.kind == ENSEMBLE else f"calls {', '.join(found.members)}"
    say(f"{settings.model}: {flow}; finding its bottleneck under load")
    if found.kind != ENSEMBLE:
        say(
            f"{settings.model} is served with at least as many instances as each model it calls "
            "(an instance holds a request until its calls return)"
        )
    step, point = bottleneck.find(settings, found, wait=wait)
    where = bottleneck_line(point) or "no per-step figures"
    say(f"round 1: at your config's operating point, {point.where}, {where}; tunes {step}")
    return replace(settings, step=step, rounds=True)


def next_round(settings: RunSettings, outcome: Outcome, say: Callable[[str], None]) -> RunSettings | None:
    """The next round's settings after ``outcome``, the outcome of the round ``settings`` ran.
    The next round tunes the step where requests spend the most time at the winner's operating
    point (:func:`autotune.bottleneck.next_step`), with every winner so far. With several models
    on one server, it tunes the next model instead (:func:`_next_beside`). None when that was the
    last round, the round had no winner, or the run is not in rounds."""
    winner = outcome.winner
    if not settings.rounds or winner is None or winner.best is None:
        return None
    record = RunDir.load(outcome.run_dir).record
    tuned = TunedStep(
        record.tuned,
        (outcome.run_dir / WINNER_CONFIG).read_text(encoding="utf-8"),
        record.original_digest,
        str(outcome.run_dir),
    )
    steps = (*settings.tuned_steps, tuned)
    if settings.beside:
        return _next_beside(settings, steps, outcome.run_dir, say)
    step = bottleneck.next_step(winner.best, [t.model for t in steps])
    where = bottleneck_line(winner.best) or "no per-step figures"
    if not step:
        say(
            f"rounds done: at the winner's operating point {where}, a step tuned already; "
            f"autotune apply {shlex.quote(str(outcome.run_dir))} writes the configs of "
            f"{', '.join(models_written(outcome.run_dir, record))}"
        )
        return None
    say(f"round {len(steps) + 1}: at the winner's operating point {where}; tuning {step}")
    name = f"{settings.study_name}-{step}" if settings.study_name else None  # a study of its own
    return replace(settings, step=step, tuned_steps=steps, run_dir=None, study_name=name)


def _next_beside(
    settings: RunSettings, steps: tuple[TunedStep, ...], run_dir: Path, say: Callable[[str], None]
) -> RunSettings | None:
    """The next round for several models on one server. It tunes the first model no round has
    tuned yet, with the others served beside it. Those already tuned are served with their
    winners (``steps``). None once every model was tuned."""
    done = [t.model for t in steps]
    following = next((c for c in settings.beside if c.model not in done), None)
    if following is None:
        say(
            f"rounds done: every model tuned ({', '.join(done)}); autotune apply "
            f"{shlex.quote(str(run_dir))} writes every model's config"
        )
        return None
    swapped = _swapped(settings, following)
    say(
        f"round {len(steps) + 1}: tuning {following.model}, served with "
        f"{', '.join(swapped.beside_names)} ({', '.join(done)} with the configs their rounds chose)"
    )
    name = f"{settings.study_name}-{following.model}" if settings.study_name else None
    return replace(swapped, tuned_steps=steps, run_dir=None, study_name=name)


def _swapped(settings: RunSettings, following: CoModel) -> RunSettings:
    """For several models on one server: ``settings`` with ``following`` as the tuned model. The
    model tuned so far is served beside it, in its place."""
    me = CoModel(settings.model, replace(settings.sla, others=()), settings.weight, settings.workload)
    beside = tuple(me if c.model == following.model else c for c in settings.beside)
    swapped = serving(settings, following, beside)
    plan = search_plan(swapped.sla, swapped.plan.window_s)  # its SLA's percentile
    return replace(swapped, plan=plan)


def unfinished_round(settings: RunSettings) -> RunSettings | None:
    """For several models on one server: the settings of a later round that these settings
    started and that stopped before finishing, with its run directory. None when there is none.
    Each other model's folder is searched (:func:`autotune.rundir.find_unfinished`), because
    that round tunes that model."""
    for following in settings.beside:
        swapped = _swapped(settings, following)
        found = find_unfinished(swapped)
        if found is not None:
            return replace(swapped, tuned_steps=RunDir.load(found).record.tuned_steps, run_dir=found)
    return None
