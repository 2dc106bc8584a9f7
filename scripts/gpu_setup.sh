# Sourced by the scripts that run on a lent GPU machine (gpu_path.sh, gpu_survey.sh, gpu_ray.sh), from
# the repository root with .gpu/ carried (scripts/gpu_bundle.sh makes it here), or .gpu-ray/ in a later
# call on the same warm machine (scripts/gpu_bundle_ray.sh): unpacks tritonserver, installs the carried
# wheels and autotune into /tmp/autotune-site, sends everything printed to $OUT/$1.log as well, and
# prints what the machine is.
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/$1.log") 2>&1
export PYTHONUNBUFFERED=1
SITE=/tmp/autotune-site
mkdir -p "$SITE"
if [ ! -d "$SITE/pytriton" ]; then  # once a machine: a later call on it finds them there
  [ -d .gpu ] || { echo "no .gpu/ carried and no tritonserver in $SITE: carry .gpu first"; exit 2; }
  tar -xJf .gpu/tritonserver.tar.xz -C "$SITE" || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu/wheels/*.whl || exit 1
fi
if [ -d .gpu-ray ]; then  # a call of its own (scripts/gpu_bundle_ray.sh): Ray and what it imports
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu-ray/*.whl || exit 1
fi
# autotune itself, installed as a user installs it (its templates and search spaces inside)
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target "$SITE" . || exit 1
export PYTHONPATH="$SITE"
# the 3.12 stub embeds this Python's shared library: where it lies
LIBDIR=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')
export LD_LIBRARY_PATH="$LIBDIR:${LD_LIBRARY_PATH:-}"
echo "== the machine"
nvidia-smi -L
lscpu | grep -E '^(Model name|CPU\(s\)):'
python3 -c 'import sys, numpy, torch; print(sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available())'
ls "$LIBDIR"/libpython3.12* 2>/dev/null || ldconfig -p | grep libpython3.12 || echo "no libpython3.12 found"
python3 -c 'import google.protobuf, grpc; print("protobuf", google.protobuf.__version__, "grpcio", grpc.__version__)'
