"""The GPU path, live, on a machine with an NVIDIA GPU (issue 45; the device tool runs it through
scripts/gpu_path.sh, which unpacks what scripts/gpu_bundle.sh carried there).

    python scripts/gpu_path.py OUT [--cpu]     # --cpu: a rehearsal on a machine without one


On tests/gpu_models/torch_mlp, a KIND_GPU model that runs torch on CUDA in the python backend:
1. served on the local launcher and loaded, its server's ``/metrics`` are saved with their GPU
   lines (OUT/metrics_gpu.txt: the capture tests/data keeps);
2. the output check on a real FP16 computation: the same weights computed in half precision
   (``precision: fp16``) against FP32: FP32's tolerance must find the difference, FP16's (what a
   candidate that computes in FP16 is held to) must accept it;
3. tuned end to end by ``autotune run`` (instances and batching on the GPU): its report (the GPU
   panel), trials.csv and run.json go to OUT.
A line per step; exit 1 when one went wrong.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.outputs import Answer

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "gpu_models"
SPACE = """instance_group:
  count: [1, 2]
  kind: [KIND_GPU]
  gpus: [[0]]
max_batch_size: [8, 32]
dynamic_batching:
  enabled: [true, false]
  max_queue_delay_microseconds: [0, 500]
load:
  concurrency: {min: 1, max: 64}
"""


KIND = "KIND_GPU"  # KIND_CPU with --cpu


def served_answers(out: Path, precision: str, metrics: bool) -> tuple[list[Answer], dict[str, str]]:
    """Serve torch_mlp computing in ``precision``; its answers to the output check's requests
    (after a load at 8 clients; ``metrics``: the server's /metrics then saved to OUT). The
    server is stopped when :meth:`Launcher.serve`'s block ends; the stages are removed after."""
    from autotune.gpu_probe import scrape
    from autotune.launch import make_launcher
    from autotune.loadgen import LoadGenerator
    from autotune.model_config import load_config
    from autotune.settings import Launch, Workload
    from autotune.staging import Stages, stage_model

    config = load_config(MODELS, "torch_mlp")
    config.parameters["precision"].string_value = precision
    if KIND == "KIND_CPU":
        from tritonclient.grpc import model_config_pb2 as mc

        del config.instance_group[:]
        config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    launcher = make_launcher(Launch(), "gpu-path")  # reaps what a killed run left
    stages = Stages.for_run(f"gpu-path-{precision}")
    try:
        repo = stage_model(MODELS / "torch_mlp", config, stages.path("repo"))
        with launcher.serve(repo, "torch_mlp", out / f"server-{precision}.log") as server:
            gen = LoadGenerator.connect(server.host, server.http_port, server.grpc_port, "torch_mlp")
            point = gen.at_concurrency(8)
            print(f"  {precision}: {point.throughput:.0f} infer/s at 8 clients, p95 {point.p95_ms:.2f} ms")
            if metrics:
                time.sleep(1.0)  # the metrics refresh every 0.5 s
                text = scrape(server.metrics_url) or ""
                (out / "metrics_gpu.txt").write_text(text, encoding="utf-8")
                print(f"  metrics: {sum(line.startswith('nv_gpu_') for line in text.splitlines())} GPU lines")
            sample = gen.check_sample(Workload(), 0, 16)
            answers, types = gen.answers([payload for payload, _ in sample])
            return list(answers), types
    finally:
        stages.remove()


def fp16_check(out: Path) -> bool:
    from autotune.outputs import compare

    full, types = served_answers(out, "fp32", metrics=True)
    half, _ = served_answers(out, "fp16", metrics=False)
    strict = compare(full, half, types)
    held = compare(full, half, types, fp16=True)
    print(f"  FP32's tolerance: {strict.line if strict else 'no difference found'}")
    print(f"  FP16's tolerance: {held.line if held else 'accepted'}")
    return strict is not None and held is None


def tune(out: Path) -> bool:
    work = Path("/tmp/gpu-path-run")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    space = (
        SPACE if KIND == "KIND_GPU" else SPACE.replace("KIND_GPU", "KIND_CPU").replace("  gpus: [[0]]\n", "")
    )
    (work / "space.yaml").write_text(space, encoding="utf-8")
    argv = [sys.executable, "-m", "autotune.cli", "run", "--model", "torch_mlp", "--model-repository",
            str(MODELS), "--sla-p95-ms", "20", "--search-space", str(work / "space.yaml"), "--reports-dir",
            str(work / "reports"), "--max-trials", "5", "--time-budget", "150s", "--finalists", "1",
            "--repeats", "1", "--no-open-loop-check"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=330, cwd=work)  # not the checkout
    (out / "run.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    print("\n".join("  " + line for line in (done.stdout + done.stderr).splitlines()[-25:]))
    runs = sorted((work / "reports" / "torch_mlp").glob("*/run.json"))
    for name in ("report.html", "trials.csv", "run.json"):
        if runs and (runs[-1].parent / name).is_file():
            shutil.copy(runs[-1].parent / name, out / name)
    return done.returncode == 0


def main() -> int:
    global KIND
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    KIND = "KIND_CPU" if "--cpu" in sys.argv[1:] else "KIND_GPU"
    out = Path(args[0] if args else "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, step in (("metrics and the FP16 check", fp16_check), ("a tuning run on the GPU", tune)):
        print(f"== {name}", flush=True)
        start = time.monotonic()
        try:
            results[name] = step(out)
        except Exception as exc:  # a step that breaks is reported, and the next still runs
            print(f"  failed: {type(exc).__name__}: {exc}")
            results[name] = False
        print(f"  {'good' if results[name] else 'WRONG'} ({time.monotonic() - start:.0f} s)", flush=True)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
