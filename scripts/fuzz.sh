#!/usr/bin/env bash
# The fuzz job (issue: hardening): builds the libFuzzer harnesses of test/fuzz with
# clang-22 (ASan + UBSan, every ortc source instrumented for coverage) into build-fuzz/,
# replays each harness's committed crash corpus (test/fuzz/regressions/<harness>/) as
# regression tests, then fuzzes each for FUZZ_SECONDS (default 60) with a fixed seed from
# its committed seed corpus and prints executions and edge coverage. Any finding fails
# (its input is left in build-fuzz/findings/). Needs the main build (build/, for the
# small artifact the artifact and checkpoint harnesses load). Without clang-22 and
# libclang-rt-22-dev it says so and succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
FUZZER_LIB=/usr/lib/llvm-22/lib/clang/22/lib/linux/libclang_rt.fuzzer-x86_64.a
if ! command -v clang++-22 >/dev/null || [[ ! -f "$FUZZER_LIB" ]]; then
  echo "fuzz: skipped (needs clang-22 and libclang-rt-22-dev)"
  exit 0
fi
export CCACHE_BASEDIR="$ROOT"
if [[ ! -f build-fuzz/build.ninja ]]; then
  cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DORTC_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DOpenMP_C_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_FLAGS=-fopenmp=libgomp \
    -DOpenMP_C_LIB_NAMES=gomp -DOpenMP_CXX_LIB_NAMES=gomp \
    -DOpenMP_gomp_LIBRARY="$(g++ -print-file-name=libgomp.so)" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
ninja -C build-fuzz -j"${ORTC_JOBS:-2}" fuzzers | grep -v -E '^\[[0-9]+/[0-9]+\]' || true
test "${PIPESTATUS[0]}" -eq 0

# The artifact the artifact and checkpoint harnesses load: the mlp sample, small.
WORK="$(mktemp -d /tmp/ortc-fuzz.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
ORTC_CXX_OPT=-O1 build/tools/ortc/ortc build samples/mlp/mlp.onnx --dim batch=2 \
  -o "$WORK/mlp.ortc" >/dev/null 2>&1
export ORTC_FUZZ_ARTIFACT="$WORK/mlp.ortc"
mkdir -p build-fuzz/findings
# Leaks in a harness process are not findings of a reader (libFuzzer's -detect_leaks
# would report MLIR's context, which lives for the whole run).
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for h in onnx npz artifact checkpoint; do
  bin="build-fuzz/test/fuzz/fuzz-$h"
  regressions="test/fuzz/regressions/$h"
  if compgen -G "$regressions/*" >/dev/null; then
    if ! "$bin" -runs=1 "$regressions"/* >"$WORK/$h.regress.log" 2>&1; then
      echo "fuzz-$h: a committed regression input fails again:"
      tail -40 "$WORK/$h.regress.log"
      status=1
      continue
    fi
  fi
  mkdir -p "$WORK/corpus-$h"
  # The manifest of the artifact just built: its hashes match the files loaded.
  [[ $h == artifact ]] && cp "$ORTC_FUZZ_ARTIFACT/manifest.json" "$WORK/corpus-$h/built.json"
  dict=()
  [[ -f "test/fuzz/$h.dict" ]] && dict=(-dict="test/fuzz/$h.dict")
  if "$bin" -seed=1 -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/findings/$h-" "${dict[@]}" \
      "$WORK/corpus-$h" "test/fuzz/corpus/$h" >"$WORK/$h.log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/$h.log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$WORK/$h.log" | tail -1 | grep -o '[0-9]*')
    echo "fuzz-$h: ${runs:-?} executions in ${SECONDS_EACH} s, edge coverage ${cov:-?}, no finding"
  else
    echo "fuzz-$h: FINDING (input in build-fuzz/findings/):"
    grep -A30 -E 'ERROR|runtime error|deadly signal|Test unit written' "$WORK/$h.log" | head -60
    status=1
  fi
done
exit $status
