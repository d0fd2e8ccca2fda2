//===- ortc_kernels.h - Portable CPU kernels for ortc -----------*- C++ -*-===//
//
// Why this file exists: the CPU backend of ortc emits C++ for every training
// step, and a reference interpreter checks that code. Both need the same
// heavy primitives (convolution, pooling, normalisation, softmax, losses,
// optimizers, ...). Keeping them in one header-only template library means
// that generated code (float) and the interpreter (double and float) share a
// single implementation with a single set of semantics, and that a compiled
// model needs nothing at run time except the C++ standard library, OpenMP
// (optional) and oneDNN (generated code, built with ORTC_KERN_DNNL: GEMM and
// convolution) or cblas (the evaluator).
//
// Conventions:
//  * Tensors are dense, row-major and contiguous. Shapes are passed as
//    `const int64_t *dims, int rank`.
//  * Index tensors (gather indices, class labels) are int64_t; booleans are
//    uint8_t.
//  * Results of the loops here never depend on the number of OpenMP threads:
//    every reduction is done in a fixed order (no thread `reduction(+:...)` on
//    floating point; sums vectorised with `omp simd reduction` keep one partial
//    sum per vector lane, combined in a fixed order: detail::runSum).
//    GEMM-based kernels (matmul, conv) are as deterministic as the library
//    behind them (oneDNN or BLAS) is.
//  * Sums and statistics are accumulated in double, also for T = float:
//    reduce (Sum/Mean), average pooling, softmax / log-softmax and their
//    gradients, layer and batch norm statistics and gradients, cross-entropy,
//    sumSquares. A double running sum of n terms errs by at most n * 2^-53 of
//    the sum of their magnitudes, below float's half ulp (2^-24) up to 2^29
//    terms, so a float result does not degrade with the count or the order of
//    its terms (test/unit/kernels, Accuracy.*). Variances are two-pass (mean,
//    then squared deviations), never E[x^2] - E[x]^2. Left to float: GEMM-based
//    kernels (matmul, conv and their gradients; oneDNN, as in PyTorch) and the
//    scatter-adds of gradients (pooling, col2im, gatherGrad, scatterElements'
//    add), whose element counts are small. An Accum argument (--accum-dtype) makes
//    GEMMs, convolutions and reduce's sums add in emulated 16-bit instead.
//  * Row ops (the softmax family) are written once as line functions
//    (softmaxLine, ...) over one row, reading through a load functor and
//    writing through a store functor: the library kernels call them with
//    plain loads, a generated rows kernel (ortc.fused "rows") with its fused
//    prologue and epilogue, so both give the same bits.
//  * The code compiles and is correct with and without -fopenmp. Threads are
//    OpenMP's only: oneDNN (built on the same libgomp) runs inside that pool,
//    single-threaded when called from inside a parallel region.
//
//===----------------------------------------------------------------------===//

#ifndef ORTC_KERNELS_CPU_ORTC_KERNELS_H
#define ORTC_KERNELS_CPU_ORTC_KERNELS_H

// Generated CPU code (ORTC_KERN_DNNL) calls oneDNN for GEMM and convolution:
// JIT kernels chosen by the CPU's features at run time, threaded by the same
// OpenMP pool as the generated loops (bfloat16 GEMMs too, on CPUs with AVX-512 BF16:
// matmulWide). The reference evaluator (double) keeps
// cblas.
#if defined(ORTC_KERN_DNNL)
#include <oneapi/dnnl/dnnl.h>
#include <map>
#else
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

// The per-element formulas shared with the GPU library and the evaluator (GELU,
// sigmoid, dropout's draws, imod): kernels/common, pasted in when the compiler
// embeds this library.
#include "ortc_scalar.h"

// Generated code (ORTC_KERN_DNNL builds, linked with glibc's libmvec): the
// float math functions of the elementwise loops get SIMD variants, so loops
// marked ORTC_KERN_PARALLEL_FOR_SIMD vectorise through them instead of calling
// the scalar function per element (GELU's erf was the top of a GPT profile).
// glibc declares these only under -ffast-math, which ortc does not use.
#if defined(ORTC_KERN_DNNL) && defined(_OPENMP) && defined(__x86_64__) &&      \
    defined(__GLIBC__) && !defined(__FAST_MATH__)
extern "C" {
#define ORTC_KERN_SIMD_DECL __attribute__((__simd__("notinbranch")))
float erff(float) noexcept ORTC_KERN_SIMD_DECL;
float expf(float) noexcept ORTC_KERN_SIMD_DECL;
float tanhf(float) noexcept ORTC_KERN_SIMD_DECL;
float logf(float) noexcept ORTC_KERN_SIMD_DECL;
double exp(double) noexcept ORTC_KERN_SIMD_DECL;
#undef ORTC_KERN_SIMD_DECL
}
#endif

// The scalar functions generated loops call (GELU, dropout, the vectorisation-stable math)
// are always inlined: an out-of-line call keeps the loop scalar, and GCC declined to
// inline them once erf became arithmetic (a GELU kernel went from a vector body to 9 ns
// an element).
#if defined(__GNUC__)
#define ORTC_KERN_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ORTC_KERN_ALWAYS_INLINE inline
#endif

// Non-template functions whose bodies are costly to compile (oneDNN plan caches:
// their std::map instantiations took 0.08 s of every unit's 0.12 s floor) have
// one definition, in ortc_kernels_lib.o, when generated code is built against that
// object (see the end of this file): units only declare them.
#if defined(ORTC_KERN_FLOAT_OBJECT) && !defined(ORTC_KERN_INSTANTIATE)
#define ORTC_KERN_DECLARE_ONLY
#endif
#if defined(ORTC_KERN_FLOAT_OBJECT) || defined(ORTC_KERN_INSTANTIATE)
#define ORTC_KERN_OBJECT_INLINE
#else
#define ORTC_KERN_OBJECT_INLINE inline
#endif

// `#pragma omp ...` written through _Pragma so that builds without -fopenmp
// see no unknown pragmas (and no -Wunknown-pragmas warnings).
#if defined(_OPENMP)
#define ORTC_KERN_PRAGMA(x) _Pragma(#x)
#else
#define ORTC_KERN_PRAGMA(x)
#endif
/// Parallelise the following `for` loop when `work` (roughly the number of
/// scalar operations it performs) is large enough to amortise a fork/join.
#define ORTC_KERN_PARALLEL_FOR(work)                                           \
  ORTC_KERN_PRAGMA(omp parallel for schedule(static) if (                      \
      (work) > ::ortc::kern::detail::kParallelWork))
/// Vectorise the following inner loop (independent iterations); with
/// ORTC_KERN_SIMD_SUM, a sum reduction into `var` (lanes keep partial sums in
/// the accumulator's type, combined in a fixed order: thread-count independent).
#define ORTC_KERN_SIMD ORTC_KERN_PRAGMA(omp simd)
#define ORTC_KERN_SIMD_SUM(var) ORTC_KERN_PRAGMA(omp simd reduction(+ : var))
/// The same for a loop whose iterations are independent element operations
/// (no calls that cannot be inlined, no early exits): also vectorised. At -O2
/// GCC vectorises only loops it needs no run-time alias checks for, which
/// excludes nearly every loop over pointers into one arena.
#define ORTC_KERN_PARALLEL_FOR_SIMD(work)                                      \
  ORTC_KERN_PRAGMA(omp parallel for simd schedule(static) if (parallel :       \
      (work) > ::ortc::kern::detail::kParallelWork))

// ---- 16-bit floats: storage only -------------------------------------------------
// float16 (IEEE binary16) and bfloat16 tensors are stored in 16 bits and computed in
// float: these types only hold the bits, and ortc_cvt converts. Float to 16 bits rounds
// to nearest, ties to even, as the GPUs' conversion instructions, F16C and PyTorch do:
// magnitudes past the largest finite value's half ulp become infinity, float16's
// subnormals are kept, and any NaN becomes a quiet NaN of the same sign (its payload's
// top bits kept). 16 bits to float is exact. The conversions are branch-free, so loops
// over them vectorise; the F16C instructions (x86-64-v3 and up) give the same bits
// (test/unit/kernels/LowPrecisionTest.cpp checks all 2^32 floats against a reference,
// the branching integer code and F16C). The GPU targets' preludes spell the same names with the
// vendors' types (__half, __nv_bfloat16).
#if defined(__F16C__)
#include <immintrin.h> // the emulated 16-bit sums' vector code (round16x8)
#endif

struct ortc_half {
  uint16_t bits;
};
struct ortc_bf16 {
  uint16_t bits;
};

namespace ortc {
namespace kern {
inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// Round-to-nearest-even of the float with bits `u` to bfloat16 (branch-free: the
/// loops over it vectorise).
inline uint16_t floatToBf16Bits(uint32_t u) {
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}
inline float bf16BitsToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }
/// Round-to-nearest-even of the float with bits `u` to float16 (integer arithmetic).
inline uint16_t floatToHalfBitsScalar(uint32_t u) {
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu, e = a >> 23, m = a & 0x7fffffu;
  if (a > 0x7f800000u) // NaN: quiet, the payload's top bits kept
    return uint16_t(sign | 0x7e00u | (m >> 13));
  if (a >= 0x477ff000u) // 65520 and up (the half ulp past 65504): infinity
    return uint16_t(sign | 0x7c00u);
  uint32_t k, shift;
  if (a >= 0x38800000u) { // normal half: 2^-14 and up
    k = ((e - 112u) << 10) | (m >> 13);
    shift = 13;
    m &= 0x1fffu;
  } else { // subnormal half (or zero): k units of 2^-24
    if (e < 102u)
      return sign; // below 2^-25: rounds to zero
    shift = 126u - e; // |f| * 2^24 = (m | 2^23) >> shift, shift in [14, 24]
    uint32_t full = m | 0x800000u;
    k = full >> shift;
    m = full & ((1u << shift) - 1u);
  }
  uint32_t half = 1u << (shift - 1);
  if (m > half || (m == half && (k & 1u)))
    ++k; // a carry into the exponent is the right encoding
  return uint16_t(sign | k);
}
/// The same rounding without branches, so that the loops over it vectorise (F16C's
/// conversions are scalar intrinsics GCC does not vectorise): every case is computed
/// and the right one selected. A subnormal half comes from float addition: |f| + 0.5
/// has ulp 2^-24, the subnormal half's unit, so the sum's low bits are |f| / 2^-24
/// rounded to nearest even (inputs below 2^-14 only, where that sum stays below 1).
inline uint16_t floatToHalfBits(uint32_t u) {
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  const uint32_t t = a - 0x38000000u; // exponent rebiased by 127 - 15
  const uint32_t normal = (t + 0xfffu + ((t >> 13) & 1u)) >> 13;
  const uint32_t subnormal = floatBits(bitsFloat(a < 0x38800000u ? a : 0u) + 0.5f) - 0x3f000000u;
  uint32_t r = a < 0x38800000u ? subnormal : normal;
  r = a >= 0x477ff000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? 0x7e00u | ((a & 0x7fffffu) >> 13) : r;
  return uint16_t(sign | r);
}
/// Exact float16 to float (integer arithmetic); NaNs come out quiet.
inline float halfBitsToFloatScalar(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) { // zero or subnormal: m * 2^-24, exact in float
    float v = float(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) // infinity, or NaN made quiet (as F16C does), its payload carried over
    return bitsFloat(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  return bitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}
/// The same without branches (vectorises).
inline float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);
  const uint32_t special = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);
  const uint32_t subnormal = sign | floatBits(float(int32_t(m)) * 0x1p-24f);
  return bitsFloat(e == 0 ? subnormal : e == 31 ? special : normal);
}
} // namespace kern
} // namespace ortc

/// Element conversion of generated kernels: static_cast, except to and from the 16-bit
/// floats, which go through float.
template <typename D, typename S> inline D ortc_cvt(S s) { return static_cast<D>(s); }
template <typename D> inline D ortc_cvt(ortc_half h) {
  return static_cast<D>(ortc::kern::halfBitsToFloat(h.bits));
}
template <typename D> inline D ortc_cvt(ortc_bf16 h) {
  return static_cast<D>(ortc::kern::bf16BitsToFloat(h.bits));
}
template <> inline ortc_half ortc_cvt<ortc_half, float>(float f) {
  return {ortc::kern::floatToHalfBits(ortc::kern::floatBits(f))};
}
template <> inline ortc_bf16 ortc_cvt<ortc_bf16, float>(float f) {
  return {ortc::kern::floatToBf16Bits(ortc::kern::floatBits(f))};
}
template <> inline ortc_half ortc_cvt<ortc_half, double>(double d) {
  return ortc_cvt<ortc_half, float>(float(d)); // as PyTorch: through float
}
template <> inline ortc_bf16 ortc_cvt<ortc_bf16, double>(double d) {
  return ortc_cvt<ortc_bf16, float>(float(d));
}

namespace ortc {
namespace kern {

namespace detail {
/// The identity of Max: -inf for floats, the lowest value for integers (whose
/// numeric_limits infinity is 0, which would make the max of negative ints 0).
template <typename T> T maxIdentity() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                              : std::numeric_limits<T>::lowest();
}
/// std::type_identity (C++20) for C++17.
template <typename T> struct TypeIdentity { using type = T; };
} // namespace detail

/// `T` in a non-deduced context. Used for scalar and nullable-pointer
/// parameters so that T is deduced from the tensor arguments only: callers
/// may pass `nullptr`, or a double literal to a float kernel.
template <typename T> using NoDeduce = typename detail::TypeIdentity<T>::type;

namespace detail {

/// Minimum amount of work (scalar operations) for a loop to go parallel.
constexpr int64_t kParallelWork = int64_t(1) << 15;

/// Product of dims[0..n); 1 for n <= 0.
inline int64_t product(const int64_t *dims, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i)
    p *= dims[i];
  return p;
}

/// Row-major strides of a contiguous tensor with the given dims.
inline std::vector<int64_t> stridesOf(const int64_t *dims, int rank) {
  std::vector<int64_t> s(rank > 0 ? rank : 1, 1);
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= dims[d];
  }
  return s;
}

/// Offset sum_d coord_d * strides[d] of the `row`-th element of the index
/// space dims[0..n) (row-major enumeration).
inline int64_t rowOffset(int64_t row, const int64_t *dims,
                         const int64_t *strides, int n) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; --d) {
    int64_t c = row % dims[d];
    row /= dims[d];
    off += c * strides[d];
  }
  return off;
}

/// Bit-level finiteness test (robust under -ffast-math, unlike std::isfinite).
inline bool isFiniteBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b & 0x7f800000u) != 0x7f800000u;
}
inline bool isFiniteBits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

/// Bit-level NaN test (robust under -ffast-math).
inline bool isNaNBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b & 0x7fffffffu) > 0x7f800000u;
}
inline bool isNaNBits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
/// Integers are never NaN (reductions also run on index tensors).
template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
inline bool isNaNBits(I) {
  return false;
}

/// Sum in double of term(i) over i < n: vectorised (lanes combined in a fixed
/// order) for runs of 8 or more, a plain loop below (where the vector loop's
/// set-up and combining cost more than the sum: BatchNorm over 2x2 maps).
template <typename F> ORTC_KERN_ALWAYS_INLINE double runSum(int64_t n, F term) {
  double s = 0;
  if (n >= 8) {
    ORTC_KERN_SIMD_SUM(s)
    for (int64_t i = 0; i < n; ++i)
      s += term(i);
  } else {
    for (int64_t i = 0; i < n; ++i)
      s += term(i);
  }
  return s;
}

/// Uninitialised scratch of n elements (a std::vector would zero it first).
template <typename T> std::unique_ptr<T[]> scratch(int64_t n) {
  return std::unique_ptr<T[]>(new T[static_cast<size_t>(n)]);
}

/// p[0, n) = 0 on the pool: a gradient that several windows then add into.
template <typename T> void zeroFill(T *p, int64_t n) {
  ORTC_KERN_PARALLEL_FOR_SIMD(n)
  for (int64_t i = 0; i < n; ++i)
    p[i] = T(0);
}

/// Range [lo, hi) of output positions o in [0, outLen) for which the input
/// coordinate o * stride + offset lies inside [0, inLen). stride > 0.
inline void validRange(int64_t outLen, int64_t stride, int64_t offset,
                       int64_t inLen, int64_t &lo, int64_t &hi) {
  // o * stride + offset >= 0  <=>  o >= ceil(-offset / stride).
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // o * stride + offset < inLen  <=>  o < ceil((inLen - offset) / stride).
  int64_t room = inLen - offset;
  hi = room <= 0 ? 0 : (room + stride - 1) / stride;
  lo = std::min(lo, outLen);
  hi = std::min(hi, outLen);
  if (hi < lo)
    hi = lo;
}

/// Spatial geometry normalised to exactly three spatial dims: the real
/// dims are right-aligned and the missing leading ones are size 1.
struct Spatial3 {
  int64_t in[3], k[3], out[3], s[3], p[3], d[3];
  int64_t pe[3]; ///< end pads (pooling's count_include_pad bound; 0 for convolutions)
  int64_t inSize, kSize, outSize;
};

/// Builds a Spatial3 from the first nSpatial entries of the arrays.
inline Spatial3 toSpatial3(int nSpatial, const int64_t *in,
                           const int64_t *kernel, const int64_t *out,
                           const int64_t *stride, const int64_t *padBegin,
                           const int64_t *dilation) {
  Spatial3 g;
  int off = 3 - nSpatial;
  for (int i = 0; i < 3; ++i) {
    if (i < off) {
      g.in[i] = g.k[i] = g.out[i] = g.s[i] = g.d[i] = 1;
      g.p[i] = g.pe[i] = 0;
    } else {
      int j = i - off;
      g.in[i] = in[j];
      g.k[i] = kernel[j];
      g.out[i] = out[j];
      g.s[i] = stride[j];
      g.p[i] = padBegin[j];
      g.pe[i] = 0;
      g.d[i] = dilation[j];
    }
  }
  g.inSize = g.in[0] * g.in[1] * g.in[2];
  g.kSize = g.k[0] * g.k[1] * g.k[2];
  g.outSize = g.out[0] * g.out[1] * g.out[2];
  return g;
}

/// Maps of at most this many (tap, output position) pairs go through a table
/// in im2col and col2imAdd: on ResNet-18's 2x2 maps the per-row range
/// arithmetic cost more than the copies.
constexpr int64_t kTapTableMax = 1024;

/// For a small map: table[kk * outSize + p] is the offset within one channel's
/// input of tap kk of output position p, or -1 where it falls in padding.
inline void tapOffsets(const Spatial3 &g, int64_t *table) {
  for (int64_t kk = 0; kk < g.kSize; ++kk) {
    const int64_t kd = kk / (g.k[1] * g.k[2]), kh = (kk / g.k[2]) % g.k[1], kw = kk % g.k[2];
    int64_t *t = table + kk * g.outSize;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
          const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
          const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.d[2];
          const bool in = id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 &&
                          iw < g.in[2];
          *t++ = in ? (id * g.in[1] + ih) * g.in[2] + iw : -1;
        }
  }
}

/// im2col for one image and `C` channels: col is [C * kSize, outSize] with
/// row (c, kd, kh, kw) and column (od, oh, ow), rows `ld` apart (outSize
/// when 0); out-of-input taps are zero.
template <typename T>
void im2col(const T *x, int64_t C, const Spatial3 &g, T *col, int64_t ld = 0) {
  const int64_t rows = C * g.kSize;
  const int64_t P = g.outSize;
  if (ld == 0)
    ld = P;
  if (g.kSize * P <= kTapTableMax) {
    int64_t table[kTapTableMax];
    tapOffsets(g, table);
    ORTC_KERN_PARALLEL_FOR(rows * P)
    for (int64_t r = 0; r < rows; ++r) {
      const T *src = x + (r / g.kSize) * g.inSize;
      const int64_t *t = table + (r % g.kSize) * P;
      T *dst = col + r * ld;
      for (int64_t p = 0; p < P; ++p)
        dst[p] = t[p] < 0 ? T(0) : src[t[p]];
    }
    return;
  }
  const int64_t plane12 = g.out[1] * g.out[2];
  ORTC_KERN_PARALLEL_FOR(rows * P)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = r / g.kSize, kk = r % g.kSize;
    const int64_t kd = kk / (g.k[1] * g.k[2]);
    const int64_t kh = (kk / g.k[2]) % g.k[1];
    const int64_t kw = kk % g.k[2];
    const T *src = x + c * g.inSize;
    T *dst = col + r * ld;
    int64_t wlo, whi;
    validRange(g.out[2], g.s[2], kw * g.d[2] - g.p[2], g.in[2], wlo, whi);
    for (int64_t od = 0; od < g.out[0]; ++od) {
      const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
      T *dplane = dst + od * plane12;
      if (id < 0 || id >= g.in[0]) {
        std::fill(dplane, dplane + plane12, T(0));
        continue;
      }
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
        T *drow = dplane + oh * g.out[2];
        if (ih < 0 || ih >= g.in[1]) {
          std::fill(drow, drow + g.out[2], T(0));
          continue;
        }
        const T *srow = src + (id * g.in[1] + ih) * g.in[2];
        const int64_t base = kw * g.d[2] - g.p[2];
        for (int64_t ow = 0; ow < wlo; ++ow)
          drow[ow] = T(0);
        if (g.s[2] == 1) {
          for (int64_t ow = wlo; ow < whi; ++ow)
            drow[ow] = srow[ow + base];
        } else {
          for (int64_t ow = wlo; ow < whi; ++ow)
            drow[ow] = srow[ow * g.s[2] + base];
        }
        for (int64_t ow = whi; ow < g.out[2]; ++ow)
          drow[ow] = T(0);
      }
    }
  }
}

