#!/usr/bin/env bash
# Install what the real-component tests need, idempotently, and write .test-env
# (variables the test run reads). Needs root for apt (CI and these machines run as root).
#  - chromium: the report is opened in a real headless browser
#  - podman's Docker API + a local Triton image: ../shared/tools/build-triton-image.sh
#  - postgresql: several workers sharing one Optuna study
set -uo pipefail
cd "$(dirname "$0")/.."
log() { printf '[setup-test-env] %s\n' "$*" >&2; }
: > .test-env

want=()
command -v chromium >/dev/null || want+=(chromium)
[ -x /usr/lib/postgresql/15/bin/postgres ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || want+=(postgresql)
if [ ${#want[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "apt-get install ${want[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${want[@]}" >&2 \
      || log "WARNING: apt-get failed; the tests that need ${want[*]} will be skipped"
  else
    log "WARNING: not root, cannot install ${want[*]}; those tests will be skipped"
  fi
fi

builder=""
for b in ../shared/tools/build-triton-image.sh shared/tools/build-triton-image.sh; do
  [ -f "$b" ] && builder="$b" && break
done
if [ -n "$builder" ] && [ "$(id -u)" = 0 ] && [ "${AUTOTUNE_SKIP_DOCKER:-0}" != 1 ]; then
  log "container engine and test image: $builder"
  # from /: the API service it may start keeps its working directory, and conmon fails
  # ("Failed to get working directory") once a removed checkout was that directory
  builder=$(realpath "$builder")  # before the cd below: the path is relative to the checkout
  if out=$(cd / && bash "$builder"); then
    echo "$out" | sed -n 's/^export //p' >> .test-env
    echo "AUTOTUNE_TEST_IMAGE=${AUTOTUNE_TRITON_IMAGE:-localhost/autotune-triton:test}" >> .test-env
  else
    log "WARNING: $builder failed; docker tests will be skipped"
  fi
else
  log "no container engine set-up script (or not root): docker tests will be skipped"
fi
cat .test-env >&2
