//===- HipTarget.cpp - The AMD side of the GPU target seam ----------------===//
//
// Wavefront size 64 (CDNA, gfx90a), mask-free shuffles, the HIP runtime API,
// rocBLAS when the running machine has it (else ortc's tiled GEMM), and hipcc:
// kernels.so (host launchers with the code object bundled in) plus the device-only
// code object kernels.hsaco.
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

// rocBLAS is not in Debian, but the machine running the step may have it: it is
// loaded with dlopen when first used, and GEMMs fall back to ortc's tiled kernel
// without it. Declared here from rocBLAS's stable C ABI (no header needed to build).
const char *kRocblas = R"(
#include <dlfcn.h>
/// The rocBLAS entry points ortc uses (rocblas_int is int32, rocblas_stride int64).
struct OrtcRocblas {
  typedef int (*Create)(void **);
  typedef int (*SetStream)(void *, hipStream_t);
  typedef int (*Sgemm)(void *, int, int, int32_t, int32_t, int32_t, const float *, const float *, int32_t,
                       int64_t, const float *, int32_t, int64_t, const float *, float *, int32_t, int64_t,
                       int32_t);
  typedef int (*Dgemm)(void *, int, int, int32_t, int32_t, int32_t, const double *, const double *, int32_t,
                       int64_t, const double *, int32_t, int64_t, const double *, double *, int32_t, int64_t,
                       int32_t);
  SetStream setStream = nullptr;
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  void *handle = nullptr;
};
static inline OrtcRocblas *ortcRocblas() {
  static OrtcRocblas *rb = []() -> OrtcRocblas * {
    void *so = nullptr;
    for (const char *n : {"librocblas.so.0", "librocblas.so", "/opt/rocm/lib/librocblas.so"})
      if (!so)
        so = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (!so)
      return nullptr;
    static OrtcRocblas r;
    auto create = (OrtcRocblas::Create)dlsym(so, "rocblas_create_handle");
    r.setStream = (OrtcRocblas::SetStream)dlsym(so, "rocblas_set_stream");
    r.sgemm = (OrtcRocblas::Sgemm)dlsym(so, "rocblas_sgemm_strided_batched");
    r.dgemm = (OrtcRocblas::Dgemm)dlsym(so, "rocblas_dgemm_strided_batched");
    if (!create || !r.setStream || !r.sgemm || !r.dgemm || create(&r.handle) != 0)
      return nullptr;
    return &r;
  }();
  return rb;
}
/// Row-major C = op(A) op(B) as the column-major C^T = op(B)^T op(A)^T. False (the
/// caller runs ortc's tiled kernel) without rocBLAS or on any failure.
template <typename T>
static bool ortcRocblasGemm(const T *A, const T *B, T *C, int64_t batch, int64_t M, int64_t N, int64_t K,
                            bool transA, bool transB, hipStream_t stream) {
  OrtcRocblas *rb = ortcRocblas();
  if (!rb || batch <= 0 || M <= 0 || N <= 0 || K <= 0 || batch > 0x7fffffff || M > 0x7fffffff ||
      N > 0x7fffffff || K > 0x7fffffff || rb->setStream(rb->handle, stream) != 0)
    return false;
  const int none = 111, trans = 112; // rocblas_operation
  const T alpha = T(1), beta = T(0);
  const int32_t m = int32_t(N), n = int32_t(M), k = int32_t(K), b = int32_t(batch);
  const int32_t ldb = transB ? k : m, lda = transA ? n : k;
  if (sizeof(T) == 4)
    return rb->sgemm(rb->handle, transB ? trans : none, transA ? trans : none, m, n, k, (const float *)&alpha,
                     (const float *)B, ldb, K * N, (const float *)A, lda, M * K, (const float *)&beta,
                     (float *)C, m, M * N, b) == 0;
  return rb->dgemm(rb->handle, transB ? trans : none, transA ? trans : none, m, n, k, (const double *)&alpha,
                   (const double *)B, ldb, K * N, (const double *)A, lda, M * K, (const double *)&beta,
                   (double *)C, m, M * N, b) == 0;
}
#define ORTC_VENDOR_GEMM ortcRocblasGemm
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
  t.vendorCode = kRocblas;
  t.fileExtension = ".hip";
  t.deviceObject = "kernels.hsaco";
  t.validArchs = {"gfx90a"};
  t.defaultArchs = {"gfx90a"};
  // HIP programming guide (hardware features): 1024 threads, grid dims up to 2^31 - 1,
  // 64 KiB of LDS per workgroup on CDNA2/3 (static or dynamic alike).
  t.launchLimits = {{"gfx90a", 1024, {0x7fffffffu, 0x7fffffffu, 0x7fffffffu}, 64 << 10, 64 << 10},
                    {"gfx942", 1024, {0x7fffffffu, 0x7fffffffu, 0x7fffffffu}, 64 << 10, 64 << 10}};
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
