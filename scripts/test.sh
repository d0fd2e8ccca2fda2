#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test via ctest
# (lit + FileCheck, GoogleTest, Python checks against PyTorch and onnxruntime), then
# the fuzz job (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 "$@")
# The readers under libFuzzer (clang-22, ASan + UBSan): 60 s per harness, any finding
# fails. Left out when ctest was given a selection.
if [[ $# -eq 0 ]]; then
  bash scripts/fuzz.sh
fi
