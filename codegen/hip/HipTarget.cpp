//===- HipTarget.cpp - The AMD side of the GPU target seam ----------------===//
//
// Wavefront size 64 (CDNA, gfx90a), mask-free shuffles, the HIP runtime API, no
// vendor GEMM (ortc's tiled kernel), and hipcc: kernels.so (host launchers with
// the code object bundled in) plus the device-only code object kernels.hsaco.
// gfx942 / gfx1100 need clang >= 17; the Debian hipcc (ROCm 5.2) cannot build them.
//
//===----------------------------------------------------------------------===//
#include "codegen/Artifact.h"
#include "codegen/gpu/TargetInfo.h"


namespace ortc {
namespace {

const char *kHipRuntime = R"(typedef hipStream_t ortcStream_t;
typedef hipDeviceProp_t ortcDeviceProp;
typedef __half ortc_half;
typedef hip_bfloat16 ortc_bf16;
#define ORTC_API(x) hip##x
/// "gfx90a:sramecc+:xnack-" -> "gfx90a"
#define ORTC_ARCH_NAME(p, buf, len) snprintf((buf), (len), "%.*s", (int)strcspn((p).gcnArchName, ":"), (p).gcnArchName)
#define ORTC_MEMCPY_ASYNC(d, s, n, st) (void)hipMemcpyAsync((d), (s), (n), hipMemcpyDeviceToDevice, (st))
#define ORTC_MEMSET_ASYNC(d, v, n, st) (void)hipMemsetAsync((d), (v), (n), (st))
/// Device address of a __device__ variable (constants of the model).
static inline void *ortcSymbolAddress(const void *sym) {
  void *p = nullptr;
  (void)hipGetSymbolAddress(&p, sym);
  return p;
}
#define ORTC_SYMBOL_ADDRESS(sym) ortcSymbolAddress(HIP_SYMBOL(sym))
)";

std::vector<std::string> hipCommands(const std::string &hipcc, const std::vector<std::string> &archs,
                                     const std::string &dir) {
  std::string offload;
  for (const std::string &a : archs)
    offload += " --offload-arch=" + a;
  std::string d = shellQuote(dir);
  std::string flags = " -std=c++17 -O3 -Wno-unused-result" + offload;
  // The device-only compile gives a clang offload bundle; unbundle the code object
  // of the (one) arch with the clang-offload-bundler next to hipcc's clang.
  std::string bundler =
      "B=\"${ORTC_OFFLOAD_BUNDLER:-}\"; for c in /usr/lib/llvm-15/bin/clang-offload-bundler "
      "clang-offload-bundler-15 clang-offload-bundler; do [ -n \"$B\" ] && break; "
      "B=$(command -v $c || true); done; [ -n \"$B\" ] || { echo 'clang-offload-bundler not "
      "found (set ORTC_OFFLOAD_BUNDLER)'; exit 1; }; \"$B\"";
  return {
      "cd " + d + " && " + hipcc + flags + " -fPIC -shared kernels.hip -o kernels.so",
      "cd " + d + " && " + hipcc + flags + " --cuda-device-only -c kernels.hip -o kernels.hipfb",
      "cd " + d + " && " + bundler + " --type=o --targets=hipv4-amdgcn-amd-amdhsa--" + archs[0] +
          " --input=kernels.hipfb --output=kernels.hsaco --unbundle && rm -f kernels.hipfb",
  };
}

TargetInfo makeRocm() {
  TargetInfo t;
  t.name = "rocm";
  t.displayName = "ROCm/HIP";
  t.warpSize = 64;
  t.includes = "#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>\n#include <hip/hip_bfloat16.h>\n"
               "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n";
  t.shuffleDown = "__shfl_down((v), (o))";
  t.shuffleXor = "__shfl_xor((v), (m))";
  t.barrier = "__syncthreads()";
  t.launchBounds = "__launch_bounds__(n)";
  t.runtimeApi = kHipRuntime;
  t.fileExtension = ".hip";
  t.deviceObject = "kernels.hsaco";
  t.validArchs = {"gfx90a"};
  t.defaultArchs = {"gfx90a"};
  const char *why = "needs clang >= 17 (packages clang-22, lld-22); this build's hipcc "
                    "(Debian, ROCm 5.2) cannot target it";
  t.refusedArchs = {{"gfx942", why}, {"gfx1100", why}};
  t.compilerEnv = "ORTC_HIPCC";
  t.compilerDefault = "hipcc";
  t.installHint = "install Debian's hipcc and libamdhip64-dev (scripts/setup.sh does)";
  t.commands = hipCommands;
  return t;
}

} // namespace

const TargetInfo &rocmTarget() {
  static const TargetInfo t = makeRocm();
  return t;
}

} // namespace ortc