/// Adjoint of im2col: x[c, ...] += col entries mapping to it (col's rows
/// `ld` apart, outSize when 0). Parallel over channels only, so no two
/// threads touch the same element of x.
template <typename T>
void col2imAdd(const T *col, int64_t C, const Spatial3 &g, T *x, int64_t ld = 0) {
  const int64_t P = g.outSize;
  if (ld == 0)
    ld = P;
  if (g.kSize * P <= kTapTableMax) {
    int64_t table[kTapTableMax];
    tapOffsets(g, table);
    ORTC_KERN_PARALLEL_FOR(C * g.kSize * P)
    for (int64_t c = 0; c < C; ++c) {
      T *dst = x + c * g.inSize;
      for (int64_t kk = 0; kk < g.kSize; ++kk) {
        const T *src = col + (c * g.kSize + kk) * ld;
        const int64_t *t = table + kk * P;
        for (int64_t p = 0; p < P; ++p)
          if (t[p] >= 0)
            dst[t[p]] += src[p];
      }
    }
    return;
  }
  ORTC_KERN_PARALLEL_FOR(C * g.kSize * P)
  for (int64_t c = 0; c < C; ++c) {
    T *dstPlane = x + c * g.inSize;
    for (int64_t kk = 0; kk < g.kSize; ++kk) {
      const int64_t kd = kk / (g.k[1] * g.k[2]);
      const int64_t kh = (kk / g.k[2]) % g.k[1];
      const int64_t kw = kk % g.k[2];
      const T *src = col + (c * g.kSize + kk) * ld;
      int64_t wlo, whi;
      const int64_t base = kw * g.d[2] - g.p[2];
      validRange(g.out[2], g.s[2], base, g.in[2], wlo, whi);
      for (int64_t od = 0; od < g.out[0]; ++od) {
        const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
        if (id < 0 || id >= g.in[0])
          continue;
        for (int64_t oh = 0; oh < g.out[1]; ++oh) {
          const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
          if (ih < 0 || ih >= g.in[1])
            continue;
          T *drow = dstPlane + (id * g.in[1] + ih) * g.in[2];
          const T *srow = src + (od * g.out[1] + oh) * g.out[2];
          for (int64_t ow = wlo; ow < whi; ++ow)
            drow[ow * g.s[2] + base] += srow[ow];
        }
      }
    }
  }
}

/// True when the convolution is a plain 1x1 matrix product (no im2col).
inline bool isPointwise(const Spatial3 &g) {
  for (int i = 0; i < 3; ++i)
    if (g.k[i] != 1 || g.s[i] != 1 || g.p[i] != 0 || g.out[i] != g.in[i])
      return false;
  return true;
}

} // namespace detail

//===----------------------------------------------------------------------===//
// 16-bit accumulation (ortc build --accum-dtype chunked16 | plain16)
//===----------------------------------------------------------------------===//
//
// Hardware with fast 16-bit arithmetic can also add in 16 bits. A long sum held in
// bfloat16 (8 significant bits) stops growing once its terms fall below half its
// ulp: 1e6 terms of about 1 sum to a few hundred. Chunk-based accumulation (Wang
// et al., "Training Deep Neural Networks with 8-bit Floating Point Numbers", 2018)
// adds in the 16-bit type over chunks of C terms only and adds the chunk sums in
// float, so no partial sum outgrows its terms by more than C times; the paper's
// analysis puts C at 64 for float16 (ortc takes 16 for bfloat16's shorter significand). These kernels *emulate* that arithmetic on the CPU (and the
// GPU library does the same in its tiled GEMM and reduction): each addition's
// result is rounded to nearest even in the 16-bit type, products of two 16-bit values
// being exact in float. `Accum` says which: Float is ortc's default (the float GEMMs,
// double sums); Bf16/Half with chunk C > 0 is chunked16; chunk 0 keeps one 16-bit
// partial sum for the whole reduction (plain16, for comparison). Which ops accumulate
// so is the compiler's choice (the GEMMs and sums of a --precision bf16|fp16 step).
struct Accum {
  enum Kind : int32_t { Float = 0, Bf16 = 1, Half = 2 };
  int32_t kind = Float;
  int64_t chunk = 0; ///< terms per 16-bit partial sum; 0: a single one (plain16)
};
/// The paper's chunk length (float16); ortc's default for bfloat16 is 16 (the pass says why).
constexpr int64_t kDefaultAccumChunk = 64;

namespace detail {
/// x rounded to the 16-bit type of Kind, as a float (NaN stays NaN, overflow is inf).
template <int Kind> inline float round16(float x) {
  if constexpr (Kind == Accum::Bf16)
    return bf16BitsToFloat(floatToBf16Bits(floatBits(x)));
  else
    return halfBitsToFloat(floatToHalfBits(floatBits(x)));
}

/// A sum of terms added one at a time in the 16-bit type of Kind, in chunks of
/// `chunk` terms (0: one chunk) whose sums are added in float.
template <int Kind> struct Sum16 {
  explicit Sum16(int64_t chunk) : chunk(chunk) {}
  void add(float x) {
    part = round16<Kind>(part + x);
    if (++n == chunk) {
      total += part;
      part = 0.0f;
      n = 0;
    }
  }
  float value() const { return total + part; }
  int64_t chunk, n = 0;
  float part = 0.0f, total = 0.0f;
};

/// Sum or mean of n elements at x[0], x[stride], ... accumulated as `acc` says
/// (acc.kind != Float).
template <int Kind, typename T>
T sum16(const T *x, int64_t n, int64_t stride, int64_t chunk) {
  Sum16<Kind> s(chunk);
  for (int64_t i = 0; i < n; ++i)
    s.add(static_cast<float>(x[i * stride]));
  return static_cast<T>(s.value());
}

#if defined(__AVX2__) && defined(__F16C__)
/// round16 of 8 floats (AVX2 / F16C: the same bits as the scalar code).
template <int Kind> inline __m256 round16x8(__m256 x) {
  if constexpr (Kind == Accum::Bf16) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i up = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    const __m256i isNaN = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                             _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(up, quiet, isNaN);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int(0xffff0000u))));
  } else {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
}
#endif

/// C = op(A) op(B) (+ C when accumulate) with 16-bit accumulation (see Accum): every
/// element of C is its products A[i, k] * B[k, j] added in k order, each sum rounded,
/// the chunk sums added in float. Four rows of C at a time share each row of B, and
/// with AVX2 sixteen columns are two vectors (the scalar loop does the rest). A transposed
/// B is copied to [K, N] rows first, A to [M, K].
template <int Kind, typename T>
void gemm16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const T *A,
            int64_t lda, const T *B, int64_t ldb, bool accumulate, T *C, int64_t ldc,
            int64_t chunk) {
  std::vector<float> rowsB(static_cast<size_t>(K * N)), rowsA(static_cast<size_t>(M * K));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j)
      rowsB[k * N + j] = static_cast<float>(transB ? B[j * ldb + k] : B[k * ldb + j]);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      rowsA[i * K + k] = static_cast<float>(transA ? A[k * lda + i] : A[i * lda + k]);
  const int64_t len = chunk > 0 ? chunk : K, blocks = (M + 3) / 4;
  ORTC_KERN_PARALLEL_FOR(M * N * K)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * 4, rows = std::min<int64_t>(4, M - i0);
    const float *a[4];
    for (int r = 0; r < 4; ++r)
      a[r] = rowsA.data() + std::min(i0 + r, M - 1) * K; // a missing row repeats the last
    int64_t j0 = 0;
#if defined(__AVX2__) && defined(__F16C__)
    // 4 rows x 16 columns: eight independent chains of add-and-round per k.
    for (; j0 + 16 <= N; j0 += 16) {
      float total[4][16] = {};
      for (int64_t k0 = 0; k0 < K; k0 += len) {
        __m256 part[4][2];
        for (int r = 0; r < 4; ++r)
          part[r][0] = part[r][1] = _mm256_setzero_ps();
        const int64_t k1 = std::min(K, k0 + len);
        for (int64_t k = k0; k < k1; ++k) {
          const float *brow = rowsB.data() + k * N + j0;
          const __m256 b0 = _mm256_loadu_ps(brow), b1 = _mm256_loadu_ps(brow + 8);
          _Pragma("GCC unroll 4") // the chains in registers (-O2 does not unroll it)
          for (int r = 0; r < 4; ++r) {
            const __m256 av = _mm256_set1_ps(a[r][k]);
            part[r][0] = round16x8<Kind>(_mm256_add_ps(part[r][0], _mm256_mul_ps(av, b0)));
            part[r][1] = round16x8<Kind>(_mm256_add_ps(part[r][1], _mm256_mul_ps(av, b1)));
          }
        }
        for (int r = 0; r < 4; ++r)
          for (int h = 0; h < 2; ++h)
            _mm256_storeu_ps(total[r] + 8 * h,
                             _mm256_add_ps(_mm256_loadu_ps(total[r] + 8 * h), part[r][h]));
      }
      for (int r = 0; r < rows; ++r) {
        T *c = C + (i0 + r) * ldc + j0;
        for (int j = 0; j < 16; ++j)
          c[j] = static_cast<T>(accumulate ? static_cast<float>(c[j]) + total[r][j]
                                           : total[r][j]);
      }
    }
#endif
    for (; j0 < N; ++j0)
      for (int r = 0; r < rows; ++r) {
        float part = 0.0f, total = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += len) {
          part = 0.0f;
          for (int64_t k = k0; k < std::min(K, k0 + len); ++k)
            part = round16<Kind>(part + a[r][k] * rowsB[k * N + j0]);
          total += part;
        }
        T *c = C + (i0 + r) * ldc + j0;
        *c = static_cast<T>(accumulate ? static_cast<float>(*c) + total : total);
      }
  }
}
} // namespace detail

/// The sum of n elements accumulated as `acc` says (Float: in double, as `reduce`).
template <typename T> T sumAccum(const T *x, int64_t n, Accum acc) {
  if (acc.kind == Accum::Bf16)
    return detail::sum16<Accum::Bf16>(x, n, 1, acc.chunk);
  if (acc.kind == Accum::Half)
    return detail::sum16<Accum::Half>(x, n, 1, acc.chunk);
  return static_cast<T>(detail::runSum(n, [&](int64_t i) { return static_cast<double>(x[i]); }));
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

namespace detail {
/// oneDNN's sgemm does not pack an operand whose other side of the product is short
/// (B when M <= 256, A when N <= 256): its kernels then read that operand in place,
/// walking K down its stored rows. Rows a multiple of 1 KiB (256 floats) apart fall
/// into a few L1 sets and evict each other: on a Zen 3 core a 256x1024x1024 product
/// with B's rows 4 KiB apart ran at 34-42 GFLOP/s, with them 4 KiB + 64 bytes apart at
/// 80-88 (512-float strides alike; 256 and 768 lost 10-20%), and a transformer's
/// weight gradients (K = the batch's tokens, often a power of two) are such products.
/// The operand walked across rows is B unless transB, A when transA.
inline bool aliasedOperand(bool walksRows, int64_t ld, int64_t other) {
  return walksRows && ld % 256 == 0 && other >= 32 && other <= 256;
}

/// Copies the rows x cols matrix at `src` (row stride ld) into `buf` with a row stride
/// that is not a multiple of 1 KiB and returns that stride; on the pool when called
/// outside a parallel region. `buf` grows and is kept (one per thread).
template <typename T>
int64_t copyUnaliased(const T *src, int64_t rows, int64_t cols, int64_t ld,
                      std::vector<T> &buf) {
  int64_t out = (cols + 15) / 16 * 16;
  if (out % 256 == 0)
    out += 16;
  buf.resize(static_cast<size_t>(rows * out));
  T *dst = buf.data();
  ORTC_KERN_PRAGMA(omp parallel for schedule(static) if (rows * cols > (int64_t(1) << 16)))
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * out, src + r * ld, static_cast<size_t>(cols) * sizeof(T));
  return out;
}
} // namespace detail

#if defined(ORTC_KERN_DNNL)
namespace dnnl_detail {
ORTC_KERN_OBJECT_INLINE bool gemmF32(bool transA, bool transB, int64_t M, int64_t N,
                                     int64_t K, const float *A, int64_t lda, const float *B,
                                     int64_t ldb, bool accumulate, float *C, int64_t ldc);
} // namespace dnnl_detail
#endif

/// Row-major GEMM: C = alpha * op(A) * op(B) + beta * C, where op(A) is
/// [M, K] (A stored [K, M] when transA) and op(B) is [K, N] (B stored [N, K]
/// when transB); lda/ldb/ldc are row strides. Thin wrapper over oneDNN (generated
/// code: its matmul primitive or dnnl_sgemm, see below) or cblas_sgemm (the evaluator).
/// M == 0 or N == 0 is a no-op; K == 0 gives C = beta * C (C = 0 if beta == 0).
inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 float alpha, const float *A, int64_t lda, const float *B,
                 int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
#if defined(ORTC_KERN_DNNL)
  // oneDNN's matmul primitive where it has a brgemm kernel (AVX-512 CPUs): it packs
  // B itself and splits the product over the pool by rows and columns, where the
  // sgemm below splits a short product badly (on a Zen 4 at 2 threads, x W^T for a
  // 64x1024 batch through a 1024x1024 layer ran at 66 GFLOP/s, 168 through the
  // primitive; 128x1024x1024 NT 103 against 192; NN and small products alike). Only
  // outside a parallel region (a panel of matmulPanels runs on its own thread), for
  // products of at least 2M multiply-adds, where one primitive call's overhead is lost,
  // and dense operands (oneDNN 2.6 has brgemm for no other strides).
  if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && M * N * K >= (int64_t(1) << 21) &&
      lda == (transA ? M : K) && ldb == (transB ? K : N) && ldc == N
#if defined(_OPENMP)
      && !omp_in_parallel()
#endif
      && dnnl_detail::gemmF32(transA, transB, M, N, K, A, lda, B, ldb, beta == 1.0f, C, ldc))
    return;
  // An operand oneDNN would read in place with rows that evict each other is copied
  // first, into rows 64 bytes further apart (detail::aliasedOperand): the copy costs
  // one pass over it, against a product that reads it `other` times. Same bits: the
  // copy changes where the operand lies, not the order of the sums.
  static thread_local std::vector<float> copyA, copyB;
  if (detail::aliasedOperand(transA, lda, N)) {
    lda = detail::copyUnaliased(A, K, M, lda, copyA);
    A = copyA.data();
  }
  if (detail::aliasedOperand(!transB, ldb, M)) {
    ldb = detail::copyUnaliased(B, K, N, ldb, copyB);
    B = copyB.data();
  }
  dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B,
             ldb, beta, C, ldc);
#else
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
#endif
}

/// Double-precision overload of gemm (cblas_dgemm); same semantics.
inline void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 double alpha, const double *A, int64_t lda, const double *B,
                 int64_t ldb, double beta, double *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[i * ldc + j];
    return;
  }
#if defined(ORTC_KERN_DNNL)
  // oneDNN has no double GEMM; generated code is float, so this plain loop
  // only keeps the overload set the same in both builds.
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += (transA ? A[k * lda + i] : A[i * lda + k]) *
               (transB ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] =
          alpha * acc + (beta == 0.0 ? 0.0 : beta * C[i * ldc + j]);
    }
#else
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
#endif
}

/// gemm accumulated as `acc` says: Float is the gemm above; the 16-bit kinds
/// (alpha 1, beta 0 or 1: the kernels' uses) are detail::gemm16.
template <typename T>
void gemm(const Accum &acc, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          T alpha, const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C,
          int64_t ldc) {
  if (acc.kind == Accum::Float || M <= 0 || N <= 0)
    return gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (acc.kind == Accum::Bf16)
    detail::gemm16<Accum::Bf16>(transA, transB, M, N, K, A, lda, B, ldb, beta != T(0), C,
                                ldc, acc.chunk);
  else
    detail::gemm16<Accum::Half>(transA, transB, M, N, K, A, lda, B, ldb, beta != T(0), C,
                                ldc, acc.chunk);
}

/// Where a GEMM finds the matrices of a batch in a buffer (generated code's
/// matmulLayout; ortc::MatrixLayout in the compiler): matrix b starts at at(b), its
/// rows `ld` apart (of op's stored matrix: [K, M] rows when transposed), unit-stride
/// columns. Two batch levels cover attention's heads read out of a [B, T, 3C] tensor.
struct MatLayout {
  int64_t ld, inner, outerStride, innerStride;
  int64_t at(int64_t b) const { return (b / inner) * outerStride + (b % inner) * innerStride; }
};

/// C[b] = op(A[b]) @ op(B[b]) (+ C[b] when accumulate) for b < batch, each matrix
/// where its layout says; float sums (the GEMM's). Kernel formation reads attention's
/// head slices and transposes so, without copies.
template <typename T>
void matmulLayout(const T *A, MatLayout la, const T *B, MatLayout lb, T *C, MatLayout lc,
                  int64_t batch, int64_t M, int64_t N, int64_t K, bool transA, bool transB,
                  bool accumulate = false) {
  const T beta = accumulate ? T(1) : T(0);
  if (batch <= 0)
    return;
#if defined(ORTC_KERN_DNNL) && defined(_OPENMP)
  // Many small products (attention heads): one product per thread at a time;
  // oneDNN runs a GEMM called inside a parallel region on its calling thread.
  if (batch >= omp_get_max_threads() && omp_get_max_threads() > 1) {
    ORTC_KERN_PRAGMA(omp parallel for schedule(static))
    for (int64_t b = 0; b < batch; ++b)
      gemm(transA, transB, M, N, K, T(1), A + la.at(b), la.ld, B + lb.at(b), lb.ld, beta,
           C + lc.at(b), lc.ld);
    return;
  }
#endif
  for (int64_t b = 0; b < batch; ++b)
    gemm(transA, transB, M, N, K, T(1), A + la.at(b), la.ld, B + lb.at(b), lb.ld, beta,
         C + lc.at(b), lc.ld);
}

/// What matmulPanels hands each panel to: `fn(ctx, o0, o1, panel)`. A function
/// pointer, not a template parameter, so that the panel driver is compiled once (into
/// ortc_kernels_lib.o) and a generated gemm kernel compiles only its epilogue: a
/// quarter of the compile time of each (one indirect call per panel, or per `align` rows
/// on the short-product path: a cost lost in the GEMM's).
template <typename T> struct PanelEpilogue {
  void (*fn)(void *ctx, int64_t o0, int64_t o1, const T *panel);
  void *ctx;
  void operator()(int64_t o0, int64_t o1, const T *panel) const { fn(ctx, o0, o1, panel); }
};

/// The products op(A[b]) @ op(B[b]) (operands where their layouts say) in panels of
/// rows, each written into a per-thread panel buffer and handed at once to
/// `epilogue(o0, o1, panel)`: rows [o0, o1) of the products flattened to
/// [batch * M, N], row o at panel + (o - o0) * N, while they are in cache. A gemm
/// kernel's elementwise ops after its GEMM (bias, activation, residual add) so read the
/// product from cache, and it never reaches the arena (the epilogue may write over its
/// own inputs). Panels hold about 256 KiB (at least 16 rows), and there are at least as
/// many as threads where they can be; threads take whole panels (oneDNN runs a GEMM
/// called inside a parallel region on its calling thread). Panels start at multiples of
/// `align` rows of a matrix (a kernel's sums add blocks of rows, each in one panel).
template <typename T>
void matmulPanels(const T *A, MatLayout la, const T *B, MatLayout lb, int64_t batch,
                  int64_t M, int64_t N, int64_t K, bool transA, bool transB, int64_t align,
                  PanelEpilogue<T> epilogue) {
  if (batch <= 0 || M <= 0 || N <= 0)
    return;
  int threads = 1;
#if defined(_OPENMP)
  threads = omp_get_max_threads();
#endif
#if defined(ORTC_KERN_DNNL) && defined(_OPENMP)
  // A product of up to 4M elements (16 MiB) is computed whole by oneDNN on the
  // pool, into a scratch buffer, and the epilogue follows on row blocks, `align`
  // rows at a time. Panels called from each thread pack all of B again for every
  // panel: a short matrix (a batch of 64 rows through a wide layer) gained 1.3x
  // from 2 threads that way, against 1.9x for one GEMM, and a transformer's
  // 1024x1024x256 MLP GEMM with a bias+ReLU epilogue took 2.28 ms in 64-row
  // panels against 2.04 ms whole (GPT d256 step 2-4% faster). Larger products keep
  // the panels: their scratch would not stay in the caches.
  if (batch == 1 && threads > 1 && M * N <= (int64_t(1) << 22)) {
    auto whole = detail::scratch<T>(M * N);
    gemm(transA, transB, M, N, K, T(1), A + la.at(0), la.ld, B + lb.at(0), lb.ld, T(0),
         whole.get(), N);
    const int64_t blocks = (M + align - 1) / align;
    const T *product = whole.get();
    ORTC_KERN_PRAGMA(omp parallel for schedule(static))
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t r0 = k * align, r1 = std::min(M, r0 + align);
      epilogue(r0, r1, product + r0 * N);
    }
    return;
  }
#endif
  int64_t rows = std::min<int64_t>(M, std::max<int64_t>(16, (int64_t(1) << 16) / N));
  int64_t per = (M + rows - 1) / rows; // panels per matrix
  if (batch * per < threads)
    per = std::min<int64_t>(M, (threads + batch - 1) / batch);
  rows = (M + per - 1) / per;
  rows = (rows + align - 1) / align * align; // whole blocks of `align` rows
  per = (M + rows - 1) / rows;
  // Every panel of one matrix reads all of B: where each panel's GEMM would copy it
  // (oneDNN's float gemm, detail::aliasedOperand), it is copied once here instead.
  std::vector<T> copyB;
