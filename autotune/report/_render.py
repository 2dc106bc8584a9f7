"""Draw a :class:`~autotune.report._data.ReportData` as one self-contained HTML page.

The page opens offline: plotly.js is embedded once, the figures are JSON blocks that a small
script hands to ``Plotly.newPlot``. Every string that came from a person or a server (model
name, labels, reasons, log tails, configs) goes through :func:`html.escape`; the JSON blocks
have ``<``, ``>`` and ``&`` escaped so no string can close their ``<script>`` element.
"""

from __future__ import annotations

import html
import importlib.resources
import math
import re
from collections.abc import Iterable, Sequence
from string import Template
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

from autotune import __version__
from autotune.measure import WARNING_TEXT
from autotune.report._data import OperatingPoint, ReportData, TrialRow, VerificationRow
from autotune.results import COMPLETE, FAIL, RUNNING

PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d",
    "#ff9da6", "#7f7f7f", "#2f4b7c", "#bcbd22", "#17becf", "#a05195", "#665191", "#d45087",
)  # fmt: skip
WINNER = "#f2b705"
BASELINE = "#1d4ed8"
FRONT = "#1b2230"
SLA_RED = "#c0392b"
FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Arial, "Noto Sans", "DejaVu Sans", sans-serif'
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def sla_text(data: ReportData) -> str:
    return f"p{data.sla.percentile} ≤ {data.sla.limit_ms:g} ms"


def render_html(data: ReportData) -> str:
    figures = {
        "fig-pareto": pareto_figure(data),
        "fig-server": server_figure(data),
        "fig-batch": batch_figure(data),
    }
    return _template().substitute(
        version=esc(__version__),
        title=esc(f"autotune: {data.run.model} ({sla_text(data)})"),
        header=_header(data),
        pareto=_pareto_section(data),
        server=_server_section(data, figures),
        trials=_trials_section(data),
        verifications=_verifications_section(data.verifications, data),
        config=_config_section(data),
        footer=esc(f"autotune {__version__} · run {data.run.run_id}"),
        figures="\n".join(_figure_block(k, f) for k, f in figures.items() if f is not None),
        plotlyjs=_plotlyjs(),
    )


def _template() -> Template:
    resource = importlib.resources.files("autotune.templates").joinpath("report.html")
    return Template(resource.read_text(encoding="utf-8"))


def _plotlyjs() -> str:
    # plotly.js holds no "</script" today; should one appear, keep it from ending our element.
    return re.sub(r"</(script)", r"<\\/\1", plotly.offline.get_plotlyjs(), flags=re.IGNORECASE)


def script_json(text: str) -> str:
    """JSON that is safe inside a <script> element: no <, > or & left to close or confuse it."""
    return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_ESCAPES[m.group()], text)


def _figure_block(target: str, fig: go.Figure) -> str:
    body = script_json(pio.to_json(fig, validate=False))
    return f'<script type="application/json" data-plot="{esc(target)}">{body}</script>'


# ---------------------------------------------------------------- formatting


def num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _td(text: str, cls: str = "") -> str:
    """A cell sorted by its text."""
    return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"


def _ntd(text: str, value: float | None, cls: str = "") -> str:
    """A cell sorted by ``value`` (an empty key when there is none: such rows sort last)."""
    key = "" if value is None else repr(value)
    klass = f' class="{cls}"' if cls else ""
    return f'<td{klass} data-v="{key}">{text}</td>'


def _badge(text: str, kind: str, title: str = "") -> str:
    tip = f' title="{esc(title)}"' if title else ""
    return f'<span class="badge {kind}"{tip}>{esc(text)}</span>'


def _percentiles(data: ReportData) -> list[int]:
    return sorted({50, 95, 99, data.sla.percentile})


# ---------------------------------------------------------------- header


def _header(data: ReportData) -> str:
    run = data.run
    finished = f" → {esc(run.finished)}" if run.finished else " (running)"
    running = f", {data.count(RUNNING)} running" if data.count(RUNNING) else ""
    counts = (
        f"{len(data.rows)} ({data.count(COMPLETE)} complete, {data.count(FAIL)} failed{running}, "
        f"{data.feasible_count} within the SLA)"
    )
    meta = [
        ("SLA", esc(sla_text(data))),
        ("run", f"<code>{esc(run.run_id)}</code>"),
        ("launcher", esc(run.launcher)),
        ("time", esc(run.started) + finished),
        ("trials", esc(counts)),
    ]
    items = "".join(f"<span>{k} <b>{v}</b></span>" for k, v in meta)
    return (
        f'<header><h1><span class="tool">autotune report ·</span> {esc(run.model)}</h1>'
        f'<div class="meta">{items}</div>{_kpis(data)}{_run_notes(run.notes)}</header>'
    )


