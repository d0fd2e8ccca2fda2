//===- HipTarget.cpp - The AMD side of the GPU target seam ----------------===//
//
// Wavefront size 64 (CDNA: gfx90a, gfx942, gfx950) or 32 (RDNA: gfx1100, gfx1201),
// mask-free shuffles, the HIP runtime API, rocBLAS when the running machine has it
// (else ortc's tiled GEMM), and clang-22: kernels.so (host launchers with the code
// objects embedded) plus kernels.hipfb, the offload bundle of one code object per arch.
//
//===----------------------------------------------------------------------===//
#include "codegen/Artifact.h"
#include "codegen/gpu/TargetInfo.h"

#include <cctype>
#include <string>


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

/// The ISA version ROCm's device libraries read (__oclc_ISA_version): "gfx<major><minor
/// hex digit><stepping hex digit>" -> major * 1000 + minor * 100 + stepping (gfx90a: 9010).
int isaVersion(const std::string &arch) {
  auto hex = [](char c) { return std::isdigit(c) ? c - '0' : std::tolower(c) - 'a' + 10; };
  size_t n = arch.size();
  return std::stoi(arch.substr(3, n - 5)) * 1000 + hex(arch[n - 2]) * 100 + hex(arch[n - 1]);
}

// clang-22 compiles HIP for every arch LLVM knows, but links ROCm's device libraries
// (ocml/ockl: math, bit tricks) by arch, and Debian's (ROCm 5.2) stop at gfx940. Those
// libraries are target-independent LLVM bitcode parameterised by a few constants per
// arch; the missing constant files (__oclc_ISA_version, and __oclc_daz_opt that the 5.2
// math reads but clang-22 no longer links) are written here, next to links to
// Debian's files, so each arch gets the libraries' math. They also carry hip.bc, whose
// one function (__atomic_work_item_fence, the fence of HIP 5.2's __syncthreads) clang-22
// no longer links either (weak_odr and a caller, or llvm-link would drop them unused). The offload bundle (one code
// object per arch) is built once and embedded in kernels.so by the host compile.
std::vector<std::string> hipCommands(const std::string &clang, const std::vector<std::string> &archs,
                                     const std::string &dir) {
  std::string d = shellQuote(dir), offload;
  std::string devlibs =
      "L=; for b in /usr/lib/*/amdgcn/bitcode /usr/lib/amdgcn/bitcode /opt/rocm/amdgcn/bitcode; do "
      "[ -f \"$b/ocml.bc\" ] && L=$b && break; done; [ -n \"$L\" ] || { echo 'ROCm device libraries "
      "(ocml.bc) not found: install Debian'\\''s rocm-device-libs'; exit 1; }; "
      "LINK=$(command -v llvm-link-22 || command -v llvm-link) || { echo 'llvm-link-22 not found (Debian "
      "llvm-22)'; exit 1; }; H=; [ -f \"$L/hip.bc\" ] && H=\"$L/hip.bc\"; rm -rf devlibs && mkdir devlibs && "
      "ln -s \"$L\"/*.bc devlibs/";
  const char *layout = "e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-"
                       "p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-"
                       "v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9";
  for (const std::string &a : archs) {
    offload += " --offload-arch=" + a;
    std::string name = "oclc_isa_version_" + a.substr(3);
    devlibs += " && rm -f devlibs/" + name + ".bc && printf '%s\\n' 'target datalayout = \"" + layout +
               "\"' 'target triple = \"amdgcn-amd-amdhsa\"' '@__oclc_ISA_version = weak_odr protected "
               "local_unnamed_addr addrspace(4) constant i32 " +
               std::to_string(isaVersion(a)) +
               "' '@__oclc_daz_opt = weak_odr protected local_unnamed_addr addrspace(4) constant i8 0' "
               "'declare void @__atomic_work_item_fence(i32, i32, i32)' "
               "'define weak_odr hidden void @__ortc_link_fence() {' "
               "'  call void @__atomic_work_item_fence(i32 0, i32 5, i32 2)' 'ret void' '}' > "
               "devlibs/" + name + ".ll && \"$LINK\" devlibs/" + name + ".ll $H -o devlibs/" + name + ".bc";
  }
  // clang-22 bundles the code objects with clang-offload-bundler by name; Debian ships
  // it in clang-tools-15 (the bundle format is unchanged).
  std::string bundler =
      "B=\"${ORTC_OFFLOAD_BUNDLER:-}\"; for c in /usr/lib/llvm-22/bin/clang-offload-bundler "
      "/usr/lib/llvm-15/bin/clang-offload-bundler clang-offload-bundler; do [ -n \"$B\" ] && break; "
      "B=$(command -v $c || true); done; [ -n \"$B\" ] || { echo 'clang-offload-bundler not found (Debian "
      "clang-tools-15 brings it; or set ORTC_OFFLOAD_BUNDLER)'; exit 1; }; mkdir -p devlibs/bin && ln -sf \"$B\" "
      "devlibs/bin/clang-offload-bundler && export PATH=\"$PWD/devlibs/bin:$PATH\"";
  std::string flags = " -x hip -std=c++17 -O3 -Wno-unused-result --rocm-path=/usr --rocm-device-lib-path=devlibs "
                      "-mcode-object-version=5" + offload;
  return {
      "cd " + d + " && " + devlibs,
      "cd " + d + " && " + bundler + " && " + clang + flags + " --cuda-device-only -c kernels.hip -o kernels.hipfb",
      "cd " + d + " && " + clang + flags +
          " --cuda-host-only -Xclang -fcuda-include-gpubinary -Xclang kernels.hipfb -fPIC -shared kernels.hip "
          "-o kernels.so -lamdhip64 && rm -rf devlibs",
  };
}

