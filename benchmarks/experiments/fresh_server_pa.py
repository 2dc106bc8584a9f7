"""perf_analyzer on one config, the way ``vs_model_analyzer.py`` re-measures a winner: a fresh
server each time, a 1 s warm-up, then 3 windows of 2 s (stability 100%), ``--repeats`` times.
Shows the spread a fresh server adds beside a long-warmed one (``client_cpu.py``).

    .venv/bin/python benchmarks/experiments/fresh_server_pa.py --model mobilenet \\
        --config WORK/mobilenet/remeasure/autotune-#4/repo/mobilenet/config.pbtxt --concurrency 10
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402
import vs_model_analyzer as vsma  # noqa: E402

from autotune import model_config as mcfg  # noqa: E402
from autotune.launch.local import LocalLauncher  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mobilenet")
    parser.add_argument("--config", type=Path, required=True, help="the config.pbtxt to serve")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup-ms", type=int, default=1000)
    args = parser.parse_args()
    _tools.stop_on_sigint()
    pa = _tools.ensure_perf_analyzer()
    models = _tools.example_models([args.model])
    work = Path(tempfile.mkdtemp(prefix="fresh-pa-"))
    for repeat in range(args.repeats):
        folder = work / f"repeat-{repeat}"
        config = mcfg.parse_config(args.config.read_text(encoding="utf-8"))
        config.name = args.model
        vsma.stage_model(models / args.model, config, folder / "repo")
        with LocalLauncher().serve(folder / "repo", args.model, folder / "server.log") as server:
            port = server.grpc_port
            vsma.perf_analyzer(pa, args.model, port, args.concurrency, args.warmup_ms, folder / "w.csv", 100)
            point = vsma.perf_analyzer(pa, args.model, port, args.concurrency, 2000, folder / "m.csv", 100)
        if point is None:
            print(f"repeat {repeat + 1}: perf_analyzer failed (logs in {folder})")
        else:
            print(
                f"repeat {repeat + 1}: {point.throughput:.0f} infer/s, p99 {point.p99_ms:.1f} ms", flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
