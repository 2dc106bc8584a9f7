"""The output check on every example (issue 45): no false alarm, and what it costs.

    python benchmarks/output_check.py [--models bertQA cnn ...] [--out DIR]

Each example of examples/model_repository is tuned once with the default search space and
default budget, the check on (the default), with the workload the examples README gives it.
A row per model: the trials measured, what their check found (reference: your config's answers;
passed; differs), the check's seconds per trial (median and most) and in all, and that share of
the run's wall time. Every model but ``sentiment`` must show no "differs" (a false alarm);
``sentiment``'s batching configs must (its model.py answers a batch in the wrong order).
Run it alone on the machine: the runs measure.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "examples" / "model_repository"
# model -> (SLA p95 ms, workload flags), as examples/README.md and the benchmarks tune them
MODELS: dict[str, tuple[float, tuple[str, ...]]] = {
    "bertQA": (50.0, ()),
    "bertQA_dynamic": (100.0, ("--input-data", str(REPO / "bertQA_dynamic" / "input.json"))),
    "cnn": (20.0, ()),
    "food_classifier": (50.0, ("--input-data", str(REPO / "food_classifier" / "input.json"))),
    "text_recognition": (50.0, ("--shape", "input.1:1,32,100", "--batch-size", "2")),
    "mobilenet": (25.0, ()),
    "recommender": (25.0, ()),
    "embedder": (50.0, ()),
    "sentiment": (50.0, ("--input-data", str(REPO / "sentiment" / "input.json"))),
}


def tune(model: str, reports: Path) -> tuple[Path | None, float, int]:
    """One default run of ``model``: its run directory, wall time and exit code."""
    sla, workload = MODELS[model]
    argv = [sys.executable, "-m", "autotune.cli", "run", "--model", model, "--model-repository", str(REPO),
            "--sla-p95-ms", f"{sla:g}", "--reports-dir", str(reports), *workload]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - start
    runs = sorted((reports / model).glob("*/run.json"))
    if done.returncode != 0:
        print(f"{model}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
    return (runs[-1].parent if runs else None), wall, done.returncode


def row(model: str, run_dir: Path | None, wall: float, code: int) -> str:
    from autotune.reload import reload_outcome

    if run_dir is None:
        return f"| {model} | exit {code} | | | | | |"
    trials = [t for t in reload_outcome(run_dir).trials if t.reused_from is None]
    checked = [t for t in trials if t.measurement is not None and t.output_check]
    found = {k: sum(t.output_check == k for t in trials) for k in ("reference", "passed", "differs")}
    seconds = [t.measurement.output_check_s for t in checked if t.measurement is not None]
    per = f"{statistics.median(seconds):.2f} / {max(seconds):.2f}" if seconds else "-"
    total = sum(seconds)
    winner = reload_outcome(run_dir).winner
    label = winner.candidate.label() if winner is not None and winner.candidate is not None else "none"
    return (f"| {model} | {len(trials)} | {found['reference']} / {found['passed']} / {found['differs']} | "
            f"{per} | {total:.1f} | {wall:.0f} | {100 * total / wall:.2f}% | {label} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--out", type=Path, help="where the run directories go (default: a temporary folder)")
    args = parser.parse_args(argv)
    reports = args.out or Path(tempfile.mkdtemp(prefix="output-check-"))
    print("| model | trials | check: reference / passed / differs | check s per trial (median / most) "
          "| check s in all | run wall s | check share | winner |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for model in args.models:
        print(row(model, *tune(model, reports)), flush=True)
    print(f"run directories: {reports}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
