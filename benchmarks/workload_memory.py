#!/usr/bin/env python3
"""Peak memory of a tuning run fed a large input file, against the same run on random data.

    .venv/bin/python benchmarks/workload_memory.py                 # ~100 MB of entries
    .venv/bin/python benchmarks/workload_memory.py --megabytes 20

Builds bertQA_dynamic (examples/build_models.py) and an input.json of about ``--megabytes``
MB in perf_analyzer's format (entries of lengths 32 to 256, cycled), then runs ``autotune run``
twice with the same small budget (2 trials, no finalists): on random data (``--shape`` 128)
and on the file. Each run is its own process (``python -m autotune.cli``); the tuner's peak
resident memory is its ``VmHWM`` (read by a wrapper at exit), the load generator's is the
tuner's own (it runs in the tuner's process: one worker). The server's memory is not counted.
Also prints how long reading the file took (the run's "workload:" line comes after it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _tools
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (32, 48, 64, 96, 128, 160, 192, 256)
# Runs autotune.cli in this process and prints the peak RSS (VmHWM) when it is done.
WRAPPER = """
import sys
from autotune.cli import main
code = main(sys.argv[1:])
for line in open("/proc/self/status"):
    if line.startswith("VmHWM"):
        print("PEAK_KB", line.split()[1], file=sys.stderr)
sys.exit(code)
"""


def write_input(path: Path, megabytes: float, seed: int = 0) -> int:
    """perf_analyzer JSON of bertQA_dynamic entries until the file holds ``megabytes`` MB."""
    rng = np.random.default_rng(seed)
    target, size, count = megabytes * 1e6, 0, 0
    with path.open("w", encoding="utf-8") as out:
        out.write('{"data":[')
        while size < target:
            n = LENGTHS[count % len(LENGTHS)]
            entry = {
                "input_ids": {"content": rng.integers(1000, 30522, n).tolist(), "shape": [n]},
                "segment_ids": {"content": [0] * (n // 2) + [1] * (n - n // 2), "shape": [n]},
                "input_mask": {"content": [1] * n, "shape": [n]},
            }
            text = ("," if count else "") + json.dumps(entry, separators=(",", ":"))
            out.write(text)
            size += len(text)
            count += 1
        out.write("]}")
    return count


def run(repo: Path, reports: Path, flags: Sequence[str], log: Path) -> tuple[int, float, int]:
    """``autotune run`` on bertQA_dynamic: (exit code, wall seconds, peak RSS in kB)."""
    args = [
        "run",
        "--model",
        "bertQA_dynamic",
        "--model-repository",
        str(repo),
        "--sla-p95-ms",
        "200",
        "--reports-dir",
        str(reports),
        "--max-trials",
        "2",
        "--finalists",
        "0",
        "--fresh",
        *flags,
    ]
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *args], capture_output=True, text=True, check=False)
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    peak = next((int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_KB")), 0)
    return proc.returncode, time.monotonic() - start, peak


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=100.0, help="input file size (default 100)")
    parser.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="workload-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    models = _tools.example_models(["bertQA_dynamic"])
    repo = work / "repo"
    if not (repo / "bertQA_dynamic").is_dir():
        _tools.copy_model(models, "bertQA_dynamic", repo)
    data = work / "input.json"
    entries = write_input(data, args.megabytes)
    mb = data.stat().st_size / 1e6
    _tools.log(f"{data}: {mb:.1f} MB, {entries} entries")
    rows = []
    for label, flags in (("random data", ["--shape", "input_ids:128", "--shape", "segment_ids:128",
                                          "--shape", "input_mask:128"]),
                         (f"input.json {mb:.0f} MB", ["--input-data", str(data)])):  # fmt: skip
        log = work / f"{label.split()[0]}.log"
        code, wall, peak = run(repo, work / "reports", flags, log)
        rows.append((label, code, wall, peak))
        _tools.log(f"{label}: exit {code}, {wall:.0f} s, peak {peak / 1024:.0f} MB (log {log})")
    print(f"{'workload':<22} {'exit':>4} {'wall s':>7} {'tuner peak RSS MB':>18}")
    for label, code, wall, peak in rows:
        print(f"{label:<22} {code:>4} {wall:>7.0f} {peak / 1024:>18.0f}")
    if rows[0][3]:
        print(f"extra peak memory for the file: {(rows[1][3] - rows[0][3]) / 1024:.0f} MB "
              f"({(rows[1][3] - rows[0][3]) / 1024 / mb:.1f}x its size)")  # fmt: skip
    return 0 if all(code == 0 for _, code, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