#if defined(ORTC_KERN_DNNL)
  if (std::is_same<T, float>::value && batch == 1 && detail::aliasedOperand(!transB, lb.ld, rows)) {
    lb = MatLayout{detail::copyUnaliased(B + lb.at(0), K, N, lb.ld, copyB), 1, 0, 0};
    B = copyB.data();
  }
#endif
  auto panel = [&](int64_t item) {
    static thread_local std::vector<T> buffer;
    buffer.resize(static_cast<size_t>(rows * N));
    const int64_t b = item / per, r0 = (item % per) * rows, r1 = std::min(M, r0 + rows);
    const T *a = A + la.at(b) + (transA ? r0 : r0 * la.ld);
    gemm(transA, transB, r1 - r0, N, K, T(1), a, la.ld, B + lb.at(b), lb.ld, T(0),
         buffer.data(), N);
    epilogue(b * M + r0, b * M + r1, static_cast<const T *>(buffer.data()));
  };
  const int64_t items = batch * per;
#if defined(ORTC_KERN_DNNL) && defined(_OPENMP)
  if (threads > 1 && items > 1) {
    ORTC_KERN_PRAGMA(omp parallel for schedule(static))
    for (int64_t i = 0; i < items; ++i)
      panel(i);
    return;
  }
#endif
  for (int64_t i = 0; i < items; ++i)
    panel(i);
}

/// matmulPanels with the epilogue as any callable (a generated kernel's lambda).
template <typename T, typename Epilogue>
void matmulEpilogue(const T *A, MatLayout la, const T *B, MatLayout lb, int64_t batch,
                    int64_t M, int64_t N, int64_t K, bool transA, bool transB, int64_t align,
                    Epilogue &&epilogue) {
  using E = std::remove_reference_t<Epilogue>;
  PanelEpilogue<T> erased{[](void *ctx, int64_t o0, int64_t o1, const T *panel) {
                            (*static_cast<E *>(ctx))(o0, o1, panel);
                          },
                          const_cast<void *>(static_cast<const void *>(&epilogue))};
  matmulPanels<T>(A, la, B, lb, batch, M, N, K, transA, transB, align, erased);
}

/// Batched matmul with explicit batch strides (in elements) for A and B; a
/// stride of 0 broadcasts that operand over the batch (torch.matmul
/// broadcasting of a 2-d operand). C is contiguous [batch, M, N]:
/// C[b] = op(A[b]) @ op(B[b]) (+ C[b] when accumulate). A[b] is [M, K]
/// ([K, M] when transA), B[b] is [K, N] ([N, K] when transB). `acc`: how the
/// products are summed (16-bit kinds: see Accum).
template <typename T>
void matmulStrided(const T *A, int64_t strideA, const T *B, int64_t strideB,
                   T *C, int64_t batch, int64_t M, int64_t N, int64_t K,
                   bool transA, bool transB, bool accumulate = false,
                   Accum acc = Accum()) {
  const int64_t lda = transA ? M : K;
  const int64_t ldb = transB ? K : N;
  const T beta = accumulate ? T(1) : T(0);
  if (batch <= 0)
    return;
  if (acc.kind != Accum::Float) {
    for (int64_t b = 0; b < batch; ++b)
      gemm(acc, transA, transB, M, N, K, T(1), A + b * strideA, lda, B + b * strideB,
           ldb, beta, C + b * M * N, N);
    return;
  }
  // Shared B and untransposed, batch-contiguous A: one tall GEMM.
  if (strideB == 0 && !transA && (batch == 1 || strideA == M * K)) {
    gemm(false, transB, batch * M, N, K, T(1), A, lda, B, ldb, beta, C, N);
    return;
  }
  matmulLayout(A, MatLayout{lda, 1, strideA, 0}, B, MatLayout{ldb, 1, strideB, 0}, C,
               MatLayout{N, 1, M * N, 0}, batch, M, N, K, transA, transB, accumulate);
}

/// Batched matmul, torch.bmm semantics with optional transposes:
/// C[b] = op(A[b]) @ op(B[b]) for b < batch, where A is [batch, M, K]
/// ([batch, K, M] when transA), B is [batch, K, N] ([batch, N, K] when
/// transB) and C is [batch, M, N]. With accumulate, C[b] += ... (beta = 1).
template <typename T>
void matmul(const T *A, const T *B, T *C, int64_t batch, int64_t M, int64_t N,
            int64_t K, bool transA, bool transB, bool accumulate = false,
            Accum acc = Accum()) {
  matmulStrided(A, M * K, B, K * N, C, batch, M, N, K, transA, transB,
                accumulate, acc);
}
#if defined(ORTC_KERN_DNNL)
namespace dnnl_detail {
inline bool nativeBf16();
ORTC_KERN_OBJECT_INLINE bool matmulBf16(const ortc_bf16 *A, const ortc_bf16 *B, void *C,
                                        bool bf16Result, int64_t batch, int64_t M, int64_t N,
                                        int64_t K, bool transA, bool transB);
} // namespace dnnl_detail
#endif

/// matmul of 16-bit operands (ortc_bf16 or ortc_half) into C, the products summed in
/// float (mixed precision's GEMM): a float C (matmul f32_result), or a C of the operands'
/// type, each float sum rounded to nearest even as it is stored.
/// bfloat16 on a CPU with AVX-512 BF16 (and AMX where it has it): oneDNN's bf16 matmul,
/// which multiplies the 16-bit values in hardware and sums in float
/// (dnnl_detail::matmulBf16). Elsewhere (AVX2 CPUs, and float16: oneDNN 2.6 has no
/// float16 GEMM on CPUs), both operands are widened (exactly) into per-thread buffers
/// and the float GEMM runs: the bits of the float GEMM on widened copies, without those
/// copies in the step's arena. A 16-bit C is then computed in blocks of rows through a
/// per-thread float tile of about kWideTile elements, so no float copy of the whole
/// product exists either. The two paths differ in the order of the float sums, and AMX
/// reads subnormal bfloat16 values as zero.
constexpr int64_t kWideTile = int64_t(1) << 16;
template <typename S, typename O = float>
void matmulWide(const S *A, const S *B, O *C, int64_t batch, int64_t M, int64_t N,
                int64_t K, bool transA, bool transB) {
#if defined(ORTC_KERN_DNNL)
  if constexpr (std::is_same<S, ortc_bf16>::value)
    if (dnnl_detail::matmulBf16(A, B, C, !std::is_same<O, float>::value, batch, M, N, K,
                                transA, transB))
      return;
#endif
  static thread_local std::vector<float> a, b;
  constexpr bool rounded = !std::is_same<O, float>::value;
  const int64_t na = batch * M * K, nb = batch * K * N;
  a.resize(static_cast<size_t>(na));
  b.resize(static_cast<size_t>(nb));
  float *ap = a.data(), *bp = b.data();
  if (rounded && transA) { // row blocks of op(A) must be contiguous: widen it untransposed
    ORTC_KERN_PARALLEL_FOR(na)
    for (int64_t bm = 0; bm < batch * M; ++bm) {
      const int64_t bt = bm / M, m = bm % M;
      for (int64_t k = 0; k < K; ++k)
        ap[bm * K + k] = ortc_cvt<float>(A[(bt * K + k) * M + m]);
    }
  } else {
    ORTC_KERN_PARALLEL_FOR_SIMD(na)
    for (int64_t i = 0; i < na; ++i)
      ap[i] = ortc_cvt<float>(A[i]);
  }
  ORTC_KERN_PARALLEL_FOR_SIMD(nb)
  for (int64_t i = 0; i < nb; ++i)
    bp[i] = ortc_cvt<float>(B[i]);
  if constexpr (!rounded) {
    matmul(ap, bp, C, batch, M, N, K, transA, transB);
  } else {
    static thread_local std::vector<float> tile;
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(M, kWideTile / std::max<int64_t>(N, 1)));
    tile.resize(static_cast<size_t>(rows * N));
    float *t = tile.data();
    for (int64_t bt = 0; bt < batch; ++bt)
      for (int64_t m0 = 0; m0 < M; m0 += rows) {
        const int64_t r = std::min(rows, M - m0);
        matmul(ap + (bt * M + m0) * K, bp + bt * K * N, t, 1, r, N, K, false, transB);
        O *c = C + (bt * M + m0) * N;
        ORTC_KERN_PARALLEL_FOR_SIMD(r * N)
        for (int64_t i = 0; i < r * N; ++i)
          c[i] = ortc_cvt<O>(t[i]);
      }
  }
}

/// matmul (C overwritten) summed as `acc` says (generated code's call for ortc.accum).
template <typename T>
void matmulAccum(const T *A, const T *B, T *C, int64_t batch, int64_t M, int64_t N,
                 int64_t K, bool transA, bool transB, Accum acc) {
  matmul(A, B, C, batch, M, N, K, transA, transB, false, acc);
}

//===----------------------------------------------------------------------===//
// Layout kernels
//===----------------------------------------------------------------------===//

/// numpy/torch.broadcast_to: out (shape outDims) = in (shape inDims)
/// broadcast. Both shapes have the same rank; inDims[d] is either
/// outDims[d] or 1 (broadcast dimension). rank 0 copies one element.
template <typename T>
void broadcastTo(const T *in, const int64_t *inDims, T *out,
                 const int64_t *outDims, int rank) {
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  std::vector<int64_t> st(rank);
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; --d) {
    st[d] = inDims[d] == 1 ? 0 : acc;
    acc *= inDims[d];
  }
  const int64_t inner = outDims[rank - 1];
  const int64_t rows = detail::product(outDims, rank - 1);
  const bool innerBroadcast = st[rank - 1] == 0;
  ORTC_KERN_PARALLEL_FOR(rows * inner)
  for (int64_t r = 0; r < rows; ++r) {
    const T *src = in + detail::rowOffset(r, outDims, st.data(), rank - 1);
    T *dst = out + r * inner;
    if (innerBroadcast)
      std::fill(dst, dst + inner, src[0]);
    else
      std::copy(src, src + inner, dst);
  }
}

/// Reduction kinds of `reduce`.
enum class ReduceKind { Sum, Mean, Max, Prod };

namespace detail {
/// The accumulator of products: double for floating T (like the sums), int64_t for
/// integers (exact, wrapping like ONNX's reference on overflow).
template <typename T>
using ProdAcc = std::conditional_t<std::is_floating_point<T>::value, double, int64_t>;
} // namespace detail

/// ONNX ReduceSum / ReduceMean / ReduceMax with keepdims=1 (torch.sum /
/// mean / amax with keepdim=True): `in` has shape dims[0..rank); `axes`
/// (nAxes entries, negative values count from the end, duplicates allowed)
/// are reduced; `out` has shape dims with every reduced axis set to 1 (the
/// caller reshapes for keepdims=0). nAxes == 0 reduces nothing (copy).
/// Sum/Mean accumulate in double, Prod in detail::ProdAcc. Max propagates NaN
/// (like torch.amax). Empty reductions give Sum = 0, Mean = NaN, Max = -inf,
/// Prod = 1.
/// `acc` (Sum and Mean): a 16-bit kind adds each output's terms in row-major order
/// of the reduced axes as Accum says.
template <typename T>
void reduce(const T *in, const int64_t *dims, int rank, const int64_t *axes,
            int nAxes, T *out, ReduceKind kind, Accum acc = Accum()) {
  std::vector<char> isRed(rank > 0 ? rank : 1, 0);
  for (int i = 0; i < nAxes; ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a >= 0 && a < rank)
      isRed[a] = 1;
  }
  int64_t outCount = 1, redCount = 1;
  for (int d = 0; d < rank; ++d)
    (isRed[d] ? redCount : outCount) *= dims[d];
  if (outCount == 0)
    return;
  if (redCount == 0) {
    T v = kind == ReduceKind::Sum    ? T(0)
          : kind == ReduceKind::Prod ? T(1)
          : kind == ReduceKind::Mean ? std::numeric_limits<T>::quiet_NaN()
                                     : detail::maxIdentity<T>();
    std::fill(out, out + outCount, v);
    return;
  }
  if (acc.kind != Accum::Float &&
      (kind == ReduceKind::Sum || kind == ReduceKind::Mean)) {
    std::vector<int64_t> st = detail::stridesOf(dims, rank), kDims, kStr, rDims, rStr;
    for (int d = 0; d < rank; ++d) {
      (isRed[d] ? rDims : kDims).push_back(dims[d]);
      (isRed[d] ? rStr : kStr).push_back(st[d]);
    }
    const int nk = static_cast<int>(kDims.size()), nr = static_cast<int>(rDims.size());
    std::vector<T> terms(static_cast<size_t>(redCount));
    for (int64_t o = 0; o < outCount; ++o) {
      const T *base = in + detail::rowOffset(o, kDims.data(), kStr.data(), nk);
      for (int64_t j = 0; j < redCount; ++j)
        terms[j] = base[detail::rowOffset(j, rDims.data(), rStr.data(), nr)];
      T s = sumAccum(terms.data(), redCount, acc);
      out[o] = kind == ReduceKind::Mean ? static_cast<T>(s / static_cast<T>(redCount)) : s;
    }
    return;
  }
  // Canonicalise: drop size-1 dims, merge runs of kept / reduced dims.
  std::vector<int64_t> sz;
  std::vector<char> rd;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1)
      continue;
    if (!sz.empty() && rd.back() == isRed[d])
      sz.back() *= dims[d];
    else {
      sz.push_back(dims[d]);
      rd.push_back(isRed[d]);
    }
  }
  const int m = static_cast<int>(sz.size());
  if (m == 0 || redCount == 1) {
    std::copy(in, in + outCount, out);
    return;
  }
  std::vector<int64_t> st = detail::stridesOf(sz.data(), m);
  const int64_t L = sz[m - 1];
  const bool lastRed = rd[m - 1] != 0;
  // Outer kept / reduced dims (excluding the innermost merged dim).
  std::vector<int64_t> kDims, kStr, rDims, rStr;
  for (int k = 0; k < m - 1; ++k) {
    (rd[k] ? rDims : kDims).push_back(sz[k]);
    (rd[k] ? rStr : kStr).push_back(st[k]);
  }
  const int64_t R = detail::product(rDims.data(), (int)rDims.size());
  std::vector<int64_t> redOff(R);
  for (int64_t j = 0; j < R; ++j)
    redOff[j] =
        detail::rowOffset(j, rDims.data(), rStr.data(), (int)rDims.size());
  const double invCount = 1.0 / static_cast<double>(redCount);
  const int nk = static_cast<int>(kDims.size());
  if (lastRed) {
    const int64_t nOut = outCount;
    ORTC_KERN_PARALLEL_FOR(nOut * R * L)
    for (int64_t o = 0; o < nOut; ++o) {
      const T *base = in + detail::rowOffset(o, kDims.data(), kStr.data(), nk);
      if (kind == ReduceKind::Max) {
        T mx = detail::maxIdentity<T>();
        for (int64_t j = 0; j < R; ++j) {
          const T *p = base + redOff[j];
          for (int64_t l = 0; l < L; ++l)
            if (p[l] > mx || detail::isNaNBits(p[l]))
              mx = p[l];
        }
        out[o] = mx;
      } else if (kind == ReduceKind::Prod) {
        detail::ProdAcc<T> pr = 1;
        for (int64_t j = 0; j < R; ++j) {
          const T *p = base + redOff[j];
          for (int64_t l = 0; l < L; ++l)
            pr *= static_cast<detail::ProdAcc<T>>(p[l]);
        }
        out[o] = static_cast<T>(pr);
      } else {
        double s = 0;
        for (int64_t j = 0; j < R; ++j) {
          const T *p = base + redOff[j];
          s += detail::runSum(L, [&](int64_t l) { return static_cast<double>(p[l]); });
        }
        out[o] = static_cast<T>(kind == ReduceKind::Mean ? s * invCount : s);
      }
    }
    return;
  }
  // Innermost dim kept: accumulate blocks of it across the reduced offsets.
  constexpr int64_t kBlock = 256;
  const int64_t rows = outCount / L;
  const int64_t nBlocks = (L + kBlock - 1) / kBlock;
  const int64_t tasks = rows * nBlocks;
  ORTC_KERN_PARALLEL_FOR(rows * R * L)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t row = t / nBlocks, blk = t % nBlocks;
    const int64_t l0 = blk * kBlock, l1 = std::min(L, l0 + kBlock);
    const T *base =
        in + detail::rowOffset(row, kDims.data(), kStr.data(), nk) + l0;
    T *dst = out + row * L + l0;
    const int64_t n = l1 - l0;
    if (kind == ReduceKind::Max) {
      for (int64_t l = 0; l < n; ++l)
        dst[l] = detail::maxIdentity<T>();
      for (int64_t j = 0; j < R; ++j) {
        const T *p = base + redOff[j];
        for (int64_t l = 0; l < n; ++l)
          if (p[l] > dst[l] || detail::isNaNBits(p[l]))
            dst[l] = p[l];
      }
    } else if (kind == ReduceKind::Prod) {
      detail::ProdAcc<T> acc[kBlock];
      for (int64_t l = 0; l < n; ++l)
        acc[l] = 1;
      for (int64_t j = 0; j < R; ++j) {
        const T *p = base + redOff[j];
        for (int64_t l = 0; l < n; ++l)
          acc[l] *= static_cast<detail::ProdAcc<T>>(p[l]);
      }
      for (int64_t l = 0; l < n; ++l)
        dst[l] = static_cast<T>(acc[l]);
    } else {
      double acc[kBlock];
      for (int64_t l = 0; l < n; ++l)
        acc[l] = 0;
      for (int64_t j = 0; j < R; ++j) {
        const T *p = base + redOff[j];
        ORTC_KERN_SIMD
        for (int64_t l = 0; l < n; ++l)
          acc[l] += static_cast<double>(p[l]);
      }
      for (int64_t l = 0; l < n; ++l)
        dst[l] = static_cast<T>(kind == ReduceKind::Mean ? acc[l] * invCount
                                                         : acc[l]);
    }
  }
}

/// ONNX Transpose / torch.permute(...).contiguous(): out has dims
/// outDims[i] = dims[perm[i]] and out[c_0..c_{r-1}] = in[x] with
/// x[perm[i]] = c_i.
template <typename T>
void transpose(const T *in, const int64_t *dims, int rank, const int64_t *perm,
               T *out) {
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  std::vector<int64_t> inSt = detail::stridesOf(dims, rank);
  std::vector<int64_t> oDims(rank), src(rank);
  for (int i = 0; i < rank; ++i) {
    oDims[i] = dims[perm[i]];
    src[i] = inSt[perm[i]];
  }
  const int64_t inner = oDims[rank - 1];
  const int64_t rows = detail::product(oDims.data(), rank - 1);
  const int64_t is = src[rank - 1];
  ORTC_KERN_PARALLEL_FOR(rows * inner)
  for (int64_t r = 0; r < rows; ++r) {
    const T *s = in + detail::rowOffset(r, oDims.data(), src.data(), rank - 1);
    T *d = out + r * inner;
    if (is == 1)
      std::copy(s, s + inner, d);
    else
      for (int64_t i = 0; i < inner; ++i)
        d[i] = s[i * is];
  }
}

/// ONNX Concat / torch.cat along one axis. Input i is viewed as
/// [outer, axisSizes[i], inner] (inner = product of the dims after the axis);
/// out is [outer, sum(axisSizes), inner].
template <typename T>
void concat(const T *const *ins, const int64_t *axisSizes, int nIn,
            int64_t outer, int64_t inner, T *out) {
  int64_t total = 0;
  for (int i = 0; i < nIn; ++i)
    total += axisSizes[i];
  const int64_t outRow = total * inner;
  ORTC_KERN_PARALLEL_FOR(outer * outRow)
  for (int64_t o = 0; o < outer; ++o) {
    T *dst = out + o * outRow;
    for (int i = 0; i < nIn; ++i) {
      const int64_t n = axisSizes[i] * inner;
      std::copy(ins[i] + o * n, ins[i] + o * n + n, dst);
      dst += n;
    }
  }
}

/// ONNX Split / torch.split along one axis (inverse of concat, also its
/// gradient): `in` is [outer, sum(axisSizes), inner]; output i is
/// [outer, axisSizes[i], inner].
template <typename T>
void split(const T *in, const int64_t *axisSizes, int nOut, int64_t outer,
           int64_t inner, T *const *outs) {
  int64_t total = 0;
  for (int i = 0; i < nOut; ++i)
    total += axisSizes[i];
  const int64_t inRow = total * inner;
  ORTC_KERN_PARALLEL_FOR(outer * inRow)
  for (int64_t o = 0; o < outer; ++o) {
    const T *src = in + o * inRow;
    for (int i = 0; i < nOut; ++i) {
      const int64_t n = axisSizes[i] * inner;
      std::copy(src, src + n, outs[i] + o * n);
      src += n;
    }
  }
}

/// ONNX Slice (after normalisation): out[c] = in[starts + c * steps] per
/// dimension, for c in [0, outDims). starts are already clamped to valid
/// positions; steps are non-zero and may be negative. Every dimension is
/// described (use start 0, step 1, outDim = inDim for untouched axes).
template <typename T>
void slice(const T *in, const int64_t *inDims, int rank, const int64_t *starts,
           const int64_t *steps, T *out, const int64_t *outDims) {
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  std::vector<int64_t> st = detail::stridesOf(inDims, rank);
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) {
    base += starts[d] * st[d];
    st[d] *= steps[d];
  }
  const int64_t inner = outDims[rank - 1];
  const int64_t rows = detail::product(outDims, rank - 1);
  const int64_t is = st[rank - 1];
  ORTC_KERN_PARALLEL_FOR(rows * inner)
  for (int64_t r = 0; r < rows; ++r) {
    const T *s = in + base + detail::rowOffset(r, outDims, st.data(), rank - 1);
    T *d = out + r * inner;
    for (int64_t i = 0; i < inner; ++i)
      d[i] = s[i * is];
  }
}

