#!/usr/bin/env bash
# What scripts/gpu_ray.sh needs on a lent GPU machine beyond what scripts/gpu_bundle.sh carries:
# .gpu-ray/ (git-ignored through .git/info/exclude), holding Ray's wheel for CPython 3.12 without
# its Java jars (32 MB that a Python driver never loads) and the wheels Ray imports. About 49 MB:
# it travels in a call of its own, after gpu_path.sh's call on the same warm machine.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu-ray/' .git/info/exclude 2>/dev/null || echo '/.gpu-ray/' >> .git/info/exclude
rm -rf .gpu-ray && mkdir -p .gpu-ray
.venv/bin/python -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu-ray ray==2.60.0 protobuf==6.33.6
.venv/bin/python - <<'PY'
"""Ray's wheel rewritten without ray/jars/ (its RECORD too), under the same name."""
import pathlib, zipfile
wheel = next(pathlib.Path(".gpu-ray").glob("ray-*.whl"))
lean = wheel.with_suffix(".lean")
with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(lean, "w", zipfile.ZIP_DEFLATED) as out:
    for item in src.infolist():
        if item.filename.startswith("ray/jars/"):
            continue
        data = src.read(item)
        if item.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(line for line in lines if not line.startswith("ray/jars/")).encode()
        out.writestr(item, data)
lean.replace(wheel)
PY
du -sh .gpu-ray