def _kpis(data: ReportData) -> str:
    w, pct = data.winner, data.sla.percentile
    if w is None:
        return (
            '<div class="kpis"><div class="kpi win"><div class="k">Winner</div>'
            '<div class="v">none yet</div><div class="s">no trial met the SLA</div></div></div>'
        )
    chosen = "chosen by the run" if data.winner_chosen else "best so far (the run has not chosen yet)"
    r = data.recommended
    goodput: float | None
    latency: float | None
    p50: float | None
    if r is not None and r.verification is not None:  # the verified operating point (medians)
        goodput, latency, p50 = r.throughput, r.latency_ms, r.p50_ms
        v = r.verification
        met = f"{v.sla_met}/{len(v.points)}"
        where = f"at concurrency {r.concurrency} · {met} verification repeats met the SLA"
    else:
        goodput, latency, p50, where = w.goodput, w.latency_ms, w.p50_ms, _where(w)
    over = (latency or 0.0) > data.sla.limit_ms
    tiles = [
        ("kpi win", "Winner", esc(w.label or f"trial {w.number}"), f"trial #{w.number} · {chosen}"),
        ("kpi", "Goodput", f"{num(goodput)} <small>infer/s</small>", where),
        (
            "kpi",
            f"Latency p{pct}",
            f'<span class="{"bad" if over else ""}">{num(latency, 2)}</span> <small>ms</small>',
            f"SLA ≤ {data.sla.limit_ms:g} ms · p50 {num(p50, 2)} ms",
        ),
        ("kpi", "Gain vs baseline", *_gain_text(data)),
    ]
    cards = "".join(
        f'<div class="{c}"><div class="k">{k}</div><div class="v">{v}</div><div class="s">{s}</div></div>'
        for c, k, v, s in tiles
    )
    return f'<div class="kpis">{cards}</div>'


def _where(row: TrialRow) -> str:
    if row.concurrency:
        return f"at concurrency {row.concurrency}"
    return f"at {num(row.request_rate)} req/s" if row.request_rate else ""


def _gain_text(data: ReportData) -> tuple[str, str]:
    base = data.baseline
    if base is None:
        return "—", "no baseline trial"
    if data.gain is None:
        return "—", f"baseline (trial #{base.number}) did not meet the SLA"
    pct = (data.gain - 1) * 100
    cls = "good" if data.gain >= 1 else "bad"
    return (
        f'<span class="{cls}">&times;{data.gain:.2f}</span> <small>{pct:+.0f}%</small>',
        f"baseline {num(base.goodput)} infer/s (trial #{base.number})",
    )


def _run_notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{esc(n)}</li>" for n in notes)
    return f'<div class="callout"><b>Notes</b><ul>{items}</ul></div>'


# ---------------------------------------------------------------- charts


def _pareto_section(data: ReportData) -> str:
    pct = data.sla.percentile
    body = (
        '<div id="fig-pareto" class="chart"></div>'
        if data.points
        else '<div class="empty">no operating point was measured</div>'
    )
    return (
        '<section class="card"><h2>Throughput vs latency</h2>'
        f'<p class="sub">Every operating point measured (faint, one colour per trial; hover for details), '
        f"each trial's reported point, and the trials no other beats on both throughput and p{pct} "
        f"latency (the Pareto front). Right of the red line the SLA is broken.</p>{body}</section>"
    )


def pareto_figure(data: ReportData) -> go.Figure | None:
    if not data.points:
        return None
    rows = {r.number: r for r in data.rows}
    fig = go.Figure()
    fig.add_trace(_points_trace(data.points, rows))
    for feasible in (True, False):
        shown = [r for r in rows.values() if _shown(r) and r.feasible == feasible]
        if shown:
            fig.add_trace(_best_trace(shown, feasible))
    front = list(data.front)
    fig.add_trace(
        go.Scatter(
            x=[r.latency_ms for r in front], y=[r.throughput for r in front], mode="lines+markers",
            name="Pareto front", line={"color": FRONT, "width": 2},
            marker={"symbol": "circle-open", "size": 17, "color": FRONT, "line": {"width": 1.5}},
            hoverinfo="skip",
        )
    )  # fmt: skip
    for row, name, symbol, colour, size in (
        (data.baseline, "baseline", "diamond", BASELINE, 15),
        (data.winner, "winner", "star", WINNER, 22),
    ):
        if row is not None and row.measured:
            fig.add_trace(_marked(row, name, symbol, colour, size))
    _pareto_layout(fig, data)
    return fig