/// Gradient of `slice`: dx (shape inDims) is zero-filled, then
/// dx[starts + c * steps] = dy[c] for every c in [0, outDims) (the sliced
/// positions are distinct, so this is also the scatter-add).
template <typename T>
void sliceGrad(const T *dy, const int64_t *outDims, int rank,
               const int64_t *starts, const int64_t *steps, T *dx,
               const int64_t *inDims) {
  const int64_t inCount = detail::product(inDims, rank);
  std::fill(dx, dx + inCount, T(0));
  if (rank == 0) {
    dx[0] = dy[0];
    return;
  }
  std::vector<int64_t> st = detail::stridesOf(inDims, rank);
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) {
    base += starts[d] * st[d];
    st[d] *= steps[d];
  }
  const int64_t inner = outDims[rank - 1];
  const int64_t rows = detail::product(outDims, rank - 1);
  const int64_t is = st[rank - 1];
  ORTC_KERN_PARALLEL_FOR(rows * inner)
  for (int64_t r = 0; r < rows; ++r) {
    T *d = dx + base + detail::rowOffset(r, outDims, st.data(), rank - 1);
    const T *s = dy + r * inner;
    for (int64_t i = 0; i < inner; ++i)
      d[i * is] = s[i];
  }
}

/// ONNX Pad mode="constant" / torch.nn.functional.pad(value=...): out
/// (shape outDims) holds in shifted by padsBegin along every dim, i.e.
/// out[c] = in[c - padsBegin] where that is inside `in`, else `value`.
/// Negative pads crop. outDims = inDims + padsBegin + padsEnd.
template <typename T>
void pad(const T *in, const int64_t *inDims, int rank, const int64_t *padsBegin,
         NoDeduce<T> value, T *out, const int64_t *outDims) {
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  std::vector<int64_t> st = detail::stridesOf(inDims, rank);
  const int64_t inner = outDims[rank - 1];
  const int64_t rows = detail::product(outDims, rank - 1);
  const int64_t pb = padsBegin[rank - 1];
  int64_t lo, hi;
  detail::validRange(inner, 1, -pb, inDims[rank - 1], lo, hi);
  ORTC_KERN_PARALLEL_FOR(rows * inner)
  for (int64_t r = 0; r < rows; ++r) {
    T *d = out + r * inner;
    int64_t rem = r, off = 0;
    bool inside = true;
    for (int k = rank - 2; k >= 0; --k) {
      const int64_t c = rem % outDims[k] - padsBegin[k];
      rem /= outDims[k];
      if (c < 0 || c >= inDims[k]) {
        inside = false;
        break;
      }
      off += c * st[k];
    }
    if (!inside) {
      std::fill(d, d + inner, value);
      continue;
    }
    const T *s = in + off;
    for (int64_t i = 0; i < lo; ++i)
      d[i] = value;
    for (int64_t i = lo; i < hi; ++i)
      d[i] = s[i - pb];
    for (int64_t i = hi; i < inner; ++i)
      d[i] = value;
  }
}

/// ONNX Gather / torch.index_select along `axis` (negative counts from the
/// end) with a flattened index tensor of nIdx entries: data is viewed as
/// [outer, dims[axis], inner] and out as [outer, nIdx, inner] with
/// out[o, j, i] = data[o, idx[j], i]. Negative indices wrap once (idx +
/// dims[axis]). Returns false, writing nothing, if an index is outside
/// [-dims[axis], dims[axis]).
template <typename T>
bool gather(const T *data, const int64_t *dims, int rank, int axis,
            const int64_t *idx, int64_t nIdx, T *out) {
  if (axis < 0)
    axis += rank;
  const int64_t outer = detail::product(dims, axis);
  const int64_t A = dims[axis];
  const int64_t inner = detail::product(dims + axis + 1, rank - axis - 1);
  for (int64_t j = 0; j < nIdx; ++j)
    if (idx[j] < -A || idx[j] >= A)
      return false;
  const int64_t rows = outer * nIdx;
  ORTC_KERN_PARALLEL_FOR(rows * inner)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r / nIdx, j = r % nIdx;
    const int64_t k = idx[j] < 0 ? idx[j] + A : idx[j];
    const T *s = data + (o * A + k) * inner;
    std::copy(s, s + inner, out + r * inner);
  }
  return true;
}

/// Gradient of `gather` w.r.t. data: dx (shape dataDims) is zero-filled,
/// then dx[o, idx[j], i] += dy[o, j, i]; repeated indices accumulate (in
/// increasing j, independent of the thread count; no races). Returns false,
/// writing nothing, on an out-of-range index.
template <typename T>
bool gatherGrad(const T *dy, const int64_t *dataDims, int rank, int axis,
                const int64_t *idx, int64_t nIdx, T *dx) {
  if (axis < 0)
    axis += rank;
  const int64_t outer = detail::product(dataDims, axis);
  const int64_t A = dataDims[axis];
  const int64_t inner = detail::product(dataDims + axis + 1, rank - axis - 1);
  for (int64_t j = 0; j < nIdx; ++j)
    if (idx[j] < -A || idx[j] >= A)
      return false;
  std::fill(dx, dx + outer * A * inner, T(0));
  // Tasks own disjoint column blocks of one outer slice of dx.
  constexpr int64_t kBlock = 64;
  const int64_t nBlocks = (inner + kBlock - 1) / kBlock;
  const int64_t tasks = outer * nBlocks;
  ORTC_KERN_PARALLEL_FOR(outer * nIdx * inner)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / nBlocks, blk = t % nBlocks;
    const int64_t i0 = blk * kBlock, i1 = std::min(inner, i0 + kBlock);
    for (int64_t j = 0; j < nIdx; ++j) {
      const int64_t k = idx[j] < 0 ? idx[j] + A : idx[j];
      T *d = dx + (o * A + k) * inner;
      const T *s = dy + (o * nIdx + j) * inner;
      for (int64_t i = i0; i < i1; ++i)
        d[i] += s[i];
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Element-indexed ops with run-time indices (ONNX GatherElements,
// ScatterElements), arg-reductions, top-k and cumulative sums
//
// Each works on lines: the [outer, A, inner] view of a tensor around `axis`
// has outer * inner lines of A elements (stride inner). Lines are independent,
// so they are the parallel unit and every line is processed in a fixed order:
// results (repeated scatter indices included) never depend on the thread count.
//===----------------------------------------------------------------------===//

namespace detail {
/// outer / inner of the [outer, dims[axis], inner] view.
inline void lineView(const int64_t *dims, int rank, int axis, int64_t &outer,
                     int64_t &inner) {
  outer = product(dims, axis);
  inner = product(dims + axis + 1, rank - axis - 1);
}
/// Offset of element `t` of a tensor with dims `idxDims` in a tensor with dims
/// `dataDims` (same rank, each idxDims[d] <= dataDims[d] except on `axis`, whose
/// coordinate is taken as 0).
inline int64_t lineBase(int64_t t, const int64_t *idxDims, const int64_t *dataDims,
                        int rank, int axis) {
  int64_t off = 0, stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t c = t % idxDims[d];
    t /= idxDims[d];
    if (d != axis)
      off += c * stride;
    stride *= dataDims[d];
  }
  return off;
}
/// Whether every index lies in [-A, A).
inline bool indicesInRange(const int64_t *idx, int64_t n, int64_t A) {
  for (int64_t j = 0; j < n; ++j)
    if (idx[j] < -A || idx[j] >= A)
      return false;
  return true;
}
} // namespace detail

/// ONNX GatherElements: out (shape idxDims, same rank as dataDims, each dim no
/// larger than the data's except `axis`) is out[c] = data[c with c[axis] =
/// idx[c]]; negative indices wrap once. Returns false, writing nothing, on an
/// index outside [-dataDims[axis], dataDims[axis]).
template <typename T>
bool gatherElements(const T *data, const int64_t *dataDims, const int64_t *idx,
                    const int64_t *idxDims, int rank, int axis, T *out) {
  const int64_t n = detail::product(idxDims, rank), A = dataDims[axis];
  const int64_t stride = detail::product(dataDims + axis + 1, rank - axis - 1);
  if (!detail::indicesInRange(idx, n, A))
    return false;
  ORTC_KERN_PARALLEL_FOR(n * 4)
  for (int64_t t = 0; t < n; ++t) {
    const int64_t k = idx[t] < 0 ? idx[t] + A : idx[t];
    out[t] = data[detail::lineBase(t, idxDims, dataDims, rank, axis) + k * stride];
  }
  return true;
}

/// ONNX ScatterElements: out = data, then for every element c of `upd` (shape
/// idxDims, as for gatherElements) out[c with c[axis] = idx[c]] is set to
/// upd[c] (reduction 0 = none) or combined with it (1 add, 2 mul, 3 max, 4 min).
/// Updates apply in row-major order (a line at a time, lines in parallel: two
/// updates can only meet within one line), so repeated indices give the same
/// result at every thread count. `out` may alias `data`. Returns false, writing
/// nothing, on an out-of-range index.
template <typename T>
bool scatterElements(const T *data, const int64_t *dataDims, const int64_t *idx,
                     const T *upd, const int64_t *idxDims, int rank, int axis,
                     int reduction, T *out) {
  const int64_t n = detail::product(idxDims, rank), A = dataDims[axis];
  if (!detail::indicesInRange(idx, n, A))
    return false;
  if (out != data)
    std::copy(data, data + detail::product(dataDims, rank), out);
  const int64_t stride = detail::product(dataDims + axis + 1, rank - axis - 1);
  const int64_t Ai = idxDims[axis];
  const int64_t innerI = detail::product(idxDims + axis + 1, rank - axis - 1);
  const int64_t lines = Ai ? n / Ai : 0;
  ORTC_KERN_PARALLEL_FOR(n * 4)
  for (int64_t line = 0; line < lines; ++line) {
    // Element (o, 0, i) of the indices' [outer, Ai, innerI] view starts the line.
    const int64_t first = (line / innerI) * Ai * innerI + line % innerI;
    T *dst = out + detail::lineBase(first, idxDims, dataDims, rank, axis);
    for (int64_t a = 0; a < Ai; ++a) {
      const int64_t t = first + a * innerI;
      const int64_t k = idx[t] < 0 ? idx[t] + A : idx[t];
      T &d = dst[k * stride];
      const T u = upd[t];
      switch (reduction) {
      case 1: d = d + u; break;
      case 2: d = d * u; break;
      case 3: d = std::max(d, u); break;
      case 4: d = std::min(d, u); break;
      default: d = u;
      }
    }
  }
  return true;
}

/// ONNX ArgMax / ArgMin over the middle dim of [outer, A, inner]: out[o, i] is
/// the index of the largest (smallest if isMin) element of the line; ties go to
/// the first index, or the last with selectLast; a NaN wins (numpy's rule).
template <typename T>
void argReduce(const T *x, int64_t outer, int64_t A, int64_t inner, bool isMin,
               bool selectLast, int64_t *out) {
  const int64_t lines = outer * inner;
  ORTC_KERN_PARALLEL_FOR(lines * A)
  for (int64_t line = 0; line < lines; ++line) {
    const T *p = x + (line / inner) * A * inner + line % inner;
    int64_t best = 0;
    for (int64_t a = 1; a < A; ++a) {
      const T v = p[a * inner], b = p[best * inner];
      if (b != b) // a NaN already won
        break;
      const bool better = v != v || (isMin ? v < b : v > b) || (selectLast && v == b);
      if (better)
        best = a;
    }
    out[line] = best;
  }
}

namespace detail {
/// The order of TopK: strictly larger (smaller) first, then the lower index.
template <typename T>
inline bool topKBefore(T a, int64_t ia, T b, int64_t ib, bool largest) {
  if (a == b)
    return ia < ib;
  return largest ? a > b : a < b;
}
} // namespace detail

/// ONNX TopK over the middle dim of [outer, A, inner]: values/indices
/// [outer, k, inner] hold the k largest (smallest) elements of each line,
/// sorted, equal values by increasing index. (NaNs are not ordered.)
template <typename T>
void topK(const T *x, int64_t outer, int64_t A, int64_t inner, int64_t k,
          bool largest, T *values, int64_t *indices) {
  const int64_t lines = outer * inner;
  ORTC_KERN_PARALLEL_FOR(lines * A * 4)
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t o = line / inner, i = line % inner;
    const T *p = x + o * A * inner + i;
    std::vector<int64_t> order(A);
    for (int64_t a = 0; a < A; ++a)
      order[a] = a;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t l, int64_t r) {
                        return detail::topKBefore(p[l * inner], l, p[r * inner], r,
                                                  largest);
                      });
    for (int64_t j = 0; j < k; ++j) {
      values[(o * k + j) * inner + i] = p[order[j] * inner];
      indices[(o * k + j) * inner + i] = order[j];
    }
  }
}

/// ONNX CumSum over the middle dim of [outer, A, inner] (exclusive: without
/// the element itself; reverse: from the end). Floats accumulate in double.
template <typename T>
void cumsum(const T *x, int64_t outer, int64_t A, int64_t inner, bool exclusive,
            bool reverse, T *y) {
  using Acc = std::conditional_t<std::is_floating_point<T>::value, double, int64_t>;
  const int64_t lines = outer * inner;
  ORTC_KERN_PARALLEL_FOR(lines * A)
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t base = (line / inner) * A * inner + line % inner;
    Acc acc = 0;
    for (int64_t s = 0; s < A; ++s) {
      const int64_t at = base + (reverse ? A - 1 - s : s) * inner;
      const Acc v = static_cast<Acc>(x[at]);
      y[at] = static_cast<T>(exclusive ? acc : acc + v);
      acc += v;
    }
  }
}

/// Gradient of a product over rows: dx[r, j] = dy[r] * prod_{k != j} x[r, k]
/// for x [rows, n], as prefix times suffix products (accumulated in double,
/// the prefixes rounded to T once), so it is right where x has zeros (prod / x
/// is not).
template <typename T>
void reduceProdGrad(const T *x, const T *dy, T *dx, int64_t rows, int64_t n) {
  ORTC_KERN_PARALLEL_FOR(rows * n * 3)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * n;
    T *dr = dx + r * n;
    double prefix = 1;
    for (int64_t j = 0; j < n; ++j) { // dx holds the prefix products for now
      dr[j] = static_cast<T>(prefix);
      prefix *= static_cast<double>(xr[j]);
    }
    double suffix = static_cast<double>(dy[r]);
    for (int64_t j = n - 1; j >= 0; --j) {
      dr[j] = static_cast<T>(static_cast<double>(dr[j]) * suffix);
      suffix *= static_cast<double>(xr[j]);
    }
  }
}

/// ONNX Mod on integers (kernels/common/ortc_scalar.h).
using scalar::imod;

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

/// Geometry of an N-d convolution (nSpatial = 1, 2 or 3; only the first
/// nSpatial entries of the arrays are read). x is [N, C, in...], w is
/// [M, C / group, kernel...], y is [N, M, out...]. Output position o of a
/// spatial dim reads input o * stride - padBegin + k * dilation; taps
/// outside [0, in) read zero (so end padding, including "ceil-mode" style
/// extra outputs, is implied by `out`).
struct ConvGeom {
  int nSpatial;
  int64_t N, C, M /*out channels*/, group;
  int64_t in[3], kernel[3], out[3], stride[3], padBegin[3], dilation[3];
  Accum accum; ///< how the GEMMs sum (16-bit kinds: the im2col templates, not oneDNN)
};

namespace detail {
/// What every convolution pass derives from its geometry: the spatial view, the
/// group count, channels per group in and out, the GEMM depth Kd = Cg * kernel
/// size and the output positions per image P.
struct ConvShape {
  Spatial3 s;
  int64_t G, Cg, Mg, Kd, P;
};
inline ConvShape convShape(const ConvGeom &geom) {
  Spatial3 s = toSpatial3(geom.nSpatial, geom.in, geom.kernel, geom.out, geom.stride,
                          geom.padBegin, geom.dilation);
  int64_t G = geom.group, Cg = geom.C / G;
  return {s, G, Cg, geom.M / G, Cg * s.kSize, s.outSize};
}
} // namespace detail

template <typename T>
void convForwardBatched(const T *x, const T *w, const NoDeduce<T> *bias, T *y,
                        const ConvGeom &geom);
template <typename T>
void convGradInputBatched(const T *dy, const T *w, T *dx, const ConvGeom &geom);
template <typename T>
void convGradWeightBatched(const T *dy, const T *x, T *dw, const ConvGeom &geom);

/// ONNX Conv / torch.nn.functional.conv{1,2,3}d (cross-correlation) with
/// groups: y[n, m, o] = bias[m] + sum_{c in group(m), k} w[m, c, k] *
/// x[n, c, o * stride - padBegin + k * dilation]. bias may be null.
/// Implemented as im2col + GEMM per image and group.
template <typename T>
void convForward(const T *x, const T *w, const NoDeduce<T> *bias, T *y,
                 const ConvGeom &geom) {
  if (geom.accum.kind != Accum::Float) // one GEMM whose sums run over the whole batch
    return convForwardBatched<T>(x, w, bias, y, geom);
  const auto [s, G, Cg, Mg, Kd, P] = detail::convShape(geom);
  const bool direct = detail::isPointwise(s);
  std::vector<T> col(direct ? 0 : static_cast<size_t>(Kd * P));
  for (int64_t n = 0; n < geom.N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const T *xg = x + (n * geom.C + g * Cg) * s.inSize;
      const T *cp = xg;
      if (!direct) {
        detail::im2col(xg, Cg, s, col.data());
        cp = col.data();
      }
      gemm(geom.accum, false, false, Mg, P, Kd, T(1), w + g * Mg * Kd, Kd, cp, P, T(0),
           y + (n * geom.M + g * Mg) * P, P);
    }
  }
  if (bias) {
    const int64_t planes = geom.N * geom.M;
    ORTC_KERN_PARALLEL_FOR(planes * P)
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T b = bias[pl % geom.M];
      T *yp = y + pl * P;
      for (int64_t i = 0; i < P; ++i)
        yp[i] += b;
    }
  }
}

/// Gradient of convForward w.r.t. x (torch.nn.grad.conv*d_input): dx =
/// conv_transpose(dy, w) with the same geometry; dx is fully overwritten
/// (input positions no window reads get 0).
template <typename T>
void convGradInput(const T *dy, const T *w, T *dx, const ConvGeom &geom) {
  if (geom.accum.kind != Accum::Float)
    return convGradInputBatched<T>(dy, w, dx, geom);
  const auto [s, G, Cg, Mg, Kd, P] = detail::convShape(geom);
  const bool direct = detail::isPointwise(s);
  if (!direct)
    std::fill(dx, dx + geom.N * geom.C * s.inSize, T(0));
  std::vector<T> col(direct ? 0 : static_cast<size_t>(Kd * P));
  for (int64_t n = 0; n < geom.N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const T *dyg = dy + (n * geom.M + g * Mg) * P;
      T *dxg = dx + (n * geom.C + g * Cg) * s.inSize;
      const T *wg = w + g * Mg * Kd;
      if (direct) {
        gemm(geom.accum, true, false, Kd, P, Mg, T(1), wg, Kd, dyg, P, T(0), dxg, P);
      } else {
        gemm(geom.accum, true, false, Kd, P, Mg, T(1), wg, Kd, dyg, P, T(0), col.data(), P);
        detail::col2imAdd(col.data(), Cg, s, dxg);
      }
    }
  }
}

/// Gradient of convForward w.r.t. w (torch.nn.grad.conv*d_weight):
/// dw[m, c, k] = sum_{n, o} dy[n, m, o] * x[n, c, o * stride - padBegin +
/// k * dilation]; dw is fully overwritten. The bias gradient (sum of dy over
/// N and spatial dims) is left to the caller (`reduce`).
template <typename T>
void convGradWeight(const T *dy, const T *x, T *dw, const ConvGeom &geom) {
  if (geom.accum.kind != Accum::Float) // dW's sums over N*P in one GEMM
    return convGradWeightBatched<T>(dy, x, dw, geom);
  const auto [s, G, Cg, Mg, Kd, P] = detail::convShape(geom);
  const bool direct = detail::isPointwise(s);
  if (geom.N == 0 || P == 0) {
    std::fill(dw, dw + geom.M * Kd, T(0));
    return;
  }
  std::vector<T> col(direct ? 0 : static_cast<size_t>(Kd * P));
  for (int64_t n = 0; n < geom.N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const T *xg = x + (n * geom.C + g * Cg) * s.inSize;
      const T *cp = xg;
      if (!direct) {
        detail::im2col(xg, Cg, s, col.data());
        cp = col.data();
      }
      gemm(geom.accum, false, true, Mg, Kd, P, T(1), dy + (n * geom.M + g * Mg) * P, P, cp,
           P, n == 0 ? T(0) : T(1), dw + g * Mg * Kd, Kd);
    }
  }
}

//===----------------------------------------------------------------------===//
// Convolution over the whole batch at once (small feature maps)
//===----------------------------------------------------------------------===//
//
// The per-image forms above (and oneDNN's direct kernels, measured) starve on
// small feature maps: on ResNet-18's 512-channel layers at 64x64 input a 2x2
// map makes the per-image GEMM dimension P = 4, and oneDNN's backward-weights
// ran at 11 GFLOP/s without scaling with threads. Here every image's columns
// sit side by side ([Kd, N*P]) and each pass is one GEMM per group whose
// dimension is N*P: forward y = W cols, backward-data dcols = W^T dY,
// backward-weights dW = dY cols^T. The buffers are [Kd, N*P] and [Mg, N*P],
// so this serves small feature maps (see kBatchedConvMaxNP).

