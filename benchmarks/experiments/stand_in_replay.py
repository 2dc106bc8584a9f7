"""The trials :func:`autotune.decide.dominated` would not have measured, replayed on recorded runs.

    .venv/bin/python benchmarks/experiments/stand_in_replay.py RUN_DIR [RUN_DIR ...]

Reads run folders (reports/<model>/<run-id>); no server. Walks each run's trials in order and
asks, of every measured one but the baseline, what :func:`autotune.decide.stand_in` would have
said given the trials before it (as the tuner asks before it serves a proposal): the ones it
would have scored as another trial, with the seconds they took, and whether one of them was
the run's winner (then the replay says nothing of what the run would have found). An upper
bound of what the run would have saved: the search after a stand-in differs (a free trial
queues the incumbent's untried neighbours at once, as a repeated proposal does).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune import decide  # noqa: E402
from autotune.reload import reload_outcome  # noqa: E402


def replay(run_dir: Path) -> tuple[int, float, float]:
    """(trials it would stand in for, their seconds, the run's seconds in trials); prints them."""
    outcome = reload_outcome(run_dir)
    trials = sorted(outcome.trials, key=lambda t: t.number)
    winner = outcome.info.winner
    skipped, saved = 0, 0.0
    print(f"== {run_dir}")
    for i, trial in enumerate(trials):
        if trial.reused_from is not None or trial.candidate is None or trial.measurement is None:
            continue
        stood, why = decide.stand_in(trials[:i], trial.candidate, outcome.info.scoring, trial.baseline)
        if stood is None:
            continue
        skipped, saved = skipped + 1, saved + trial.duration_s
        won = "  THE WINNER" if trial.number == winner else ""
        print(f"  #{trial.number:<3} {trial.candidate.label():<45} {trial.duration_s:5.1f} s  {why}{won}")
    total = sum(t.duration_s for t in trials)
    print(f"  {skipped} trials, {saved:.1f} s of {total:.1f} s in trials")
    return skipped, saved, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    runs = [replay(d) for d in args.run_dirs]
    seconds = sorted(s for _, s, _ in runs)
    print(f"\n{len(runs)} runs: {sum(n for n, _, _ in runs)} trials stood in for, "
          f"{sum(seconds):.1f} s of {sum(t for _, _, t in runs):.1f} s in trials; "
          f"per run median {seconds[len(seconds) // 2]:.1f} s, most {seconds[-1]:.1f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
