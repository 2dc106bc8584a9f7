#!/usr/bin/env bash
# What the GPU path (scripts/gpu_path.sh) needs on a lent GPU machine, which reaches no package
# registry: .gpu/ (git-ignored through .git/info/exclude, carried by the device tool), holding
#   tritonserver.tar.xz  the nvidia-pytriton wheel's tritonserver as installed in .venv, laid out as
#                        in site-packages (its RPATHs hold), with only Python 3.12's backend stub
#   wheels/*.whl         what autotune imports that the machine's image lacks, for CPython 3.12
# Run here, from the repository root, after `make install`. About 60 MB in all: the device tool
# carries 64 MiB with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf .gpu && mkdir -p .gpu/wheels
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/pytriton/tritonserver/python_backend_stubs" "$stage/nvidia_pytriton.libs"
cp "$SITE/pytriton/__init__.py" "$stage/pytriton/"
cp -r "$SITE/pytriton/tritonserver/bin" "$SITE/pytriton/tritonserver/backends" "$stage/pytriton/tritonserver/"
rm -rf "$stage/pytriton/tritonserver/backends/python/__pycache__"
cp -r "$SITE/pytriton/tritonserver/python_backend_stubs/3.12" "$stage/pytriton/tritonserver/python_backend_stubs/"
# every bundled library but the 3.13 stub's own libpython
find "$SITE/nvidia_pytriton.libs" -maxdepth 1 -type f ! -name 'libpython3-*' -exec cp {} "$stage/nvidia_pytriton.libs/" \;
tar -C "$stage" -cf - . | xz -T2 -9 > .gpu/tritonserver.tar.xz
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu/wheels \
  tritonclient==2.73.0 geventhttpclient==2.6.1 gevent==26.9.0 greenlet==3.3.2 zope.event==6.2 \
  zope.interface==8.7 python-rapidjson==1.25 brotli==1.2.1 optuna==5.0.0 alembic==1.20.1 colorlog==6.12.0 \
  sqlalchemy==2.1.9 Mako==1.4.3 plotly==7.1.0 hpack==4.2.0 ijson==3.6.0 protobuf==6.33.6 grpcio==1.85.3
du -sh .gpu/tritonserver.tar.xz .gpu/wheels .gpu