namespace detail {
/// Columns of every image of group g side by side: cols[k, n * P + p]
/// (images split among the pool's threads).
template <typename T>
void im2colBatch(const T *x, const ConvGeom &geom, const Spatial3 &s, int64_t g, T *cols) {
  const int64_t Cg = geom.C / geom.group, P = s.outSize, NP = geom.N * P;
  ORTC_KERN_PARALLEL_FOR(geom.N * Cg * s.kSize * P)
  for (int64_t n = 0; n < geom.N; ++n)
    im2col(x + (n * geom.C + g * Cg) * s.inSize, Cg, s, cols + n * P, NP);
}

/// Channels [off, off + rows) of an [N, M, P] tensor as [rows, N * P], or back
/// (`toBatch` false).
template <typename T>
void batchLayout(T *nmp, T *batch, int64_t N, int64_t M, int64_t off, int64_t rows, int64_t P,
                 bool toBatch) {
  ORTC_KERN_PARALLEL_FOR(N * rows * P)
  for (int64_t nm = 0; nm < N * rows; ++nm) {
    const int64_t n = nm / rows, m = nm % rows;
    T *a = nmp + (n * M + off + m) * P, *b = batch + m * N * P + n * P;
    if (toBatch)
      std::copy(a, a + P, b);
    else
      std::copy(b, b + P, a);
  }
}

} // namespace detail

/// Feature maps of at most this many positions over the batch (N * out size)
/// use the batched forms: measured on ResNet-18 (AMD EPYC, 1 and 2 threads),
/// they beat oneDNN's direct kernels up to N*P = 64 and lose from N*P = 512.
constexpr int64_t kBatchedConvMaxNP = 64;

template <typename T>
void convForwardBatched(const T *x, const T *w, const NoDeduce<T> *bias, T *y,
                        const ConvGeom &geom) {
  const auto [s, G, Cg, Mg, Kd, P] = detail::convShape(geom);
  const int64_t NP = geom.N * P;
  auto cols = detail::scratch<T>(Kd * NP), ys = detail::scratch<T>(Mg * NP);
  for (int64_t g = 0; g < G && NP; ++g) {
    detail::im2colBatch(x, geom, s, g, cols.get());
    gemm(geom.accum, false, false, Mg, NP, Kd, T(1), w + g * Mg * Kd, Kd, cols.get(), NP, T(0),
         ys.get(), NP);
    detail::batchLayout(y, ys.get(), geom.N, geom.M, g * Mg, Mg, P, false);
  }
  if (bias)
    for (int64_t pl = 0; pl < geom.N * geom.M; ++pl)
      for (int64_t i = 0; i < P; ++i)
        y[pl * P + i] += bias[pl % geom.M];
}

template <typename T>
void convGradInputBatched(const T *dy, const T *w, T *dx, const ConvGeom &geom) {
  const auto [s, G, Cg, Mg, Kd, P] = detail::convShape(geom);
  const int64_t NP = geom.N * P;
  detail::zeroFill(dx, geom.N * geom.C * s.inSize);
  auto cols = detail::scratch<T>(Kd * NP), dys = detail::scratch<T>(Mg * NP);
  for (int64_t g = 0; g < G && NP; ++g) {
    detail::batchLayout(const_cast<T *>(dy), dys.get(), geom.N, geom.M, g * Mg, Mg, P, true);
    gemm(geom.accum, true, false, Kd, NP, Mg, T(1), w + g * Mg * Kd, Kd, dys.get(), NP, T(0),
         cols.get(), NP);
    ORTC_KERN_PARALLEL_FOR(geom.N * Kd * P)
    for (int64_t n = 0; n < geom.N; ++n)
      detail::col2imAdd(cols.get() + n * P, Cg, s, dx + (n * geom.C + g * Cg) * s.inSize, NP);
  }
}

template <typename T>
void convGradWeightBatched(const T *dy, const T *x, T *dw, const ConvGeom &geom) {
  const auto [s, G, Cg, Mg, Kd, P] = detail::convShape(geom);
  const int64_t NP = geom.N * P;
  if (NP == 0) {
    std::fill(dw, dw + geom.M * Kd, T(0));
    return;
  }
  auto cols = detail::scratch<T>(Kd * NP), dys = detail::scratch<T>(Mg * NP);
  for (int64_t g = 0; g < G; ++g) {
    detail::im2colBatch(x, geom, s, g, cols.get());
    detail::batchLayout(const_cast<T *>(dy), dys.get(), geom.N, geom.M, g * Mg, Mg, P, true);
    gemm(geom.accum, false, true, Mg, Kd, NP, T(1), dys.get(), NP, cols.get(), NP, T(0),
         dw + g * Mg * Kd, Kd);
  }
}

/// Whether a convolution's feature map is small enough for the batched forms.
inline bool useBatchedConv(const ConvGeom &geom) {
  int64_t outSize = 1;
  for (int i = 0; i < geom.nSpatial; ++i)
    outSize *= geom.out[i];
  return geom.N * outSize <= kBatchedConvMaxNP;
}

#if defined(ORTC_KERN_DNNL)
//===----------------------------------------------------------------------===//
// Convolution through oneDNN (generated code, float)
//===----------------------------------------------------------------------===//
//
// Each distinct (pass, geometry, bias) gets one plan: the primitive, created
// with oneDNN's preferred ("any") layouts, and the reorders between ortc's
// plain NCHW/OIHW tensors and those layouts (blocked layouts run the direct
// JIT kernels, 1.3-2x faster than oneDNN's own im2col + GEMM on plain ones).
// Plans are made at the first step and kept for the life of the process, so
// descriptors are created once per artifact load. A geometry oneDNN refuses
// falls back to the im2col + GEMM templates above.

namespace dnnl_detail {

enum class ConvPass { Forward, BackwardData, BackwardWeights };

inline dnnl_engine_t engine() {
  static dnnl_engine_t e = [] {
    dnnl_engine_t created = nullptr;
    if (dnnl_engine_create(&created, dnnl_cpu, 0) != dnnl_success)
      created = nullptr;
    return created;
  }();
  return e;
}

/// One stream per calling thread (streams are not shared between threads).
inline dnnl_stream_t stream() {
  struct Holder {
    dnnl_stream_t s = nullptr;
    ~Holder() {
      if (s)
        dnnl_stream_destroy(s);
    }
  };
  thread_local Holder h;
  if (!h.s && engine())
    dnnl_stream_create(&h.s, engine(), dnnl_stream_default_flags);
  return h.s;
}

/// A tensor argument: ortc's plain layout (`user`, bound to the caller's
/// pointer at each call) and, when the primitive wants another layout, a
/// buffer in that layout plus the reorder into or out of it.
struct Arg {
  int dnnlArg = 0;
  bool isOutput = false;
  dnnl_memory_t user = nullptr, packed = nullptr;
  dnnl_primitive_t reorder = nullptr;
  ~Arg() {
    if (reorder)
      dnnl_primitive_destroy(reorder);
    if (packed)
      dnnl_memory_destroy(packed);
    if (user)
      dnnl_memory_destroy(user);
  }
};

/// One primitive of one geometry (a convolution pass, a bf16 matmul) with its
/// arguments: made at the first call and kept for the life of the process.
struct Plan {
  bool ok = false;
  dnnl_primitive_t prim = nullptr;
  Arg args[4];
  int nArgs = 0;
  ~Plan() {
    if (prim)
      dnnl_primitive_destroy(prim);
  }
};

/// Plain memory descriptor of an activation ([N, C, spatial...]) or weight
/// ([M, C/G, k...], seen as [G, M/G, C/G, k...] when grouped).
inline bool plainDesc(dnnl_memory_desc_t &md, int nSpatial, const int64_t *lead,
                      int nLead, const int64_t *spatial) {
  dnnl_dims_t dims;
  int nd = 0;
  for (int i = 0; i < nLead; ++i)
    dims[nd++] = lead[i];
  for (int i = 0; i < nSpatial; ++i)
    dims[nd++] = spatial[i];
  static const dnnl_format_tag_t tags[] = {
      dnnl_format_tag_undef, dnnl_a,     dnnl_ab,    dnnl_abc,
      dnnl_abcd,             dnnl_abcde, dnnl_abcdef};
  return dnnl_memory_desc_init_by_tag(&md, nd, dims, dnnl_f32, tags[nd]) ==
         dnnl_success;
}

inline bool anyDesc(dnnl_memory_desc_t &md, const dnnl_memory_desc_t &plain) {
  return dnnl_memory_desc_init_by_tag(&md, plain.ndims, plain.dims, dnnl_f32,
                                      dnnl_format_tag_any) == dnnl_success;
}

/// Binds `arg` to the plain descriptor and the layout `want` that the
/// primitive descriptor chose for it.
inline bool bindArg(Arg &arg, int dnnlArg, bool isOutput,
                    const dnnl_memory_desc_t &plain,
                    const dnnl_memory_desc_t *want) {
  arg.dnnlArg = dnnlArg;
  arg.isOutput = isOutput;
  if (dnnl_memory_create(&arg.user, &plain, engine(), DNNL_MEMORY_NONE) !=
      dnnl_success)
    return false;
  if (!want || dnnl_memory_desc_equal(want, &plain))
    return true;
  if (dnnl_memory_create(&arg.packed, want, engine(), DNNL_MEMORY_ALLOCATE) !=
      dnnl_success)
    return false;
  dnnl_primitive_desc_t rpd = nullptr;
  const dnnl_memory_desc_t *from = isOutput ? want : &plain;
  const dnnl_memory_desc_t *to = isOutput ? &plain : want;
  if (dnnl_reorder_primitive_desc_create(&rpd, from, engine(), to, engine(),
                                         nullptr) != dnnl_success)
    return false;
  bool ok = dnnl_primitive_create(&arg.reorder, rpd) == dnnl_success;
  dnnl_primitive_desc_destroy(rpd);
  return ok;
}

/// Builds the plan of one convolution pass; plan.ok stays false when oneDNN
/// cannot run this geometry.
inline void makeConvPlan(Plan &plan, ConvPass pass, const ConvGeom &g,
                         bool hasBias) {
  if (!engine() || g.nSpatial < 1 || g.nSpatial > 3 || g.group <= 0 ||
      g.N <= 0 || g.C <= 0 || g.M <= 0)
    return;
  const int ns = g.nSpatial;
  for (int i = 0; i < ns; ++i)
    if (g.in[i] <= 0 || g.out[i] <= 0 || g.kernel[i] <= 0)
      return;
  dnnl_dims_t strides, dilates, padL, padR;
  for (int i = 0; i < ns; ++i) {
    strides[i] = g.stride[i];
    dilates[i] = g.dilation[i] - 1;
    padL[i] = g.padBegin[i];
    // The end padding that makes oneDNN's output size equal `out`; negative
    // when the last inputs are never read (a strided 1x1 convolution), which
    // oneDNN takes.
    padR[i] = (g.out[i] - 1) * g.stride[i] + (g.kernel[i] - 1) * g.dilation[i] +
              1 - g.in[i] - g.padBegin[i];
  }
  const int64_t xLead[2] = {g.N, g.C}, yLead[2] = {g.N, g.M};
  const int64_t wLead1[2] = {g.M, g.C}, wLeadG[3] = {g.group, g.M / g.group,
                                                     g.C / g.group};
  dnnl_memory_desc_t x, w, y, b, xa, wa, ya;
  if (!plainDesc(x, ns, xLead, 2, g.in) || !plainDesc(y, ns, yLead, 2, g.out) ||
      !(g.group == 1 ? plainDesc(w, ns, wLead1, 2, g.kernel)
                     : plainDesc(w, ns, wLeadG, 3, g.kernel)) ||
      !anyDesc(xa, x) || !anyDesc(wa, w) || !anyDesc(ya, y))
    return;
  const int64_t bLead[1] = {g.M};
  if (!plainDesc(b, 0, bLead, 1, nullptr))
    return;
  dnnl_convolution_desc_t fwdDesc, desc;
  if (dnnl_dilated_convolution_forward_desc_init(
          &fwdDesc, dnnl_forward_training, dnnl_convolution_direct, &xa, &wa,
          hasBias ? &b : nullptr, &ya, strides, dilates, padL,
          padR) != dnnl_success)
    return;
  dnnl_primitive_desc_t fwdPd = nullptr, pd = nullptr;
  if (dnnl_primitive_desc_create(&fwdPd, &fwdDesc, nullptr, engine(),
                                 nullptr) != dnnl_success)
    return;
  dnnl_status_t st = dnnl_success;
  if (pass == ConvPass::Forward) {
    pd = fwdPd;
    fwdPd = nullptr;
  } else {
    st = pass == ConvPass::BackwardData
             ? dnnl_dilated_convolution_backward_data_desc_init(
                   &desc, dnnl_convolution_direct, &xa, &wa, &ya, strides,
                   dilates, padL, padR)
             : dnnl_dilated_convolution_backward_weights_desc_init(
                   &desc, dnnl_convolution_direct, &xa, &wa, nullptr, &ya,
                   strides, dilates, padL, padR);
    if (st == dnnl_success)
      st = dnnl_primitive_desc_create(&pd, &desc, nullptr, engine(), fwdPd);
    dnnl_primitive_desc_destroy(fwdPd);
    if (st != dnnl_success)
      return;
  }
  auto q = [&](dnnl_query_t what) {
    return dnnl_primitive_desc_query_md(pd, what, 0);
  };
  bool ok = true;
  switch (pass) {
  case ConvPass::Forward:
    ok = bindArg(plan.args[0], DNNL_ARG_SRC, false, x, q(dnnl_query_src_md)) &&
         bindArg(plan.args[1], DNNL_ARG_WEIGHTS, false, w,
                 q(dnnl_query_weights_md)) &&
         bindArg(plan.args[2], DNNL_ARG_DST, true, y, q(dnnl_query_dst_md)) &&
         (!hasBias || bindArg(plan.args[3], DNNL_ARG_BIAS, false, b, nullptr));
    plan.nArgs = hasBias ? 4 : 3;
    break;
  case ConvPass::BackwardData:
    ok = bindArg(plan.args[0], DNNL_ARG_DIFF_DST, false, y,
                 q(dnnl_query_diff_dst_md)) &&
         bindArg(plan.args[1], DNNL_ARG_WEIGHTS, false, w,
                 q(dnnl_query_weights_md)) &&
         bindArg(plan.args[2], DNNL_ARG_DIFF_SRC, true, x,
                 q(dnnl_query_diff_src_md));
    plan.nArgs = 3;
    break;
  case ConvPass::BackwardWeights:
    ok = bindArg(plan.args[0], DNNL_ARG_DIFF_DST, false, y,
                 q(dnnl_query_diff_dst_md)) &&
         bindArg(plan.args[1], DNNL_ARG_SRC, false, x, q(dnnl_query_src_md)) &&
         bindArg(plan.args[2], DNNL_ARG_DIFF_WEIGHTS, true, w,
                 q(dnnl_query_diff_weights_md));
    plan.nArgs = 3;
    break;
  }
  ok = ok && dnnl_primitive_create(&plan.prim, pd) == dnnl_success;
  dnnl_primitive_desc_destroy(pd);
  plan.ok = ok;
}

/// Runs the plan in `slot` (made by `make` at the first call) on `ptrs`, which
/// follow the plan's argument order, reordering into and out of the layouts the
/// primitive chose; false when oneDNN cannot (the caller falls back).
template <typename Make>
bool runPlan(std::unique_ptr<Plan> &slot, Make make, void *const *ptrs) {
  if (!slot) {
    slot.reset(new Plan);
    make(*slot);
  }
  Plan *plan = slot.get();
  dnnl_stream_t s = stream();
  if (!plan->ok || !s)
    return false;
  dnnl_exec_arg_t exec[4];
  for (int i = 0; i < plan->nArgs; ++i) {
    Arg &a = plan->args[i];
    dnnl_memory_set_data_handle(a.user, ptrs[i]);
    exec[i].arg = a.dnnlArg;
    exec[i].memory = a.packed ? a.packed : a.user;
    if (a.packed && !a.isOutput) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a.user}, {DNNL_ARG_TO, a.packed}};
      dnnl_primitive_execute(a.reorder, s, 2, r);
    }
  }
  if (dnnl_primitive_execute(plan->prim, s, plan->nArgs, exec) != dnnl_success)
    return false;
  for (int i = 0; i < plan->nArgs; ++i) {
    Arg &a = plan->args[i];
    if (a.packed && a.isOutput) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a.packed}, {DNNL_ARG_TO, a.user}};
      dnnl_primitive_execute(a.reorder, s, 2, r);
    }
  }
  dnnl_stream_wait(s);
  return true;
}

/// Runs one pass of a convolution through its plan; false when oneDNN cannot
/// (the caller falls back). `ptrs` follow the plan's argument order: forward
/// x, w, y, bias; backward-data dy, w, dx; backward-weights dy, x, dw.
#if defined(ORTC_KERN_DECLARE_ONLY)
bool runConv(ConvPass pass, const ConvGeom &g, bool hasBias, void *const *ptrs);
#else
ORTC_KERN_OBJECT_INLINE bool runConv(ConvPass pass, const ConvGeom &g, bool hasBias,
                                     void *const *ptrs) {
  std::vector<int64_t> key = {int64_t(pass), hasBias, g.nSpatial, g.N, g.C,
                              g.M, g.group};
  for (int i = 0; i < g.nSpatial; ++i)
    for (int64_t v : {g.in[i], g.kernel[i], g.out[i], g.stride[i],
                      g.padBegin[i], g.dilation[i]})
      key.push_back(v);
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;
  return runPlan(plans[key], [&](Plan &plan) { makeConvPlan(plan, pass, g, hasBias); }, ptrs);
}
#endif

/// True when oneDNN runs bfloat16 products in hardware on this CPU: AVX-512 BF16
/// (AMX included). DNNL_MAX_CPU_ISA below that level turns the native path off.
inline bool nativeBf16() {
  static const bool native = [] {
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const unsigned want = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & want) == want;
  }();
  return native;
}

/// The plan of a matmul on plain strided descriptors a x b -> c (no reorders), with
/// `attr` (null: none), when oneDNN's implementation passes `accept(impl)`.
template <typename Accept>
inline void makeMatmulPlan(Plan &plan, const dnnl_memory_desc_t &a, const dnnl_memory_desc_t &b,
                           const dnnl_memory_desc_t &c, const_dnnl_primitive_attr_t attr,
                           Accept accept) {
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = nullptr;
  if (dnnl_matmul_desc_init(&desc, &a, &b, nullptr, &c) != dnnl_success ||
      dnnl_primitive_desc_create(&pd, &desc, attr, engine(), nullptr) != dnnl_success)
    return;
  const char *impl = nullptr;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  bool ok = impl && accept(impl) && dnnl_primitive_create(&plan.prim, pd) == dnnl_success;
  dnnl_primitive_desc_destroy(pd);
  plan.nArgs = 3;
  plan.ok = ok && bindArg(plan.args[0], DNNL_ARG_SRC, false, a, nullptr) &&
            bindArg(plan.args[1], DNNL_ARG_WEIGHTS, false, b, nullptr) &&
            bindArg(plan.args[2], DNNL_ARG_DST, true, c, nullptr);
}

/// The plan of a bfloat16 matmul: A [batch, M, K] and B [batch, K, N] (transposes as
/// strides) into a float or bfloat16 C [batch, M, N].
inline void makeBf16MatmulPlan(Plan &plan, bool bf16Result, int64_t batch, int64_t M,
                               int64_t N, int64_t K, bool transA, bool transB) {
  if (!engine() || batch <= 0 || M <= 0 || N <= 0 || K <= 0)
    return;
  const dnnl_dims_t ad = {batch, M, K}, bd = {batch, K, N}, cd = {batch, M, N};
  const dnnl_dims_t as = {M * K, transA ? 1 : K, transA ? M : 1};
  const dnnl_dims_t bs = {K * N, transB ? 1 : N, transB ? K : 1};
  const dnnl_dims_t cs = {M * N, N, 1};
  dnnl_memory_desc_t a, b, c;
  if (dnnl_memory_desc_init_by_strides(&a, 3, ad, dnnl_bf16, as) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&b, 3, bd, dnnl_bf16, bs) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&c, 3, cd, bf16Result ? dnnl_bf16 : dnnl_f32, cs) !=
          dnnl_success)
    return;
  // A reference implementation is far slower than widening: refuse it.
  makeMatmulPlan(plan, a, b, c, nullptr,
                 [](const char *impl) { return !std::strstr(impl, "ref"); });
}

/// matmulWide's bfloat16 path (see there): false when this CPU lacks AVX-512 BF16 or
/// oneDNN has no fast kernel for the geometry (the caller widens instead).
#if !defined(ORTC_KERN_DECLARE_ONLY)
ORTC_KERN_OBJECT_INLINE bool matmulBf16(const ortc_bf16 *A, const ortc_bf16 *B, void *C,
                                        bool bf16Result, int64_t batch, int64_t M, int64_t N,
                                        int64_t K, bool transA, bool transB) {
  if (!nativeBf16())
    return false;
  const std::vector<int64_t> key = {bf16Result, batch, M, N, K, transA, transB};
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;
  void *const ptrs[3] = {const_cast<ortc_bf16 *>(A), const_cast<ortc_bf16 *>(B), C};
  return runPlan(plans[key],
                 [&](Plan &plan) {
                   makeBf16MatmulPlan(plan, bf16Result, batch, M, N, K, transA, transB);
                 },
                 ptrs);
}
#endif

