"""Issue 79's GPU item, live: one tuning of tests/gpu_models/torch_mlp run twice on a machine with an
NVIDIA GPU, by the local launcher alone and with ``--ray`` on a one-node Ray cluster whose trials ask
Ray for the GPU; both must choose the same winner (scripts/gpu_ray.sh runs it there).

    python scripts/gpu_ray.py OUT [--cpu]     # --cpu: a rehearsal without a GPU (the tests' toy model)

The space holds four configs and each run measures all four (``--max-trials 4``): the winner is the
race's verdict, not the sampler's path. OUT gets each run's log, run.json, trials.csv and
winner.pbtxt. A line per step; exit 1 when one went wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = Path("/tmp/gpu-ray-run")
# every process of the cluster on 127.0.0.1, the driver with the cluster's token (docs/fleet.md)
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": uuid.uuid4().hex,
}
SPACE = """instance_group:
  count: [1, 2]
  kind: [KIND_GPU]
  gpus: [[0]]
max_batch_size: [8]
dynamic_batching:
  enabled: [true, false]
  max_queue_delay_microseconds: [0]
load:
  concurrency: {min: 1, max: 64}
"""
SAME = ["--max-trials", "4", "--seed", "1", "--finalists", "2", "--repeats", "2", "--no-open-loop-check",
        "--time-budget", "200s"]  # fmt: skip
GPU_MODEL = ("torch_mlp", ROOT / "tests" / "gpu_models", "20")  # its name, repository, p95 limit in ms
CPU_MODEL = ("toy", ROOT / "tests" / "models", "60")


def tune(out: Path, name: str, model: tuple[str, Path, str], *extra: str) -> Path | None:
    """``autotune run`` (``extra``: its further arguments): its files copied to OUT/name-*; its run
    directory (None: it failed)."""
    reports, (model_name, repository, limit) = WORK / f"reports-{name}", model
    argv = [sys.executable, "-m", "autotune.cli", "run", "--model", model_name, "--model-repository",
            str(repository), "--sla-p95-ms", limit, *SAME, "--search-space", str(WORK / "space.yaml"),
            "--reports-dir", str(reports), *extra]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=330, cwd=WORK, env={**os.environ, **RAY_ENV},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    (out / f"{name}-run.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    print("\n".join("  " + line for line in (done.stdout + done.stderr).splitlines()[-12:]))
    runs = sorted((reports / model_name).glob("*/run.json"))
    for file in ("run.json", "trials.csv", "winner.pbtxt", "report.html"):
        if runs and (runs[-1].parent / file).is_file():
            shutil.copy(runs[-1].parent / file, out / f"{name}-{file}")
    return runs[-1].parent if done.returncode == 0 and runs else None


def ray_head(gpus: int) -> tuple[subprocess.Popen[bytes], str]:
    """A one-node Ray cluster (``ray start --head --block``: it ends with its process) offering one
    trial at a time and ``gpus`` GPUs; its address once it answers. Its folder is short: its
    sockets' paths must fit 107 bytes."""
    from autotune.launch import free_ports

    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address",
            "127.0.0.1", "--port", str(port), "--num-cpus", "8", "--num-gpus", str(gpus), "--resources",
            '{"autotune": 1}', "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir",
            str(WORK / "ray")]  # fmt: skip
    with (WORK / "ray-head.log").open("wb") as log:  # the head keeps its own copy of the file
        head = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **RAY_ENV})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and head.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                time.sleep(5)  # the raylet registers after the GCS answers
                return head, f"127.0.0.1:{port}"
        time.sleep(1)
    raise RuntimeError(f"Ray's head did not answer on port {port}: {WORK / 'ray-head.log'}")


def main() -> int:
    cpu = "--cpu" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    out = Path(args[0] if args else "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    space = (
        SPACE.replace("KIND_GPU", "KIND_CPU").replace("  gpus: [[0]]\n", "").replace("64", "16")
        if cpu
        else SPACE
    )
    (WORK / "space.yaml").write_text(space, encoding="utf-8")
    name, repository, limit = CPU_MODEL if cpu else GPU_MODEL
    shutil.copytree(repository, WORK / "repo", ignore=shutil.ignore_patterns("__pycache__"))
    model = (name, WORK / "repo", limit)  # both runs tune a copy: the checkout stays as it is
    print("== the tuning on the local launcher", flush=True)
    start = time.monotonic()
    local = tune(out, "local", model)
    print(f"  {'good' if local else 'WRONG'} ({time.monotonic() - start:.0f} s)", flush=True)
    print("== the same tuning with --ray, each trial asking Ray for the GPU", flush=True)
    start = time.monotonic()
    head, address = ray_head(0 if cpu else 1)
    try:
        raced = tune(out, "ray", model, "--ray", address)
    finally:
        head.send_signal(signal.SIGTERM)  # --block: the cluster's processes end with it
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
    print(f"  {'good' if raced else 'WRONG'} ({time.monotonic() - start:.0f} s)", flush=True)
    if local is None or raced is None:
        return 1
    same = (local / "winner.pbtxt").read_text() == (raced / "winner.pbtxt").read_text()
    nodes = json.loads((raced / "run.json").read_text(encoding="utf-8")).get("nodes", {})
    print(f"== the same winner: {'yes' if same else 'NO'}; the --ray run's trials by node: {nodes}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
