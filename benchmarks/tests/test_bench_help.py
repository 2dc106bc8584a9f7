"""Every benchmark that parses options with argparse explains itself: ``--help`` prints its
usage and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if "argparse" in p.read_text())


def test_the_benchmarks_that_take_options_are_found() -> None:
    assert {"simulate.py", "at_once.py", "vs_model_analyzer.py", "sim_vs_real.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_prints_its_help(script: str) -> None:
    """A help text argparse cannot format (a bare ``%``) fails here, not in a user's terminal."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--help"],
        capture_output=True, text=True, timeout=120, cwd=BENCHMARKS.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