/// The plan of a float GEMM with row strides (gemm's operands): the matmul primitive
/// on plain strided descriptors (no reorders), C summed into when `accumulate`; only
/// a brgemm implementation (elsewhere oneDNN wraps the same sgemm gemm calls itself).
inline void makeGemmPlan(Plan &plan, bool transA, bool transB, int64_t M, int64_t N,
                         int64_t K, int64_t lda, int64_t ldb, bool accumulate, int64_t ldc) {
  if (!engine())
    return;
  const dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  const dnnl_dims_t as = {transA ? 1 : lda, transA ? lda : 1};
  const dnnl_dims_t bs = {transB ? 1 : ldb, transB ? ldb : 1};
  const dnnl_dims_t cs = {ldc, 1};
  dnnl_memory_desc_t a, b, c;
  if (dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs) != dnnl_success)
    return;
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_post_ops_t ops = nullptr;
  if (accumulate) {
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
      return;
    if (dnnl_post_ops_create(&ops) != dnnl_success ||
        dnnl_post_ops_append_sum(ops, 1.0f) != dnnl_success ||
        dnnl_primitive_attr_set_post_ops(attr, ops) != dnnl_success) {
      if (ops)
        dnnl_post_ops_destroy(ops);
      dnnl_primitive_attr_destroy(attr);
      return;
    }
  }
  makeMatmulPlan(plan, a, b, c, attr,
                 [](const char *impl) { return std::strncmp(impl, "brg", 3) == 0; });
  if (ops)
    dnnl_post_ops_destroy(ops);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
}

/// gemm's primitive path (see there): false when oneDNN has no brgemm kernel for the
/// geometry on this CPU (the caller runs sgemm).
#if !defined(ORTC_KERN_DECLARE_ONLY)
ORTC_KERN_OBJECT_INLINE bool gemmF32(bool transA, bool transB, int64_t M, int64_t N,
                                     int64_t K, const float *A, int64_t lda, const float *B,
                                     int64_t ldb, bool accumulate, float *C, int64_t ldc) {
  const std::vector<int64_t> key = {transA, transB, M, N, K, lda, ldb, accumulate, ldc};
  thread_local std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans;
  void *const ptrs[3] = {const_cast<float *>(A), const_cast<float *>(B), C};
  return runPlan(plans[key],
                 [&](Plan &plan) {
                   makeGemmPlan(plan, transA, transB, M, N, K, lda, ldb, accumulate, ldc);
                 },
                 ptrs);
}
#endif

} // namespace dnnl_detail

/// Float convolutions of generated code: oneDNN when it takes the geometry,
/// else the templates above. Same contracts as the templates. With the float
/// object (see the end of this file) units only declare them: their oneDNN plans
/// are compiled once, into ortc_kernels_lib.o.
#if defined(ORTC_KERN_DECLARE_ONLY)
void convForward(const float *x, const float *w, const float *bias, float *y,
                 const ConvGeom &geom);
void convGradInput(const float *dy, const float *w, float *dx, const ConvGeom &geom);
void convGradWeight(const float *dy, const float *x, float *dw, const ConvGeom &geom);
#else
ORTC_KERN_OBJECT_INLINE void convForward(const float *x, const float *w, const float *bias,
                                        float *y, const ConvGeom &geom) {
  if (geom.accum.kind != Accum::Float)
    return convForward<float>(x, w, bias, y, geom);
  if (useBatchedConv(geom))
    return convForwardBatched<float>(x, w, bias, y, geom);
  void *ptrs[4] = {const_cast<float *>(x), const_cast<float *>(w), y,
                   const_cast<float *>(bias)};
  if (!dnnl_detail::runConv(dnnl_detail::ConvPass::Forward, geom, bias != nullptr,
                            ptrs))
    convForward<float>(x, w, bias, y, geom);
}

ORTC_KERN_OBJECT_INLINE void convGradInput(const float *dy, const float *w, float *dx,
                                          const ConvGeom &geom) {
  if (geom.accum.kind != Accum::Float)
    return convGradInput<float>(dy, w, dx, geom);
  if (useBatchedConv(geom))
    return convGradInputBatched<float>(dy, w, dx, geom);
  void *ptrs[3] = {const_cast<float *>(dy), const_cast<float *>(w), dx};
  if (!dnnl_detail::runConv(dnnl_detail::ConvPass::BackwardData, geom, false,
                            ptrs))
    convGradInput<float>(dy, w, dx, geom);
}

ORTC_KERN_OBJECT_INLINE void convGradWeight(const float *dy, const float *x, float *dw,
                                           const ConvGeom &geom) {
  if (geom.accum.kind != Accum::Float)
    return convGradWeight<float>(dy, x, dw, geom);
  if (useBatchedConv(geom))
    return convGradWeightBatched<float>(dy, x, dw, geom);
  void *ptrs[3] = {const_cast<float *>(dy), const_cast<float *>(x), dw};
  if (!dnnl_detail::runConv(dnnl_detail::ConvPass::BackwardWeights, geom,
                            false, ptrs))
    convGradWeight<float>(dy, x, dw, geom);
}
#endif // ORTC_KERN_DECLARE_ONLY
#endif // ORTC_KERN_DNNL

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// Geometry of N-d pooling (nSpatial = 1, 2 or 3; only the first nSpatial
/// entries are read). x is [N, C, in...], y is [N, C, out...]; output o of a
/// spatial dim covers taps o * stride - padBegin + k * dilation, k <
/// kernel. `out` may include ceil-mode extra windows. countIncludePad only
/// matters for average pooling.
struct PoolGeom {
  int nSpatial;
  int64_t N, C;
  int64_t in[3], kernel[3], out[3], stride[3], padBegin[3], dilation[3];
  int64_t padEnd[3];
  bool countIncludePad;
};

namespace detail {

/// Spatial3 of a pooling geometry.
inline Spatial3 toSpatial3(const PoolGeom &g) {
  Spatial3 s = toSpatial3(g.nSpatial, g.in, g.kernel, g.out, g.stride, g.padBegin,
                          g.dilation);
  for (int j = 0; j < g.nSpatial; ++j)
    s.pe[3 - g.nSpatial + j] = g.padEnd[j];
  return s;
}

/// Argmax (index within the plane, or -1 when no tap lies inside the input)
/// of the windows of outputs (od, oh, ow0 .. ow0 + n) into best[0, n), their
/// maxima into mx (-inf without taps). Same rule as PyTorch: start at the
/// first in-bounds tap, move on `v > max || isnan(v)`, so ties go to the
/// first maximal tap in row-major window order; padding never wins. The taps
/// are the outer loops and the outputs the inner one, so it vectorises (a
/// tap per output in program order was a chain of dependent selects). Tap kw
/// is in bounds for the outputs [owLo[kw], owHi[kw]) of the row (see
/// forEachMaxPoolRow).
template <typename T, typename I>
void maxPoolArgRow(const T *plane, const Spatial3 &g, int64_t od, int64_t oh, int64_t ow0,
                   int64_t n, const int64_t *owLo, const int64_t *owHi, T *mx, I *best) {
  for (int64_t j = 0; j < n; ++j) {
    mx[j] = -std::numeric_limits<T>::infinity();
    best[j] = -1;
  }
  // Taps k in bounds: o * s - p + k * d in [0, in), validRange with k as
  // the position.
  int64_t kdLo, kdHi, khLo, khHi;
  validRange(g.k[0], g.d[0], od * g.s[0] - g.p[0], g.in[0], kdLo, kdHi);
  validRange(g.k[1], g.d[1], oh * g.s[1] - g.p[1], g.in[1], khLo, khHi);
  const int64_t sw = g.s[2];
  for (int64_t kd = kdLo; kd < kdHi; ++kd) {
    const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
    for (int64_t kh = khLo; kh < khHi; ++kh) {
      const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
      const int64_t rowBase = (id * g.in[1] + ih) * g.in[2];
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const int64_t base = rowBase + kw * g.d[2] - g.p[2];
        const T *row = plane + base;
        const int64_t lo = std::max(owLo[kw], ow0), hi = std::min(owHi[kw], ow0 + n);
        ORTC_KERN_SIMD
        for (int64_t ow = lo; ow < hi; ++ow) {
          const int64_t j = ow - ow0;
          const T v = row[ow * sw];
          const bool take = (best[j] < 0) | (v > mx[j]) | isNaNBits(v);
          mx[j] = take ? v : mx[j];
          best[j] = take ? I(base + ow * sw) : best[j];
        }
      }
    }
  }
}

/// Runs fn(pl, od, oh, ow0, n, mx, best) over every plane and output row of
/// a max pool in chunks of at most 64 outputs, planes split among the pool's
/// threads (maxPoolArgRow's results in mx and best; indices in 32 bits where
/// a plane allows, which vectorise twice as wide).
template <typename T, typename F>
void forEachMaxPoolRow(const T *x, const Spatial3 &g, int64_t planes, F fn) {
  constexpr int64_t kChunk = 64;
  // Outputs whose tap kw is in bounds: ow * s - p + kw * d in [0, in), the same
  // for every row of every plane.
  std::vector<int64_t> owLo(static_cast<size_t>(g.k[2])), owHi(owLo.size());
  for (int64_t kw = 0; kw < g.k[2]; ++kw)
    validRange(g.out[2], g.s[2], kw * g.d[2] - g.p[2], g.in[2], owLo[kw], owHi[kw]);
  auto run = [&](auto index) {
    using I = decltype(index);
    ORTC_KERN_PARALLEL_FOR(planes * g.outSize * g.kSize)
    for (int64_t pl = 0; pl < planes; ++pl) {
      T mx[kChunk];
      I best[kChunk];
      const T *plane = x + pl * g.inSize;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow0 = 0; ow0 < g.out[2]; ow0 += kChunk) {
            const int64_t n = std::min(kChunk, g.out[2] - ow0);
            maxPoolArgRow(plane, g, od, oh, ow0, n, owLo.data(), owHi.data(), mx, best);
            fn(pl, od, oh, ow0, n, static_cast<const T *>(mx), static_cast<const I *>(best));
          }
    }
  };
  if (g.inSize <= std::numeric_limits<int32_t>::max())
    run(int32_t());
  else
    run(int64_t());
}

/// Number of taps k < kernel with o * stride - padBegin + k * dilation in
/// [lo, hi).
inline int64_t tapCount(int64_t o, int64_t stride, int64_t padBegin,
                        int64_t kernel, int64_t dilation, int64_t lo,
                        int64_t hi) {
  int64_t first, last;
  validRange(kernel, dilation, o * stride - padBegin - lo, hi - lo, first, last);
  return last - first;
}

/// Divisor of average pooling for output (od, oh, ow); see avgPool.
inline int64_t avgDivisor(const Spatial3 &g, bool countIncludePad, int64_t od,
                          int64_t oh, int64_t ow) {
  const int64_t o[3] = {od, oh, ow};
  int64_t div = 1;
  for (int i = 0; i < 3; ++i) {
    const int64_t lo = countIncludePad ? -g.p[i] : 0;
    const int64_t hi = countIncludePad ? g.in[i] + g.pe[i] : g.in[i];
    div *= tapCount(o[i], g.s[i], g.p[i], g.k[i], g.d[i], lo, hi);
  }
  return div;
}

} // namespace detail

/// ONNX MaxPool / torch max_pool{1,2,3}d (any dilation, ceil-mode outputs
/// via g.out): y = max over the in-bounds taps of each window (padding is
/// never a candidate); NaN propagates. A window without in-bounds taps
/// yields -inf.
template <typename T> void maxPool(const T *x, T *y, const PoolGeom &geom) {
  const detail::Spatial3 g = detail::toSpatial3(geom);
  detail::forEachMaxPoolRow(x, g, geom.N * geom.C,
      [&](int64_t pl, int64_t od, int64_t oh, int64_t ow0, int64_t n, const T *mx,
          const auto *) {
        std::copy(mx, mx + n, y + pl * g.outSize + (od * g.out[1] + oh) * g.out[2] + ow0);
      });
}

/// Gradient of maxPool (torch max_pool backward): dx is zero-filled, then
/// each dy element is added to the window's argmax, i.e. the first maximal
/// in-bounds tap in row-major window order (ties never split the gradient;
/// overlapping windows accumulate, in output order). x is the forward input.
template <typename T>
void maxPoolGrad(const T *x, const T *dy, T *dx, const PoolGeom &geom) {
  const detail::Spatial3 g = detail::toSpatial3(geom);
  const int64_t planes = geom.N * geom.C;
  detail::zeroFill(dx, planes * g.inSize);
  detail::forEachMaxPoolRow(x, g, planes,
      [&](int64_t pl, int64_t od, int64_t oh, int64_t ow0, int64_t n, const T *,
          const auto *best) {
        T *dplane = dx + pl * g.inSize;
        const T *dyr = dy + pl * g.outSize + (od * g.out[1] + oh) * g.out[2] + ow0;
        for (int64_t j = 0; j < n; ++j)
          if (best[j] >= 0)
            dplane[best[j]] += dyr[j];
      });
}

/// ONNX AveragePool / torch avg_pool{1,2,3}d: y = (sum of the in-bounds
/// taps) / divisor. With countIncludePad the divisor is the number of taps
/// inside the padded input [-padBegin, in + padEnd) per dim (the window
/// clipped to the padded input, as ONNX's reference and PyTorch do, which also
/// clips ceil-mode windows); without it, the number of in-bounds taps. Windows with divisor
/// 0 yield 0.
template <typename T> void avgPool(const T *x, T *y, const PoolGeom &geom) {
  const detail::Spatial3 g = detail::toSpatial3(geom);
  const int64_t total = geom.N * geom.C * g.outSize;
  ORTC_KERN_PARALLEL_FOR(total * g.kSize)
  for (int64_t t = 0; t < total; ++t) {
    const int64_t pl = t / g.outSize, o = t % g.outSize;
    const int64_t ow = o % g.out[2], oh = (o / g.out[2]) % g.out[1],
                  od = o / (g.out[1] * g.out[2]);
    const T *plane = x + pl * g.inSize;
    double s = 0;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
      if (id < 0 || id >= g.in[0])
        continue;
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
        if (ih < 0 || ih >= g.in[1])
          continue;
        const T *row = plane + (id * g.in[1] + ih) * g.in[2];
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.d[2];
          if (iw >= 0 && iw < g.in[2])
            s += static_cast<double>(row[iw]);
        }
      }
    }
    const int64_t div = detail::avgDivisor(g, geom.countIncludePad, od, oh, ow);
    y[t] = div > 0 ? static_cast<T>(s / static_cast<double>(div)) : T(0);
  }
}

/// Gradient of avgPool: dx is zero-filled, then every in-bounds tap of each
/// window receives dy / divisor (same divisor as avgPool).
template <typename T>
void avgPoolGrad(const T *dy, T *dx, const PoolGeom &geom) {
  const detail::Spatial3 g = detail::toSpatial3(geom);
  const int64_t planes = geom.N * geom.C;
  std::fill(dx, dx + planes * g.inSize, T(0));
  ORTC_KERN_PARALLEL_FOR(planes * g.outSize * g.kSize)
  for (int64_t pl = 0; pl < planes; ++pl) {
    T *dplane = dx + pl * g.inSize;
    const T *dyp = dy + pl * g.outSize;
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          const int64_t div =
              detail::avgDivisor(g, geom.countIncludePad, od, oh, ow);
          if (div <= 0)
            continue;
          const T v = static_cast<T>(
              static_cast<double>(dyp[(od * g.out[1] + oh) * g.out[2] + ow]) /
              static_cast<double>(div));
          for (int64_t kd = 0; kd < g.k[0]; ++kd) {
            const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
            if (id < 0 || id >= g.in[0])
              continue;
            for (int64_t kh = 0; kh < g.k[1]; ++kh) {
              const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
              if (ih < 0 || ih >= g.in[1])
                continue;
              T *row = dplane + (id * g.in[1] + ih) * g.in[2];
              for (int64_t kw = 0; kw < g.k[2]; ++kw) {
                const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.d[2];
                if (iw >= 0 && iw < g.in[2])
                  row[iw] += v;
              }
            }
          }
        }
  }
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

namespace detail {
/// A per-thread buffer of at least n elements (a line's values, reused).
template <typename T> T *lineScratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < n)
    buf.resize(n);
  return buf.data();
}
} // namespace detail

// The line functions compute one line (row) of n elements: `load(j)` gives element
// j of an operand, `store(j, y)` receives element j of the result. Each operand
// element is loaded once and each result element stored once, after every load, so
// a store may overwrite the line it read. The library kernels below call them with
// plain loads and stores; a rows kernel (ortc.fused "rows") with its prologue and
// epilogue inlined, so its fused softmax gives the library's bits.

namespace detail {
/// Loads a line into the per-thread buffer; returns it and sets `mx` to its maximum.
template <typename T, typename Load> T *loadLineWithMax(int64_t n, Load load, T &mx) {
  T *x = lineScratch<T>(n);
  ORTC_KERN_SIMD
  for (int64_t a = 0; a < n; ++a)
    x[a] = load(a);
  // max is exact in any order (a NaN makes the whole line NaN either way).
  mx = -std::numeric_limits<T>::infinity();
  ORTC_KERN_PRAGMA(omp simd reduction(max : mx))
  for (int64_t a = 0; a < n; ++a)
    mx = std::max(mx, x[a]);
  return x;
}
} // namespace detail

/// y = exp(x - max) / sum(exp(x - max)) (max subtracted for stability).
template <typename T, typename Load, typename Store>
inline void softmaxLine(int64_t n, Load load, Store store) {
  T mx;
  T *e = detail::loadLineWithMax<T>(n, load, mx);
  double s = 0;
  ORTC_KERN_SIMD_SUM(s)
  for (int64_t a = 0; a < n; ++a) {
    e[a] = std::exp(e[a] - mx);
    s += static_cast<double>(e[a]);
  }
  const double inv = 1.0 / s;
  ORTC_KERN_SIMD
  for (int64_t a = 0; a < n; ++a)
    store(a, static_cast<T>(static_cast<double>(e[a]) * inv));
}

/// y = x - max - log(sum(exp(x - max))).
template <typename T, typename Load, typename Store>
inline void logSoftmaxLine(int64_t n, Load load, Store store) {
  T mx;
  const T *x = detail::loadLineWithMax<T>(n, load, mx);
  double s = 0;
  ORTC_KERN_SIMD_SUM(s)
  for (int64_t a = 0; a < n; ++a)
    s += std::exp(static_cast<double>(x[a]) - mx);
  const double lse = static_cast<double>(mx) + std::log(s);
  ORTC_KERN_SIMD
  for (int64_t a = 0; a < n; ++a)
    store(a, static_cast<T>(static_cast<double>(x[a]) - lse));
}

/// Gradient of softmax given its output y: dx = y * (dy - sum(dy * y)).
template <typename T, typename LoadY, typename LoadDy, typename Store>
inline void softmaxGradLine(int64_t n, LoadY loadY, LoadDy loadDy, Store store) {
  T *y = detail::lineScratch<T>(2 * n), *dy = y + n;
  double s = 0;
  ORTC_KERN_SIMD_SUM(s)
  for (int64_t a = 0; a < n; ++a) {
    y[a] = loadY(a);
    dy[a] = loadDy(a);
    s += static_cast<double>(dy[a]) * y[a];
  }
  ORTC_KERN_SIMD
  for (int64_t a = 0; a < n; ++a)
    store(a, static_cast<T>(static_cast<double>(y[a]) * (dy[a] - s)));
}

/// Gradient of logSoftmax given its output y: dx = dy - exp(y) * sum(dy).
template <typename T, typename LoadY, typename LoadDy, typename Store>
inline void logSoftmaxGradLine(int64_t n, LoadY loadY, LoadDy loadDy, Store store) {
  T *y = detail::lineScratch<T>(2 * n), *dy = y + n;
  double s = 0;
  ORTC_KERN_SIMD_SUM(s)
  for (int64_t a = 0; a < n; ++a) {
    y[a] = loadY(a);
    dy[a] = loadDy(a);
    s += static_cast<double>(dy[a]);
  }
  ORTC_KERN_SIMD
  for (int64_t a = 0; a < n; ++a)
    store(a, static_cast<T>(static_cast<double>(dy[a]) -
                            std::exp(static_cast<double>(y[a])) * s));
}

namespace detail {
/// Runs `line(off)` for every line along the middle axis of an [outer, axisLen, inner]
/// view, the lines in parallel: `off` is the line's first element, its elements lie
/// `inner` apart.
template <typename F>
void forEachLine(int64_t outer, int64_t axisLen, int64_t inner, F line) {
  ORTC_KERN_PARALLEL_FOR(outer * inner * axisLen)
  for (int64_t t = 0; t < outer * inner; ++t)
    line((t / inner) * axisLen * inner + t % inner);
}
} // namespace detail

/// torch.softmax / ONNX Softmax (opset >= 13) along one axis: x and y are
/// viewed as [outer, axisLen, inner], one line per (outer, inner). y may alias x.
template <typename T>
void softmax(const T *x, T *y, int64_t outer, int64_t axisLen, int64_t inner) {
  detail::forEachLine(outer, axisLen, inner, [&](int64_t off) {
    softmaxLine<T>(axisLen, [&](int64_t a) { return x[off + a * inner]; },
                   [&](int64_t a, T v) { y[off + a * inner] = v; });
  });
}

/// torch.log_softmax / ONNX LogSoftmax along one axis ([outer, axisLen, inner]
/// view). y may alias x.
template <typename T>
void logSoftmax(const T *x, T *y, int64_t outer, int64_t axisLen, int64_t inner) {
  detail::forEachLine(outer, axisLen, inner, [&](int64_t off) {
    logSoftmaxLine<T>(axisLen, [&](int64_t a) { return x[off + a * inner]; },
                      [&](int64_t a, T v) { y[off + a * inner] = v; });
  });
}

/// Gradient of softmax given its output y ([outer, axisLen, inner] view). dx may
/// alias dy.
template <typename T>
void softmaxGrad(const T *y, const T *dy, T *dx, int64_t outer, int64_t axisLen,
                 int64_t inner) {
  detail::forEachLine(outer, axisLen, inner, [&](int64_t off) {
    softmaxGradLine<T>(axisLen, [&](int64_t a) { return y[off + a * inner]; },
                       [&](int64_t a) { return dy[off + a * inner]; },
                       [&](int64_t a, T v) { dx[off + a * inner] = v; });
  });
}

