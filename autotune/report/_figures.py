"""The report's plotly figures, drawn from a :class:`~autotune.report._data.ReportData`.

Plotly renders hover text and trace text as HTML, so a string in a figure that came from a
person or a server (a trial's label: the kind comes from a config) goes through
:func:`hover_text` here. Everything else on the page is escaped by the template.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.report._data import ReportData, Row, records

PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d",
    "#ff9da6", "#7f7f7f", "#2f4b7c", "#bcbd22", "#17becf", "#a05195", "#665191", "#d45087",
)  # fmt: skip
WINNER = "#f2b705"
BASELINE = "#1d4ed8"
FRONT = "#1b2230"
SLA_RED = "#c0392b"
FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, "Noto Sans", "DejaVu Sans", sans-serif'
# The server-side breakdown's stacked bars, bottom up: (legend, column, colour).
SERVER_BARS = (
    ("queue", "queue_us", "#f2a541"),
    ("compute input", "compute_input_us", "#9ec5e8"),
    ("compute infer", "compute_infer_us", "#2f6db5"),
    ("compute output", "compute_output_us", "#b9d7a8"),
)


def figures(data: ReportData) -> dict[str, go.Figure | None]:
    """The page's figures by the id of the element each is drawn in; None: nothing to draw."""
    return {
        "fig-pareto": pareto_figure(data),
        "fig-load": load_figure(data),
        "fig-open-loop": open_loop_figure(data),
        "fig-server": server_figure(data),
        "fig-steps": steps_figure(data),
        "fig-batch": batch_figure(data),
        "fig-gpu": gpu_figure(data),
    }


def hover_text(value: object) -> str:
    """A person's or a server's string, safe as plotly's (HTML) hover text."""
    return html.escape(str(value), quote=True)


def num(value: float | None, digits: int = 1) -> str:
    """A number as the page shows it (thousands separated); a dash for none."""
    return "—" if value is None else f"{value:,.{digits}f}"


def sla_text(data: ReportData) -> str:
    return f"p{data.sla.percentile} ≤ {data.sla.limit_ms:g} ms"


def measured(row: Row) -> bool:
    return row["throughput"] is not None and row["latency_ms"] is not None


def shown(row: Row) -> bool:
    """Drawn as a trial: measured, and not a repeat of a trial drawn already."""
    return measured(row) and row["reused_from"] is None


# ---------------------------------------------------------------- throughput vs latency


def pareto_figure(data: ReportData) -> go.Figure | None:
    """Throughput (per GPU where the run compared so: what it ranked by) against latency."""
    if data.points.empty:
        return None
    rows = records(data.trials)
    y = data.throughput_column
    fig = go.Figure()
    fig.add_trace(_points_trace(records(data.points), {r["trial"]: hover_text(r["label"]) for r in rows}, y))
    for feasible in (True, False):
        best = [r for r in rows if shown(r) and r["feasible"] == feasible]
        if best:
            fig.add_trace(_best_trace(best, feasible, y))
    fig.add_trace(_front_trace(records(data.front), y))
    for number, name, symbol, colour, size in (
        (data.baseline, "baseline", "diamond", BASELINE, 15),
        (data.winner, "winner", "star", WINNER, 22),
    ):
        if number is not None and measured(data.row(number)):
            fig.add_trace(_marked(data.row(number), name, symbol, colour, size, y))
    _pareto_layout(fig, data)
    return fig


def _unit(y: str) -> str:
    return "infer/s per GPU" if y == "throughput_per_gpu" else "infer/s"


def _colour(trial: int) -> str:
    return PALETTE[trial % len(PALETTE)]


