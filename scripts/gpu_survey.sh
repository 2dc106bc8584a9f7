#!/usr/bin/env bash
# A survey on a quiet GPU server (benchmarks/survey.py) for the simulator: torch_mlp (torch on
# CUDA in the python backend, tests/gpu_models) under p95 <= 5 ms, every config of the GPU path's
# space (instances 1-2 on GPU 0, max batch 8 or 32, batching off / on with 0 or 500 us delay) at
# 1-128 clients, 8 windows of 0.5 s each. On a lent GPU machine, from the repository root:
#   device run: bash scripts/gpu_survey.sh [SECONDS]    carry: [".gpu"]    back: $OUT/torch_mlp_gpu.json.gz
# SECONDS (default 450) bounds the survey; the configs measured by then are kept in the file.
set -uo pipefail
source scripts/gpu_setup.sh gpu_survey
cat > /tmp/gpu-space.yaml <<'SPACE'
instance_group:
  count: [1, 2]
  kind: [KIND_GPU]
  gpus: [[0]]
max_batch_size: [8, 32]
dynamic_batching:
  enabled: [true, false]
  max_queue_delay_microseconds: [0, 500]
load:
  concurrency: {min: 1, max: 128}
SPACE
cd /tmp && timeout -s TERM "${1:-450}" python3 "$OLDPWD/benchmarks/survey.py" --model torch_mlp \
  --model-repository "$OLDPWD/tests/gpu_models" --sla-p95-ms 5 --search-space /tmp/gpu-space.yaml \
  --levels 1 4 16 32 64 128 --windows 8 --out "$OUT/torch_mlp_gpu.json.gz"
echo "survey exit $?"
ls -la "$OUT"
