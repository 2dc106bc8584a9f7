"""Render a :class:`~autotune.report._data.ReportData` as one self-contained HTML page.

The markup is ``templates/report.html``, a Jinja2 template rendered with autoescaping on: this
module hands it plain values (strings, numbers, rows of the report's tables), so every string
that came from a person or a server (model name, labels, reasons, log tails, configs) is
escaped by Jinja2 and none can become markup. Two things go in raw, as :class:`~markupsafe.Markup`,
and only after being made safe inside a ``<script>`` element: plotly.js (no ``</script`` left
in it) and the figures' JSON (no ``<``, ``>``, ``&``, U+2028 or U+2029 left in it).

The page opens offline: plotly.js is embedded once, the figures are JSON blocks that a small
script in the template hands to ``Plotly.newPlot``.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from dataclasses import dataclass
from typing import Any

import jinja2
import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline
from markupsafe import Markup

from autotune import __version__
from autotune.points import WARNING_TEXT
from autotune.report._data import ReportData, Row, records
from autotune.report._figures import figures, num, sla_text
from autotune.results import COMPLETE, FAIL, PRUNED, RUNNING

TEMPLATE = "report.html"
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
STATE_BADGES = {COMPLETE: "ok", FAIL: "fail", PRUNED: "infeasible"}  # any other state (RUNNING): "run"


@dataclass(frozen=True)
class Kpis:
    """The winner's tiles: what it is, its operating point, and its gain over the baseline."""

    number: int
    label: str  # the winner's label, or "trial N" for a trial without one
    chosen: bool  # by the run; else the best so far
    goodput: float | None
    latency_ms: float | None  # at the SLA percentile
    p50_ms: float | None
    over: bool  # the latency breaks the SLA
    where: str  # "at concurrency 8 · 3/3 race rounds met the SLA"
    baseline: int | None
    baseline_goodput: float  # as the run ranked: per GPU in a per-GPU run
    gain: float | None  # the run's objective: goodput, or goodput per GPU
    per_gpu: float | None = None  # a per-GPU run: the winner's goodput per GPU
    gpus_used: int = 0  # ... and the GPUs it used (0: a CPU candidate, counted as one)
    throughput_gain: float | None = None  # a per-GPU run: the gain in throughput, beside it
    gain_figures: str = ""  # which figures the gain compares, and its interval where raced
    keep_yours: bool = False  # the race did not show the winner ahead of your config


@dataclass(frozen=True)
class TrialLine:
    """One row of the trials table: the trial's row and how the page marks it."""

    row: Row
    css: str  # the <tr> class: winner, failed, baseline, infeasible or none
    state_kind: str  # the state badge's class
    marks: tuple[tuple[str, str, str], ...]  # badges: (text, class, tooltip)
    load: str  # "c=8", "500 req/s" or a dash
    latencies: tuple[tuple[float | None, str], ...]  # (value, cell class) per shown percentile
    extra: tuple[tuple[str, float | None], ...] = ()  # per-GPU and GPU cells: (text, sort value)


def render_html(data: ReportData) -> str:
    drawn = figures(data)
    return _environment().get_template(TEMPLATE).render(_context(data, drawn))


