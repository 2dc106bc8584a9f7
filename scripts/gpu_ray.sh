#!/usr/bin/env bash
# Issue 79's GPU item, live (scripts/gpu_ray.py), on a lent GPU machine from the repository root, in
# the call after gpu_path.sh's on the same warm machine (it finds tritonserver there), with .gpu-ray/
# carried (scripts/gpu_bundle_ray.sh makes it here; the machine goes back after 30 s idle):
#   device run: bash scripts/gpu_ray.sh      carry: [".gpu-ray"]     what comes back: $OUT
set -uo pipefail
source scripts/gpu_setup.sh gpu_ray
python3 scripts/gpu_ray.py "$OUT"
