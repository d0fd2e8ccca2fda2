//===- cublaslt_shim.cpp - cuBLASLt on the emulated device ----------------===//
//
// Why: the CUDA target's GEMMs go through cuBLASLt (dlopen'd as
// libcublasLt.so.13). This library is what that dlopen finds under the emulator:
// the calls the generated code makes, with cuBLASLt's conventions (column-major
// layouts with leading dimensions, per-operand transposes, strided batches, alpha
// and beta, the bias/ReLU/GELU epilogues), computed on the host in stream order
// with FP32 (or FP64) accumulation; A and B may be bf16 or fp16 beside a float C and D
// (mixed precision's GEMMs, as on tensor cores). A call the shim cannot honour fails the run
// loudly instead of falling back, so a wrong convention in the generated code shows.
//
//===----------------------------------------------------------------------===//
#include "cublasLt.h"
#include "emu/half.h"

#include <cmath>
#include <cstring>
#include <cstdio>
#include <string>

struct cublasLtContext {
  int magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  int epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

namespace {

cublasStatus_t refuse(const std::string &why) {
  emu::emu_fail(("cublasLt shim: " + why).c_str());
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

/// Copies an attribute's value into `field`, which must have its size.
template <typename Field> cublasStatus_t setField(Field &field, int attr, const void *buf, size_t size) {
  if (size != sizeof(field))
    return refuse("attribute " + std::to_string(attr) + " set with " + std::to_string(size) + " bytes");
  std::memcpy(&field, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

struct Gemm {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t a, b, c, d;
  const void *A, *B, *C;
  void *D;
  double alpha, beta;
};

/// Element `i` of an operand of layout type `type`, widened to Acc.
template <typename Acc> Acc element(const void *p, cudaDataType_t type, int64_t i) {
  switch (type) {
  case CUDA_R_16BF: return static_cast<Acc>(float(static_cast<const __nv_bfloat16 *>(p)[i]));
  case CUDA_R_16F: return static_cast<Acc>(float(static_cast<const __half *>(p)[i]));
  case CUDA_R_32F: return static_cast<Acc>(static_cast<const float *>(p)[i]);
  default: return static_cast<Acc>(static_cast<const double *>(p)[i]);
  }
}

template <typename T, typename Acc> void run(const Gemm &g) {
  const int64_t m = static_cast<int64_t>(g.d.rows), n = static_cast<int64_t>(g.d.cols);
  const int64_t k = static_cast<int64_t>(g.op.transA == CUBLAS_OP_N ? g.a.cols : g.a.rows);
  const T *C = static_cast<const T *>(g.C);
  T *D = static_cast<T *>(g.D);
  const T *bias = static_cast<const T *>(g.op.bias);
  const size_t ea = g.a.type == CUDA_R_64F ? 8 : g.a.type == CUDA_R_32F ? 4 : 2;
  const size_t eb = g.b.type == CUDA_R_64F ? 8 : g.b.type == CUDA_R_32F ? 4 : 2;
  for (int32_t bt = 0; bt < g.d.batch; ++bt) {
    const char *a = static_cast<const char *>(g.A) + bt * g.a.stride * ea;
    const char *b = static_cast<const char *>(g.B) + bt * g.b.stride * eb;
    const T *c = C + bt * g.c.stride;
    T *d = D + bt * g.d.stride;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        Acc s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const Acc av = element<Acc>(a, g.a.type, g.op.transA == CUBLAS_OP_N ? i + p * g.a.ld : p + i * g.a.ld);
          const Acc bv = element<Acc>(b, g.b.type, g.op.transB == CUBLAS_OP_N ? p + j * g.b.ld : j + p * g.b.ld);
          s += av * bv;
        }
        Acc v = static_cast<Acc>(g.alpha) * s;
        if (g.beta != 0)
          v += static_cast<Acc>(g.beta) * static_cast<Acc>(c[i + j * g.c.ld]);
        const int e = g.op.epilogue;
        if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS)
          v += static_cast<Acc>(bias[i]);
        if (e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS)
          v = v > 0 ? v : 0;
        if (e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS)
          v = Acc(0.5) * v * (Acc(1) + std::tanh(Acc(0.7978845608028654) * (v + Acc(0.044715) * v * v * v)));
        d[i + j * g.d.ld] = static_cast<T>(v);
      }
  }
}

void runGemm(void *ctx) {
  const Gemm &g = *static_cast<Gemm *>(ctx);
  if (g.d.type == CUDA_R_32F)
    run<float, float>(g);
  else if (g.d.type == CUDA_R_16BF) // FP32 sums, each rounded as it is stored
    run<__nv_bfloat16, float>(g);
  else if (g.d.type == CUDA_R_16F)
    run<__half, float>(g);
  else
    run<double, double>(g);
}

/// Bytes a layout spans (the last element of the last batch, plus one).
size_t span(const cublasLtMatrixLayoutOpaque_t &l) {
  const size_t elem = l.type == CUDA_R_64F ? 8 : l.type == CUDA_R_32F ? 4 : 2;
  if (!l.rows || !l.cols)
    return 0;
  return ((l.batch - 1) * l.stride + (l.cols - 1) * l.ld + l.rows) * elem;
}

} // namespace

extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t st) {
  if ((ct == CUBLAS_COMPUTE_32F) != (st == CUDA_R_32F) || (ct != CUBLAS_COMPUTE_32F && ct != CUBLAS_COMPUTE_64F))
    return refuse("compute type " + std::to_string(ct) + " with scale type " + std::to_string(st));
  *d = new cublasLtMatmulDescOpaque_t{ct, st};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
  auto get = [&](auto &field) { return setField(field, attr, buf, size); };
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA: return get(d->transA);
  case CUBLASLT_MATMUL_DESC_TRANSB: return get(d->transB);
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(d->epilogue);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get(d->bias);
  default: return refuse("matmul attribute " + std::to_string(attr) + " is not emulated");
  }
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_64F && type != CUDA_R_16BF && type != CUDA_R_16F)
    return refuse("data type " + std::to_string(type) + " is not emulated");
  if (ld < static_cast<int64_t>(rows) || ld < 1)
    return refuse("leading dimension " + std::to_string(ld) + " < rows " + std::to_string(rows) +
                  " (layouts are column-major)");
  *l = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size) {
  auto get = [&](auto &field) { return setField(field, attr, buf, size); };
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return get(l->batch);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return get(l->stride);
  default: return refuse("layout attribute " + std::to_string(attr) + " is not emulated");
  }
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t stream) {
  if (!h || h->magic != 0x4c74)
    return refuse("cublasLtMatmul without a handle from cublasLtCreate");
  const bool f32 = op->scale == CUDA_R_32F;
  // A and B: the scale type, or (FP32 compute) both bf16 or both fp16.
  const bool sixteen = a->type == CUDA_R_16BF || a->type == CUDA_R_16F;
  if (a->type != b->type || (sixteen ? !f32 : (a->type == CUDA_R_32F) != f32))
    return refuse("A's and B's types (" + std::to_string(a->type) + ", " + std::to_string(b->type) +
                  ") do not go with the scale type");
  // C and D: one type, the scale type's or (16-bit A and B) theirs.
  if (c->type != d->type || ((d->type == CUDA_R_32F) != f32 && !(sixteen && d->type == a->type)))
    return refuse("C's or D's type goes neither with the scale type nor with A's and B's");
  // op(A) is m x k, op(B) k x n, C and D m x n.
  const uint64_t m = d->rows, n = d->cols;
  const uint64_t am = op->transA == CUBLAS_OP_N ? a->rows : a->cols, ak = op->transA == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t bk = op->transB == CUBLAS_OP_N ? b->rows : b->cols, bn = op->transB == CUBLAS_OP_N ? b->cols : b->rows;
  if (am != m || bn != n || ak != bk || c->rows != m || c->cols != n)
    return refuse("shapes do not chain: op(A) " + std::to_string(am) + "x" + std::to_string(ak) + ", op(B) " +
                  std::to_string(bk) + "x" + std::to_string(bn) + ", D " + std::to_string(m) + "x" +
                  std::to_string(n));
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch)
    return refuse("batch counts differ between the layouts");
  if (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT && op->epilogue != CUBLASLT_EPILOGUE_RELU &&
      op->epilogue != CUBLASLT_EPILOGUE_BIAS && op->epilogue != CUBLASLT_EPILOGUE_RELU_BIAS &&
      op->epilogue != CUBLASLT_EPILOGUE_GELU && op->epilogue != CUBLASLT_EPILOGUE_GELU_BIAS)
    return refuse("epilogue " + std::to_string(op->epilogue) + " is not emulated");
  auto *g = new Gemm{*op, *a, *b, *c, *d, A, B, C, D, 0, 0};
  g->alpha = f32 ? *static_cast<const float *>(alpha) : *static_cast<const double *>(alpha);
  g->beta = f32 ? *static_cast<const float *>(beta) : *static_cast<const double *>(beta);
  // Every operand must lie inside one device allocation.
  const size_t elem = f32 ? 4 : 8;
  if (!emu::emu_check_range(A, span(*a), "cublasLtMatmul A") || !emu::emu_check_range(B, span(*b), "cublasLtMatmul B") ||
      (g->beta != 0 && !emu::emu_check_range(C, span(*c), "cublasLtMatmul C")) ||
      !emu::emu_check_range(D, span(*d), "cublasLtMatmul D") ||
      (op->bias && !emu::emu_check_range(op->bias, m * elem, "cublasLtMatmul bias"))) {
    delete g;
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  emu::emu_enqueue_host(stream, runGemm, g, [](void *p) { delete static_cast<Gemm *>(p); });
  return CUBLAS_STATUS_SUCCESS;
}
} // extern "C"
