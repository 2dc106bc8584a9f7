"""The embedder example's shape: which batcher settings pay for a model with fixed batch shapes.

    .venv/bin/python benchmarks/experiments/embedder_shape.py                 # the table, ~10 minutes
    .venv/bin/python benchmarks/experiments/embedder_shape.py --concurrency 8 16 --window-ms 2000

Serves the ``embedder`` example (every call padded to a multiple of 8 rows: one row costs what
8 do) on a local tritonserver under each config below in turn, and measures each at the given
concurrencies with perf_analyzer over gRPC (``--percentile=99``, ``--measurement-interval``,
its first three windows, stable or not), random data. Prints one line per config and
concurrency: throughput, p99, and the mean batch the server executed (from its statistics).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402

from autotune.launch.local import LocalLauncher  # noqa: E402

MODEL = "embedder"
# (label, instances, dynamic batching?, preferred sizes, queue delay in microseconds)
CONFIGS = (
    ("no batching", 1, False, (), 0),
    ("no batching", 2, False, (), 0),
    ("dynamic, delay 0", 1, True, (), 0),
    ("dynamic, delay 0", 2, True, (), 0),
    ("preferred [8,16], delay 0", 1, True, (8, 16), 0),
    ("preferred [8,16], delay 0", 2, True, (8, 16), 0),
    ("preferred [8,16], delay 2000", 1, True, (8, 16), 2000),
    ("preferred [8,16], delay 5000", 1, True, (8, 16), 5000),
    ("preferred [8,16], delay 2000", 2, True, (8, 16), 2000),
    ("preferred [8,16], delay 5000", 2, True, (8, 16), 5000),
)


def configure(path: Path, instances: int, dynamic: bool, preferred: tuple[int, ...], delay_us: int) -> None:
    config = text_format.Parse(path.read_text(encoding="utf-8"), mc.ModelConfig())
    config.instance_group[0].count = instances
    config.ClearField("dynamic_batching")
    if dynamic:
        config.dynamic_batching.preferred_batch_size.extend(preferred)
        config.dynamic_batching.max_queue_delay_microseconds = delay_us
    path.write_text(text_format.MessageToString(config), encoding="utf-8")


def executions(http_url: str) -> tuple[int, int]:
    """(inferences, executions) the server counted for the model so far."""
    with urllib.request.urlopen(f"{http_url}/v2/models/{MODEL}/stats", timeout=10) as reply:
        stats = json.load(reply)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def measure(pa: _tools.PerfAnalyzer, url: str, concurrency: int, window_ms: int, out: Path
            ) -> tuple[float, float]:  # fmt: skip
    cmd = [str(pa.binary), "-m", MODEL, "-u", url, "-i", "grpc", f"--concurrency-range={concurrency}",
           "--percentile=99", f"--measurement-interval={window_ms}", "--stability-percentage=100",
           "--max-trials=3", "-f", str(out)]  # fmt: skip
    out.unlink(missing_ok=True)
    done = subprocess.run(cmd, env=pa.env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:  # unstable or failed: say why, measure on
        print(f"  perf_analyzer exit {done.returncode}: {done.stdout.strip().splitlines()[-1:]}", flush=True)
        return float("nan"), float("nan")
    with out.open(encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    return float(row["Inferences/Second"]), float(row["p99 latency"]) / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 8, 16, 24])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--configs", type=int, nargs="+", help="indices into CONFIGS (default: all)")
    args = parser.parse_args()
    _tools.stop_on_sigint()
    pa = _tools.ensure_perf_analyzer()
    work = Path(tempfile.mkdtemp(prefix="embedder-shape-"))
    built = work / "built"
    _tools.run_checked([sys.executable, str(ROOT / "examples" / "build_models.py"), "--out", str(built),
                        "--models", MODEL], "examples/build_models.py")  # fmt: skip
    print(f"{'config':<30} {'inst':>4} {'conc':>4} {'infer/s':>8} {'p99 ms':>7} {'batch':>5}", flush=True)
    chosen = [CONFIGS[i] for i in args.configs] if args.configs else CONFIGS
    for label, instances, dynamic, preferred, delay_us in chosen:
        repo = work / f"repo-{instances}-{dynamic}-{len(preferred)}-{delay_us}"
        _tools.copy_model(built, MODEL, repo)
        configure(repo / MODEL / "config.pbtxt", instances, dynamic, preferred, delay_us)
        with LocalLauncher().serve(repo, MODEL, work / "server.log") as server:
            http = f"http://{server.host}:{server.http_port}"
            for concurrency in args.concurrency:
                before = executions(http)
                throughput, p99 = measure(pa, server.grpc_url, concurrency, args.window_ms, work / "pa.csv")
                after = executions(http)
                batch = (after[0] - before[0]) / max(1, after[1] - before[1])
                figures = f"{throughput:8.1f} {p99:7.1f} {batch:5.1f}"
                print(f"{label:<30} {instances:>4} {concurrency:>4} {figures}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
