//===- GpuPrelude.cpp - ortc-gpu-prelude: a target's generated-file prelude ===//
//
// Why: hand-written GPU test programs (test/gpu/emu/defects.cu) must compile
// against exactly what generated files start with: the target's includes, seam
// macros and launch-limit table (codegen/gpu/TargetInfo).
//
//   ortc-gpu-prelude cuda|rocm > prelude.h
//
//===----------------------------------------------------------------------===//
#include "codegen/gpu/TargetInfo.h"

#include <cstdio>

int main(int argc, char **argv) {
  const ortc::TargetInfo *t = argc == 2 ? ortc::gpuTargetByName(argv[1]) : nullptr;
  if (!t) {
    std::fprintf(stderr, "usage: ortc-gpu-prelude cuda|rocm\n");
    return 2;
  }
  std::fputs(t->prelude().c_str(), stdout);
  return 0;
}