def _points_trace(points: Sequence[Row], labels: dict[int, str], y: str) -> go.Scatter:
    """Every point; where its windows were recorded, its interval's whiskers (throughput: both
    bounds; latency: the upper bound the SLA is held to)."""
    bars: dict[str, Any] = {}
    if y == "throughput" and any(p["throughput_low"] is not None for p in points):
        up = [_gap(p, "throughput_high", "throughput") for p in points]
        down = [_gap(p, "throughput_low", "throughput") for p in points]
        right = [_gap(p, "latency_high", "latency_ms") for p in points]
        bars["error_y"] = {"type": "data", "symmetric": False, "array": up, "arrayminus": down, **WHISKER}
        flat = [0.0] * len(points)
        bars["error_x"] = {"type": "data", "symmetric": False, "array": right, "arrayminus": flat, **WHISKER}
    return go.Scatter(
        **bars,
        x=[p["latency_ms"] for p in points],
        y=[p[y] for p in points],
        mode="markers",
        name="operating points",
        marker={"color": [_colour(p["trial"]) for p in points], "size": 7, "opacity": 0.35},
        customdata=[
            [p["trial"], labels.get(p["trial"], ""), _load(p), "yes" if p["meets_sla"] else "no", _warm(p)]
            for p in points
        ],
        hovertemplate=(
            "trial #%{customdata[0]} · %{customdata[2]}<br>%{customdata[1]}<br>"
            f"%{{y:,.1f}} {_unit(y)} · %{{x:,.2f}} ms · SLA met: %{{customdata[3]}}"
            "%{customdata[4]}<extra></extra>"
        ),
    )


WHISKER = {"thickness": 1, "width": 0}


def _warm(p: Row) -> str:
    """A hover line for the first windows a warm-up held, dropped from the point ("" none)."""
    found = p.get("warm_windows")
    n = int(found) if isinstance(found, (int, float)) and found == found else 0  # NaN: none recorded
    return f"<br>first {n} window{'s' if n > 1 else ''} dropped: still warming up" if n else ""


def _gap(p: Row, bound: str, figure: str) -> float:
    """How far a point's bound lies from its figure (0 without one)."""
    return 0.0 if p[bound] is None else abs(p[bound] - p[figure])


def _load(p: Row) -> str:
    return f"concurrency {p['concurrency']}" if p["concurrency"] else f"{p['request_rate']:.4g} req/s"


def _best_trace(rows: Sequence[Row], feasible: bool, y: str) -> go.Scatter:
    marker: dict[str, Any] = {
        "color": [_colour(r["trial"]) for r in rows],
        "size": 11,
        "line": {"color": "white", "width": 1.5},
    }
    if not feasible:
        marker = {"color": "#8a93a3", "size": 9, "symbol": "x", "line": {"width": 0}}
    return go.Scatter(
        x=[r["latency_ms"] for r in rows],
        y=[r[y] for r in rows],
        mode="markers",
        name="trials (best within SLA)" if feasible else "trials (none within SLA: closest)",
        marker=marker,
        customdata=[[r["trial"], hover_text(r["label"]), _load(r)] for r in rows],
        hovertemplate=(
            "<b>trial #%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[2]} · "
            f"%{{y:,.1f}} {_unit(y)} · %{{x:,.2f}} ms<extra></extra>"
        ),
    )


def _front_trace(front: Sequence[Row], y: str) -> go.Scatter:
    return go.Scatter(
        x=[r["latency_ms"] for r in front], y=[r[y] for r in front], mode="lines+markers",
        name="Pareto front", line={"color": FRONT, "width": 2},
        marker={"symbol": "circle-open", "size": 17, "color": FRONT, "line": {"width": 1.5}},
        hoverinfo="skip",
    )  # fmt: skip


def _marked(row: Row, name: str, symbol: str, colour: str, size: int, y: str) -> go.Scatter:
    return go.Scatter(
        x=[row["latency_ms"]], y=[row[y]], mode="markers+text", name=name,
        text=[f"<b>{name}</b>"], textposition="top center", textfont={"color": "#1b2230", "size": 12},
        marker={"symbol": symbol, "size": size, "color": colour, "line": {"color": "#1b2230", "width": 1.2}},
        customdata=[[row["trial"], hover_text(row["label"])]],
        hovertemplate=(
            f"<b>{name}</b>: trial #%{{customdata[0]}}<br>%{{customdata[1]}}<br>"
            f"%{{y:,.1f}} {_unit(y)} · %{{x:,.2f}} ms<extra></extra>"
        ),
    )  # fmt: skip


