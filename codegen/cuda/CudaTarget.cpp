//===- CudaTarget.cpp - The NVIDIA side of the GPU target seam ------------===//
//
// Warp size 32, *_sync shuffles, the CUDA runtime API, cuBLASLt for matmul
// (loaded at run time), and nvcc: one invocation builds kernels.so (host launchers
// with the static CUDA runtime, which loads the driver when first used, and the
// device code embedded) and keeps the fatbin it embedded as kernels.fatbin.
//
//===----------------------------------------------------------------------===//
#include "codegen/Artifact.h"
#include "codegen/gpu/TargetInfo.h"

#include <algorithm>
#include <string>


namespace ortc {
namespace {

const char *kCudaRuntime = R"(typedef cudaStream_t ortcStream_t;
typedef cudaDeviceProp ortcDeviceProp;
typedef __half ortc_half;
typedef __nv_bfloat16 ortc_bf16;
#define ORTC_API(x) cuda##x
#define ORTC_ARCH_NAME(p, buf, len) snprintf((buf), (len), "sm_%d%d", (p).major, (p).minor)
#define ORTC_MEMCPY_ASYNC(d, s, n, st) (void)cudaMemcpyAsync((d), (s), (n), cudaMemcpyDeviceToDevice, (st))
#define ORTC_MEMSET_ASYNC(d, v, n, st) (void)cudaMemsetAsync((d), (v), (n), (st))
/// Device address of a __device__ variable (constants of the model).
static inline void *ortcSymbolAddress(const void *sym) {
  void *p = nullptr;
  cudaGetSymbolAddress(&p, sym);
  return p;
}
#define ORTC_SYMBOL_ADDRESS(sym) ortcSymbolAddress((const void *)&(sym))
)";

// cuBLASLt is loaded at run time (dlopen), so kernels.so links no BLAS and loads on
// machines without it; GEMMs then use ortc's tiled kernel. Row-major
// C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T.
const char *kCublasLt = R"(
#include <dlfcn.h>
#include <type_traits>
/// The cuBLASLt entry points ortc uses, resolved once from libcublasLt.so.
struct OrtcLt {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) descSet = nullptr;
  decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layoutSet = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  cublasLtHandle_t handle = nullptr;
};
static inline OrtcLt *ortcLt() {
  static OrtcLt *lt = []() -> OrtcLt * {
    const char *names[] = {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13",
                           "libcublasLt.so"};
    void *so = nullptr;
    for (const char *n : names)
      if (!so)
        so = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (!so)
      return nullptr;
    static OrtcLt l;
    l.create = (decltype(l.create))dlsym(so, "cublasLtCreate");
    l.descCreate = (decltype(l.descCreate))dlsym(so, "cublasLtMatmulDescCreate");
    l.descSet = (decltype(l.descSet))dlsym(so, "cublasLtMatmulDescSetAttribute");
    l.descDestroy = (decltype(l.descDestroy))dlsym(so, "cublasLtMatmulDescDestroy");
    l.layoutCreate = (decltype(l.layoutCreate))dlsym(so, "cublasLtMatrixLayoutCreate");
    l.layoutSet = (decltype(l.layoutSet))dlsym(so, "cublasLtMatrixLayoutSetAttribute");
    l.layoutDestroy = (decltype(l.layoutDestroy))dlsym(so, "cublasLtMatrixLayoutDestroy");
    l.matmul = (decltype(l.matmul))dlsym(so, "cublasLtMatmul");
    if (!l.create || !l.descCreate || !l.descSet || !l.descDestroy || !l.layoutCreate ||
        !l.layoutSet || !l.layoutDestroy || !l.matmul || l.create(&l.handle) != CUBLAS_STATUS_SUCCESS)
      return nullptr;
    return &l;
  }();
  return lt;
}
template <typename T> static inline cudaDataType_t ortcCudaType() {
  return std::is_same<T, __nv_bfloat16>::value ? CUDA_R_16BF
         : std::is_same<T, __half>::value      ? CUDA_R_16F
         : sizeof(T) == 4                      ? CUDA_R_32F
                                               : CUDA_R_64F;
}
/// Strided-batched GEMM in FP32 (or FP64) compute: no TF32, like the CPU. A and B may
/// be bf16 or fp16 with a float C or one of their type (tensor cores, FP32 accumulation,
/// rounded as stored: matmulWide). Returns false (the caller falls back to ortc's tiled
/// kernel) when cuBLASLt is missing or fails.
template <typename TA, typename T>
static bool ortcCublasLtGemm(const TA *A, const TA *B, T *C, int64_t batch, int64_t M, int64_t N, int64_t K,
                             bool transA, bool transB, cudaStream_t stream) {
  OrtcLt *lt = ortcLt();
  if (!lt || batch <= 0 || M <= 0 || N <= 0 || K <= 0 || batch > 0x7fffffff)
    return false;
  // The scale type is the compute type's: float for FP32 compute, whatever C holds.
  using Scale = typename std::conditional<sizeof(T) == 8, double, float>::type;
  const cudaDataType_t dt = ortcCudaType<T>(), dta = ortcCudaType<TA>(), st = ortcCudaType<Scale>();
  const cublasComputeType_t ct = sizeof(T) == 8 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t lb = nullptr, la = nullptr, lc = nullptr;
  bool ok = lt->descCreate(&op, ct, st) == CUBLAS_STATUS_SUCCESS;
  cublasOperation_t first = transB ? CUBLAS_OP_T : CUBLAS_OP_N, second = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  ok = ok && lt->descSet(op, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first)) == CUBLAS_STATUS_SUCCESS;
  ok = ok && lt->descSet(op, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second)) == CUBLAS_STATUS_SUCCESS;
  ok = ok && lt->layoutCreate(&lb, dta, transB ? K : N, transB ? N : K, transB ? K : N) == CUBLAS_STATUS_SUCCESS;
  ok = ok && lt->layoutCreate(&la, dta, transA ? M : K, transA ? K : M, transA ? M : K) == CUBLAS_STATUS_SUCCESS;
  ok = ok && lt->layoutCreate(&lc, dt, N, M, N) == CUBLAS_STATUS_SUCCESS;
  const int32_t count = static_cast<int32_t>(batch);
  const int64_t sb = K * N, sa = M * K, sc = M * N;
  struct { cublasLtMatrixLayout_t l; int64_t stride; } ls[3] = {{lb, sb}, {la, sa}, {lc, sc}};
  for (auto &e : ls) {
    ok = ok && lt->layoutSet(e.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)) == CUBLAS_STATUS_SUCCESS;
    ok = ok && lt->layoutSet(e.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &e.stride, sizeof(e.stride)) == CUBLAS_STATUS_SUCCESS;
  }
  const Scale alpha = Scale(1), beta = Scale(0);
  ok = ok && lt->matmul(lt->handle, op, &alpha, B, lb, A, la, &beta, C, lc, C, lc, nullptr, nullptr, 0, stream) == CUBLAS_STATUS_SUCCESS;
  if (lc) lt->layoutDestroy(lc);
  if (la) lt->layoutDestroy(la);
  if (lb) lt->layoutDestroy(lb);
  if (op) lt->descDestroy(op);
  return ok;
}
#define ORTC_VENDOR_GEMM ortcCublasLtGemm
#define ORTC_VENDOR_GEMM_WIDE ortcCublasLtGemm
)";

