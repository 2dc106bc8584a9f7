"""The tuning report: data first (tables), then render (one offline HTML page).

    data = report_data(run, trials)        # the trials and points as DataFrames; tests assert on them
    html = render_html(data)               # self-contained page, plotly.js inline
    write_report(run, trials, out_dir)     # report.html + trials.csv, each written atomically

The report only reads the run; it never changes a study or a config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.files import write_text_atomic
from autotune.report._data import (
    ReportData,
    VerificationRow,
    gpu_summary,
    pareto_front,
    report_data,
    trials_frame,
    write_csv,
)
from autotune.report._render import render_html
from autotune.results import RunInfo, TrialResult

REPORT_NAME = "report.html"
CSV_NAME = "trials.csv"


def write_report(run: RunInfo, trials: Sequence[TrialResult], out_dir: Path) -> Path:
    """Write ``report.html`` and ``trials.csv`` into ``out_dir``; return the report's path."""
    data = report_data(run, trials)
    page = render_html(data)
    write_csv(data, out_dir / CSV_NAME)
    path = out_dir / REPORT_NAME
    write_text_atomic(path, page)
    return path


__all__ = [
    "CSV_NAME",
    "REPORT_NAME",
    "ReportData",
    "VerificationRow",
    "gpu_summary",
    "pareto_front",
    "render_html",
    "report_data",
    "trials_frame",
    "write_csv",
    "write_report",
]