def _pareto_layout(fig: go.Figure, data: ReportData) -> None:
    latencies = [float(x) for x in data.points["latency_ms"] if x > 0]
    log = bool(latencies) and max(latencies) / min(latencies) > 50
    limit = data.sla.limit_ms
    right = max([*latencies, limit]) * (3 if log else 1.08)
    fig.add_vrect(x0=limit, x1=right, fillcolor=SLA_RED, opacity=0.05, line_width=0, layer="below")
    fig.add_vline(x=limit, line={"color": SLA_RED, "width": 1.5, "dash": "dash"})
    fig.add_annotation(  # on a log axis, annotations take log10 of the value (shapes do not)
        x=math.log10(limit) if log else limit, y=1, yref="paper", text=f"SLA {sla_text(data)}",
        showarrow=False, xanchor="left", yanchor="top", xshift=6, font={"color": SLA_RED, "size": 12},
    )  # fmt: skip
    _base_layout(fig)
    fig.update_layout(legend={"orientation": "h", "y": -0.16, "x": 0}, hovermode="closest")
    fig.update_xaxes(title_text=f"p{data.sla.percentile} latency (ms)", type="log" if log else "linear")
    fig.update_yaxes(title_text=f"throughput ({_unit(data.throughput_column)})", rangemode="tozero")
    if not log:
        fig.update_xaxes(rangemode="tozero")


def _base_layout(fig: go.Figure) -> None:
    fig.update_layout(
        template="plotly_white",
        font={"family": FONT, "size": 12.5, "color": "#1b2230"},
        margin={"l": 64, "r": 20, "t": 16, "b": 56},
        hoverlabel={"font": {"family": FONT}},
        paper_bgcolor="white",
        plot_bgcolor="white",
    )
    fig.update_xaxes(showline=True, linecolor="#c9ced8", gridcolor="#eef0f4", zeroline=False)
    fig.update_yaxes(showline=True, linecolor="#c9ced8", gridcolor="#eef0f4", zeroline=False)


# ---------------------------------------------------------------- latency vs load


def load_figure(data: ReportData) -> go.Figure | None:
    """Each trial's latency at the SLA percentile against the load it was measured at: the
    request rate in an open-loop run (where each config's curve turns up is what it sustains),
    the concurrency in a closed-loop one."""
    points = records(data.points)
    if not points:
        return None
    labels = {r["trial"]: hover_text(r["label"]) for r in records(data.trials)}
    rate = data.run.open_loop_run
    fig = go.Figure()
    for trial in sorted({p["trial"] for p in points}):
        mine = sorted((p for p in points if p["trial"] == trial), key=_level)
        fig.add_trace(
            go.Scatter(
                x=[_level(p) for p in mine], y=[p["latency_ms"] for p in mine], mode="lines+markers",
                name=f"#{trial}" + (" ★" if trial == data.winner else ""),
                line={"color": _colour(trial), "width": 3 if trial == data.winner else 1.5},
                marker={"size": 7, "symbol": ["circle" if p["meets_sla"] else "x" for p in mine]},
                customdata=[[trial, labels.get(trial, ""), _load(p), p["throughput"]] for p in mine],
                hovertemplate=(
                    "trial #%{customdata[0]} · %{customdata[2]}<br>%{customdata[1]}<br>"
                    "%{y:,.2f} ms · %{customdata[3]:,.1f} infer/s<extra></extra>"
                ),
            )
        )  # fmt: skip
    _sla_line(fig, data)
    _base_layout(fig)
    fig.update_layout(legend={"orientation": "h", "y": -0.2, "x": 0}, hovermode="closest")
    fig.update_xaxes(title_text="arrival rate (req/s)" if rate else "concurrency", rangemode="tozero")
    fig.update_yaxes(title_text=f"p{data.sla.percentile} latency (ms)", type="log")
    return fig