/// "compute_NN" of the newest of `archs` ("sm_NN"): its PTX runs on any later GPU.
std::string newestPtx(const std::vector<std::string> &archs) {
  int newest = 0;
  for (const std::string &a : archs)
    newest = std::max(newest, std::stoi(a.substr(3)));
  return "compute_" + std::to_string(newest);
}

std::vector<std::string> cudaCommands(const std::string &nvcc, const std::vector<std::string> &archs,
                                      const std::string &dir) {
  std::string gencode;
  for (const std::string &a : archs) {
    if (a.rfind("compute_", 0) == 0) { // PTX, compiled by the driver of a newer GPU
      gencode += " -gencode arch=" + a + ",code=" + a;
      continue;
    }
    std::string n = a.substr(3); // "sm_80" -> "80"
    gencode += " -gencode arch=compute_" + n + ",code=sm_" + n;
  }
  std::string d = shellQuote(dir);
  return {
      "rm -rf " + d + "/nvcc-tmp && mkdir -p " + d + "/nvcc-tmp",
      // --threads 0: one nvcc thread per arch at once, up to the machine's cores.
      "cd " + d + " && " + nvcc + " -std=c++17 -O3 --threads 0 -Xcompiler -fPIC -shared" + gencode +
          " --keep --keep-dir nvcc-tmp kernels.cu -o kernels.so -ldl",
      "cp " + d + "/nvcc-tmp/kernels.fatbin " + d + "/kernels.fatbin",
      "rm -rf " + d + "/nvcc-tmp",
  };
}

TargetInfo makeCuda() {
  TargetInfo t;
  t.name = "cuda";
  t.displayName = "CUDA";
  t.warpSize = 32;
  t.includes = "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cublasLt.h>\n#include <stdint.h>\n#include <stdio.h>\n";
  t.shuffleDown = "__shfl_down_sync(0xffffffffu, (v), (o))";
  t.shuffleXor = "__shfl_xor_sync(0xffffffffu, (v), (m))";
  t.barrier = "__syncthreads()";
  t.launchBounds = "__launch_bounds__(n)";
  t.runtimeApi = kCudaRuntime;
  t.vendorCode = kCublasLt;
  t.fileExtension = ".cu";
  t.deviceObject = "kernels.fatbin";
  t.validArchs = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"};
  t.defaultArchs = {"sm_80", "sm_90"};
  t.portableArch = newestPtx;
  // CUDA C Programming Guide, "Technical Specifications per Compute Capability":
  // grid y/z 65535, 1024 threads, 48 KiB static shared; opt-in 64/163/99/99/227/227/99 KiB.
  const unsigned kGridX = 0x7fffffffu;
  t.launchLimits = {{"sm_75", 1024, {kGridX, 65535, 65535}, 48 << 10, 64 << 10},
                    {"sm_80", 1024, {kGridX, 65535, 65535}, 48 << 10, 163 << 10},
                    {"sm_86", 1024, {kGridX, 65535, 65535}, 48 << 10, 99 << 10},
                    {"sm_89", 1024, {kGridX, 65535, 65535}, 48 << 10, 99 << 10},
                    {"sm_90", 1024, {kGridX, 65535, 65535}, 48 << 10, 227 << 10},
                    {"sm_100", 1024, {kGridX, 65535, 65535}, 48 << 10, 227 << 10},
                    {"sm_120", 1024, {kGridX, 65535, 65535}, 48 << 10, 99 << 10}};
  t.compilerEnv = "ORTC_NVCC";
  t.compilerDefault = "/usr/local/cuda/bin/nvcc";
  t.installHint = "install the CUDA 13 toolkit into /usr/local/cuda";
  t.commands = cudaCommands;
  return t;
}

} // namespace

const TargetInfo &cudaTarget() {
  static const TargetInfo t = makeCuda();
  return t;
}

} // namespace ortc
