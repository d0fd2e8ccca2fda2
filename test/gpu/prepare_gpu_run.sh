#!/bin/bash
# Why: a lent GPU machine has CUDA, PyTorch and minutes of time, but not ortc's compiler (its
# MLIR libraries stay on the build machine) nor the CPU kernels' libraries (oneDNN). This builds,
# here, everything test/gpu/on_gpu.sh runs there into one folder (under 64 MiB, what travels):
# the runtime-only ortc-run and its NCCL communicator plugin, the GEMM check binary, the samples' CUDA artifacts with the CPU
# target's runs as reference (gpu_train_check.py), the zoo's CUDA artifacts (gpu_zoo_check.py) and
# the benchmark's artifacts and feeds (bench/bench_gpu.py, --no-params).
#
#   test/gpu/prepare_gpu_run.sh DIR [--arch sm_90] [--recompute POLICY] [--bench-models NAME...]
# (--recompute: the benchmark also builds each model with that policy, a column of its own.)
# Run from the repository root after scripts/build.sh (and `ctest -R gpu_gemm_check_compiles`).
set -euo pipefail
DIR=${1:?usage: prepare_gpu_run.sh DIR [--arch ARCH] [--recompute POLICY] [--bench-models NAME...]}
shift
ARCH=sm_90
RECOMPUTE=()
BENCH=("gpt2-124M B8 T1024" "gpt d256 L6 T128")
while [ $# -gt 0 ]; do
  case $1 in
    --arch) ARCH=$2; shift 2 ;;
    --recompute) RECOMPUTE=(--recompute "$2"); shift 2 ;;
    --bench-models) shift; BENCH=("$@"); break ;;
    *) echo "prepare_gpu_run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
PY=.venv/bin/python
mkdir -p "$DIR"
cp build/runtime/ortc-run build/runtime/libortc_comm_nccl.so "$DIR/"  # the plugin beside the runtime
cp build/test/gpu/gemm-check/gemm_check "$DIR/"
$PY test/gpu/gpu_train_check.py --prepare "$DIR/samples"
rm -rf "$DIR"/samples/*-cpu.ortc  # their runs are kept; the GPU machine cannot load them
$PY test/gpu/gpu_zoo_check.py --prepare "$DIR/zoo" --arch "$ARCH"
$PY bench/bench_gpu.py --prepare "$DIR/bench" "${RECOMPUTE[@]}" --models "${BENCH[@]}"
du -sh "$DIR"