def _shown(row: TrialRow) -> bool:
    return row.measured and row.reused_from is None


def _colour(trial: int) -> str:
    return PALETTE[trial % len(PALETTE)]


def _points_trace(points: Sequence[OperatingPoint], rows: dict[int, TrialRow]) -> go.Scatter:
    label = {n: esc(r.label) for n, r in rows.items()}
    return go.Scatter(
        x=[p.latency_ms for p in points],
        y=[p.throughput for p in points],
        mode="markers",
        name="operating points",
        marker={"color": [_colour(p.trial) for p in points], "size": 7, "opacity": 0.35},
        customdata=[
            [p.trial, label.get(p.trial, ""), _load(p), "yes" if p.meets_sla else "no"] for p in points
        ],
        hovertemplate=(
            "trial #%{customdata[0]} · %{customdata[2]}<br>%{customdata[1]}<br>"
            "%{y:,.1f} infer/s · %{x:,.2f} ms · SLA met: %{customdata[3]}<extra></extra>"
        ),
    )


def _load(p: OperatingPoint) -> str:
    return f"concurrency {p.concurrency}" if p.concurrency else f"{p.request_rate:g} req/s"


def _best_trace(rows: Sequence[TrialRow], feasible: bool) -> go.Scatter:
    marker: dict[str, Any] = {
        "color": [_colour(r.number) for r in rows],
        "size": 11,
        "line": {"color": "white", "width": 1.5},
    }
    if not feasible:
        marker = {"color": "#8a93a3", "size": 9, "symbol": "x", "line": {"width": 0}}
    return go.Scatter(
        x=[r.latency_ms for r in rows],
        y=[r.throughput for r in rows],
        mode="markers",
        name="trials (best within SLA)" if feasible else "trials (none within SLA: closest)",
        marker=marker,
        customdata=[[r.number, esc(r.label), r.concurrency or 0] for r in rows],
        hovertemplate=(
            "<b>trial #%{customdata[0]}</b><br>%{customdata[1]}<br>concurrency %{customdata[2]} · "
            "%{y:,.1f} infer/s · %{x:,.2f} ms<extra></extra>"
        ),
    )


def _marked(row: TrialRow, name: str, symbol: str, colour: str, size: int) -> go.Scatter:
    return go.Scatter(
        x=[row.latency_ms], y=[row.throughput], mode="markers+text", name=name,
        text=[f"<b>{name}</b>"], textposition="top center", textfont={"color": "#1b2230", "size": 12},
        marker={"symbol": symbol, "size": size, "color": colour, "line": {"color": "#1b2230", "width": 1.2}},
        customdata=[[row.number, esc(row.label)]],
        hovertemplate=(
            f"<b>{name}</b>: trial #%{{customdata[0]}}<br>%{{customdata[1]}}<br>"
            "%{y:,.1f} infer/s · %{x:,.2f} ms<extra></extra>"
        ),
    )  # fmt: skip


def _pareto_layout(fig: go.Figure, data: ReportData) -> None:
    latencies = [p.latency_ms for p in data.points if p.latency_ms > 0]
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
    fig.update_yaxes(title_text="throughput (infer/s)", rangemode="tozero")
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


def _server_section(data: ReportData, figures: dict[str, go.Figure | None]) -> str:
    server = (
        '<div id="fig-server" class="chart small"></div>'
        if figures["fig-server"] is not None
        else '<div class="empty">no server statistics were collected</div>'
    )
    batch = (
        '<div id="fig-batch" class="chart small"></div>'
        if figures["fig-batch"] is not None
        else '<div class="empty">no batch statistics for the winner</div>'
    )
    who = f" (trial #{data.winner.number})" if data.winner else ""
    return (
        '<section class="card"><div class="grid2">'
        "<div><h2>Where the time goes, server side</h2>"
        '<p class="sub">Per request at each trial\'s reported point: time queued vs computing '
        f"(from Triton's statistics).</p>{server}</div>"
        f"<div><h2>Batch sizes the winner ran{esc(who)}</h2>"
        f'<p class="sub">Model executions by batch size at the winning operating point.</p>{batch}</div>'
        "</div></section>"
    )