TargetInfo makeRocm() {
  TargetInfo t;
  t.name = "rocm";
  t.displayName = "ROCm/HIP";
  t.warpSize = 64;
  t.archMacro = "__%s__";
  // HIP 5.2's headers read __AMDGCN_WAVEFRONT_SIZE and, in uncalled fp16 helpers, two
  // declarations of the HIP wrapper of older clangs; clang-22 has neither.
  t.includes = "#ifndef __AMDGCN_WAVEFRONT_SIZE\n#define __AMDGCN_WAVEFRONT_SIZE ORTC_WARP_SIZE\n#endif\n"
               "#include <hip/hip_runtime.h>\n"
               "#if defined(__HIP__) && __clang_major__ >= 20\n"
               "extern \"C\" __device__ __attribute__((const)) _Float16 __llvm_amdgcn_rcp_f16(_Float16);\n"
               "extern \"C\" __device__ __attribute__((const)) __2f16 __llvm_amdgcn_rcp_2f16(__2f16);\n"
               "#endif\n"
               "#include <hip/hip_fp16.h>\n#include <hip/hip_bfloat16.h>\n"
               "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n";
  t.shuffleDown = "__shfl_down((v), (o))";
  t.shuffleXor = "__shfl_xor((v), (m))";
  t.barrier = "__syncthreads()";
  t.launchBounds = "__launch_bounds__(n)";
  t.runtimeApi = kHipRuntime;
  t.vendorCode = kRocblas;
  t.fileExtension = ".hip";
  t.deviceObject = "kernels.hipfb";
  t.validArchs = {"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"};
  t.defaultArchs = {"gfx90a", "gfx942"};
  // HIP programming guide (hardware features): 1024 threads, grid dims up to 2^31 - 1;
  // LDS per workgroup 64 KiB on CDNA2/3 and RDNA3/4, 160 KiB on CDNA4 (static or
  // dynamic alike). RDNA code objects are wave32 (clang's default there), CDNA wave64.
  const unsigned g = 0x7fffffffu;
  t.launchLimits = {{"gfx90a", 1024, {g, g, g}, 64 << 10, 64 << 10},
                    {"gfx942", 1024, {g, g, g}, 64 << 10, 64 << 10},
                    {"gfx950", 1024, {g, g, g}, 160 << 10, 160 << 10},
                    {"gfx1100", 1024, {g, g, g}, 64 << 10, 64 << 10, 32},
                    {"gfx1201", 1024, {g, g, g}, 64 << 10, 64 << 10, 32}};
  const char *generic = "the generic targets need code object v6, which ROCm 5.2's HIP runtime and device "
                        "libraries predate; name the arch";
  t.refusedArchs = {{"gfx9-4-generic", generic}, {"gfx11-generic", generic}, {"gfx12-generic", generic}};
  t.compilerEnv = "ORTC_HIPCC";
  t.compilerDefault = "clang++-22";
  t.installHint = "install Debian's clang-22, lld-22, llvm-22, libamdhip64-dev, rocm-device-libs and "
                  "clang-tools-15 (scripts/setup.sh does)";
  t.commands = hipCommands;
  return t;
}

} // namespace

const TargetInfo &rocmTarget() {
  static const TargetInfo t = makeRocm();
  return t;
}

} // namespace ortc
