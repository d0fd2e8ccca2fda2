#!/usr/bin/env bash
# Configures (once) and builds ortc into build/ with Ninja and ccache. Used by the
# main-job and test scripts so both build the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on relative paths below the checkout, so fresh clones share the cache.
export CCACHE_BASEDIR="$PWD"
if [[ ! -f build/build.ninja ]]; then
  cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
# Ninja's status, not grep's: under pipefail a failed build fails the pipeline, and a
# trailing `|| true` would reset PIPESTATUS before it could be tested.
status=0
ninja -C build -j"${ORTC_JOBS:-2}" | grep -v -E '^\[[0-9]+/[0-9]+\]' || status=${PIPESTATUS[0]}
exit "$status"