@functools.cache
def _environment() -> jinja2.Environment:
    """Jinja2 over the packaged templates (``autotune.templates``), escaping every value."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt name fails the render instead of vanishing
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = num
    env.filters["sortkey"] = sort_key
    return env


def _template_source(name: str) -> str:
    return importlib.resources.files("autotune.templates").joinpath(name).read_text(encoding="utf-8")


def sort_key(value: float | None) -> str:
    """A cell's ``data-v``: the number the table's script sorts by; empty (sorted last) for none."""
    return "" if value is None else repr(value)


def _context(data: ReportData, drawn: dict[str, go.Figure | None]) -> dict[str, Any]:
    return {
        "version": __version__,
        "title": f"autotune: {data.run.model} ({sla_label(data)})",
        "run": data.run,
        "sla": sla_label(data),
        "pct": data.sla.percentile,
        "limit": data.sla.limit_ms,
        "percentiles": percentiles(data),
        "counts": _counts(data),
        "made": list(data.run.made),
        "kpis": _kpis(data),
        "winner": data.winner,
        "per_gpu": data.per_gpu,
        "has_gpus": data.has_gpus,
        "extra_heads": extra_heads(data),
        "drawn": {target: fig is not None for target, fig in drawn.items()},
        "trials": [_trial_line(r, data) for r in records(data.trials)],
        "verifications": data.verifications,
        "race_nodes": any(v.nodes for v in data.verifications),
        "node_spread": data.node_spread,
        "diff": diff_lines(data.run.winner_diff),
        "open_loop": open_loop_text(data),
        "figures": [(target, _figure_json(fig)) for target, fig in drawn.items() if fig is not None],
        "plotlyjs": _plotlyjs(),
    }


# ---------------------------------------------------------------- raw parts, made safe


def _plotlyjs() -> Markup:
    # plotly.js holds no "</script" today; should one appear, keep it from ending our element.
    return Markup(re.sub(r"</(script)", r"<\\/\1", plotly.offline.get_plotlyjs(), flags=re.IGNORECASE))


def script_json(text: str) -> str:
    """JSON that is safe inside a <script> element: no <, > or & left to close or confuse it."""
    return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_ESCAPES[m.group()], text)


def _figure_json(fig: go.Figure) -> Markup:
    return Markup(script_json(pio.to_json(fig, validate=False)))


# ---------------------------------------------------------------- header


def sla_label(data: ReportData) -> str:
    """The SLA as the page's header names it: the latency, and the GPU memory limit if any."""
    memory = data.sla.max_gpu_memory_mb
    return sla_text(data) + (f", GPU memory ≤ {memory:g} MiB" if memory else "")


def percentiles(data: ReportData) -> list[int]:
    """The latency percentiles the trials table shows: 50, 95, 99 and the SLA's."""
    return sorted({50, 95, 99, data.sla.percentile})


def _counts(data: ReportData) -> str:
    running = f", {data.count(RUNNING)} running" if data.count(RUNNING) else ""
    pruned = f", {data.count(PRUNED)} not measured" if data.count(PRUNED) else ""
    return (
        f"{len(data.trials)} ({data.count(COMPLETE)} complete, {data.count(FAIL)} failed{pruned}{running}, "
        f"{data.feasible_count} within the SLA)"
    )


def _kpis(data: ReportData) -> Kpis | None:
    """The winner's tiles: at its verified operating point (medians) where it was verified."""
    if data.winner is None:
        return None
    w, r = data.row(data.winner), data.recommended
    if r is not None and r.verification is not None:
        met = f"{r.verification.sla_met}/{len(r.verification.points)}"
        where = f"at {r.where} · {met} race rounds met the SLA"
        goodput, latency, p50 = r.throughput, r.latency_ms, r.p50_ms
    else:
        where, goodput, latency, p50 = _where(w), w["goodput"], w["latency_ms"], w["p50_ms"]
    base = data.baseline_goodput
    gpus = int(w["gpus_used"] or 0)
    per_gpu = goodput / max(gpus, 1) if data.per_gpu and goodput is not None else None  # CPU: as one
    return Kpis(
        number=data.winner, label=w["label"] or f"trial {data.winner}", chosen=data.winner_chosen,
        goodput=goodput, latency_ms=latency, p50_ms=p50, over=(latency or 0.0) > data.sla.limit_ms,
        where=where, baseline=data.baseline, baseline_goodput=base,
        gain=data.gain_per_gpu if data.per_gpu else data.gain, per_gpu=per_gpu, gpus_used=gpus,
        throughput_gain=data.gain if data.per_gpu else None, gain_figures=data.gain_figures,
        keep_yours=data.keep_yours,
    )  # fmt: skip


def _where(row: Row) -> str:
    if row["concurrency"]:
        return f"at concurrency {row['concurrency']}"
    return f"at {row['request_rate']:.4g} req/s" if row["request_rate"] else ""