def server_figure(data: ReportData) -> go.Figure | None:
    rows = [r for r in data.rows if _shown(r) and r.queue_us is not None]
    if not rows or not any((r.queue_us or 0) + (r.compute_infer_us or 0) > 0 for r in rows):
        return None
    names = [_trial_tick(r, data) for r in rows]
    labels = [esc(r.label) for r in rows]
    fig = go.Figure()
    for title, attr, colour in (
        ("queue", "queue_us", "#f2a541"),
        ("compute input", "compute_input_us", "#9ec5e8"),
        ("compute infer", "compute_infer_us", "#2f6db5"),
        ("compute output", "compute_output_us", "#b9d7a8"),
    ):
        values = [getattr(r, attr) or 0.0 for r in rows]
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


def _trial_tick(row: TrialRow, data: ReportData) -> str:
    if data.winner is not None and row.number == data.winner.number:
        return f"#{row.number} ★"
    return f"#{row.number} (base)" if row.baseline else f"#{row.number}"


def batch_figure(data: ReportData) -> go.Figure | None:
    w = data.winner
    if w is None or not w.batch_sizes or not any(w.batch_sizes.values()):
        return None
    sizes = sorted(w.batch_sizes)
    fig = go.Figure(
        go.Bar(
            x=[str(s) for s in sizes], y=[w.batch_sizes[s] for s in sizes], marker={"color": "#2f6db5"},
            hovertemplate="batch size %{x}: %{y:,} executions<extra></extra>", name="executions",
        )
    )  # fmt: skip
    _base_layout(fig)
    fig.update_layout(showlegend=False, bargap=0.3)
    fig.update_xaxes(type="category", title_text=f"batch size (average {num(w.avg_batch, 2)})")
    fig.update_yaxes(title_text="executions")
    return fig


# ---------------------------------------------------------------- tables


def _trials_section(data: ReportData) -> str:
    pcts = _percentiles(data)
    heads = [
        ("#", ""), ("configuration", "l"), ("state", "l"), ("load", ""), ("throughput /s", ""),
        *((f"p{p} ms", "sla" if p == data.sla.percentile else "") for p in pcts),
        ("avg ms", ""), ("queue µs", ""), ("infer µs", ""), ("avg batch", ""), ("time s", ""),
    ]  # fmt: skip
    head = "".join(f'<th class="{c}">{esc(h)}</th>' if c else f"<th>{esc(h)}</th>" for h, c in heads)
    body = "".join(_trial_tr(r, data, pcts) for r in data.rows)
    body = body or f'<tr><td class="l" colspan="{len(heads)}">no trials yet</td></tr>'
    return (
        '<section class="card"><h2>Trials</h2>'
        f'<p class="sub">Each trial at its best point within the SLA (or, when none met it, its lowest '
        f"p{data.sla.percentile} point). Click a column to sort.</p>"
        f'<div class="table-wrap"><table class="sortable" id="trials"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div></section>"
    )


def _trial_tr(r: TrialRow, data: ReportData, pcts: Iterable[int]) -> str:
    limit, sla_pct = data.sla.limit_ms, data.sla.percentile
    lat = []
    for p in pcts:
        value: float | None = getattr(r, f"p{p}_ms")
        cls = "sla" if p == sla_pct else ""
        if p == sla_pct and value is not None and value > limit:
            cls += " over"
        lat.append(_ntd(num(value, 2), value, cls.strip()))
    cells = [
        _ntd(str(r.number), r.number),
        _config_td(r, data),
        _td(_badge(r.state.lower(), {COMPLETE: "ok", FAIL: "fail"}.get(r.state, "run")), "l"),
        _ntd(esc(_load_text(r)), r.concurrency or r.request_rate),
        _ntd(num(r.throughput), r.throughput),
        *lat,
        _ntd(num(r.avg_ms, 2), r.avg_ms),
        _ntd(num(r.queue_us, 0), r.queue_us),
        _ntd(num(r.compute_infer_us, 0), r.compute_infer_us),
        _ntd(num(r.avg_batch, 2), r.avg_batch),
        _ntd(num(r.duration_s, 0), r.duration_s),
    ]
    return f'<tr class="{_row_class(r, data)}">{"".join(cells)}</tr>'


def _row_class(r: TrialRow, data: ReportData) -> str:
    if data.winner is not None and r.number == data.winner.number:
        return "winner"
    if r.state == FAIL:
        return "failed"
    if r.baseline:
        return "baseline"
    return "" if r.feasible or r.state != COMPLETE else "infeasible"


def _load_text(r: TrialRow) -> str:
    if r.concurrency:
        return f"c={r.concurrency}"
    return f"{r.request_rate:g} req/s" if r.request_rate else "—"