def open_loop_figure(data: ReportData) -> go.Figure | None:
    """A concurrency run's winner under arrivals at a rate: latency against the rate, the rate
    its closed loop was credited with, and the highest one that met the SLA."""
    check = data.run.open_loop
    if check is None or not check.points:
        return None
    ordered = sorted(check.points, key=lambda p: p.request_rate)
    pct = data.sla.percentile
    fig = go.Figure(
        go.Scatter(
            x=[p.request_rate for p in ordered], y=[p.latency_ms(pct) for p in ordered],
            mode="lines+markers", name=f"winner (trial #{check.trial}), {check.distribution} arrivals",
            line={"color": WINNER, "width": 3}, marker={"size": 9, "line": {"color": FRONT, "width": 1}},
            hovertemplate="%{x:,.4g} req/s · %{y:,.2f} ms<extra></extra>",
        )
    )  # fmt: skip
    fig.add_vline(x=check.credited_rate, line={"color": FRONT, "width": 1.5, "dash": "dot"})
    fig.add_annotation(
        x=check.credited_rate, y=1, yref="paper", text="closed loop's rate", showarrow=False,
        xanchor="right", yanchor="top", xshift=-4, font={"size": 12},
    )  # fmt: skip
    _sla_line(fig, data)
    _base_layout(fig)
    fig.update_layout(legend={"orientation": "h", "y": -0.22, "x": 0})
    fig.update_xaxes(title_text="arrival rate (req/s)", rangemode="tozero")
    fig.update_yaxes(title_text=f"p{pct} latency (ms)", type="log")
    return fig


def _level(p: Row) -> float:
    return float(p["concurrency"] or p["request_rate"] or 0.0)


def _sla_line(fig: go.Figure, data: ReportData) -> None:
    limit = data.sla.limit_ms
    fig.add_hline(y=limit, line={"color": SLA_RED, "width": 1.5, "dash": "dash"})
    fig.add_annotation(  # a log axis: annotations take log10 of the value
        x=0, xref="paper", y=math.log10(limit), text=f"SLA {sla_text(data)}", showarrow=False,
        xanchor="left", yanchor="bottom", font={"color": SLA_RED, "size": 12},
    )  # fmt: skip


# ---------------------------------------------------------------- server side


def server_figure(data: ReportData) -> go.Figure | None:
    rows = [r for r in records(data.trials) if shown(r) and r["queue_us"] is not None]
    if not any((r["queue_us"] or 0) + (r["compute_infer_us"] or 0) > 0 for r in rows):
        return None
    names = [_trial_tick(r, data) for r in rows]
    labels = [hover_text(r["label"]) for r in rows]
    fig = go.Figure()
    for title, column, colour in SERVER_BARS:
        values = [r[column] or 0.0 for r in rows]
        if any(values):
            fig.add_trace(
                go.Bar(
                    x=names, y=values, name=title, marker={"color": colour}, customdata=labels,
                    hovertemplate=f"%{{x}} · {title}: %{{y:,.0f}} µs<br>%{{customdata}}<extra></extra>",
                )
            )  # fmt: skip
    _base_layout(fig)
    fig.update_layout(
        barmode="stack", legend={"orientation": "h", "y": -0.22, "x": 0, "traceorder": "normal"}, bargap=0.25
    )
    fig.update_xaxes(type="category", tickangle=0)
    fig.update_yaxes(title_text="µs per request")
    return fig


def steps_figure(data: ReportData) -> go.Figure | None:
    """An ensemble's trials: each step's time per request (queued, computing), stacked per
    trial; None for a model that serves alone."""
    rows = [r for r in records(data.trials) if shown(r) and r.get("steps")]
    if not rows:
        return None
    names = [_trial_tick(r, data) for r in rows]
    steps = list(dict.fromkeys(name for r in rows for name in r["steps"]))
    fig = go.Figure()
    for i, step in enumerate(steps):
        colour = STEP_COLOURS[i % len(STEP_COLOURS)]
        for part, opacity in (("queue", 0.45), ("compute", 1.0)):
            values = [_step_us(r["steps"].get(step), part) for r in rows]
            hover = f"%{{x}} · {hover_text(step)} {part}: %{{y:,.0f}} µs<br>%{{customdata}}<extra></extra>"
            fig.add_trace(
                go.Bar(
                    x=names, y=values, name=f"{step} {part}", marker={"color": colour},
                    opacity=opacity, customdata=[hover_text(r["label"]) for r in rows],
                    hovertemplate=hover,
                )
            )  # fmt: skip
    _base_layout(fig)
    fig.update_layout(barmode="stack", legend={"orientation": "h", "y": -0.22, "x": 0}, bargap=0.25)
    fig.update_xaxes(type="category", tickangle=0)
    fig.update_yaxes(title_text="µs per request")
    return fig