# ---------------------------------------------------------------- trials table


def _trial_line(r: Row, data: ReportData) -> TrialLine:
    return TrialLine(
        row=r,
        css=_row_class(r, data),
        state_kind=STATE_BADGES.get(r["state"], "run"),
        marks=marks(r, data),
        load=_load_text(r),
        latencies=tuple(_latency_cell(r, p, data) for p in percentiles(data)),
        extra=extra_cells(r, data),
    )


def extra_heads(data: ReportData) -> list[str]:
    """The trials table's columns a run has only sometimes: the throughput per GPU (a per-GPU
    run), the GPU figures (a run whose points have them), the share of requests answered with
    errors (a run where some point got them)."""
    heads = ["per GPU /s"] if data.per_gpu else []
    heads += ["GPU util %", "GPU MiB peak", "GPU W"] if data.has_gpus else []
    return heads + (["errors %"] if data.has_errors else [])


def extra_cells(r: Row, data: ReportData) -> tuple[tuple[str, float | None], ...]:
    """A trial's cells under :func:`extra_heads`: (text, sort value)."""
    values: list[tuple[float | None, int]] = [(r["throughput_per_gpu"], 1)] if data.per_gpu else []
    if data.has_gpus:
        values += [(r["gpu_util_pct"], 0), (r["gpu_memory_mb"], 0), (r["gpu_power_w"], 0)]
    if data.has_errors:
        rate = r["error_rate"]
        values.append((None if rate is None else 100.0 * rate, 1))
    return tuple((num(v, digits), v) for v, digits in values)


def _row_class(r: Row, data: ReportData) -> str:
    if r["trial"] == data.winner:
        return "winner"
    if r["output_check"] == "differs":
        return "infeasible"
    if r["state"] == FAIL:
        return "failed"
    if r["baseline"]:
        return "baseline"
    return "" if r["feasible"] or r["state"] != COMPLETE else "infeasible"


def marks(r: Row, data: ReportData) -> tuple[tuple[str, str, str], ...]:
    """What marks a trial out, as badges (text, class, tooltip): winner, baseline, Pareto,
    over the SLA, wrong answers (the output check), and each measurement warning with the text
    that says what to do about it."""
    badges = []
    if r["trial"] == data.winner:
        badges.append(("winner", "win", ""))
    if r["baseline"]:
        badges.append(("baseline", "base", ""))
    if r["pareto"]:
        badges.append(("pareto", "front", "no other trial has both more throughput and less latency"))
    if r["state"] == COMPLETE and not r["feasible"]:
        badges.append(("over SLA", "infeasible", "no operating point met the SLA"))
    if r["output_check"] == "differs":
        badges.append(
            ("wrong answers", "infeasible", "its answers differ from your config's (the reason says where)")
        )
    badges.extend((w, "warn", WARNING_TEXT.get(w, "")) for w in r["warnings"] or ())
    return tuple(badges)


def _load_text(r: Row) -> str:
    if r["concurrency"]:
        return f"c={r['concurrency']}"
    return f"{r['request_rate']:.4g} req/s" if r["request_rate"] else "—"


def _latency_cell(r: Row, percentile: int, data: ReportData) -> tuple[float | None, str]:
    """The trial's latency at a percentile, classed ``sla`` at the SLA's (``over`` when broken)."""
    value: float | None = r[f"p{percentile}_ms"]
    if percentile != data.sla.percentile:
        return value, ""
    return value, "sla over" if value is not None and value > data.sla.limit_ms else "sla"


def open_loop_text(data: ReportData) -> str:
    """A concurrency run's winner under arrivals at a rate, in a sentence ("" without the check)."""
    return data.run.open_loop.summary() if data.run.open_loop is not None else ""


# ---------------------------------------------------------------- configs


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """A unified diff's lines, each with its class: add, del, hunk, file or ctx. None for a
    diff of only whitespace (the winner is the original configuration)."""
    if not diff.strip():
        return []
    return [(_diff_class(line), line) for line in diff.splitlines()]


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "ctx")
