#!/usr/bin/env bash
# A survey on a quiet GPU server (benchmarks/survey.py) for the simulator: torch_mlp (torch on
# CUDA in the python backend, tests/gpu_models) under p95 <= 5 ms, every config of the GPU path's
# space (instances 1-2 on GPU 0, max batch 8 or 32, batching off / on with 0 or 500 us delay) at
# 1-128 clients, 8 windows of 0.5 s each. On a lent GPU machine, from the repository root:
#   device run: bash scripts/gpu_survey.sh [SECONDS]    carry: [".gpu"]    back: $OUT/torch_mlp_gpu.json.gz
# SECONDS (default 450) bounds the survey; the configs measured by then are kept in the file.
set -uo pipefail
source scripts/gpu_setup.sh gpu_survey
# the GPU path's space (scripts/gpu_path.py), its clients up to 128
python3 -c 'import sys; sys.path.insert(0, "scripts"); import gpu_path
print(gpu_path.SPACE.replace("max: 64}", "max: 128}"), end="")' > /tmp/gpu-space.yaml || exit 1
cd /tmp && timeout -s TERM "${1:-450}" python3 "$OLDPWD/benchmarks/survey.py" --model torch_mlp \
  --model-repository "$OLDPWD/tests/gpu_models" --sla-p95-ms 5 --search-space /tmp/gpu-space.yaml \
  --levels 1 4 16 32 64 128 --windows 8 --out "$OUT/torch_mlp_gpu.json.gz"
echo "survey exit $?"
ls -la "$OUT"
