#!/usr/bin/env bash
# Installs what ortc needs on a Debian 12 machine: Debian packages for the C++ side and a
# virtual environment (.venv, from /usr/bin/python3 so it sees Debian's torch) for the
# Python references. Idempotent and quiet when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(cmake ninja-build ccache g++ pkg-config git
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin libcli11-dev nlohmann-json3-dev libgtest-dev zlib1g-dev
  libxxhash-dev
  libamdhip64-dev rocm-device-libs clang-tools-15 clang-22 lld-22 llvm-22 libclang-rt-22-dev
  python3-torch python3-torchvision python3-numpy python3-venv python3-dev pybind11-dev)
# --target cuda uses the CUDA toolkit at /usr/local/cuda (not a Debian package); --target
# rocm uses clang-22 and lld-22 with Debian's HIP headers and device libraries (ROCm 5.2),
# llvm-link-22 and clang-offload-bundler from clang-tools-15. clang-22 also compiles the
# generated GPU code for the emulated device (test/gpu/emu) and, with libclang-rt-22-dev
# (libFuzzer, ASan, UBSan), the fuzz harnesses (test/fuzz, scripts/fuzz.sh).

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# onnx (checker, reference, backend tests) and onnxruntime-training (which also provides the
# `onnxruntime` inference module) for the Python-side references. numpy stays below 2:
# Debian's torch 1.13 cannot exchange arrays with numpy 2 (and ml_dtypes 0.6 needs it).
PY_PKGS=("onnx>=1.16" "onnxruntime-training==1.19.*" "numpy<2" "ml_dtypes>=0.5,<0.6")
if [[ ! -x .venv/bin/python ]]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import onnx, onnxruntime, numpy, torch; torch.from_numpy(numpy.ones(1))" \
  >/dev/null 2>&1; then
  echo "setup: installing Python packages into .venv: ${PY_PKGS[*]}"
  .venv/bin/pip install -q --disable-pip-version-check "${PY_PKGS[@]}"
fi