def _config_td(r: TrialRow, data: ReportData) -> str:
    """The label, then what marks the trial out, then why it failed and the server's last words."""
    label = f'<div class="label">{esc(r.label) or "—"}</div>'
    marks = _marks(r, data)
    marks = f'<div class="marks">{marks}</div>' if marks else ""
    return f'<td class="cfg l" data-s="{esc(r.label)}">{label}{marks}{_notes(r)}</td>'


def _marks(r: TrialRow, data: ReportData) -> str:
    badges = []
    if data.winner is not None and r.number == data.winner.number:
        badges.append(_badge("winner", "win"))
    if r.baseline:
        badges.append(_badge("baseline", "base"))
    if r.pareto:
        badges.append(_badge("pareto", "front", "no other trial has both more throughput and less latency"))
    if r.state == COMPLETE and not r.feasible:
        badges.append(_badge("over SLA", "infeasible", "no operating point met the SLA"))
    badges.extend(_badge(w, "warn", WARNING_TEXT.get(w, "")) for w in r.warnings)
    return "".join(badges)


def _notes(r: TrialRow) -> str:
    parts = []
    if r.reason:
        parts.append(f'<div class="reason">{esc(r.reason)}</div>')
    if r.reused_from is not None:
        parts.append(
            f'<div class="note">same configuration as trial #{r.reused_from}: not measured again</div>'
        )
    if r.log_tail:
        parts.append(
            f"<details><summary>server log (last lines)</summary><pre>{esc(r.log_tail)}</pre></details>"
        )
    return "".join(parts)


def _verifications_section(rows: Sequence[VerificationRow], data: ReportData) -> str:
    if not rows:
        return ""
    pct = data.sla.percentile
    heads = ["trial", "configuration", "concurrency", "repeats", "SLA met",
             "median /s", "min /s", "max /s", f"median p{pct} ms", f"worst p{pct} ms"]  # fmt: skip
    head = "".join(f'<th class="l">{h}</th>' if h == "configuration" else f"<th>{h}</th>" for h in heads)
    body = "".join(_verification_tr(v, data.sla.limit_ms) for v in rows)
    return (
        '<section class="card"><h2>Verification</h2>'
        '<p class="sub">The finalists measured again at their chosen operating point.</p>'
        f'<div class="table-wrap"><table class="sortable" id="verifications"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div></section>"
    )


def _verification_tr(v: VerificationRow, limit: float) -> str:
    all_met = v.sla_met == v.repeats
    met = _badge(f"{v.sla_met}/{v.repeats}", "ok" if all_met else "fail")
    cells = [
        _ntd(str(v.trial), v.trial),
        f'<td class="cfg l">{esc(v.label) or "—"}</td>',
        _ntd(str(v.concurrency), v.concurrency),
        _ntd(str(v.repeats), v.repeats),
        _ntd(met, v.sla_met),
        _ntd(num(v.median_throughput), v.median_throughput),
        _ntd(num(v.min_throughput), v.min_throughput),
        _ntd(num(v.max_throughput), v.max_throughput),
        _ntd(num(v.median_latency_ms, 2), v.median_latency_ms, "over" if v.median_latency_ms > limit else ""),
        _ntd(num(v.max_latency_ms, 2), v.max_latency_ms, "over" if v.max_latency_ms > limit else ""),
    ]
    return f"<tr>{''.join(cells)}</tr>"


# ---------------------------------------------------------------- configs


def _config_section(data: ReportData) -> str:
    run = data.run
    if not run.winner_config:
        return (
            '<section class="card"><h2>Original config.pbtxt</h2>'
            '<p class="sub">No winning configuration was recorded.</p>'
            f"<pre>{esc(run.original_config) or '(empty)'}</pre></section>"
        )
    diff = (
        f'<pre class="diff">{diff_html(run.winner_diff)}</pre>'
        if run.winner_diff.strip()
        else '<div class="empty">the winner is the original configuration: nothing to change</div>'
    )
    return (
        '<section class="card"><div class="grid2">'
        f'<div><h2>What the winner changes</h2><p class="sub">config.pbtxt, original → winner</p>{diff}</div>'
        '<div><h2>The winner\'s config.pbtxt</h2><p class="sub">as written back</p>'
        f"<pre>{esc(run.winner_config)}</pre></div></div></section>"
    )


def diff_html(diff: str) -> str:
    """A unified diff as escaped lines, each in a span classed add/del/hunk/file."""
    return "".join(
        f'<span class="{_diff_class(line)}">{esc(line) or " "}</span>' for line in diff.splitlines()
    )


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "ctx")