STEP_COLOURS = ("#2f6db5", "#f2a541", "#3a9d5d", "#b5452f", "#7a4fb5", "#5f6b7a")


def _step_us(step: Mapping[str, Any] | None, part: str) -> float:
    """A step's queue, or compute (input, infer, output), in µs per request (0 without it)."""
    if not step:
        return 0.0
    if part == "queue":
        return float(step.get("queue_us") or 0.0)
    return float(
        sum(step.get(k) or 0.0 for k in ("compute_input_us", "compute_infer_us", "compute_output_us"))
    )


def _trial_tick(row: Row, data: ReportData) -> str:
    if row["trial"] == data.winner:
        return f"#{row['trial']} ★"
    return f"#{row['trial']} (base)" if row["baseline"] else f"#{row['trial']}"


def batch_figure(data: ReportData) -> go.Figure | None:
    if data.winner is None:
        return None
    w = data.row(data.winner)
    batch_sizes: dict[int, int] = w["batch_sizes"] or {}
    if not any(batch_sizes.values()):
        return None
    sizes = sorted(batch_sizes)
    fig = go.Figure(
        go.Bar(
            x=[str(s) for s in sizes], y=[batch_sizes[s] for s in sizes], marker={"color": "#2f6db5"},
            hovertemplate="batch size %{x}: %{y:,} executions<extra></extra>", name="executions",
        )
    )  # fmt: skip
    _base_layout(fig)
    fig.update_layout(showlegend=False, bargap=0.3)
    fig.update_xaxes(type="category", title_text=f"batch size (average {num(w['avg_batch'], 2)})")
    fig.update_yaxes(title_text="executions")
    return fig


# ---------------------------------------------------------------- GPUs


GPU_BARS = (("memory_mb", "MiB"), ("utilization_pct", "%"))  # the GPU panel's rows: (column, unit)


def gpu_figure(data: ReportData) -> go.Figure | None:
    """Each GPU's peak memory (top) and average utilisation (bottom) at each trial's reported
    point, bars grouped by GPU; the SLA's GPU memory limit as a line. None without GPU figures."""
    if not data.has_gpus:
        return None
    rows = records(data.gpus)
    ticks = {t: _trial_tick(data.row(t), data) for t in dict.fromkeys(r["trial"] for r in rows)}
    gpus = sorted({r["gpu"] for r in rows})
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for gpu in gpus:
        mine = [r for r in rows if r["gpu"] == gpu]
        for place, (column, unit) in enumerate(GPU_BARS, start=1):
            bars = _gpu_bars(mine, ticks, gpu, len(gpus) > 1, column, unit, place == 1)
            fig.add_trace(bars, row=place, col=1)
    limit = data.sla.max_gpu_memory_mb
    if limit:
        fig.add_hline(y=limit, line={"color": SLA_RED, "width": 1.5, "dash": "dash"}, row=1, col=1)
    _base_layout(fig)
    fig.update_layout(barmode="group", bargap=0.25, legend={"orientation": "h", "y": -0.16, "x": 0})
    fig.update_xaxes(type="category", tickangle=0)
    fig.update_yaxes(title_text="memory, peak (MiB)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="utilisation (%)", range=[0, 100], row=2, col=1)
    return fig


def _gpu_bars(
    rows: Sequence[Row], ticks: dict[int, str], gpu: int, several: bool, column: str, unit: str, legend: bool
) -> go.Bar:
    """One GPU's bars of one figure (``column``), a colour per GPU, named in the legend once."""
    name = f"GPU {gpu}" if several else "GPU"
    return go.Bar(
        x=[ticks[r["trial"]] for r in rows], y=[r[column] for r in rows], name=name, legendgroup=name,
        showlegend=several and legend, marker={"color": PALETTE[gpu % len(PALETTE)]},
        customdata=[hover_text(r["uuid"]) for r in rows],
        hovertemplate=f"%{{x}} · {name} %{{customdata}}: %{{y:,.0f}} {unit}<extra></extra>",
    )  # fmt: skip
