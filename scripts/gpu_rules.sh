#!/usr/bin/env bash
# Both rule sets on a quiet GPU server (scripts/gpu_rules.py), on a lent GPU machine from the
# repository root, with .gpu/ carried (scripts/gpu_bundle.sh makes it here):
#   device run: bash scripts/gpu_rules.sh [SECONDS]     carry: [".gpu"]     what comes back: $OUT
set -uo pipefail
source scripts/gpu_setup.sh gpu_rules
python3 scripts/gpu_rules.py "$OUT" "$@"  # SECONDS: gpu_rules.py's default when not given
