//===- GemmCheck.cpp - ortc-gpu-gemm-check: own GEMM vs cuBLASLt ---------===//
//
// Why a generator: the GEMM under test is the code the CUDA target emits, so the
// check is assembled from the same pieces (the CUDA prelude of TargetInfo, the
// embedded kernel library) plus gemm_check_main.cu.in, compiled by nvcc for the
// default archs and run. Exit status: the check's (77 = no GPU, skipped).
//
//   ortc-gpu-gemm-check WORKDIR [--compile-only | --no-timing]
//
// With ORTC_NVCC naming the emulated device's driver (test/gpu/emu) it runs in CI
// with --no-timing.
//
//===----------------------------------------------------------------------===//
#include "codegen/Artifact.h"
#include "codegen/gpu/GpuEmitter.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#ifndef ORTC_GEMM_CHECK_MAIN
#error "ORTC_GEMM_CHECK_MAIN must name gemm_check_main.cu.in"
#endif

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ortc-gpu-gemm-check WORKDIR [--compile-only | --no-timing]\n");
    return 2;
  }
  std::string dir = argv[1];
  const std::string option = argc > 2 ? argv[2] : "";
  const bool compileOnly = option == "--compile-only";
  const ortc::TargetInfo &cuda = ortc::cudaTarget();
  std::string error, nvcc = cuda.findCompiler(error);
  if (nvcc.empty()) {
    std::fprintf(stderr, "ortc-gpu-gemm-check: %s\n", error.c_str());
    return 1;
  }
  std::ifstream in(ORTC_GEMM_CHECK_MAIN);
  std::stringstream main;
  main << in.rdbuf();
  std::system(("mkdir -p " + ortc::shellQuote(dir)).c_str());
  std::ofstream(dir + "/ortc_gpu_kernels.h") << ortc::gpuKernelLibrarySource();
  std::ofstream(dir + "/gemm_check.cu")
      << cuda.prelude() << "#include \"ortc_gpu_kernels.h\"\n\n" << main.str();
  std::string gencode;
  for (const std::string &a : cuda.defaultArchs)
    gencode += " -gencode arch=compute_" + a.substr(3) + ",code=sm_" + a.substr(3);
  if (!ortc::runCompileCommands({"cd " + ortc::shellQuote(dir) + " && " + nvcc +
                                 " -std=c++17 -O3" + gencode +
                                 " gemm_check.cu -o gemm_check -ldl"},
                                dir, "compiling the GEMM check", error)) {
    std::fprintf(stderr, "ortc-gpu-gemm-check: %s\n", error.c_str());
    return 1;
  }
  if (compileOnly)
    return 0;
  int status = std::system((ortc::shellQuote(dir + "/gemm_check") + (option == "--no-timing" ? " --no-timing" : ""))
                               .c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
