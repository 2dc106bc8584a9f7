"""A fresh server's first windows, with and without the warm-up (autotune/warmup.py): how far the
first window's latency and throughput read off the server's steady ones.

    python benchmarks/first_window.py --servers 20            # cnn and bertQA, 20 fresh servers each way
    python benchmarks/first_window.py --models cnn --servers 4
    python benchmarks/first_window.py --drift 300            # one warmed server each, read 300 s

For each example (examples/model_repository, built by examples/build_models.py) a config of two
instances with dynamic batching is served on fresh local servers, in turn with Triton's
model_warmup (every instance at every batch size, on the workload's first entry) and without.
Each server's first point is measured from its first request (no warm-up window), in
``--windows`` windows of 0.5 s at a fixed level; a window's reading is divided by the median of
the server's windows from the fifth on (its steady state). Printed per example and arm: the
median and the range over the servers of the first and second windows' ratios (p99 and
throughput), and the servers' start-to-ready time.

``--drift S``: one warmed server per example, read for S seconds at the same level; its windows'
means over 5 s blocks, compared block to block at lags of 5 s to S/2: the sd of the log
difference, throughput and p99. Windows alone give the same sd at every lag; a machine that
drifts within a run gives more at longer lags (the simulator's drift, :class:`autotune.sim.Drift`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune import warmup
from autotune.launch.local import LocalLauncher
from autotune.loadgen import LoadGenerator, ModelIO, WindowPlan, read_workload
from autotune.model_config import apply_candidate, candidate_of, load_config
from autotune.settings import Workload
from autotune.staging import Stages, stage_model

REPOSITORY = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
LEVELS = {"cnn": 12, "bertQA": 3}  # clients: near each one's knee with two batching instances


def one_server(
    model: str, warmed: bool, windows: int, stages: Stages, n: int
) -> tuple[list[float], list[float], float]:
    """A fresh server's windows (p99 ms, throughput) from its first request, and its start to ready."""
    original = load_config(REPOSITORY, model)
    yours = candidate_of(original)
    config = apply_candidate(
        original, type(yours)(2, yours.kind, (), yours.max_batch_size, True, (), 0, False)
    )
    files: dict[str, bytes] = {}
    if warmed:
        io = ModelIO.from_config(model, config)
        assert io is not None
        entry = read_workload(io, Workload(), 0).entries[0]
        config, files = warmup.samples(config, entry, [s.name for s in io.inputs], 1)
    repo = stage_model(REPOSITORY / model, config, stages.path(f"{model}-{n}"), files)
    launcher = LocalLauncher(kill_when_done=True)
    began = time.monotonic()
    with launcher.serve(repo, model, stages.path(f"{model}-{n}.log")) as server:
        ready = time.monotonic() - began
        plan = WindowPlan(
            window_s=0.5, warmup_s=0.0, tolerance=0.0, stable_windows=windows, max_windows=windows,
            min_requests=1, percentile=99,
        )  # fmt: skip
        gen = LoadGenerator.connect(
            server.host, server.http_port, server.grpc_port, model, protocol="grpc", plan=plan
        )
        point = gen.at_concurrency(LEVELS[model])
    return list(point.window_latencies_ms), list(point.window_throughputs), ready


BLOCK_WINDOWS = 10  # 5 s of 0.5 s windows


def lag_spreads(values: Sequence[float], lags_s: Sequence[float]) -> dict[float, float]:
    """The sd of the log difference between 5 s block means ``lag`` seconds apart, for each lag."""
    blocks = [
        math.log(statistics.fmean(values[i : i + BLOCK_WINDOWS]))
        for i in range(0, len(values) - BLOCK_WINDOWS + 1, BLOCK_WINDOWS)
    ]
    out: dict[float, float] = {}
    for lag in lags_s:
        k = round(lag / (BLOCK_WINDOWS * 0.5))
        diffs = [b - a for a, b in zip(blocks, blocks[k:], strict=False)]
        if k >= 1 and len(diffs) >= 2:
            out[lag] = math.sqrt(statistics.fmean(d * d for d in diffs))
    return out


