"""Both rule sets on a quiet GPU server (issue 42): ``autotune run`` on tests/gpu_models/torch_mlp
(torch on CUDA in the python backend) under p95 <= 5 ms, the space of its survey
(benchmarks/surveys/torch_mlp_gpu.json.gz: scripts/gpu_path.py's, clients up to 128), the runs
alternating ``--rules stability`` and ``--rules intervals`` (ABBA...) until ``SECONDS`` would be
passed. Each run has the defaults but a time budget of 120 s and no open-loop check (not part of
either rule set). The device tool runs it through scripts/gpu_rules.sh; each run's run.json,
trials.csv and console go to OUT/NN-RULES/, a line per run to stdout:

    python scripts/gpu_rules.py OUT [SECONDS] [--cpu]     # --cpu: a rehearsal without a GPU

The winners' true goodput is read on the survey here: ``benchmarks/simulate.py`` does not; the
closing note of issue 42 says how.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_path

ORDER = ("stability", "intervals", "intervals", "stability")
RUN_S = 150  # a run's usual length here, with its 120 s budget: no run is begun with less left


def one_run(out: Path, index: int, rules: str, cpu: bool) -> str:
    work = Path(f"/tmp/gpu-rules-{index}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    space = gpu_path.SPACE.replace("max: 64}", "max: 128}")
    if cpu:
        space = space.replace("KIND_GPU", "KIND_CPU").replace("  gpus: [[0]]\n", "")
    (work / "space.yaml").write_text(space, encoding="utf-8")
    argv = [sys.executable, "-m", "autotune.cli", "run", "--model", "torch_mlp", "--model-repository",
            str(gpu_path.MODELS), "--sla-p95-ms", "5", "--search-space", str(work / "space.yaml"),
            "--reports-dir", str(work / "reports"), "--time-budget", "120s", "--no-open-loop-check",
            "--rules", rules, "--fresh"]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=work)
    wall = time.monotonic() - start
    dest = out / f"{index:02d}-{rules}"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "console.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    runs = sorted((work / "reports" / "torch_mlp").glob("*/run.json"))
    if not runs:
        return f"{index:2d} {rules:<9} rc {done.returncode} wall {wall:4.0f} s: no run directory"
    for name in ("run.json", "trials.csv"):
        if (runs[-1].parent / name).is_file():
            shutil.copy(runs[-1].parent / name, dest / name)
    record = json.loads(runs[-1].read_text(encoding="utf-8"))
    with (runs[-1].parent / "trials.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    measured = sum(1 for r in rows if r["state"] == "COMPLETE" and not r["reused_from"])
    winner = next((r for r in rows if r["winner"] == "True"), None)
    label = f"{winner['label']} at {winner['concurrency']} clients" if winner else "none"
    return (
        f"{index:2d} {rules:<9} rc {done.returncode} wall {wall:4.0f} s "
        f"searched {record.get('searched_s', 0):4.0f} s trials measured {measured:2d} winner {label}"
    )


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    out = Path(args[0] if args else "gpu-out")
    seconds = float(args[1]) if len(args) > 1 else 480.0
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + seconds
    index = 0
    while time.monotonic() + RUN_S < deadline:
        rules = ORDER[index % len(ORDER)]
        print(one_run(out, index, rules, "--cpu" in sys.argv[1:]), flush=True)
        index += 1
    return 0 if index else 1


if __name__ == "__main__":
    sys.exit(main())
