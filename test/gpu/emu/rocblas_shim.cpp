//===- rocblas_shim.cpp - rocBLAS on the emulated device ------------------===//
//
// Why: the ROCm target dlopens librocblas.so.0 for its GEMMs and declares the
// entry points from rocBLAS's C ABI; this is the library that dlopen finds under
// the emulator: strided-batched sgemm/dgemm with rocBLAS's column-major
// conventions, run on the host in stream order. Bad arguments fail the run.
//
//===----------------------------------------------------------------------===//
#include "emu/api.h"

#include <cstdint>
#include <string>

namespace {
enum { kNone = 111, kTrans = 112 }; // rocblas_operation

struct Handle {
  hipStream_t stream = nullptr;
};

template <typename T> struct Gemm {
  int ta, tb;
  int32_t m, n, k, lda, ldb, ldc, batch;
  int64_t sa, sb, sc;
  T alpha, beta;
  const T *A, *B;
  T *C;
};

template <typename T> void run(void *ctx) {
  const Gemm<T> &g = *static_cast<Gemm<T> *>(ctx);
  for (int32_t bt = 0; bt < g.batch; ++bt)
    for (int32_t j = 0; j < g.n; ++j)
      for (int32_t i = 0; i < g.m; ++i) {
        T s = 0;
        for (int32_t p = 0; p < g.k; ++p) {
          const T a = g.ta == kNone ? g.A[bt * g.sa + i + int64_t(p) * g.lda] : g.A[bt * g.sa + p + int64_t(i) * g.lda];
          const T b = g.tb == kNone ? g.B[bt * g.sb + p + int64_t(j) * g.ldb] : g.B[bt * g.sb + j + int64_t(p) * g.ldb];
          s += a * b;
        }
        T &c = g.C[bt * g.sc + i + int64_t(j) * g.ldc];
        c = g.alpha * s + (g.beta != T(0) ? g.beta * c : T(0));
      }
}

template <typename T>
int gemm(void *h, int ta, int tb, int32_t m, int32_t n, int32_t k, const T *alpha, const T *A, int32_t lda,
         int64_t sa, const T *B, int32_t ldb, int64_t sb, const T *beta, T *C, int32_t ldc, int64_t sc,
         int32_t batch) {
  auto bad = [](const std::string &why) {
    emu::emu_fail(("rocblas shim: " + why).c_str());
    return 3; // rocblas_status_invalid_size
  };
  if ((ta != kNone && ta != kTrans) || (tb != kNone && tb != kTrans))
    return bad("unknown rocblas_operation");
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return bad("negative size");
  if (lda < (ta == kNone ? m : k) || ldb < (tb == kNone ? k : n) || ldc < m)
    return bad("leading dimension below the rows of its column-major matrix");
  auto span = [](int32_t rows, int32_t cols, int32_t ld, int64_t stride, int32_t b) -> size_t {
    return rows && cols && b ? ((b - 1) * stride + int64_t(cols - 1) * ld + rows) * sizeof(T) : 0;
  };
  if (!emu::emu_check_range(A, span(ta == kNone ? m : k, ta == kNone ? k : m, lda, sa, batch), "rocblas A") ||
      !emu::emu_check_range(B, span(tb == kNone ? k : n, tb == kNone ? n : k, ldb, sb, batch), "rocblas B") ||
      !emu::emu_check_range(C, span(m, n, ldc, sc, batch), "rocblas C"))
    return 3;
  auto *g = new Gemm<T>{ta, tb, m, n, k, lda, ldb, ldc, batch, sa, sb, sc, *alpha, *beta, A, B, C};
  emu::emu_enqueue_host(static_cast<Handle *>(h)->stream, run<T>, g,
                        [](void *p) { delete static_cast<Gemm<T> *>(p); });
  return 0;
}
} // namespace

extern "C" {
int rocblas_create_handle(void **h) {
  *h = new Handle;
  return 0;
}
int rocblas_destroy_handle(void *h) {
  delete static_cast<Handle *>(h);
  return 0;
}
int rocblas_set_stream(void *h, hipStream_t s) {
  static_cast<Handle *>(h)->stream = s;
  return 0;
}
int rocblas_sgemm_strided_batched(void *h, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *alpha,
                                  const float *A, int32_t lda, int64_t sa, const float *B, int32_t ldb, int64_t sb,
                                  const float *beta, float *C, int32_t ldc, int64_t sc, int32_t batch) {
  return gemm(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
int rocblas_dgemm_strided_batched(void *h, int ta, int tb, int32_t m, int32_t n, int32_t k, const double *alpha,
                                  const double *A, int32_t lda, int64_t sa, const double *B, int32_t ldb, int64_t sb,
                                  const double *beta, double *C, int32_t ldc, int64_t sc, int32_t batch) {
  return gemm(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
} // extern "C"