/// Gradient of logSoftmax given its output y ([outer, axisLen, inner] view). dx
/// may alias dy.
template <typename T>
void logSoftmaxGrad(const T *y, const T *dy, T *dx, int64_t outer, int64_t axisLen,
                    int64_t inner) {
  detail::forEachLine(outer, axisLen, inner, [&](int64_t off) {
    logSoftmaxGradLine<T>(axisLen, [&](int64_t a) { return y[off + a * inner]; },
                          [&](int64_t a) { return dy[off + a * inner]; },
                          [&](int64_t a, T v) { dx[off + a * inner] = v; });
  });
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

/// torch.nn.functional.layer_norm / ONNX LayerNormalization over the last
/// `inner` elements of each of `outer` rows: y = (x - mean) * invStd * scale
/// + bias with biased variance and invStd = 1 / sqrt(var + eps). scale and
/// bias have `inner` elements and may be null (1 / 0). mean and invStd
/// ([outer], saved for the backward pass) may be null.
template <typename T>
void layerNorm(const T *x, const NoDeduce<T> *scale, const NoDeduce<T> *bias,
               T *y, NoDeduce<T> *mean, NoDeduce<T> *invStd, int64_t outer,
               int64_t inner, NoDeduce<T> eps) {
  ORTC_KERN_PARALLEL_FOR(outer * inner)
  for (int64_t r = 0; r < outer; ++r) {
    const T *xr = x + r * inner;
    T *yr = y + r * inner;
    double mu = detail::runSum(inner, [&](int64_t i) { return static_cast<double>(xr[i]); });
    mu /= static_cast<double>(inner);
    double var = detail::runSum(inner, [&](int64_t i) {
      const double c = static_cast<double>(xr[i]) - mu;
      return c * c;
    });
    var /= static_cast<double>(inner);
    double is = 1.0 / std::sqrt(var + static_cast<double>(eps));
    if constexpr (sizeof(T) >= sizeof(float)) {
      // The row is normalised with the statistics as saved, so that the recompute pass's
      // clone of y from the saved mean / invStd (LayerNormOp's buildCheaperRecompute:
      // the same double operations) gives these bits. (A 16-bit T keeps them unrounded.)
      mu = static_cast<double>(static_cast<T>(mu));
      is = static_cast<double>(static_cast<T>(is));
    }
    ORTC_KERN_SIMD
    for (int64_t i = 0; i < inner; ++i) {
      double v = (static_cast<double>(xr[i]) - mu) * is;
      if (scale)
        v *= static_cast<double>(scale[i]);
      if (bias)
        v += static_cast<double>(bias[i]);
      yr[i] = static_cast<T>(v);
    }
    if (mean)
      mean[r] = static_cast<T>(mu);
    if (invStd)
      invStd[r] = static_cast<T>(is);
  }
}

/// Gradient of layerNorm (torch native_layer_norm_backward) from the saved
/// mean / invStd: with xhat = (x - mean) * invStd and g = dy * scale,
/// dx = invStd * (g - mean_row(g) - xhat * mean_row(g * xhat)),
/// dscale = sum_rows(dy * xhat), dbias = sum_rows(dy). scale may be null
/// (1); dx, dscale and dbias may each be null (not computed).
template <typename T>
void layerNormGrad(const T *x, const NoDeduce<T> *scale,
                   const NoDeduce<T> *mean, const NoDeduce<T> *invStd,
                   const T *dy, NoDeduce<T> *dx, NoDeduce<T> *dscale,
                   NoDeduce<T> *dbias, int64_t outer, int64_t inner) {
  if (dx) {
    ORTC_KERN_PARALLEL_FOR(outer * inner)
    for (int64_t r = 0; r < outer; ++r) {
      const T *xr = x + r * inner;
      const T *dyr = dy + r * inner;
      const double mu = mean[r], is = invStd[r];
      auto g = [&](int64_t i) {
        return static_cast<double>(dyr[i]) * (scale ? double(scale[i]) : 1.0);
      };
      double sg = detail::runSum(inner, g);
      double sgx = detail::runSum(inner, [&](int64_t i) {
        return g(i) * (static_cast<double>(xr[i]) - mu) * is;
      });
      sg /= static_cast<double>(inner);
      sgx /= static_cast<double>(inner);
      T *dxr = dx + r * inner;
      ORTC_KERN_SIMD
      for (int64_t i = 0; i < inner; ++i) {
        const double xh = (static_cast<double>(xr[i]) - mu) * is;
        dxr[i] = static_cast<T>(is * (g(i) - sg - xh * sgx));
      }
    }
  }
  if (!dscale && !dbias)
    return;
  // Column sums: tasks own disjoint column blocks, rows summed in order.
  constexpr int64_t kBlock = 128;
  const int64_t nBlocks = (inner + kBlock - 1) / kBlock;
  ORTC_KERN_PARALLEL_FOR(outer * inner)
  for (int64_t b = 0; b < nBlocks; ++b) {
    const int64_t i0 = b * kBlock, i1 = std::min(inner, i0 + kBlock);
    double ds[kBlock], db[kBlock];
    for (int64_t i = 0; i < i1 - i0; ++i)
      ds[i] = db[i] = 0;
    for (int64_t r = 0; r < outer; ++r) {
      const double mu = mean[r], is = invStd[r];
      const T *xr = x + r * inner;
      const T *dyr = dy + r * inner;
      ORTC_KERN_SIMD
      for (int64_t i = i0; i < i1; ++i) {
        const double d = static_cast<double>(dyr[i]);
        ds[i - i0] += d * (static_cast<double>(xr[i]) - mu) * is;
        db[i - i0] += d;
      }
    }
    for (int64_t i = i0; i < i1; ++i) {
      if (dscale)
        dscale[i] = static_cast<T>(ds[i - i0]);
      if (dbias)
        dbias[i] = static_cast<T>(db[i - i0]);
    }
  }
}

/// batchNormTrain over the batches of every rank of a data-parallel run
/// (torch.nn.SyncBatchNorm): `sumRanks(v, n)` sums the doubles v[0..n) over
/// the ranks in place and returns the number of ranks R (1 alone; batchNormTrain
/// is this with one rank); every rank holds N * S elements per channel. Two
/// passes: the per-channel sums, then the squared deviations from the global
/// mean (never E[x^2] - E[x]^2). The sums are in double, by runs (see
/// detail::runSum), so they do not depend on the thread count.
template <typename T, typename SumRanks>
void batchNormTrainSync(const T *x, const NoDeduce<T> *scale,
                        const NoDeduce<T> *bias, T *y, NoDeduce<T> *mean,
                        NoDeduce<T> *var, NoDeduce<T> *invStd, int64_t N, int64_t C,
                        int64_t S, NoDeduce<T> eps, SumRanks sumRanks) {
  std::vector<double> mu(static_cast<size_t>(C)), v(static_cast<size_t>(C));
  ORTC_KERN_PARALLEL_FOR(N * C * S)
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T *p = x + (n * C + c) * S;
      sum += detail::runSum(S, [&](int64_t s) { return static_cast<double>(p[s]); });
    }
    mu[c] = sum;
  }
  const double cnt = static_cast<double>(N * S) * sumRanks(mu.data(), C);
  for (int64_t c = 0; c < C; ++c)
    mu[c] /= cnt;
  ORTC_KERN_PARALLEL_FOR(N * C * S)
  for (int64_t c = 0; c < C; ++c) {
    double sq = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T *p = x + (n * C + c) * S;
      const double m = mu[c];
      sq += detail::runSum(S, [&](int64_t s) {
        const double d = static_cast<double>(p[s]) - m;
        return d * d;
      });
    }
    v[c] = sq;
  }
  sumRanks(v.data(), C);
  ORTC_KERN_PARALLEL_FOR(N * C * S)
  for (int64_t c = 0; c < C; ++c) {
    const double vc = v[c] / cnt;
    const double is = 1.0 / std::sqrt(vc + static_cast<double>(eps));
    const double a = is * (scale ? static_cast<double>(scale[c]) : 1.0);
    const double b = bias ? static_cast<double>(bias[c]) : 0.0;
    const double m = mu[c];
    for (int64_t n = 0; n < N; ++n) {
      const T *p = x + (n * C + c) * S;
      T *q = y + (n * C + c) * S;
      ORTC_KERN_SIMD
      for (int64_t s = 0; s < S; ++s)
        q[s] = static_cast<T>((static_cast<double>(p[s]) - m) * a + b);
    }
    if (mean)
      mean[c] = static_cast<T>(mu[c]);
    if (var)
      var[c] = static_cast<T>(vc);
    if (invStd)
      invStd[c] = static_cast<T>(is);
  }
}

/// batchNormGrad of batchNormTrainSync (batchNormGrad is this with one rank):
/// dbias and dscale are this rank's sums
/// (the data-parallel average combines them); dx uses the sums of dy and
/// dy * xhat over every rank and the global count M = N * S * R:
/// dx = scale * invStd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat)).
template <typename T, typename SumRanks>
void batchNormGradSync(const T *x, const NoDeduce<T> *scale,
                       const NoDeduce<T> *mean, const NoDeduce<T> *invStd,
                       const T *dy, NoDeduce<T> *dx, NoDeduce<T> *dscale,
                       NoDeduce<T> *dbias, int64_t N, int64_t C, int64_t S,
                       SumRanks sumRanks) {
  std::vector<double> sums(static_cast<size_t>(2 * C)); // sum(dy), sum(dy * xhat)
  ORTC_KERN_PARALLEL_FOR(N * C * S)
  for (int64_t c = 0; c < C; ++c) {
    const double mu = mean[c], is = invStd[c];
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T *p = x + (n * C + c) * S;
      const T *d = dy + (n * C + c) * S;
      sdy += detail::runSum(S, [&](int64_t s) { return static_cast<double>(d[s]); });
      sdyx += detail::runSum(S, [&](int64_t s) {
        return static_cast<double>(d[s]) * (static_cast<double>(p[s]) - mu);
      });
    }
    sums[c] = sdy;
    sums[C + c] = sdyx * is;
    if (dbias)
      dbias[c] = static_cast<T>(sdy);
    if (dscale)
      dscale[c] = static_cast<T>(sdyx * is);
  }
  if (!dx)
    return;
  const double cnt = static_cast<double>(N * S) * sumRanks(sums.data(), 2 * C);
  ORTC_KERN_PARALLEL_FOR(N * C * S)
  for (int64_t c = 0; c < C; ++c) {
    const double mu = mean[c], is = invStd[c], sdy = sums[c], sdyx = sums[C + c];
    const double k = (scale ? static_cast<double>(scale[c]) : 1.0) * is / cnt;
    for (int64_t n = 0; n < N; ++n) {
      const T *p = x + (n * C + c) * S;
      const T *d = dy + (n * C + c) * S;
      T *q = dx + (n * C + c) * S;
      ORTC_KERN_SIMD
      for (int64_t s = 0; s < S; ++s) {
        const double xh = (static_cast<double>(p[s]) - mu) * is;
        q[s] = static_cast<T>(
            k * (cnt * static_cast<double>(d[s]) - sdy - xh * sdyx));
      }
    }
  }
}

/// Training-mode batch norm (torch batch_norm(training=True) / ONNX
/// BatchNormalization training_mode=1) over x viewed as [N, C, S]:
/// per-channel batch mean and biased variance over N*S elements, invStd =
/// 1 / sqrt(var + eps), y = (x - mean) * invStd * scale + bias. mean, var
/// and invStd ([C]) may each be null. Running statistics are the caller's
/// job (PyTorch updates running_var with the unbiased var * NS / (NS - 1)).
template <typename T>
void batchNormTrain(const T *x, const NoDeduce<T> *scale,
                    const NoDeduce<T> *bias, T *y, NoDeduce<T> *mean,
                    NoDeduce<T> *var, NoDeduce<T> *invStd, int64_t N, int64_t C,
                    int64_t S, NoDeduce<T> eps) {
  batchNormTrainSync(x, scale, bias, y, mean, var, invStd, N, C, S, eps,
                     [](double *, int64_t) { return 1.0; });
}

/// Full training-mode gradient of batchNormTrain (through the batch
/// statistics), from the saved mean / invStd; M = N * S:
/// dbias = sum(dy), dscale = sum(dy * xhat),
/// dx = scale * invStd / M * (M * dy - dbias - xhat * dscale).
/// scale may be null (1); dx, dscale and dbias may each be null.
template <typename T>
void batchNormGrad(const T *x, const NoDeduce<T> *scale,
                   const NoDeduce<T> *mean, const NoDeduce<T> *invStd,
                   const T *dy, NoDeduce<T> *dx, NoDeduce<T> *dscale,
                   NoDeduce<T> *dbias, int64_t N, int64_t C, int64_t S) {
  batchNormGradSync(x, scale, mean, invStd, dy, dx, dscale, dbias, N, C, S,
                    [](double *, int64_t) { return 1.0; });
}

/// Inference-mode batch norm (ONNX BatchNormalization, torch batch_norm
/// training=False) over [N, C, S]: y = (x - runMean) / sqrt(runVar + eps) *
/// scale + bias. scale / bias may be null (1 / 0).
template <typename T>
void batchNormInfer(const T *x, const NoDeduce<T> *scale,
                    const NoDeduce<T> *bias, const NoDeduce<T> *runMean,
                    const NoDeduce<T> *runVar, T *y, int64_t N, int64_t C,
                    int64_t S, NoDeduce<T> eps) {
  const int64_t planes = N * C;
  ORTC_KERN_PARALLEL_FOR(planes * S)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const int64_t c = pl % C;
    const double a =
        (scale ? static_cast<double>(scale[c]) : 1.0) /
        std::sqrt(static_cast<double>(runVar[c]) + static_cast<double>(eps));
    const double b = (bias ? static_cast<double>(bias[c]) : 0.0) -
                     static_cast<double>(runMean[c]) * a;
    const T *p = x + pl * S;
    T *q = y + pl * S;
    for (int64_t s = 0; s < S; ++s)
      q[s] = static_cast<T>(static_cast<double>(p[s]) * a + b);
  }
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

/// torch.nn.functional.cross_entropy(logits [N, C], labels [N],
/// ignore_index, reduction='mean') / ONNX SoftmaxCrossEntropyLoss without
/// weights: *loss = mean over kept rows of (logsumexp(logits[n]) -
/// logits[n, labels[n]]). A row is kept unless hasIgnore and labels[n] ==
/// ignoreIndex. With no kept row the loss is NaN (like PyTorch). Returns
/// false, writing nothing, when a kept label is outside [0, C). The logits may be
/// stored in 16 bits (L: ortc_bf16, ortc_half), read exactly.
template <typename T, typename L = T>
bool softmaxCrossEntropy(const L *logits, const int64_t *labels, int64_t N,
                         int64_t C, int64_t ignoreIndex, bool hasIgnore,
                         T *loss) {
  for (int64_t n = 0; n < N; ++n) {
    if (hasIgnore && labels[n] == ignoreIndex)
      continue;
    if (labels[n] < 0 || labels[n] >= C)
      return false;
  }
  std::vector<double> rowLoss(static_cast<size_t>(N), 0.0);
  ORTC_KERN_PARALLEL_FOR(N * C)
  for (int64_t n = 0; n < N; ++n) {
    if (hasIgnore && labels[n] == ignoreIndex)
      continue;
    const L *r = logits + n * C;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C; ++c)
      mx = std::max(mx, ortc_cvt<double>(r[c]));
    double s = 0;
    ORTC_KERN_SIMD_SUM(s)
    for (int64_t c = 0; c < C; ++c)
      s += std::exp(ortc_cvt<double>(r[c]) - mx);
    rowLoss[n] = mx + std::log(s) - ortc_cvt<double>(r[labels[n]]);
  }
  double total = 0;
  int64_t kept = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (hasIgnore && labels[n] == ignoreIndex)
      continue;
    total += rowLoss[n];
    ++kept;
  }
  *loss = kept == 0 ? std::numeric_limits<T>::quiet_NaN()
                    : static_cast<T>(total / static_cast<double>(kept));
  return true;
}

