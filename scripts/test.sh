#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test via ctest
# (lit + FileCheck, GoogleTest, Python checks against PyTorch and onnxruntime).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 "$@"
