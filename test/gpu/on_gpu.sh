#!/bin/bash
# Why: the checks that need a real NVIDIA GPU, in one command that fits a short lease, run from
# the repository root on the GPU machine over the folder test/gpu/prepare_gpu_run.sh made:
#   1. ortc's tiled GEMM against cuBLASLt (gemm_check, timings included);
#   2. every sample, SGD and AdamW, trained on the GPU against the CPU target's run
#      (gpu_train_check.py; one sample also without graphs and with ortc's own GEMM);
#   3. every zoo model trained on the GPU against PyTorch's float64 run (gpu_zoo_check.py);
#   4. compute-sanitizer over two training steps of the samples and the zoo models: memcheck
#      and racecheck on each, synccheck and initcheck on the gpt2 sample, until SAN_SECONDS pass;
#   5. data parallel through the real NCCL (libnccl.so.2 from pip's nvidia-nccl beside PyTorch):
#      the samples step runs it on one rank; dp2 starts two torchrun-style ranks of the gpt2
#      sample on the visible GPUs (ranks take GPU local-rank mod count) and checks that both end;
#   6. the GPU benchmark (bench/bench_gpu.py --prepared).
# Each step has its own time limit and the script goes on after a failure; the summary at the
# end says which steps failed. Logs go to $OUT (or /tmp/ortc-gpu-out), one file per kind of
# step (gemm, samples, zoo, san, bench) and summary.log.
#
#   [ONLY=gemm,samples,zoo,san,dp2,bench] [SAN_SKIP=REGEX] test/gpu/on_gpu.sh DIR [SAN_SECONDS] [BENCH_SECONDS]
# ONLY picks steps by kind or full name (a rerun within the same lease); SAN_SKIP names artifacts already sanitized.
set -u
DIR=${1:?usage: on_gpu.sh DIR [SAN_SECONDS] [BENCH_SECONDS]}
SAN_S=${2:-150}
BENCH_S=${3:-300}
OUT=${OUT:-/tmp/ortc-gpu-out}
mkdir -p "$OUT"
RUN="$DIR/ortc-run"
SAN=${SAN:-$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)}
export PYTHONUNBUFFERED=1
# cuBLASLt and NCCL: the toolkit's, else the ones pip's nvidia-cublas / nvidia-nccl bring
# beside PyTorch.
piplib() {  # the folder of pip's $1 (libnccl.so.2...) in Python's site-packages, if any
  local f
  f=$(find $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
    -name "$1" 2>/dev/null | head -1)
  [ -n "$f" ] && dirname "$f"
}
CUBLAS=$(piplib libcublasLt.so.13)
NCCL=$(piplib libnccl.so.2)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${CUBLAS:+:$CUBLAS}${NCCL:+:$NCCL}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
declare -a SUMMARY

ONLY=${ONLY:-gemm,samples,zoo,san,dp2,bench}
step() {  # step NAME SECONDS COMMAND...: runs one check, its output also in $OUT/<NAME up to '-'>.log
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  [[ ",$ONLY," == *",${name%%-*},"* || ",$ONLY," == *",$name,"* ]] || return 0
  echo "=== $name" | tee -a "$OUT/${name%%-*}.log"
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/${name%%-*}.log"
  rc=${PIPESTATUS[0]}
  SUMMARY+=("$(printf '%-12s %s (%d s)' "$name" "$([ $rc = 0 ] && echo ok || echo "FAILED, exit $rc")" $((SECONDS - t0)))")
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/summary.log"
echo "cuBLASLt from ${CUBLAS:-/usr/local/cuda}; NCCL from ${NCCL:-nowhere (not found)}" | tee -a "$OUT/summary.log"
step gemm 60 "$DIR/gemm_check"
step samples 240 python3 test/gpu/gpu_train_check.py --ortc-run "$RUN" --artifacts "$DIR/samples"
step zoo 150 python3 test/gpu/gpu_zoo_check.py --ortc-run "$RUN" --artifacts "$DIR/zoo"
sanitize() {  # sanitize TOOL ARTIFACT FEED (SAN_EXTRA: more sanitizer flags)
  step "san-$1-$(basename "$2" .ortc)" 60 "$SAN" --tool "$1" ${SAN_EXTRA:-} --error-exitcode 9 "$RUN" train \
    "$2" --data "$3" --steps 2 --quiet
}
san_end=$((SECONDS + SAN_S))
[ -n "$SAN" ] || { SUMMARY+=("sanitizer   not found: skipped"); san_end=0; }
if [ -n "$SAN" ]; then
  sanitize synccheck "$DIR/samples/gpt2-adamw-cuda.ortc" "$DIR/samples/gpt2-feed.npz"
  sanitize initcheck "$DIR/samples/gpt2-adamw-cuda.ortc" "$DIR/samples/gpt2-feed.npz"
  # The collectives through the real NCCL, one rank (torchrun-style). NCCL's start probes
  # kernels of other archs and ignores the API errors it gets: those are not reported.
  SAN_EXTRA="--report-api-errors no" RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29599 \
    sanitize memcheck "$DIR/samples/gpt2-adamw-cuda-dp.ortc" "$DIR/samples/gpt2-feed.npz"
  SAN_EXTRA="--report-api-errors no" RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29598 \
    sanitize memcheck "$DIR/samples/gpt2-adamw-cuda-dp-zero1.ortc" "$DIR/samples/gpt2-feed.npz"
fi
for art in "$DIR"/samples/*-adamw-cuda.ortc "$DIR"/zoo/*.ortc; do
  [ -z "${SAN_SKIP:-}" ] || ! [[ $(basename "$art") =~ $SAN_SKIP ]] || continue
  [ $SECONDS -lt $san_end ] || { SUMMARY+=("sanitizer   stopped at $(basename "$art") (SAN_SECONDS)"); break; }
  case $art in
    */samples/*) feed="$DIR/samples/$(basename "$art" -adamw-cuda.ortc)-feed.npz" ;;
    *) feed="${art%.ortc}-feed.npz" ;;
  esac
  sanitize memcheck "$art" "$feed"
  sanitize racecheck "$art" "$feed"
done
dp2() {  # two torchrun-style ranks of the data-parallel gpt2 sample; both must end with 0
  local port=$((29600 + RANDOM % 1000)) pids=() rc=0
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      ORTC_RENDEZVOUS_TIMEOUT=30 NCCL_DEBUG=WARN "$RUN" train "$DIR/samples/gpt2-adamw-cuda-dp.ortc" \
      --data "$DIR/samples/gpt2-feed.npz" --steps 5 --lr 0.01 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
export -f dp2
export RUN DIR
step dp2 90 bash -c dp2
step bench "$BENCH_S" python3 bench/bench_gpu.py --prepared "$DIR/bench" --ortc-run "$RUN" --markdown \
  --timeout $((BENCH_S / 3)) --torch-modes eager:fp32 eager:bf16 compile:fp32
echo "=== summary"
printf '%s\n' "${SUMMARY[@]}" | tee -a "$OUT/summary.log"