/// Gradient of softmaxCrossEntropy w.r.t. the logits: for kept rows
/// dlogits[n] = (softmax(logits[n]) - onehot(labels[n])) * *dloss / kept;
/// ignored rows get 0 (with no kept row everything is 0, as in PyTorch).
/// Returns false, writing nothing, on a kept label outside [0, C). Logits (L) and
/// dlogits (T) may be stored in 16 bits: read exactly, written through float (the bits
/// of a float result cast to 16 bits); dloss (D) is the loss's type.
template <typename T, typename L = T, typename D = T>
bool softmaxCrossEntropyGrad(const L *logits, const int64_t *labels, int64_t N,
                             int64_t C, int64_t ignoreIndex, bool hasIgnore,
                             const D *dloss, T *dlogits) {
  int64_t kept = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (hasIgnore && labels[n] == ignoreIndex)
      continue;
    if (labels[n] < 0 || labels[n] >= C)
      return false;
    ++kept;
  }
  const double scale =
      kept == 0 ? 0.0 : static_cast<double>(*dloss) / static_cast<double>(kept);
  ORTC_KERN_PARALLEL_FOR(N * C)
  for (int64_t n = 0; n < N; ++n) {
    T *d = dlogits + n * C;
    if (hasIgnore && labels[n] == ignoreIndex) {
      std::fill(d, d + C, ortc_cvt<T>(0.0));
      continue;
    }
    const L *r = logits + n * C;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C; ++c)
      mx = std::max(mx, ortc_cvt<double>(r[c]));
    double s = 0;
    ORTC_KERN_SIMD_SUM(s)
    for (int64_t c = 0; c < C; ++c)
      s += std::exp(ortc_cvt<double>(r[c]) - mx);
    const double inv = 1.0 / s;
    const int64_t label = labels[n];
    ORTC_KERN_SIMD
    for (int64_t c = 0; c < C; ++c) {
      const double p = std::exp(ortc_cvt<double>(r[c]) - mx) * inv;
      d[c] = ortc_cvt<T>((c == label ? p - 1.0 : p) * scale);
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Dropout (counter-based RNG)
//===----------------------------------------------------------------------===//

// The draws themselves (mix64, counterState, counterBits, counterUniform,
// keepThreshold, dropoutKeep, dropoutOf) are kernels/common/ortc_scalar.h's, the GPU
// library's too: a mask is the same bits on every target.
using scalar::counterBits;
using scalar::counterState;
using scalar::counterUniform;
using scalar::dropoutKeep;
using scalar::keepThreshold;
using scalar::mix64;

/// ONNX RandomUniform(Like): y[i] = low + (high - low) * counterUniform(seed,
/// key, i), computed in double and rounded to T.
template <typename T>
void randomUniform(T *y, int64_t n, double low, double high, uint64_t seed,
                   uint64_t key) {
  ORTC_KERN_PARALLEL_FOR_SIMD(n * 8)
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<T>(scalar::uniformOf(low, high, seed, key, static_cast<uint64_t>(i)));
}

/// Inverted dropout of element i; generated pointwise kernels call it with their
/// element's index.
using scalar::dropoutOf;

/// dropoutOf over n elements: y[i] = dropoutOf(x[i], seed, key, i, ratio). y may
/// alias x.
template <typename T>
void dropout(const T *x, T *y, int64_t n, double ratio, uint64_t seed,
             uint64_t key) {
  ORTC_KERN_PARALLEL_FOR_SIMD(n * 8)
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropoutOf(x[i], seed, key, i, ratio);
}

/// Gradient of dropout: dx[i] = keep(i) ? dy[i] / (1 - ratio) : 0 with the
/// same mask as the forward (same seed, key, ratio). dx may alias dy.
template <typename T>
void dropoutGrad(const T *dy, T *dx, int64_t n, double ratio, uint64_t seed,
                 uint64_t key) {
  dropout(dy, dx, n, ratio, seed, key);
}

/// The dropout mask itself (ONNX Dropout's optional `mask` output):
/// mask[i] = dropoutKeep(seed, key, i, ratio) ? 1 : 0.
inline void dropoutMask(uint8_t *mask, int64_t n, double ratio, uint64_t seed,
                        uint64_t key) {
  const uint64_t threshold = keepThreshold(ratio);
  ORTC_KERN_PARALLEL_FOR_SIMD(n * 8)
  for (int64_t i = 0; i < n; ++i)
    mask[i] = counterBits(seed, key, static_cast<uint64_t>(i)) >= threshold ? 1 : 0;
}

//===----------------------------------------------------------------------===//
// Vectorisation-stable math
//===----------------------------------------------------------------------===//
// Why: glibc's SIMD erf/exp/tanh/log (libmvec, above) round differently from the
// scalar functions, so an element's bits depended on whether it ran in a loop's vector
// body, its scalar remainder or a loop the compiler left scalar: on which kernel
// computed it. A value computed again elsewhere (recompute, another fusion) must come
// out with the same bits. These are plain arithmetic, inlined and vectorised alike
// (with kernels built -ffp-contract=off, each operation rounds once in either form; the
// polynomials' Horner steps are explicit fused multiply-adds where the level has FMA,
// detail::madd, rounded once in either form too),
// within 2 ulp of the exact result (KernelsTest's VectorStableMath). Generated kernels
// call them for float; double keeps libm.
namespace vm {
namespace detail {
inline float fromBits(int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline int32_t toBits(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
constexpr float kLn2Hi = 0.693145751953125f; // ln 2 split so that n * kLn2Hi is exact
constexpr float kLn2Lo = 1.42860682030941723212e-6f;
/// a * b + c for the polynomials' Horner steps: one fused multiply-add, rounded once,
/// where the level has FMA (x86-64-v3 and up: half the operations and latency of
/// the chains; GELU 1.6x faster on an Emerald Rapids core), else a multiply and
/// an add. Either way scalar and vector code round alike (std::fma is exact in both
/// forms), so an element's bits still do not depend on which kernel computes it; they
/// do differ between builds with and without FMA (within the 2 ulp of either).
ORTC_KERN_ALWAYS_INLINE float madd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}
} // namespace detail

/// e^x: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation
/// below 2^-27), scaled by 2^n in two halves so that denormal results round once.
ORTC_KERN_ALWAYS_INLINE float exp(float x) {
  float xc = x < 89.0f ? x : 89.0f; // beyond: inf and 0 (a NaN goes through as 89)
  xc = xc > -104.0f ? xc : -104.0f;
  const float n = std::rint(xc * 1.44269504088896341f);
  const float r = (xc - n * detail::kLn2Hi) - n * detail::kLn2Lo;
  float p = 1.0f / 5040;
  p = detail::madd(p, r, 1.0f / 720);
  p = detail::madd(p, r, 1.0f / 120);
  p = detail::madd(p, r, 1.0f / 24);
  p = detail::madd(p, r, 1.0f / 6);
  p = detail::madd(p, r, 0.5f);
  p = (p * (r * r) + r) + 1.0f;
  const int32_t k = static_cast<int32_t>(n), k1 = k / 2, k2 = k - k1;
  const float y = p * detail::fromBits((k1 + 127) << 23) * detail::fromBits((k2 + 127) << 23);
  return x != x ? x : y;
}

/// ln x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f),
/// ln m = f - (f^2/2 - s (f^2/2 + R(s^2))) with R the atanh series to s^10.
ORTC_KERN_ALWAYS_INLINE float log(float x) {
  const bool sub = x < 1.17549435e-38f; // denormals (zero and negatives: below)
  const int32_t i = detail::toBits(sub ? x * 8388608.0f : x);
  int32_t e = ((i >> 23) & 0xff) - (sub ? 150 : 127);
  float m = detail::fromBits((i & 0x007fffff) | 0x3f800000);
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  const float f = m - 1.0f, s = f / (2.0f + f), s2 = s * s, hfsq = 0.5f * f * f;
  float q = 2.0f / 9;
  q = detail::madd(q, s2, 2.0f / 7);
  q = detail::madd(q, s2, 2.0f / 5);
  q = detail::madd(q, s2, 2.0f / 3);
  const float lnm = f - (hfsq - s * (hfsq + q * s2));
  const float fe = static_cast<float>(e);
  float y = (fe * detail::kLn2Lo + lnm) + fe * detail::kLn2Hi;
  const float inf = std::numeric_limits<float>::infinity();
  y = x == inf ? inf : y;
  y = x == 0.0f ? -inf : y;
  y = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : y;
  return x != x ? x : y;
}

/// tanh x = sign(x) e / (e + 2) with e = expm1(2|x|): the Taylor series to z^11 below
/// z = ln 2 (no cancellation), e^z - 1 above; 1 beyond |x| = 9.5.
ORTC_KERN_ALWAYS_INLINE float tanh(float x) {
  const float a = std::fabs(x), z = 2.0f * (a < 9.5f ? a : 9.5f);
  float q = 1.0f / 39916800;
  q = detail::madd(q, z, 1.0f / 3628800);
  q = detail::madd(q, z, 1.0f / 362880);
  q = detail::madd(q, z, 1.0f / 40320);
  q = detail::madd(q, z, 1.0f / 5040);
  q = detail::madd(q, z, 1.0f / 720);
  q = detail::madd(q, z, 1.0f / 120);
  q = detail::madd(q, z, 1.0f / 24);
  q = detail::madd(q, z, 1.0f / 6);
  q = detail::madd(q, z, 0.5f);
  const float small = q * (z * z) + z;
  const float em1 = z < 0.693147181f ? small : vm::exp(z) - 1.0f;
  const float y = std::copysign(em1 / (em1 + 2.0f), x);
  return x != x ? x : y;
}

/// erf x: x P(x^2) for |x| < 0.875; 1 - e^(-x^2) S(|x|) up to 3.9375 with S (= erfc x
/// e^(x^2), smooth) a polynomial about 1.4375 below 2 and about 2.96875 above; 1 beyond.
/// (Least-squares fits on Chebyshev nodes against float64 erf/erfc.)
ORTC_KERN_ALWAYS_INLINE float erf(float x) {
  const float a = std::fabs(x), s = a * a;
  float p = 8.671101289e-05f;
  p = detail::madd(p, s, -8.210109191e-04f);
  p = detail::madd(p, s, 5.206660757e-03f);
  p = detail::madd(p, s, -2.686154979e-02f);
  p = detail::madd(p, s, 1.128373236e-01f);
  p = detail::madd(p, s, -3.761263602e-01f);
  p = detail::madd(p, s, 1.128379167e+00f);
  const bool lo = a < 2.0f;
  const float u = a - (lo ? 1.4375f : 2.96875f);
  float q = lo ? -9.397937112e-05f : -1.478133814e-06f;
  q = detail::madd(q, u, (lo ? 2.918029275e-04f : 6.298875197e-06f));
  q = detail::madd(q, u, (lo ? -7.837608040e-04f : -2.223501399e-05f));
  q = detail::madd(q, u, (lo ? 2.195215948e-03f : 8.762669399e-05f));
  q = detail::madd(q, u, (lo ? -5.910684762e-03f : -3.402355633e-04f));
  q = detail::madd(q, u, (lo ? 1.510260516e-02f : 1.275153000e-03f));
  q = detail::madd(q, u, (lo ? -3.648584703e-02f : -4.635534114e-03f));
  q = detail::madd(q, u, (lo ? 8.265209604e-02f : 1.631155827e-02f));
  q = detail::madd(q, u, (lo ? -1.735411737e-01f : -5.537830666e-02f));
  q = detail::madd(q, u, (lo ? 3.321175629e-01f : 1.807159347e-01f));
  const float tail = 1.0f - vm::exp(-s) * q;
  const float y = a < 0.875f ? a * p : (a < 3.9375f ? tail : 1.0f);
  return x != x ? x : std::copysign(y, x);
}

inline double exp(double x) { return std::exp(x); }
inline double log(double x) { return std::log(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double erf(double x) { return std::erf(x); }
/// The rest of what generated kernels call (exact, or without SIMD variants).
using std::ceil;
using std::cos;
using std::floor;
using std::pow;
using std::rint;
using std::sin;
using std::sqrt;
} // namespace vm

//===----------------------------------------------------------------------===//
// GELU
//===----------------------------------------------------------------------===//

/// The math policy of the shared formulas (kernels/common/ortc_scalar.h) in this
/// library: the vectorisation-stable functions above for float, libm for double.
struct VmMath {
  template <typename T> static ORTC_KERN_ALWAYS_INLINE T exp(T x) { return vm::exp(x); }
  template <typename T> static ORTC_KERN_ALWAYS_INLINE T erf(T x) { return vm::erf(x); }
  template <typename T> static ORTC_KERN_ALWAYS_INLINE T tanh(T x) { return vm::tanh(x); }
};

/// GELU of one element (scalar::gelu); generated pointwise kernels call it, inlined
/// and vectorised through the vectorisation-stable erf and tanh.
template <typename T> ORTC_KERN_ALWAYS_INLINE T geluOf(T v, bool tanhApprox) {
  return scalar::gelu<VmMath>(v, tanhApprox);
}

/// dx of GELU for one element (scalar::geluGrad).
template <typename T> ORTC_KERN_ALWAYS_INLINE T geluGradOf(T v, T dy, bool tanhApprox) {
  return scalar::geluGrad<VmMath>(v, dy, tanhApprox);
}

/// The logistic function of one element (scalar::sigmoid); generated pointwise
/// kernels call it.
template <typename T> ORTC_KERN_ALWAYS_INLINE T sigmoidOf(T v) {
  return scalar::sigmoid<VmMath>(v);
}

/// gelu over n elements; y may alias x. (One loop per form, so that each
/// vectorises without the other's math.)
template <typename T> void gelu(const T *x, T *y, int64_t n, bool tanhApprox) {
  if (tanhApprox) {
    ORTC_KERN_PARALLEL_FOR_SIMD(n * 16)
    for (int64_t i = 0; i < n; ++i)
      y[i] = geluOf(x[i], true);
  } else {
    ORTC_KERN_PARALLEL_FOR_SIMD(n * 16)
    for (int64_t i = 0; i < n; ++i)
      y[i] = geluOf(x[i], false);
  }
}

/// geluGrad over n elements; dx may alias dy.
template <typename T>
void geluGrad(const T *x, const T *dy, T *dx, int64_t n, bool tanhApprox) {
  if (tanhApprox) {
    ORTC_KERN_PARALLEL_FOR_SIMD(n * 16)
    for (int64_t i = 0; i < n; ++i)
      dx[i] = geluGradOf(x[i], dy[i], true);
  } else {
    ORTC_KERN_PARALLEL_FOR_SIMD(n * 16)
    for (int64_t i = 0; i < n; ++i)
      dx[i] = geluGradOf(x[i], dy[i], false);
  }
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// One tensor of an optimizer update: parameter, gradient, state (SGD's momentum
/// buffer in m; AdamW's moments in m and v; null where unused), element count.
template <typename T> struct UpdateTensor {
  T *p;
  const T *g;
  T *m, *v;
  int64_t n;
};

namespace detail {
/// Runs fn(tensor, begin, end) over the elements of `count` tensors taken as one
/// index space split evenly among the pool's threads, in one parallel region
/// (apex's multi_tensor_apply, llm.c's fused AdamW): one fork/join for every
/// parameter of a model, and small tensors share a thread instead of each paying
/// for a region of its own.
template <typename T, typename F>
void forEachSpan(const UpdateTensor<T> *ts, int count, int64_t opsPerElement, F fn) {
  int64_t total = 0;
  for (int k = 0; k < count; ++k)
    total += ts[k].n;
  auto run = [&](int64_t lo, int64_t hi) {
    int64_t base = 0;
    for (int k = 0; k < count && base < hi; base += ts[k].n, ++k) {
      int64_t b = std::max(lo, base), e = std::min(hi, base + ts[k].n);
      if (b < e)
        fn(ts[k], b - base, e - base);
    }
  };
#if defined(_OPENMP)
  if (total * opsPerElement > kParallelWork) {
    ORTC_KERN_PRAGMA(omp parallel)
    {
      int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      run(total * t / nt, total * (t + 1) / nt);
    }
    return;
  }
#endif
  run(0, total);
}

/// Calls f with one std::true_type / std::false_type per run-time flag, so
/// that a loop written with `if constexpr` on them is compiled once per
/// combination, with no test left inside it.
template <typename F, typename... Fixed> struct FlagDispatch {
  F &f;
  void operator()() { f(Fixed{}...); }
  template <typename... Rest> void operator()(bool b, Rest... rest) {
    if (b)
      FlagDispatch<F, Fixed..., std::true_type>{f}(rest...);
    else
      FlagDispatch<F, Fixed..., std::false_type>{f}(rest...);
  }
};
template <typename F, typename... Flags> void dispatchFlags(F &&f, Flags... flags) {
  FlagDispatch<std::remove_reference_t<F>>{f}(static_cast<bool>(flags)...);
}
} // namespace detail

/// One torch.optim.SGD step (maximize=False) on every tensor of `ts`, gated by
/// `apply`: if apply is non-null and *apply == 0 nothing is written.
///   d = g + weightDecay * p
///   if momentum != 0:
///     buf = (step == 1) ? d : momentum * buf + (1 - dampening) * d
///     d = nesterov ? d + momentum * buf : buf
///   p -= lr * d
/// buf (m) may be null when momentum == 0. step is 1-based (the buffer is
/// initialised, without dampening, on step 1). Scalar coefficients are
/// formed in double and rounded to T, as PyTorch does with Python floats.
template <typename T>
void sgdUpdateMulti(const UpdateTensor<T> *ts, int count, NoDeduce<T> lr, NoDeduce<T> momentum,
                    NoDeduce<T> dampening, bool nesterov, NoDeduce<T> weightDecay,
                    int64_t step, const uint8_t *apply) {
  if (apply && *apply == 0)
    return;
  const bool useMom = momentum != T(0);
  const bool first = step <= 1;
  const T damp = static_cast<T>(1.0 - static_cast<double>(dampening));
  // The settings are copied into the lambda and each combination gets a loop
  // of its own: read through references, every iteration reloaded them (a
  // store through p may alias them), and the loop stayed scalar (3x slower).
  const T lrT = lr, mom = momentum, wd = weightDecay;
  detail::forEachSpan(ts, count, 4, [=](const UpdateTensor<T> &t, int64_t lo, int64_t hi) {
    T *__restrict p = t.p;
    T *__restrict buf = t.m;
    const T *__restrict g = t.g;
    auto run = [&](auto decayed, auto withMom, auto firstStep, auto nest) {
      ORTC_KERN_SIMD
      for (int64_t i = lo; i < hi; ++i) {
        T d = g[i];
        if constexpr (decltype(decayed)::value)
          d = d + wd * p[i];
        if constexpr (decltype(withMom)::value) {
          T b;
          if constexpr (decltype(firstStep)::value)
            b = d;
          else
            b = buf[i] * mom + d * damp;
          buf[i] = b;
          if constexpr (decltype(nest)::value)
            d = d + mom * b;
          else
            d = b;
        }
        p[i] = p[i] - lrT * d;
      }
    };
    detail::dispatchFlags(run, wd != T(0), useMom, first, nesterov);
  });
}

/// sgdUpdateMulti on one tensor of n parameters.
template <typename T>
void sgdUpdate(T *p, const T *g, NoDeduce<T> *buf, int64_t n, NoDeduce<T> lr,
               NoDeduce<T> momentum, NoDeduce<T> dampening, bool nesterov,
               NoDeduce<T> weightDecay, int64_t step, const uint8_t *apply) {
  const UpdateTensor<T> t{p, g, buf, nullptr, n};
  sgdUpdateMulti(&t, 1, lr, momentum, dampening, nesterov, weightDecay, step, apply);
}

/// One torch.optim.AdamW step (amsgrad=False, maximize=False) on every tensor of
/// `ts`, gated by `apply` (null or *apply != 0 means apply; otherwise nothing is
/// written). step is 1-based (t):
///   p *= 1 - lr * weightDecay
///   m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
///   stepSize = lr / (1 - beta1^t)
///   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
///   p -= stepSize * m / denom
/// Scalars are formed in double and rounded to T (PyTorch's Python floats);
/// lerp uses PyTorch's two-sided formula.
template <typename T>
void adamwUpdateMulti(const UpdateTensor<T> *ts, int count, NoDeduce<T> lr, NoDeduce<T> beta1,
                      NoDeduce<T> beta2, NoDeduce<T> eps, NoDeduce<T> weightDecay,
                      int64_t step, const uint8_t *apply) {
  if (apply && *apply == 0)
    return;
  const double dlr = lr, db1 = beta1, db2 = beta2;
  const double t = static_cast<double>(step);
  const T decay = static_cast<T>(1.0 - dlr * static_cast<double>(weightDecay));
  const T w1 = static_cast<T>(1.0 - db1);
  const T c2 = static_cast<T>(1.0 - db2);
  const T stepSize = static_cast<T>(dlr / (1.0 - std::pow(db1, t)));
  const T bc2Sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(db2, t)));
  const bool lowW = std::abs(static_cast<double>(w1)) < 0.5;
  const T b2 = beta2, epsT = eps;
  // By value, one loop per lerp form: see sgdUpdateMulti.
  detail::forEachSpan(ts, count, 8, [=](const UpdateTensor<T> &tn, int64_t lo, int64_t hi) {
    T *__restrict p = tn.p;
    T *__restrict m = tn.m;
    T *__restrict v = tn.v;
    const T *__restrict g = tn.g;
    auto run = [&](auto low) {
      ORTC_KERN_SIMD
      for (int64_t i = lo; i < hi; ++i) {
        const T gi = g[i];
        const T pi = p[i] * decay;
        const T diff = gi - m[i];
        T mi;
        if constexpr (decltype(low)::value)
          mi = m[i] + w1 * diff;
        else
          mi = gi - diff * (T(1) - w1);
        const T vi = v[i] * b2 + c2 * gi * gi;
        const T denom = std::sqrt(vi) / bc2Sqrt + epsT;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - stepSize * mi / denom;
      }
    };
    detail::dispatchFlags(run, lowW);
  });
}

/// adamwUpdateMulti on one tensor of n parameters.
template <typename T>
void adamwUpdate(T *p, const T *g, T *m, T *v, int64_t n, NoDeduce<T> lr,
                 NoDeduce<T> beta1, NoDeduce<T> beta2, NoDeduce<T> eps,
                 NoDeduce<T> weightDecay, int64_t step, const uint8_t *apply) {
  const UpdateTensor<T> t{p, g, m, v, n};
  adamwUpdateMulti(&t, 1, lr, beta1, beta2, eps, weightDecay, step, apply);
}

//===----------------------------------------------------------------------===//
// Checks and norms
//===----------------------------------------------------------------------===//

/// True iff every x[i] is finite (no NaN / +-inf); bit-level test, so it
/// also works under -ffast-math (torch.isfinite(x).all()).
template <typename T> bool allFinite(const T *x, int64_t n) {
  int bad = 0;
  ORTC_KERN_PRAGMA(omp parallel for simd schedule(static) reduction(| : bad) if (
      parallel : n > ::ortc::kern::detail::kParallelWork))
  for (int64_t i = 0; i < n; ++i)
    bad |= detail::isFiniteBits(x[i]) ? 0 : 1;
  return bad == 0;
}

/// sum(x[i]^2) accumulated in double (for gradient-norm clipping:
/// torch.linalg.vector_norm(x)^2), rounded to T. The summation order is a
/// fixed blocking, so the result does not depend on the thread count.
template <typename T> T sumSquares(const T *x, int64_t n) {
  constexpr int64_t kChunk = int64_t(1) << 14;
  const int64_t nChunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(nChunks), 0.0);
  ORTC_KERN_PARALLEL_FOR(n)
  for (int64_t c = 0; c < nChunks; ++c) {
    const T *xc = x + c * kChunk;
    part[c] = detail::runSum(std::min(n, (c + 1) * kChunk) - c * kChunk, [&](int64_t i) {
      return static_cast<double>(xc[i]) * static_cast<double>(xc[i]);
    });
  }
  double s = 0;
  for (double p : part)
    s += p;
  return static_cast<T>(s);
}

} // namespace kern
} // namespace ortc

//===----------------------------------------------------------------------===//
// The float instantiations, compiled once
//===----------------------------------------------------------------------===//

// Generated code (built with ORTC_KERN_FLOAT_OBJECT) does not instantiate the float
// kernels above in each of its units: they are declared `extern template` here and
// defined in one object, ortc_kernels_lib.o, compiled from this header with
// ORTC_KERN_INSTANTIATE defined (ortc ships it prebuilt for each --cpu level and its
// own compiler; other compilers and flags compile it once into the kernel cache). A
// unit then compiles only its own kernels. Without either macro the header stays
// header-only.
#if defined(ORTC_KERN_FLOAT_OBJECT) || defined(ORTC_KERN_INSTANTIATE)
#define ORTC_KERN_FLOAT_FUNCTIONS(X) X(matmulStrided) X(matmul) X(matmulLayout) \
  X(matmulPanels) X(broadcastTo) \
  X(reduce) X(transpose) X(concat) X(split) X(slice) X(sliceGrad) X(pad) X(gather) \
  X(gatherGrad) X(gatherElements) X(scatterElements) X(argReduce) X(topK) X(cumsum) \
  X(reduceProdGrad) X(convForward) X(convGradInput) X(convGradWeight) \
  X(convForwardBatched) X(convGradInputBatched) X(convGradWeightBatched) X(maxPool) \
  X(maxPoolGrad) X(avgPool) X(avgPoolGrad) X(softmax) X(logSoftmax) X(softmaxGrad) \
  X(logSoftmaxGrad) X(layerNorm) X(layerNormGrad) X(batchNormTrain) X(batchNormGrad) \
  X(batchNormInfer) X(softmaxCrossEntropy) X(softmaxCrossEntropyGrad) \
  X(randomUniform) X(dropout) X(dropoutGrad) X(gelu) X(geluGrad) X(sgdUpdateMulti) \
  X(sgdUpdate) X(adamwUpdateMulti) X(adamwUpdate) X(allFinite) X(sumSquares)
#if defined(ORTC_KERN_INSTANTIATE)
#define ORTC_KERN_FLOAT_INSTANCE(f) template decltype(ortc::kern::f<float>) ortc::kern::f<float>;
#define ORTC_KERN_WIDE_INSTANCE(S)                                             \
  template decltype(ortc::kern::matmulWide<S>) ortc::kern::matmulWide<S>;      \
  template decltype(ortc::kern::matmulWide<S, S>) ortc::kern::matmulWide<S, S>;
#else
#define ORTC_KERN_FLOAT_INSTANCE(f)                                            \
  extern template decltype(ortc::kern::f<float>) ortc::kern::f<float>;
#define ORTC_KERN_WIDE_INSTANCE(S)                                             \
  extern template decltype(ortc::kern::matmulWide<S>) ortc::kern::matmulWide<S>; \
  extern template decltype(ortc::kern::matmulWide<S, S>) ortc::kern::matmulWide<S, S>;
#endif
ORTC_KERN_FLOAT_FUNCTIONS(ORTC_KERN_FLOAT_INSTANCE)
ORTC_KERN_WIDE_INSTANCE(ortc_bf16)
ORTC_KERN_WIDE_INSTANCE(ortc_half)
#undef ORTC_KERN_FLOAT_INSTANCE
#undef ORTC_KERN_WIDE_INSTANCE
#endif

#endif // ORTC_CODEGEN_CPU_KERNELS_ORTC_KERNELS_H