def drift(models: list[str], seconds: float, stages: Stages, out: Path | None = None) -> None:
    """One warmed server per example, read ``seconds``: how far its blocks read apart by lag;
    ``out``: every window kept there (JSON), to read again."""
    lags = [lag for lag in (5, 10, 20, 40, 80, 160, 320) if lag <= seconds / 2]
    print(f"{'':16}" + "".join(f"{lag:>7.0f}s" for lag in lags))
    kept: dict[str, dict[str, list[float]]] = {}
    for model in models:
        latencies, throughputs, _ = one_server(model, True, int(seconds / 0.5) + 4, stages, 0)
        kept[model] = {"throughput": throughputs, "p99_ms": latencies}
        if out is not None:
            out.write_text(json.dumps(kept), encoding="utf-8")
        for name, values in (("throughput", throughputs[4:]), ("p99", latencies[4:])):
            spreads = lag_spreads(values, lags)
            sd, hold_s, white = fit_drift(spreads)
            print(
                f"{model:7} {name:8}" + "".join(f"{100 * spreads[lag]:7.1f}%" for lag in spreads)
                + f"   drift: sd {100 * sd:.1f}%, hold {hold_s:.0f} s (blocks alone {100 * white:.1f}%)",
                flush=True,
            )  # fmt: skip


def fit_drift(spreads: dict[float, float]) -> tuple[float, float, float]:
    """The drift that explains ``spreads`` (:func:`lag_spreads`) best: the squared spread at lag L
    read as ``white^2 + 2 sd^2 (1 - e^(-L / hold))`` (blocks' own noise and a speed that wanders
    by ``sd`` and holds for ``hold`` seconds, :class:`autotune.sim.Drift`), least squares over a
    grid of holds; (sd, hold, white)."""
    best = (math.inf, 0.0, 0.0, 0.0)
    for hold_s in (2.0 * 1.1**i for i in range(60)):
        xs = [1 - math.exp(-lag / hold_s) for lag in spreads]
        ys = [v * v for v in spreads.values()]
        n, mx, my = len(xs), statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx) if sxx else 0.0
        base = max(0.0, my - slope * mx)
        err = sum((base + slope * x - y) ** 2 for x, y in zip(xs, ys, strict=True)) / n
        if err < best[0]:
            best = (err, math.sqrt(slope / 2), hold_s, math.sqrt(base))
    return best[1], best[2], best[3]


def ratios(values: list[float]) -> tuple[float, float]:
    """The first and second windows over the median of the fifth on."""
    steady = statistics.median(values[4:])
    return values[0] / steady, values[1] / steady


def summary(name: str, values: list[float]) -> str:
    return f"{name} {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(LEVELS), choices=list(LEVELS))
    parser.add_argument("--servers", type=int, default=20, help="fresh servers per example and arm")
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--drift", type=float, default=0.0, metavar="S", help="read one server S seconds")
    parser.add_argument("--out", type=Path, help="--drift: keep every window there (JSON)")
    args = parser.parse_args(argv)
    stages = Stages.for_run("first-window")
    try:
        if args.drift:
            drift(args.models, args.drift, stages, args.out)
            return 0
        for model in args.models:
            found: dict[bool, list[tuple[list[float], list[float], float]]] = {True: [], False: []}
            for n in range(args.servers):
                for warmed in (n % 2 == 0, n % 2 == 1):  # each arm first in turn
                    found[warmed].append(one_server(model, warmed, args.windows, stages, 2 * n + warmed))
            for warmed in (False, True):
                runs = found[warmed]
                p99 = [ratios(lat) for lat, _, _ in runs]
                thr = [ratios(t) for _, t, _ in runs]
                print(
                    f"{model:7} {'warmed' if warmed else 'cold  '} n={len(runs)}  "
                    f"{summary('w1 p99', [a for a, _ in p99])}  {summary('w2 p99', [b for _, b in p99])}  "
                    f"{summary('w1 thr', [a for a, _ in thr])}  {summary('w2 thr', [b for _, b in thr])}  "
                    f"{summary('ready s', [r for _, _, r in runs])}",
                    flush=True,
                )
    finally:
        stages.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
