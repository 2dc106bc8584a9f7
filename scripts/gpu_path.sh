#!/usr/bin/env bash
# The GPU path, live (scripts/gpu_path.py), on a lent GPU machine from the repository root, with
# .gpu/ carried (scripts/gpu_bundle.sh makes it here):
#   device run: bash scripts/gpu_path.sh     carry: [".gpu"]     what comes back: $OUT
set -uo pipefail
source scripts/gpu_setup.sh gpu_path
python3 scripts/gpu_path.py "$OUT"
