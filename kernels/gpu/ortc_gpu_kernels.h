//===- ortc_gpu_kernels.h - Shared CUDA/HIP kernels for ortc ----*- C++ -*-===//
//
// The GPU counterpart of kernels/cpu/ortc_kernels.h, with the same
// semantics (see the comments there), written once for both vendors against the
// seam macros of the generated file's prelude (codegen/gpu/TargetInfo.h):
// ORTC_WARP_SIZE, ORTC_SHFL_DOWN, ORTC_BARRIER, ORTC_LAUNCH_BOUNDS, ortcStream_t,
// ORTC_MEMCPY_ASYNC, ORTC_MEMSET_ASYNC, ORTC_API, ortcDeviceProp, ORTC_ARCH_NAME and
// optionally ORTC_VENDOR_GEMM.
//
// Conventions: every pointer is a device pointer; every host launcher takes the
// stream last and only enqueues work (never synchronises, never reads device
// memory on the host). Scalars that live in tensors (lr, step, seed, the update
// gate, dloss) are passed as device pointers and read by the kernels.
// Reductions use warp shuffles (blockReduce); sums accumulate in double like the
// CPU library (same kernels, same error bound: a float result does not degrade with
// the count of its terms; variances two-pass), but in a different order (strided
// per-thread partials, then a tree across the block), so results agree to rounding
// only. GEMM accumulates in float, like cuBLAS with FP32 compute, except where an Accum
// (--accum-dtype) asks for emulated 16-bit sums (tiled GEMM and reductions only).
// Per-element formulas (GELU, sigmoid, dropout's counter-based draws, imod) are
// kernels/common/ortc_scalar.h's, the CPU library's too: masks match bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_GPU_KERNELS_H
#define ORTC_GPU_KERNELS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <type_traits>

#ifndef ORTC_WARP_SIZE
#error "include the target prelude (ORTC_WARP_SIZE...) before ortc_gpu_kernels.h"
#endif

// kernels/common: pasted in when the compiler embeds this library.
#include "ortc_scalar.h"

/// Element conversion of generated kernels (the CPU's ortc_cvt): static_cast, which for
/// float16 / bfloat16 (ortc_half, ortc_bf16) is the vendors' round-to-nearest-even
/// conversion from float, or the exact one to float.
template <typename D, typename S> __host__ __device__ inline D ortc_cvt(S s) {
  return static_cast<D>(s);
}
/// A stored float as a double, exactly (16-bit ones through float).
template <typename S> __host__ __device__ inline double ortc_wide(S s) {
  if constexpr (sizeof(S) == 2)
    return static_cast<double>(ortc_cvt<float>(s));
  else
    return static_cast<double>(s);
}
/// A double result stored as T the way a float result cast to T is: through float for
/// the 16-bit types (the CPU's ortc_cvt from double; CUDA's own double to bfloat16
/// conversion rounds once, which can differ).
template <typename T> __host__ __device__ inline T ortc_narrow(double v) {
  if constexpr (sizeof(T) == 2)
    return ortc_cvt<T>(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

namespace ortc {
namespace gpu {

constexpr int kBlock = 256;    ///< threads of elementwise / row kernels
constexpr int kMaxRank = 8;    ///< layout kernels take shapes up to this rank
constexpr int kTile = 64;      ///< GEMM tile (kTile x kTile outputs per block)
constexpr int kTileK = 16;     ///< GEMM depth per shared-memory stage

struct Dims {
  int64_t d[kMaxRank];
  int rank;
};

/// How a GEMM or sum accumulates (the CPU library's Accum, same values): Float, or
/// in bfloat16 / float16 over chunks of `chunk` terms whose sums add in float (0: one
/// chunk). Emulated: each addition is rounded to the 16-bit type.
struct Accum {
  enum Kind : int32_t { Float = 0, Bf16 = 1, Half = 2 };
  int32_t kind = Float;
  int64_t chunk = 0;
};
/// The generated source defines ORTC_GPU_ACCUM16 when some op of the model sums in 16
/// bits; without it only the float-summing GEMM and reduction kernels are compiled.
/// Each 16-bit GEMM variant is several times the size of the float one (its rounding
/// keeps the loops from unrolling), so for a float model they were most of nvcc's and
/// hipcc's time. A 16-bit kind reaching such a build is a codegen bug: it stops here
/// rather than summing in float.
#ifdef ORTC_GPU_ACCUM16
constexpr bool kAccum16 = true;
#else
constexpr bool kAccum16 = false;
#endif
inline void requireAccum16(const Accum &acc) {
  if (!kAccum16 && acc.kind != Accum::Float) {
    fprintf(stderr, "ortc: internal error: a 16-bit accumulation in kernels built without ORTC_GPU_ACCUM16\n");
    abort();
  }
}
/// x rounded to the 16-bit type of Kind, as a float.
template <int Kind> __device__ inline float round16(float x) {
  if constexpr (Kind == Accum::Bf16)
    return ortc_cvt<float>(ortc_cvt<ortc_bf16>(x));
  else
    return ortc_cvt<float>(ortc_cvt<ortc_half>(x));
}

inline unsigned gridFor(int64_t n, int64_t per = kBlock) {
  int64_t g = (n + per - 1) / per;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 0x7fffffff ? 0x7fffffff : g));
}

#define ORTC_FOR(i, n)                                                         \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);   \
       i += (int64_t)gridDim.x * blockDim.x)

//===----------------------------------------------------------------------===//
// Scalar helpers (same spelling as the CPU's std:: calls)
//===----------------------------------------------------------------------===//

template <typename T> __host__ __device__ inline T ortc_max(T a, T b) { return a < b ? b : a; }
template <typename T> __host__ __device__ inline T ortc_min(T a, T b) { return b < a ? b : a; }
__device__ inline float ortc_abs(float a) { return fabsf(a); }
__device__ inline double ortc_abs(double a) { return fabs(a); }
__device__ inline int64_t ortc_abs(int64_t a) { return a < 0 ? -a : a; }
__device__ inline int32_t ortc_abs(int32_t a) { return a < 0 ? -a : a; }
/// Like std::numeric_limits<T>::infinity() / quiet_NaN(): 0 for integer T (as
/// numeric_limits gives), never an undefined float-to-int cast.
template <typename T> __host__ __device__ inline T ortc_inf() {
  if constexpr (std::is_integral<T>::value)
    return T(0);
  else
    return static_cast<T>(__builtin_huge_val());
}
template <typename T> __host__ __device__ inline T ortc_nan() {
  if constexpr (std::is_integral<T>::value)
    return T(0);
  else
    return static_cast<T>(__builtin_nan(""));
}
/// The identity of Max (the CPU's detail::maxIdentity): -inf for floats, the lowest
/// value for integers (0 for the unsigned bool bytes).
template <typename T> __host__ __device__ inline T ortc_lowest() {
  if constexpr (!std::is_integral<T>::value)
    return -ortc_inf<T>();
  else if constexpr (std::is_signed<T>::value)
    return static_cast<T>(static_cast<typename std::make_unsigned<T>::type>(1) << (sizeof(T) * 8 - 1));
  else
    return T(0);
}
/// ONNX Mod on integers (kernels/common/ortc_scalar.h).
using scalar::imod;
template <typename T> __device__ inline bool isNaN(T v) { return v != v; }
__device__ inline bool isFinite(float v) { return (__float_as_int(v) & 0x7f800000) != 0x7f800000; }
__device__ inline bool isFinite(double v) {
  return (__double_as_longlong(v) & 0x7ff0000000000000LL) != 0x7ff0000000000000LL;
}
template <typename T> __device__ inline bool isFinite(T) { return true; } // integers

//===----------------------------------------------------------------------===//
// Warp / block reductions
//===----------------------------------------------------------------------===//

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
/// Max that propagates NaN (torch.amax).
struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return (b > a || isNaN(b)) ? b : a;
  }
};

template <typename T, typename Op> __device__ inline T warpReduce(T v, Op op) {
  for (int o = ORTC_WARP_SIZE / 2; o > 0; o >>= 1)
    v = op(v, static_cast<T>(ORTC_SHFL_DOWN(v, o))); // (small integer T shuffles as int)
  return v; // lane 0 holds the result
}

/// Block-wide reduction (blockDim.x a multiple of the warp size, <= 1024): every
/// thread gets the result. Shuffles within warps, shared memory across them.
template <typename T, typename Op> __device__ inline T blockReduce(T v, Op op, T identity) {
  __shared__ T partial[1024 / 32];
  const int lane = threadIdx.x % ORTC_WARP_SIZE, w = threadIdx.x / ORTC_WARP_SIZE;
  const int nw = (blockDim.x + ORTC_WARP_SIZE - 1) / ORTC_WARP_SIZE;
  v = warpReduce(v, op);
  if (lane == 0)
    partial[w] = v;
  ORTC_BARRIER();
  if (w == 0) {
    v = lane < nw ? partial[lane] : identity;
    v = warpReduce(v, op);
    if (lane == 0)
      partial[0] = v;
  }
  ORTC_BARRIER();
  T r = partial[0];
  ORTC_BARRIER();
  return r;
}

//===----------------------------------------------------------------------===//
// Fill, flags
//===----------------------------------------------------------------------===//

template <typename T> __global__ void ORTC_LAUNCH_BOUNDS(kBlock) fillKernel(T *p, int64_t n, T v) {
  ORTC_FOR(i, n) p[i] = v;
}
template <typename T> void fill(T *p, int64_t n, T v, ortcStream_t s) {
  fillKernel<<<gridFor(n), kBlock, 0, s>>>(p, n, v);
}

/// p[i] /= d: the mean of a data-parallel all-reduce's sum (as the CPU target divides).
template <typename T> __global__ void ORTC_LAUNCH_BOUNDS(kBlock) divideKernel(T *p, int64_t n, T d) {
  ORTC_FOR(i, n) p[i] = p[i] / d;
}
template <typename T> void divide(T *p, int64_t n, T d, ortcStream_t s) {
  divideKernel<<<gridFor(n), kBlock, 0, s>>>(p, n, d);
}

/// Error flag of index-checking kernels (gather, losses): cleared, set by a check
/// kernel, read by the kernels after it on the same stream.
__device__ int ortcErrorFlag;

__global__ void clearFlagKernel() { ortcErrorFlag = 0; }
template <typename T> __global__ void poisonIfFlagKernel(T *p, int64_t n) {
  if (ortcErrorFlag == 0)
    return;
  ORTC_FOR(i, n) p[i] = ortc_nan<T>();
}
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) checkIndexKernel(const int64_t *idx, int64_t n, int64_t A) {
  ORTC_FOR(j, n) if (idx[j] < -A || idx[j] >= A) atomicExch(&ortcErrorFlag, 1);
}

//===----------------------------------------------------------------------===//
// Vector packs for the generated elementwise kernels
//===----------------------------------------------------------------------===//

/// Whether `p` is aligned to `bytes` (the launcher picks vector packs only then).
inline bool aligned(const void *p, unsigned long bytes) {
  return (reinterpret_cast<unsigned long>(p) & (bytes - 1)) == 0;
}
/// dst[l] = p[base + l] for l < V: one vector load when the whole pack is in range
/// (the caller checked alignment), element loads at the tail.
template <int V, typename T>
__device__ inline void loadPack(T (&dst)[V], const T *p, int64_t base, int64_t n) {
  struct alignas(V * sizeof(T)) Pack { T v[V]; };
  if (V > 1 && base + V <= n) {
    const Pack k = *reinterpret_cast<const Pack *>(p + base);
#pragma unroll
    for (int l = 0; l < V; ++l)
      dst[l] = k.v[l];
  } else {
#pragma unroll
    for (int l = 0; l < V; ++l)
      dst[l] = base + l < n ? p[base + l] : T(0);
  }
}
template <int V, typename T>
__device__ inline void storePack(T *p, const T (&src)[V], int64_t base, int64_t n) {
  struct alignas(V * sizeof(T)) Pack { T v[V]; };
  if (V > 1 && base + V <= n) {
    Pack k;
#pragma unroll
    for (int l = 0; l < V; ++l)
      k.v[l] = src[l];
    *reinterpret_cast<Pack *>(p + base) = k;
  } else {
#pragma unroll
    for (int l = 0; l < V; ++l)
      if (base + l < n)
        p[base + l] = src[l];
  }
}

//===----------------------------------------------------------------------===//
// GELU, dropout
//===----------------------------------------------------------------------===//

/// The math policy of the shared formulas (kernels/common/ortc_scalar.h) here: the
/// device's libm (the global overloads, float ones for float).
struct DeviceMath {
  template <typename T> __host__ __device__ static T exp(T x) { return ::exp(x); }
  template <typename T> __host__ __device__ static T erf(T x) { return ::erf(x); }
  template <typename T> __host__ __device__ static T tanh(T x) { return ::tanh(x); }
};

/// GELU, its dx and the sigmoid of one element; generated pointwise kernels call them.
template <typename T> __device__ inline T geluOf(T v, bool tanhApprox) {
  return scalar::gelu<DeviceMath>(v, tanhApprox);
}
template <typename T> __device__ inline T geluGradOf(T v, T dy, bool tanhApprox) {
  return scalar::geluGrad<DeviceMath>(v, dy, tanhApprox);
}
template <typename T> __device__ inline T sigmoidOf(T v) { return scalar::sigmoid<DeviceMath>(v); }

/// Dropout's draws: the CPU library's, bit for bit (the same header).
using scalar::dropoutOf;

template <typename T, typename S>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) dropoutKernel(const T *x, T *y, int64_t n, double ratio, const S *seed, uint64_t key) {
  const uint64_t sd = static_cast<uint64_t>(*seed);
  ORTC_FOR(i, n) y[i] = dropoutOf(x[i], sd, key, i, ratio);
}
/// The CPU library's randomUniform, bit for bit (the draw is computed in double).
template <typename T, typename S>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) randomUniformKernel(T *y, int64_t n, double low, double high, const S *seed, uint64_t key) {
  const uint64_t sd = static_cast<uint64_t>(*seed);
  ORTC_FOR(i, n) y[i] = static_cast<T>(scalar::uniformOf(low, high, sd, key, static_cast<uint64_t>(i)));
}
template <typename T, typename S>
void randomUniform(T *y, int64_t n, double low, double high, const S *seed, uint64_t key, ortcStream_t s) {
  randomUniformKernel<<<gridFor(n), kBlock, 0, s>>>(y, n, low, high, seed, key);
}
/// Also the gradient (same mask): dropoutGrad(dy, dx, ...) == dropout(dy, dx, ...).
template <typename T, typename S>
void dropout(const T *x, T *y, int64_t n, double ratio, const S *seed, uint64_t key, ortcStream_t s) {
  dropoutKernel<<<gridFor(n), kBlock, 0, s>>>(x, y, n, ratio, seed, key);
}

//===----------------------------------------------------------------------===//
// Layout kernels
//===----------------------------------------------------------------------===//

/// Offset in the source of element i of a strided view (dims, stride). The loop runs
/// over every possible dim with constant indices: indexed at run time, a by-value
/// Dims parameter is copied to each thread's local memory (a 25 MB copy took 0.3 ms
/// on an H100, a sixth of its bandwidth).
template <typename I> __device__ inline I stridedOffset(I i, I base, const Dims &stride, const Dims &dims) {
  I rem = i, off = base;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d >= dims.rank)
      continue;
    off += (rem % static_cast<I>(dims.d[d])) * static_cast<I>(stride.d[d]);
    rem /= static_cast<I>(dims.d[d]);
  }
  return off;
}
/// out (outDims) = in broadcast; inStride[d] is 0 on broadcast dims.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) broadcastKernel(const T *in, Dims inStride, Dims outDims, T *out, int64_t n) {
  ORTC_FOR(i, n) out[i] = in[stridedOffset<int64_t>(i, 0, inStride, outDims)];
}
template <typename T>
void broadcastTo(const T *in, const int64_t *inDims, T *out, const int64_t *outDims, int rank, ortcStream_t s) {
  Dims st{}, od{};
  st.rank = od.rank = rank;
  int64_t acc = 1, n = 1;
  for (int d = rank - 1; d >= 0; --d) {
    st.d[d] = inDims[d] == 1 ? 0 : acc;
    acc *= inDims[d];
    od.d[d] = outDims[d];
    n *= outDims[d];
  }
  broadcastKernel<<<gridFor(n), kBlock, 0, s>>>(in, st, od, out, n);
}

/// Generic strided gather: out[i] = in[base + sum_d c_d * stride[d]] where c is
/// the coordinate of i in outDims. Transpose and slice are instances.
template <typename T, typename I>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) stridedCopyKernel(const T *in, I base, Dims stride, Dims outDims, T *out, I n) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x)
    out[i] = in[stridedOffset(i, base, stride, outDims)];
}
/// The adjoint scatter: out[base + sum c_d * stride[d]] = in[i].
template <typename T, typename I>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) stridedScatterKernel(const T *in, I base, Dims stride, Dims inDims, T *out, I n) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<I>(gridDim.x) * blockDim.x)
    out[stridedOffset(i, base, stride, inDims)] = in[i];
}

/// Merges the dims of a strided view that are contiguous in both the view and its
/// source (a transpose's inner rows, a slice's kept rows) and drops dims of size 1:
/// fewer divisions per element in the kernels above.
inline void collapseDims(Dims &stride, Dims &dims) {
  Dims s{}, d{};
  for (int k = 0; k < dims.rank; ++k) {
    if (dims.d[k] == 1)
      continue;
    if (d.rank > 0 && s.d[d.rank - 1] == stride.d[k] * dims.d[k]) {
      d.d[d.rank - 1] *= dims.d[k];
      s.d[d.rank - 1] = stride.d[k];
      continue;
    }
    s.d[d.rank] = stride.d[k];
    d.d[d.rank] = dims.d[k];
    ++d.rank;
  }
  stride = s;
  dims = d;
}

/// A strided copy whose output rows are not rows of the source (a transpose that moves
/// the source's contiguous dim b away from the output's last dim a): 32 x 32 tiles
/// through shared memory, read along b and written along a, so both sides coalesce.
/// Tiles of every index of the other dims ("batches") are strided over the grid; the
/// source's stride along b is 1, the output's along a.
constexpr int kTransposeTile = 32;
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) transposeTileKernel(const T *in, int64_t base, Dims stride, Dims dims, T *out, Dims outStride, int a, int b, int64_t lenA, int64_t lenB, int64_t strideA, int64_t outStrideB, int64_t tilesA, int64_t tilesB, int64_t tiles) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];
  const int tx = threadIdx.x % kTransposeTile, ty = threadIdx.x / kTransposeTile;
  const int rows = blockDim.x / kTransposeTile;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t ta = t % tilesA, tb = (t / tilesA) % tilesB;
    int64_t rest = t / (tilesA * tilesB), inOff = base, outOff = 0;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) { // constant indices, as in stridedOffset
      if (d >= dims.rank || d == a || d == b)
        continue;
      const int64_t c = rest % dims.d[d];
      rest /= dims.d[d];
      inOff += c * stride.d[d];
      outOff += c * outStride.d[d];
    }
    for (int k = ty; k < kTransposeTile; k += rows) {
      const int64_t ia = ta * kTransposeTile + k, ib = tb * kTransposeTile + tx;
      if (ia < lenA && ib < lenB)
        tile[k][tx] = in[inOff + ia * strideA + ib];
    }
    ORTC_BARRIER();
    for (int k = ty; k < kTransposeTile; k += rows) {
      const int64_t ib = tb * kTransposeTile + k, ia = ta * kTransposeTile + tx;
      if (ia < lenA && ib < lenB)
        out[outOff + ib * outStrideB + ia] = tile[tx][k];
    }
    ORTC_BARRIER();
  }
}

/// One strided copy (scatter when `scatter`): collapsed dims; a tiled transpose when
/// the source's contiguous dim is not the output's last; else one element per thread
/// with 32-bit index arithmetic when every index fits (64-bit division is several
/// times slower on GPUs).
template <typename T>
void stridedLaunch(bool scatter, const T *in, int64_t base, Dims stride, Dims dims, T *out, int64_t n, ortcStream_t s) {
  if (n <= 0)
    return;
  collapseDims(stride, dims);
  const int a = dims.rank - 1;
  int b = -1;
  for (int d = 0; d < a; ++d)
    if (stride.d[d] == 1)
      b = d;
  if (!scatter && b >= 0 && stride.d[a] != 1 && dims.d[a] >= 8 && dims.d[b] >= 8) {
    Dims outStride{};
    outStride.rank = dims.rank;
    for (int d = a; d >= 0; --d)
      outStride.d[d] = d == a ? 1 : outStride.d[d + 1] * dims.d[d + 1];
    const int64_t tilesA = (dims.d[a] + kTransposeTile - 1) / kTransposeTile;
    const int64_t tilesB = (dims.d[b] + kTransposeTile - 1) / kTransposeTile;
    const int64_t tiles = tilesA * tilesB * (n / (dims.d[a] * dims.d[b]));
    transposeTileKernel<T><<<gridFor(tiles, 1), kBlock, 0, s>>>(in, base, stride, dims, out, outStride, a, b,
                                                               dims.d[a], dims.d[b], stride.d[a], outStride.d[b],
                                                               tilesA, tilesB, tiles);
    return;
  }
  int64_t last = base;
  for (int d = 0; d < dims.rank; ++d)
    last += (dims.d[d] - 1) * (stride.d[d] < 0 ? -stride.d[d] : stride.d[d]);
  if (n < (int64_t(1) << 30) && last < (int64_t(1) << 30) && base >= 0) { // i + grid stride fits too
    if (scatter)
      stridedScatterKernel<T, int32_t><<<gridFor(n), kBlock, 0, s>>>(in, int32_t(base), stride, dims, out, int32_t(n));
    else
      stridedCopyKernel<T, int32_t><<<gridFor(n), kBlock, 0, s>>>(in, int32_t(base), stride, dims, out, int32_t(n));
  } else if (scatter) {
    stridedScatterKernel<T, int64_t><<<gridFor(n), kBlock, 0, s>>>(in, base, stride, dims, out, n);
  } else {
    stridedCopyKernel<T, int64_t><<<gridFor(n), kBlock, 0, s>>>(in, base, stride, dims, out, n);
  }
}

inline Dims stridesOf(const int64_t *dims, int rank) {
  Dims st{};
  st.rank = rank;
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; --d) {
    st.d[d] = acc;
    acc *= dims[d];
  }
  return st;
}
inline int64_t product(const int64_t *dims, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i)
    p *= dims[i];
  return p;
}

template <typename T>
void transpose(const T *in, const int64_t *dims, int rank, const int64_t *perm, T *out, ortcStream_t s) {
  Dims inSt = stridesOf(dims, rank), st{}, od{};
  st.rank = od.rank = rank;
  for (int i = 0; i < rank; ++i) {
    od.d[i] = dims[perm[i]];
    st.d[i] = inSt.d[perm[i]];
  }
  const int64_t n = product(dims, rank);
  stridedLaunch(false, in, 0, st, od, out, n, s);
}

template <typename T>
void slice(const T *in, const int64_t *inDims, int rank, const int64_t *starts, const int64_t *steps, T *out,
           const int64_t *outDims, ortcStream_t s) {
  Dims st = stridesOf(inDims, rank), od{};
  od.rank = rank;
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) {
    base += starts[d] * st.d[d];
    st.d[d] *= steps[d];
    od.d[d] = outDims[d];
  }
  const int64_t n = product(outDims, rank);
  stridedLaunch(false, in, base, st, od, out, n, s);
}

template <typename T>
void sliceGrad(const T *dy, const int64_t *dyDims, int rank, const int64_t *starts, const int64_t *steps, T *dx,
               const int64_t *dxDims, ortcStream_t s) {
  ORTC_MEMSET_ASYNC(dx, 0, product(dxDims, rank) * sizeof(T), s);
  Dims st = stridesOf(dxDims, rank), id{};
  id.rank = rank;
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) {
    base += starts[d] * st.d[d];
    st.d[d] *= steps[d];
    id.d[d] = dyDims[d];
  }
  const int64_t n = product(dyDims, rank);
  stridedLaunch(true, dy, base, st, id, dx, n, s);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) padKernel(const T *in, Dims inDims, Dims begin, Dims outDims, T value, T *out, int64_t n) {
  ORTC_FOR(i, n) {
    int64_t rem = i, off = 0, st = 1;
    bool inside = true;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) { // constant indices (see stridedOffset)
      if (d >= outDims.rank)
        continue;
      const int64_t c = rem % outDims.d[d] - begin.d[d];
      rem /= outDims.d[d];
      inside = inside && c >= 0 && c < inDims.d[d];
      off += c * st;
      st *= inDims.d[d];
    }
    out[i] = inside ? in[off] : value;
  }
}
template <typename T>
void pad(const T *in, const int64_t *inDims, int rank, const int64_t *begin, T value, T *out, const int64_t *outDims,
         ortcStream_t s) {
  Dims id{}, b{}, od{};
  id.rank = b.rank = od.rank = rank;
  for (int d = 0; d < rank; ++d) {
    id.d[d] = inDims[d];
    b.d[d] = begin[d];
    od.d[d] = outDims[d];
  }
  const int64_t n = product(outDims, rank);
  padKernel<<<gridFor(n), kBlock, 0, s>>>(in, id, b, od, value, out, n);
}

/// One input of a concat: out[o, offset + j] = in[o, j] for j < rowLen.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) concatPartKernel(const T *in, int64_t rowLen, int64_t outRow, int64_t offset, T *out, int64_t n) {
  ORTC_FOR(i, n) out[(i / rowLen) * outRow + offset + i % rowLen] = in[i];
}
template <typename T>
void concat(const T *const *ins, const int64_t *sizes, int nIn, int64_t outer, int64_t inner, T *out, ortcStream_t s) {
  int64_t total = 0;
  for (int i = 0; i < nIn; ++i)
    total += sizes[i];
  int64_t off = 0;
  for (int i = 0; i < nIn; ++i) {
    const int64_t rowLen = sizes[i] * inner, n = outer * rowLen;
    if (n > 0)
      concatPartKernel<<<gridFor(n), kBlock, 0, s>>>(ins[i], rowLen, total * inner, off, out, n);
    off += rowLen;
  }
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) gatherKernel(const T *data, int64_t A, int64_t inner, const int64_t *idx, int64_t nIdx, T *out, int64_t n) {
  if (ortcErrorFlag)
    return;
  ORTC_FOR(t, n) {
    const int64_t i = t % inner, r = t / inner, j = r % nIdx, o = r / nIdx;
    const int64_t k = idx[j] < 0 ? idx[j] + A : idx[j];
    out[t] = data[(o * A + k) * inner + i];
  }
}
/// Returns nothing: an out-of-range index makes the whole output NaN (the CPU's
/// ortc_poison), decided on the device.
template <typename T>
void gather(const T *data, const int64_t *dims, int rank, int axis, const int64_t *idx, int64_t nIdx, T *out,
            ortcStream_t s) {
  if (axis < 0)
    axis += rank;
  const int64_t outer = product(dims, axis), A = dims[axis], inner = product(dims + axis + 1, rank - axis - 1);
  const int64_t n = outer * nIdx * inner;
  clearFlagKernel<<<1, 1, 0, s>>>();
  checkIndexKernel<<<gridFor(nIdx), kBlock, 0, s>>>(idx, nIdx, A);
  gatherKernel<<<gridFor(n), kBlock, 0, s>>>(data, A, inner, idx, nIdx, out, n);
  poisonIfFlagKernel<<<gridFor(n), kBlock, 0, s>>>(out, n);
}

/// dx[o, k, i] = the sum of dy[o, j, i] over the positions j with idx[j] == k, added in
/// order of j, as the CPU target adds them (no atomics: the same bits on every run). One
/// block per (o, j): if an earlier position names the same row, that position's block
/// owns it; otherwise the block walks the later positions a block-size chunk at a time,
/// lists the matching ones in order (thread 0, in shared memory) and adds their dy rows
/// into dx's row, each thread over its own columns. Rows no index names stay zero.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) gatherGradKernel(const T *dy, int64_t A, int64_t inner, const int64_t *idx, int64_t nIdx, T *dx, int64_t blocks) {
  __shared__ int64_t matched[kBlock];
  __shared__ unsigned char hit[kBlock];
  __shared__ int count;
  if (ortcErrorFlag) // set by checkIndexKernel before this kernel: the same for every block
    return;
  auto row = [&](int64_t q) { return idx[q] < 0 ? idx[q] + A : idx[q]; };
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t o = b / nIdx, j = b % nIdx, k = row(j);
    int earlier = 0;
    for (int64_t q = threadIdx.x; q < j; q += blockDim.x)
      earlier |= row(q) == k;
    if (blockReduce(earlier, [](int x, int y) { return x | y; }, 0))
      continue; // an earlier block owns this row
    T *out = dx + (o * A + k) * inner;
    for (int64_t base = j; base < nIdx; base += blockDim.x) {
      const int64_t q = base + threadIdx.x;
      hit[threadIdx.x] = q < nIdx && row(q) == k;
      ORTC_BARRIER();
      if (threadIdx.x == 0) {
        int c = 0;
        for (unsigned t = 0; t < blockDim.x; ++t)
          if (hit[t])
            matched[c++] = base + t;
        count = c;
      }
      ORTC_BARRIER();
      for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
        T acc = out[i];
        for (int c = 0; c < count; ++c)
          acc += dy[(o * nIdx + matched[c]) * inner + i];
        out[i] = acc;
      }
      ORTC_BARRIER();
    }
  }
}
template <typename T>
void gatherGrad(const T *dy, const int64_t *dims, int rank, int axis, const int64_t *idx, int64_t nIdx, T *dx,
                ortcStream_t s) {
  if (axis < 0)
    axis += rank;
  const int64_t outer = product(dims, axis), A = dims[axis], inner = product(dims + axis + 1, rank - axis - 1);
  const int64_t total = outer * A * inner;
  clearFlagKernel<<<1, 1, 0, s>>>();
  checkIndexKernel<<<gridFor(nIdx), kBlock, 0, s>>>(idx, nIdx, A);
  ORTC_MEMSET_ASYNC(dx, 0, total * sizeof(T), s);
  gatherGradKernel<<<gridFor(outer * nIdx, 1), kBlock, 0, s>>>(dy, A, inner, idx, nIdx, dx, outer * nIdx);
  poisonIfFlagKernel<<<gridFor(total), kBlock, 0, s>>>(dx, total);
}

//===----------------------------------------------------------------------===//
// Reductions (ONNX Reduce{Sum,Mean,Max}, keepdims=1)
//===----------------------------------------------------------------------===//

enum class ReduceKind { Sum, Mean, Max, Prod };

/// The CPU's detail::ProdAcc: products accumulate in double for floating T, in
/// int64 for integers.
template <typename T>
using ProdAcc = typename std::conditional<std::is_floating_point<T>::value, double, int64_t>::type;
struct ProdOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a * b; }
};

/// One block per output element; threads stride over the reduced elements and
/// combine with blockReduce (warp shuffles).
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) reduceKernel(const T *in, Dims keptDims, Dims keptStride, Dims redDims, Dims redStride, int64_t redCount, T *out, int kind) {
  const int64_t o = blockIdx.x;
  const int64_t base = stridedOffset<int64_t>(o, 0, keptStride, keptDims);
  if (kind == 3) {
    ProdAcc<T> acc = 1;
    for (int64_t j = threadIdx.x; j < redCount; j += blockDim.x) {
      const int64_t off = stridedOffset<int64_t>(j, base, redStride, redDims);
      acc *= static_cast<ProdAcc<T>>(in[off]);
    }
    acc = blockReduce(acc, ProdOp(), ProdAcc<T>(1));
    if (threadIdx.x == 0)
      out[o] = static_cast<T>(acc);
  } else if (kind == 2) {
    const T lowest = ortc_lowest<T>();
    T mx = lowest;
    for (int64_t j = threadIdx.x; j < redCount; j += blockDim.x) {
      const int64_t off = stridedOffset<int64_t>(j, base, redStride, redDims);
      mx = MaxOp()(mx, in[off]);
    }
    mx = blockReduce(mx, MaxOp(), lowest);
    if (threadIdx.x == 0)
      out[o] = mx;
  } else {
    double acc = 0;
    for (int64_t j = threadIdx.x; j < redCount; j += blockDim.x) {
      const int64_t off = stridedOffset<int64_t>(j, base, redStride, redDims);
      acc += static_cast<double>(in[off]);
    }
    acc = blockReduce(acc, SumOp(), 0.0);
    if (threadIdx.x == 0)
      out[o] = static_cast<T>(kind == 1 ? acc * (1.0 / static_cast<double>(redCount)) : acc); // as the CPU
  }
}
/// Sum / mean with 16-bit accumulation (Accum): one thread per output adds its terms in
/// row-major order of the reduced axes, as the CPU library does (the same bits).
template <typename T, int Kind>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) reduce16Kernel(const T *in, Dims keptDims, Dims keptStride, Dims redDims, Dims redStride, int64_t outCount, int64_t redCount, T *out, bool mean, int64_t chunk) {
  ORTC_FOR(o, outCount) {
    const int64_t base = stridedOffset<int64_t>(o, 0, keptStride, keptDims);
    float part = 0.0f, total = 0.0f;
    int64_t n = 0;
    for (int64_t j = 0; j < redCount; ++j) {
      part = round16<Kind>(part + static_cast<float>(in[stridedOffset<int64_t>(j, base, redStride, redDims)]));
      if (++n == chunk) {
        total += part;
        part = 0.0f;
        n = 0;
      }
    }
    const T sum = static_cast<T>(total + part);
    out[o] = mean ? static_cast<T>(sum / static_cast<T>(redCount)) : sum;
  }
}
template <typename T>
void reduce(const T *in, const int64_t *dims, int rank, const int64_t *axes, int nAxes, T *out, ReduceKind kind,
            ortcStream_t s) {
  reduce(in, dims, rank, axes, nAxes, out, kind, Accum(), s);
}
/// `acc` (Sum and Mean): a 16-bit kind accumulates as Accum says.
template <typename T>
void reduce(const T *in, const int64_t *dims, int rank, const int64_t *axes, int nAxes, T *out, ReduceKind kind,
            Accum acc, ortcStream_t s) {
  bool isRed[kMaxRank] = {};
  for (int i = 0; i < nAxes; ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a >= 0 && a < rank)
      isRed[a] = true;
  }
  Dims st = stridesOf(dims, rank), kd{}, ks{}, rd{}, rs{};
  int64_t outCount = 1, redCount = 1;
  for (int d = 0; d < rank; ++d) {
    if (isRed[d]) {
      rd.d[rd.rank] = dims[d];
      rs.d[rd.rank++] = st.d[d];
      redCount *= dims[d];
    } else {
      kd.d[kd.rank] = dims[d];
      ks.d[kd.rank++] = st.d[d];
      outCount *= dims[d];
    }
  }
  if (outCount == 0)
    return;
  if (redCount == 0) {
    fill(out, outCount,
         kind == ReduceKind::Sum    ? T(0)
         : kind == ReduceKind::Prod ? T(1)
         : kind == ReduceKind::Mean ? ortc_nan<T>()
                                    : ortc_lowest<T>(),
         s);
    return;
  }
  requireAccum16(acc);
#ifdef ORTC_GPU_ACCUM16
  if (acc.kind != Accum::Float && (kind == ReduceKind::Sum || kind == ReduceKind::Mean)) {
    const bool mean = kind == ReduceKind::Mean;
    if (acc.kind == Accum::Bf16)
      reduce16Kernel<T, Accum::Bf16><<<gridFor(outCount), kBlock, 0, s>>>(in, kd, ks, rd, rs, outCount, redCount, out, mean, acc.chunk);
    else
      reduce16Kernel<T, Accum::Half><<<gridFor(outCount), kBlock, 0, s>>>(in, kd, ks, rd, rs, outCount, redCount, out, mean, acc.chunk);
    return;
  }
#endif
  reduceKernel<<<gridFor(outCount, 1), kBlock, 0, s>>>(in, kd, ks, rd, rs, redCount, out, static_cast<int>(kind));
}

//===----------------------------------------------------------------------===//
// Element-indexed ops with run-time indices, arg-reductions, top-k, cumulative
// sums: the CPU library's line view ([outer, A, inner] around the axis), one
// thread per line, each line in the CPU's order (so repeated scatter indices
// combine in the same order on both targets).
//===----------------------------------------------------------------------===//

inline Dims dimsOf(const int64_t *dims, int rank) {
  Dims d{};
  d.rank = rank;
  for (int i = 0; i < rank; ++i)
    d.d[i] = dims[i];
  return d;
}
/// The CPU's detail::lineBase: the offset in `dataDims` of element t of `idxDims`
/// with its `axis` coordinate taken as 0.
__device__ inline int64_t lineBase(int64_t t, const Dims &idxDims, const Dims &dataDims, int axis) {
  int64_t off = 0, stride = 1;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) { // constant indices (see stridedOffset)
    if (d >= idxDims.rank)
      continue;
    const int64_t c = t % idxDims.d[d];
    t /= idxDims.d[d];
    if (d != axis)
      off += c * stride;
    stride *= dataDims.d[d];
  }
  return off;
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) gatherElementsKernel(const T *data, Dims dataDims, const int64_t *idx, Dims idxDims, int axis, int64_t stride, T *out, int64_t n) {
  if (ortcErrorFlag)
    return;
  const int64_t A = dataDims.d[axis];
  ORTC_FOR(t, n) {
    const int64_t k = idx[t] < 0 ? idx[t] + A : idx[t];
    out[t] = data[lineBase(t, idxDims, dataDims, axis) + k * stride];
  }
}
/// An out-of-range index makes the whole output NaN (decided on the device).
template <typename T>
void gatherElements(const T *data, const int64_t *dataDims, const int64_t *idx, const int64_t *idxDims, int rank,
                    int axis, T *out, ortcStream_t s) {
  const int64_t n = product(idxDims, rank), stride = product(dataDims + axis + 1, rank - axis - 1);
  clearFlagKernel<<<1, 1, 0, s>>>();
  checkIndexKernel<<<gridFor(n), kBlock, 0, s>>>(idx, n, dataDims[axis]);
  gatherElementsKernel<<<gridFor(n), kBlock, 0, s>>>(data, dimsOf(dataDims, rank), idx, dimsOf(idxDims, rank), axis,
                                                     stride, out, n);
  poisonIfFlagKernel<<<gridFor(n), kBlock, 0, s>>>(out, n);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) scatterElementsKernel(const int64_t *idx, const T *upd, Dims idxDims, Dims dataDims, int axis, int64_t stride, int reduction, T *out, int64_t lines) {
  if (ortcErrorFlag)
    return;
  const int64_t A = dataDims.d[axis], Ai = idxDims.d[axis];
  int64_t innerI = 1;
  for (int d = axis + 1; d < idxDims.rank; ++d)
    innerI *= idxDims.d[d];
  ORTC_FOR(line, lines) {
    const int64_t first = (line / innerI) * Ai * innerI + line % innerI;
    T *dst = out + lineBase(first, idxDims, dataDims, axis);
    for (int64_t a = 0; a < Ai; ++a) {
      const int64_t t = first + a * innerI;
      const int64_t k = idx[t] < 0 ? idx[t] + A : idx[t];
      T &d = dst[k * stride];
      const T u = upd[t];
      switch (reduction) {
      case 1: d = d + u; break;
      case 2: d = d * u; break;
      case 3: d = ortc_max(d, u); break;
      case 4: d = ortc_min(d, u); break;
      default: d = u;
      }
    }
  }
}
/// reduction: none 0, add 1, mul 2, max 3, min 4 (ScatterElementsOp::reductionCode).
template <typename T>
void scatterElements(const T *data, const int64_t *dataDims, const int64_t *idx, const T *upd, const int64_t *idxDims,
                     int rank, int axis, int reduction, T *out, ortcStream_t s) {
  const int64_t total = product(dataDims, rank), n = product(idxDims, rank);
  const int64_t lines = idxDims[axis] ? n / idxDims[axis] : 0;
  if (out != data)
    ORTC_MEMCPY_ASYNC(out, data, total * sizeof(T), s);
  clearFlagKernel<<<1, 1, 0, s>>>();
  checkIndexKernel<<<gridFor(n), kBlock, 0, s>>>(idx, n, dataDims[axis]);
  scatterElementsKernel<<<gridFor(lines), kBlock, 0, s>>>(idx, upd, dimsOf(idxDims, rank), dimsOf(dataDims, rank),
                                                          axis, product(dataDims + axis + 1, rank - axis - 1),
                                                          reduction, out, lines);
  poisonIfFlagKernel<<<gridFor(total), kBlock, 0, s>>>(out, total);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) argReduceKernel(const T *x, int64_t A, int64_t inner, bool isMin, bool selectLast, int64_t *out, int64_t lines) {
  ORTC_FOR(line, lines) {
    const T *p = x + (line / inner) * A * inner + line % inner;
    int64_t best = 0;
    for (int64_t a = 1; a < A; ++a) {
      const T v = p[a * inner], b = p[best * inner];
      if (b != b) // a NaN already won
        break;
      if (v != v || (isMin ? v < b : v > b) || (selectLast && v == b))
        best = a;
    }
    out[line] = best;
  }
}
template <typename T>
void argReduce(const T *x, int64_t outer, int64_t A, int64_t inner, bool isMin, bool selectLast, int64_t *out,
               ortcStream_t s) {
  const int64_t lines = outer * inner;
  argReduceKernel<<<gridFor(lines), kBlock, 0, s>>>(x, A, inner, isMin, selectLast, out, lines);
}

/// The CPU's order for TopK: strictly larger (smaller) first, then the lower index.
template <typename T> __device__ inline bool topKBefore(T a, int64_t ia, T b, int64_t ib, bool largest) {
  if (a == b)
    return ia < ib;
  return largest ? a > b : a < b;
}
/// Selection without scratch memory: pick j is the first element (in topKBefore's
/// total order) after pick j - 1, O(k * A) per line.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) topKKernel(const T *x, int64_t A, int64_t inner, int64_t k, bool largest, T *values, int64_t *indices, int64_t lines) {
  ORTC_FOR(line, lines) {
    const int64_t o = line / inner, i = line % inner;
    const T *p = x + o * A * inner + i;
    T prevV = T(0);
    int64_t prevI = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      T bestV = T(0);
      for (int64_t a = 0; a < A; ++a) {
        const T v = p[a * inner];
        if (prevI >= 0 && !topKBefore(prevV, prevI, v, a, largest))
          continue;
        if (best < 0 || topKBefore(v, a, bestV, best, largest)) {
          best = a;
          bestV = v;
        }
      }
      values[(o * k + j) * inner + i] = bestV;
      indices[(o * k + j) * inner + i] = best;
      prevV = bestV;
      prevI = best;
    }
  }
}
template <typename T>
void topK(const T *x, int64_t outer, int64_t A, int64_t inner, int64_t k, bool largest, T *values, int64_t *indices,
          ortcStream_t s) {
  const int64_t lines = outer * inner;
  topKKernel<<<gridFor(lines), kBlock, 0, s>>>(x, A, inner, k, largest, values, indices, lines);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) cumsumKernel(const T *x, int64_t A, int64_t inner, bool exclusive, bool reverse, T *y, int64_t lines) {
  using Acc = typename std::conditional<std::is_floating_point<T>::value, double, int64_t>::type;
  ORTC_FOR(line, lines) {
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
template <typename T>
void cumsum(const T *x, int64_t outer, int64_t A, int64_t inner, bool exclusive, bool reverse, T *y, ortcStream_t s) {
  const int64_t lines = outer * inner;
  cumsumKernel<<<gridFor(lines), kBlock, 0, s>>>(x, A, inner, exclusive, reverse, y, lines);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) reduceProdGradKernel(const T *x, const T *dy, int64_t rows, int64_t n, T *dx) {
  ORTC_FOR(r, rows) {
    const T *xr = x + r * n;
    T *dr = dx + r * n;
    double prefix = 1;
    for (int64_t j = 0; j < n; ++j) {
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
/// The CPU's reduceProdGrad (prefix times suffix products), one row per thread.
template <typename T>
void reduceProdGrad(const T *x, const T *dy, T *dx, int64_t rows, int64_t n, ortcStream_t s) {
  reduceProdGradKernel<<<gridFor(rows), kBlock, 0, s>>>(x, dy, rows, n, dx);
}

//===----------------------------------------------------------------------===//
// Softmax family: one block per line of the [outer, axisLen, inner] view
//===----------------------------------------------------------------------===//

// The line functions compute one line (row) of n elements with the whole block:
// `load(j)` gives element j of an operand (called once per pass, so it must be
// pure), `store(j, y)` receives element j of the result, after every load of the
// line and by the thread that last loaded element j. The library kernels call them
// with strided loads and stores; a rows kernel (ortc.fused "rows") with its prologue
// and epilogue inlined, so its fused softmax gives the library's bits.
template <typename T, typename Load, typename Store>
__device__ inline void softmaxLineImpl(int64_t n, bool logMode, Load load, Store store) {
  T mx = -ortc_inf<T>();
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x)
    mx = ortc_max(mx, load(a));
  mx = blockReduce(mx, MaxOp(), -ortc_inf<T>());
  double sum = 0;
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x)
    sum += logMode ? exp(static_cast<double>(load(a)) - static_cast<double>(mx))
                   : static_cast<double>(static_cast<T>(exp(load(a) - mx)));
  sum = blockReduce(sum, SumOp(), 0.0);
  if (logMode) {
    const double lse = static_cast<double>(mx) + log(sum);
    for (int64_t a = threadIdx.x; a < n; a += blockDim.x)
      store(a, static_cast<T>(static_cast<double>(load(a)) - lse));
  } else {
    const double inv = 1.0 / sum;
    for (int64_t a = threadIdx.x; a < n; a += blockDim.x)
      store(a, static_cast<T>(static_cast<double>(static_cast<T>(exp(load(a) - mx))) * inv));
  }
}
template <typename T, typename Load, typename Store>
__device__ inline void softmaxLine(int64_t n, Load load, Store store) {
  softmaxLineImpl<T>(n, false, load, store);
}
template <typename T, typename Load, typename Store>
__device__ inline void logSoftmaxLine(int64_t n, Load load, Store store) {
  softmaxLineImpl<T>(n, true, load, store);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) softmaxKernel(const T *x, T *y, int64_t axisLen, int64_t inner, bool logMode) {
  const int64_t t = blockIdx.x, o = t / inner, i = t % inner;
  const T *xs = x + o * axisLen * inner + i;
  T *ys = y + o * axisLen * inner + i;
  softmaxLineImpl<T>(axisLen, logMode, [&](int64_t a) { return xs[a * inner]; },
                     [&](int64_t a, T v) { ys[a * inner] = v; });
}
template <typename T> void softmax(const T *x, T *y, int64_t outer, int64_t axisLen, int64_t inner, ortcStream_t s) {
  if (outer * inner <= 0) // one block per line: none to launch (gridFor gives at least 1)
    return;
  softmaxKernel<<<gridFor(outer * inner, 1), kBlock, 0, s>>>(x, y, axisLen, inner, false);
}
template <typename T> void logSoftmax(const T *x, T *y, int64_t outer, int64_t axisLen, int64_t inner, ortcStream_t s) {
  if (outer * inner <= 0) // one block per line: none to launch (gridFor gives at least 1)
    return;
  softmaxKernel<<<gridFor(outer * inner, 1), kBlock, 0, s>>>(x, y, axisLen, inner, true);
}

template <typename T, typename LoadY, typename LoadDy, typename Store>
__device__ inline void softmaxGradLineImpl(int64_t n, bool logMode, LoadY loadY, LoadDy loadDy,
                                           Store store) {
  double s = 0;
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x)
    s += logMode ? static_cast<double>(loadDy(a))
                 : static_cast<double>(loadDy(a)) * loadY(a);
  s = blockReduce(s, SumOp(), 0.0);
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x) {
    const T y = loadY(a), dy = loadDy(a);
    store(a, logMode ? static_cast<T>(static_cast<double>(dy) - exp(static_cast<double>(y)) * s)
                     : static_cast<T>(static_cast<double>(y) * (dy - s)));
  }
}
template <typename T, typename LoadY, typename LoadDy, typename Store>
__device__ inline void softmaxGradLine(int64_t n, LoadY loadY, LoadDy loadDy, Store store) {
  softmaxGradLineImpl<T>(n, false, loadY, loadDy, store);
}
template <typename T, typename LoadY, typename LoadDy, typename Store>
__device__ inline void logSoftmaxGradLine(int64_t n, LoadY loadY, LoadDy loadDy, Store store) {
  softmaxGradLineImpl<T>(n, true, loadY, loadDy, store);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) softmaxGradKernel(const T *y, const T *dy, T *dx, int64_t axisLen, int64_t inner, bool logMode) {
  const int64_t off = (blockIdx.x / inner) * axisLen * inner + blockIdx.x % inner;
  softmaxGradLineImpl<T>(axisLen, logMode, [&](int64_t a) { return y[off + a * inner]; },
                         [&](int64_t a) { return dy[off + a * inner]; },
                         [&](int64_t a, T v) { dx[off + a * inner] = v; });
}
template <typename T>
void softmaxGrad(const T *y, const T *dy, T *dx, int64_t outer, int64_t axisLen, int64_t inner, ortcStream_t s) {
  if (outer * inner <= 0)
    return;
  softmaxGradKernel<<<gridFor(outer * inner, 1), kBlock, 0, s>>>(y, dy, dx, axisLen, inner, false);
}
template <typename T>
void logSoftmaxGrad(const T *y, const T *dy, T *dx, int64_t outer, int64_t axisLen, int64_t inner, ortcStream_t s) {
  if (outer * inner <= 0)
    return;
  softmaxGradKernel<<<gridFor(outer * inner, 1), kBlock, 0, s>>>(y, dy, dx, axisLen, inner, true);
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

/// One block per row; mean and variance by two block reductions.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) layerNormKernel(const T *x, const T *scale, const T *bias, T *y, T *mean, T *invStd, int64_t inner, T eps) {
  const int64_t r = blockIdx.x;
  const T *xr = x + r * inner;
  T *yr = y + r * inner;
  double mu = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
    mu += static_cast<double>(xr[i]);
  mu = blockReduce(mu, SumOp(), 0.0) / static_cast<double>(inner);
  double var = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    const double c = static_cast<double>(xr[i]) - mu;
    var += c * c;
  }
  var = blockReduce(var, SumOp(), 0.0) / static_cast<double>(inner);
  double is = 1.0 / sqrt(var + static_cast<double>(eps));
  if constexpr (sizeof(T) >= sizeof(float)) { // the saved statistics (as the CPU kernel)
    mu = static_cast<double>(static_cast<T>(mu));
    is = static_cast<double>(static_cast<T>(is));
  }
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    double v = (static_cast<double>(xr[i]) - mu) * is;
    if (scale)
      v *= static_cast<double>(scale[i]);
    if (bias)
      v += static_cast<double>(bias[i]);
    yr[i] = static_cast<T>(v);
  }
  if (threadIdx.x == 0) {
    if (mean)
      mean[r] = static_cast<T>(mu);
    if (invStd)
      invStd[r] = static_cast<T>(is);
  }
}
template <typename T>
void layerNorm(const T *x, const T *scale, const T *bias, T *y, T *mean, T *invStd, int64_t outer, int64_t inner,
               T eps, ortcStream_t s) {
  if (outer <= 0) // one block per row
    return;
  layerNormKernel<<<gridFor(outer, 1), kBlock, 0, s>>>(x, scale, bias, y, mean, invStd, inner, eps);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) layerNormGradDxKernel(const T *x, const T *scale, const T *mean, const T *invStd, const T *dy, T *dx, int64_t inner) {
  const int64_t r = blockIdx.x;
  const T *xr = x + r * inner, *dyr = dy + r * inner;
  const double mu = mean[r], is = invStd[r];
  double sg = 0, sgx = 0;
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    const double g = static_cast<double>(dyr[i]) * (scale ? double(scale[i]) : 1.0);
    sg += g;
    sgx += g * (static_cast<double>(xr[i]) - mu) * is;
  }
  sg = blockReduce(sg, SumOp(), 0.0) / static_cast<double>(inner);
  sgx = blockReduce(sgx, SumOp(), 0.0) / static_cast<double>(inner);
  for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
    const double g = static_cast<double>(dyr[i]) * (scale ? double(scale[i]) : 1.0);
    const double xh = (static_cast<double>(xr[i]) - mu) * is;
    dx[r * inner + i] = static_cast<T>(is * (g - sg - xh * sgx));
  }
}
/// Column sums (dscale, dbias): one block per column, rows reduced with shuffles.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) layerNormGradParamKernel(const T *x, const T *mean, const T *invStd, const T *dy, T *dscale, T *dbias, int64_t outer, int64_t inner) {
  const int64_t i = blockIdx.x;
  double ds = 0, db = 0;
  for (int64_t r = threadIdx.x; r < outer; r += blockDim.x) {
    const double d = static_cast<double>(dy[r * inner + i]);
    ds += d * (static_cast<double>(x[r * inner + i]) - static_cast<double>(mean[r])) * static_cast<double>(invStd[r]);
    db += d;
  }
  ds = blockReduce(ds, SumOp(), 0.0);
  db = blockReduce(db, SumOp(), 0.0);
  if (threadIdx.x == 0) {
    if (dscale)
      dscale[i] = static_cast<T>(ds);
    if (dbias)
      dbias[i] = static_cast<T>(db);
  }
}
template <typename T>
void layerNormGrad(const T *x, const T *scale, const T *mean, const T *invStd, const T *dy, T *dx, T *dscale, T *dbias,
                   int64_t outer, int64_t inner, ortcStream_t s) {
  if (dx && outer > 0)
    layerNormGradDxKernel<<<gridFor(outer, 1), kBlock, 0, s>>>(x, scale, mean, invStd, dy, dx, inner);
  if ((dscale || dbias) && inner > 0)
    layerNormGradParamKernel<<<gridFor(inner, 1), kBlock, 0, s>>>(x, mean, invStd, dy, dscale, dbias, outer, inner);
}

/// One block per channel over the [N, C, S] view.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) batchNormTrainKernel(const T *x, const T *scale, const T *bias, T *y, T *mean, T *var, int64_t N, int64_t C, int64_t S, T eps) {
  const int64_t c = blockIdx.x, M = N * S;
  const double cnt = static_cast<double>(M);
  double mu = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x)
    mu += static_cast<double>(x[((j / S) * C + c) * S + j % S]);
  mu = blockReduce(mu, SumOp(), 0.0) / cnt;
  double v = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const double d = static_cast<double>(x[((j / S) * C + c) * S + j % S]) - mu;
    v += d * d;
  }
  v = blockReduce(v, SumOp(), 0.0) / cnt;
  const double is = 1.0 / sqrt(v + static_cast<double>(eps));
  const double a = is * (scale ? static_cast<double>(scale[c]) : 1.0);
  const double b = bias ? static_cast<double>(bias[c]) : 0.0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t k = ((j / S) * C + c) * S + j % S;
    y[k] = static_cast<T>((static_cast<double>(x[k]) - mu) * a + b);
  }
  if (threadIdx.x == 0) {
    if (mean)
      mean[c] = static_cast<T>(mu);
    if (var)
      var[c] = static_cast<T>(v);
  }
}
template <typename T>
void batchNormTrain(const T *x, const T *scale, const T *bias, T *y, T *mean, T *var, int64_t N, int64_t C, int64_t S,
                    T eps, ortcStream_t s) {
  if (C <= 0) // one block per channel
    return;
  batchNormTrainKernel<<<gridFor(C, 1), kBlock, 0, s>>>(x, scale, bias, y, mean, var, N, C, S, eps);
}

/// invStd is formed from the saved var in T, as the CPU emitter does.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) batchNormGradKernel(const T *x, const T *scale, const T *mean, const T *var, T eps, const T *dy, T *dx, T *dscale, T *dbias, int64_t N, int64_t C, int64_t S) {
  const int64_t c = blockIdx.x, M = N * S;
  const double cnt = static_cast<double>(M);
  const double mu = mean[c], is = static_cast<double>(T(1) / sqrt(var[c] + eps));
  double sdy = 0, sdyx = 0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t k = ((j / S) * C + c) * S + j % S;
    sdy += static_cast<double>(dy[k]);
    sdyx += static_cast<double>(dy[k]) * (static_cast<double>(x[k]) - mu);
  }
  sdy = blockReduce(sdy, SumOp(), 0.0);
  sdyx = blockReduce(sdyx, SumOp(), 0.0) * is;
  if (threadIdx.x == 0) {
    if (dbias)
      dbias[c] = static_cast<T>(sdy);
    if (dscale)
      dscale[c] = static_cast<T>(sdyx);
  }
  if (!dx)
    return;
  const double kk = (scale ? static_cast<double>(scale[c]) : 1.0) * is / cnt;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t k = ((j / S) * C + c) * S + j % S;
    const double xh = (static_cast<double>(x[k]) - mu) * is;
    dx[k] = static_cast<T>(kk * (cnt * static_cast<double>(dy[k]) - sdy - xh * sdyx));
  }
}
template <typename T>
void batchNormGrad(const T *x, const T *scale, const T *mean, const T *var, T eps, const T *dy, T *dx, T *dscale,
                   T *dbias, int64_t N, int64_t C, int64_t S, ortcStream_t s) {
  if (C <= 0)
    return;
  batchNormGradKernel<<<gridFor(C, 1), kBlock, 0, s>>>(x, scale, mean, var, eps, dy, dx, dscale, dbias, N, C, S);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) batchNormInferKernel(const T *x, const T *scale, const T *bias, const T *runMean, const T *runVar, T *y, int64_t C, int64_t S, T eps, int64_t n) {
  ORTC_FOR(t, n) {
    const int64_t c = (t / S) % C;
    const double a = (scale ? static_cast<double>(scale[c]) : 1.0) /
                     sqrt(static_cast<double>(runVar[c]) + static_cast<double>(eps));
    const double b = (bias ? static_cast<double>(bias[c]) : 0.0) - static_cast<double>(runMean[c]) * a;
    y[t] = static_cast<T>(static_cast<double>(x[t]) * a + b);
  }
}
template <typename T>
void batchNormInfer(const T *x, const T *scale, const T *bias, const T *runMean, const T *runVar, T *y, int64_t N,
                    int64_t C, int64_t S, T eps, ortcStream_t s) {
  const int64_t n = N * C * S;
  batchNormInferKernel<<<gridFor(n), kBlock, 0, s>>>(x, scale, bias, runMean, runVar, y, C, S, eps, n);
}

//===----------------------------------------------------------------------===//
// Cross-entropy (mean over kept rows; "sum" = mean * kept)
//===----------------------------------------------------------------------===//

/// Per-block partial sums of the loss (total, kept rows, bad labels), added in block
/// order by crossEntropyFinishKernel: the loss is the same on every run, and the rows
/// spread over up to kLossParts blocks (one block for all rows took 125 ms of a
/// GPT-2-124M step's loss over 8192 x 50257 logits on an H100).
constexpr int kLossParts = 1024;
__device__ double ortcLossParts[3][kLossParts];

/// Block b takes rows b, b + gridDim.x, ...: each row's max and sum of exponentials
/// by block reductions (in double, like the CPU's), its loss added in row order. The
/// logits (L) may be stored in 16 bits.
template <typename L>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) crossEntropyRowsKernel(const L *logits, const int64_t *labels, int64_t N, int64_t C, int64_t ignore, bool hasIgnore) {
  double total = 0, kept = 0, bad = 0;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t l = labels[n];
    if (hasIgnore && l == ignore)
      continue;
    if (l < 0 || l >= C) {
      bad = 1;
      continue;
    }
    const L *r = logits + n * C;
    double mx = -ortc_inf<double>();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      mx = MaxOp()(mx, ortc_wide(r[c]));
    mx = blockReduce(mx, MaxOp(), -ortc_inf<double>());
    double sm = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      sm += exp(ortc_wide(r[c]) - mx);
    sm = blockReduce(sm, SumOp(), 0.0);
    total += mx + log(sm) - ortc_wide(r[l]);
    kept += 1;
  }
  if (threadIdx.x == 0) {
    ortcLossParts[0][blockIdx.x] = total;
    ortcLossParts[1][blockIdx.x] = kept;
    ortcLossParts[2][blockIdx.x] = bad;
  }
}
/// One thread: the blocks' partial sums in block order. Bad label -> NaN.
template <typename T>
__global__ void crossEntropyFinishKernel(int parts, bool sumMode, T *loss) {
  double total = 0, kept = 0, bad = 0;
  for (int b = 0; b < parts; ++b) {
    total += ortcLossParts[0][b];
    kept += ortcLossParts[1][b];
    bad += ortcLossParts[2][b];
  }
  T v = kept == 0 ? ortc_nan<T>() : static_cast<T>(total / kept);
  if (sumMode)
    v *= static_cast<T>(kept);
  *loss = bad != 0 ? ortc_nan<T>() : v;
}
template <typename L, typename T>
void softmaxCrossEntropy(const L *logits, const int64_t *labels, int64_t N, int64_t C, int64_t ignore, bool hasIgnore,
                         bool sumMode, T *loss, ortcStream_t s) {
  const int parts = static_cast<int>(N < 1 ? 1 : (N < kLossParts ? N : kLossParts));
  crossEntropyRowsKernel<<<parts, kBlock, 0, s>>>(logits, labels, N, C, ignore, hasIgnore);
  crossEntropyFinishKernel<<<1, 1, 0, s>>>(parts, sumMode, loss);
}

/// One block per row; each block also counts the kept rows and checks the labels.
/// Logits (L) and dlogits (T) may be stored in 16 bits: the arithmetic is that of a
/// float32 step whose dlogits are then cast (W, the float type of that step).
template <typename L, typename D, typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) crossEntropyGradKernel(const L *logits, const int64_t *labels, int64_t N, int64_t C, int64_t ignore, bool hasIgnore, bool sumMode, const D *dloss, T *dlogits) {
  using W = typename std::conditional<(sizeof(T) < 4), float, T>::type;
  const int64_t n = blockIdx.x;
  double kept = 0, bad = 0;
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    if (hasIgnore && labels[j] == ignore)
      continue;
    if (labels[j] < 0 || labels[j] >= C)
      bad = 1;
    else
      kept += 1;
  }
  kept = blockReduce(kept, SumOp(), 0.0);
  bad = blockReduce(bad, SumOp(), 0.0);
  T *d = dlogits + n * C;
  if (bad != 0) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      d[c] = ortc_narrow<T>(ortc_nan<double>());
    return;
  }
  const W dl = static_cast<W>(*dloss) * (sumMode ? static_cast<W>(kept) : W(1));
  const double scale = kept == 0 ? 0.0 : static_cast<double>(dl) / kept;
  if (hasIgnore && labels[n] == ignore) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      d[c] = ortc_narrow<T>(0.0);
    return;
  }
  const L *r = logits + n * C;
  double mx = -ortc_inf<double>();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    mx = MaxOp()(mx, ortc_wide(r[c]));
  mx = blockReduce(mx, MaxOp(), -ortc_inf<double>());
  double sm = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    sm += exp(ortc_wide(r[c]) - mx);
  const double inv = 1.0 / blockReduce(sm, SumOp(), 0.0);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    double p = exp(ortc_wide(r[c]) - mx) * inv;
    if (c == labels[n])
      p -= 1.0;
    d[c] = ortc_narrow<T>(p * scale);
  }
}
template <typename L, typename D, typename T>
void softmaxCrossEntropyGrad(const L *logits, const int64_t *labels, int64_t N, int64_t C, int64_t ignore,
                             bool hasIgnore, bool sumMode, const D *dloss, T *dlogits, ortcStream_t s) {
  if (N <= 0) // one block per row
    return;
  crossEntropyGradKernel<<<gridFor(N, 1), kBlock, 0, s>>>(logits, labels, N, C, ignore, hasIgnore, sumMode, dloss,
                                                          dlogits);
}

//===----------------------------------------------------------------------===//
// Optimizers (gated by the device flag `apply`) and the finite check
//===----------------------------------------------------------------------===//

/// One tensor of an optimizer update (the CPU library's UpdateTensor): parameter,
/// gradient, state (SGD's momentum buffer in m; AdamW's moments in m and v).
template <typename T> struct UpdateTensor {
  T *p;
  const T *g;
  T *m, *v;
  int64_t n;
};

/// Up to kMultiTensor tensors of a multi-tensor update, passed by value: one kernel
/// runs their elements as one index space (apex's multi_tensor_apply).
constexpr int kMultiTensor = 24;
template <typename T> struct UpdateChunk {
  T *p[kMultiTensor];
  const T *g[kMultiTensor];
  T *m[kMultiTensor], *v[kMultiTensor];
  int64_t start[kMultiTensor + 1]; ///< prefix sums of the tensors' sizes
  int count;
};

/// Launches kernel(chunk) for every kMultiTensor tensors of `ts`.
template <typename T, typename Launch>
void forEachChunk(const UpdateTensor<T> *ts, int count, Launch launch) {
  for (int first = 0; first < count; first += kMultiTensor) {
    UpdateChunk<T> c{};
    c.count = count - first < kMultiTensor ? count - first : kMultiTensor;
    for (int k = 0; k < c.count; ++k) {
      const UpdateTensor<T> &t = ts[first + k];
      c.p[k] = t.p, c.g[k] = t.g, c.m[k] = t.m, c.v[k] = t.v;
      c.start[k + 1] = c.start[k] + t.n;
    }
    if (c.start[c.count] > 0)
      launch(c, c.start[c.count]);
  }
}

template <typename T, typename L, typename S>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) sgdKernel(UpdateChunk<T> c, const L *lrp, T momentum, T dampening, bool nesterov, T weightDecay, const S *stepp, const uint8_t *apply) {
  if (apply && *apply == 0)
    return;
  const T lr = static_cast<T>(*lrp);
  const bool useMom = momentum != T(0), first = static_cast<int64_t>(*stepp) <= 1;
  const T damp = static_cast<T>(1.0 - static_cast<double>(dampening));
  int64_t k = 0; // a thread's elements only grow: its tensor index follows them
  ORTC_FOR(e, c.start[c.count]) {
    while (e >= c.start[k + 1])
      ++k;
    const int64_t i = e - c.start[k];
    T *p = c.p[k], *buf = c.m[k];
    T d = c.g[k][i];
    if (weightDecay != T(0))
      d = d + weightDecay * p[i];
    if (useMom) {
      const T b = first ? d : buf[i] * momentum + d * damp;
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = p[i] - lr * d;
  }
}
/// torch.optim.SGD on every tensor of ts: one kernel per kMultiTensor tensors.
template <typename T, typename L, typename S>
void sgdUpdateMulti(const UpdateTensor<T> *ts, int count, const L *lr, T momentum, T dampening, bool nesterov,
                    T weightDecay, const S *step, const uint8_t *apply, ortcStream_t s) {
  forEachChunk(ts, count, [&](const UpdateChunk<T> &c, int64_t n) {
    sgdKernel<<<gridFor(n), kBlock, 0, s>>>(c, lr, momentum, dampening, nesterov, weightDecay, step, apply);
  });
}
template <typename T, typename L, typename S>
void sgdUpdate(T *p, const T *g, T *buf, int64_t n, const L *lr, T momentum, T dampening, bool nesterov, T weightDecay,
               const S *step, const uint8_t *apply, ortcStream_t s) {
  const UpdateTensor<T> t{p, g, buf, nullptr, n};
  sgdUpdateMulti(&t, 1, lr, momentum, dampening, nesterov, weightDecay, step, apply, s);
}

template <typename T, typename L, typename S>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) adamwKernel(UpdateChunk<T> c, const L *lrp, const L *beta1p, const L *beta2p,
                                                      const L *epsp, const L *weightDecayp, const S *stepp,
                                                      const uint8_t *apply) {
  if (apply && *apply == 0)
    return;
  // The hyperparameters are run-time scalars in device memory, as the learning rate.
  const T lrT = static_cast<T>(*lrp), beta1 = static_cast<T>(*beta1p), beta2 = static_cast<T>(*beta2p),
          eps = static_cast<T>(*epsp), weightDecay = static_cast<T>(*weightDecayp);
  const double dlr = lrT, db1 = beta1, db2 = beta2, t = static_cast<double>(static_cast<int64_t>(*stepp));
  const T decay = static_cast<T>(1.0 - dlr * static_cast<double>(weightDecay));
  const T w1 = static_cast<T>(1.0 - db1), c2 = static_cast<T>(1.0 - db2);
  const T stepSize = static_cast<T>(dlr / (1.0 - pow(db1, t)));
  const T bc2Sqrt = static_cast<T>(sqrt(1.0 - pow(db2, t)));
  const bool lowW = fabs(static_cast<double>(w1)) < 0.5;
  int64_t k = 0; // a thread's elements only grow: its tensor index follows them
  ORTC_FOR(e, c.start[c.count]) {
    while (e >= c.start[k + 1])
      ++k;
    const int64_t i = e - c.start[k];
    T *p = c.p[k], *m = c.m[k], *v = c.v[k];
    const T gi = c.g[k][i], pi = p[i] * decay, diff = gi - m[i];
    const T mi = lowW ? m[i] + w1 * diff : gi - diff * (T(1) - w1);
    const T vi = v[i] * beta2 + c2 * gi * gi;
    const T denom = sqrt(vi) / bc2Sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - stepSize * mi / denom;
  }
}
/// torch.optim.AdamW on every tensor of ts: one kernel per kMultiTensor tensors.
template <typename T, typename L, typename S>
void adamwUpdateMulti(const UpdateTensor<T> *ts, int count, const L *lr, const L *beta1, const L *beta2,
                      const L *eps, const L *weightDecay, const S *step, const uint8_t *apply, ortcStream_t s) {
  forEachChunk(ts, count, [&](const UpdateChunk<T> &c, int64_t n) {
    adamwKernel<<<gridFor(n), kBlock, 0, s>>>(c, lr, beta1, beta2, eps, weightDecay, step, apply);
  });
}
template <typename T, typename L, typename S>
void adamwUpdate(T *p, const T *g, T *m, T *v, int64_t n, const L *lr, const L *beta1, const L *beta2,
                 const L *eps, const L *weightDecay, const S *step, const uint8_t *apply, ortcStream_t s) {
  const UpdateTensor<T> t{p, g, m, v, n};
  adamwUpdateMulti(&t, 1, lr, beta1, beta2, eps, weightDecay, step, apply, s);
}

template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) allFiniteKernel(const T *x, int64_t n) {
  ORTC_FOR(i, n) if (!isFinite(x[i])) atomicExch(&ortcErrorFlag, 1);
}
__global__ void clearIfFlagKernel(uint8_t *ok, uint8_t *input) {
  if (ortcErrorFlag) {
    *ok = 0;
    *input = 0;
  }
}
/// Clears *ok and *input (this input's flag) where an element is not finite (the
/// caller sets both to 1 first). The elements' verdicts meet in the error flag (an
/// atomic: many threads may find one), which one thread then applies.
template <typename T> void allFiniteAnd(const T *x, int64_t n, uint8_t *ok, uint8_t *input, ortcStream_t s) {
  if (n <= 0)
    return;
  clearFlagKernel<<<1, 1, 0, s>>>();
  allFiniteKernel<<<gridFor(n), kBlock, 0, s>>>(x, n);
  clearIfFlagKernel<<<1, 1, 0, s>>>(ok, input);
}

//===----------------------------------------------------------------------===//
// Tiled GEMM: shared-memory tiles (kTile x kTileK), 4x4 register blocking,
// operands through loader functors (transposes, batches, implicit im2col)
//===----------------------------------------------------------------------===//

/// C[b] (M x N) = A[b] (M x K) * B[b] (K x N), written through `store`. grid =
/// (ceil(N / 64), ceil(M / 64), batch); 256 threads, each owns a 4x4 block.
/// Kind != Accum::Float: each thread's sums are 16-bit partial sums over chunks of
/// `chunk` k (0: all of K), added in float (see Accum).
template <typename T, int Kind, typename LA, typename LB, typename ST>
__global__ void ORTC_LAUNCH_BOUNDS(256) gemmTiledKernel(int64_t M, int64_t N, int64_t K, int64_t batchBase, int64_t mBase, LA la, LB lb, ST st, int64_t chunk) {
  __shared__ T As[kTileK][kTile + 1];
  __shared__ T Bs[kTileK][kTile + 1];
  const int64_t b = batchBase + blockIdx.z;
  const int64_t m0 = mBase + static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  T acc[4][4];
  float total[4][4]; // the chunk sums (Kind != Float)
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      acc[i][j] = T(0);
      total[i][j] = 0.0f;
    }
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTile * kTileK; e += 256) {
      const int am = e / kTileK, ak = e % kTileK; // k fastest: row-major A coalesces
      const int64_t gm = m0 + am, gk = k0 + ak;
      As[ak][am] = (gm < M && gk < K) ? la(b, gm, gk) : T(0);
      const int bk = e / kTile, bn = e % kTile; // n fastest: row-major B coalesces
      const int64_t gk2 = k0 + bk, gn = n0 + bn;
      Bs[bk][bn] = (gn < N && gk2 < K) ? lb(b, gk2, gn) : T(0);
    }
    ORTC_BARRIER();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      T a[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = As[kk][ty + 16 * i];
        bv[i] = Bs[kk][tx + 16 * i];
      }
      if constexpr (Kind == Accum::Float) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            acc[i][j] += a[i] * bv[j];
      } else {
        const bool chunkEnd = chunk > 0 && (k0 + kk + 1) % chunk == 0;
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            float p = round16<Kind>(static_cast<float>(acc[i][j]) +
                                    static_cast<float>(a[i]) * static_cast<float>(bv[j]));
            if (chunkEnd) {
              total[i][j] += p;
              p = 0.0f;
            }
            acc[i][j] = static_cast<T>(p);
          }
      }
    }
    ORTC_BARRIER();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
      if (gm < M && gn < N)
        st(b, gm, gn, Kind == Accum::Float ? acc[i][j] : static_cast<T>(total[i][j] + static_cast<float>(acc[i][j])));
    }
}

template <typename T, typename LA, typename LB, typename ST>
void gemmTiled(int64_t batch, int64_t M, int64_t N, int64_t K, LA la, LB lb, ST st, Accum acc, ortcStream_t s) {
  if (M <= 0 || N <= 0 || batch <= 0)
    return;
  requireAccum16(acc);
  // grid.y and grid.z are at most 65535: batches and row tiles go in chunks.
  const int64_t mChunk = int64_t(65535) * kTile;
  for (int64_t b0 = 0; b0 < batch; b0 += 65535) {
    const int64_t nb = batch - b0 < 65535 ? batch - b0 : 65535;
    for (int64_t mb = 0; mb < M; mb += mChunk) {
      const int64_t rows = M - mb < mChunk ? M - mb : mChunk;
      dim3 grid(gridFor(N, kTile), gridFor(rows, kTile), static_cast<unsigned>(nb));
#ifdef ORTC_GPU_ACCUM16
      if (acc.kind == Accum::Bf16)
        gemmTiledKernel<T, Accum::Bf16><<<grid, 256, 0, s>>>(M, N, K, b0, mb, la, lb, st, acc.chunk);
      else if (acc.kind == Accum::Half)
        gemmTiledKernel<T, Accum::Half><<<grid, 256, 0, s>>>(M, N, K, b0, mb, la, lb, st, acc.chunk);
      else
#endif
        gemmTiledKernel<T, Accum::Float><<<grid, 256, 0, s>>>(M, N, K, b0, mb, la, lb, st, int64_t(0));
    }
  }
}

/// gemmTiled summing in float.
template <typename T, typename LA, typename LB, typename ST>
void gemmTiled(int64_t batch, int64_t M, int64_t N, int64_t K, LA la, LB lb, ST st, ortcStream_t s) {
  gemmTiled<T>(batch, M, N, K, la, lb, st, Accum(), s);
}

/// Matmul operands: A[b] is [M, K] ([K, M] when trans), row-major, batch stride; stored
/// as S (16-bit for matmulWide), read as T.
template <typename T, typename S = T> struct MatA {
  const S *p;
  int64_t stride, M, K;
  bool trans;
  __device__ T operator()(int64_t b, int64_t m, int64_t k) const {
    return ortc_cvt<T>(trans ? p[b * stride + k * M + m] : p[b * stride + m * K + k]);
  }
};
template <typename T, typename S = T> struct MatB {
  const S *p;
  int64_t stride, K, N;
  bool trans;
  __device__ T operator()(int64_t b, int64_t k, int64_t n) const {
    return ortc_cvt<T>(trans ? p[b * stride + n * K + k] : p[b * stride + k * N + n]);
  }
};
/// The result: computed as T, stored as S (a 16-bit matmulWide rounds each sum).
template <typename T, typename S = T> struct MatC {
  S *p;
  int64_t M, N;
  __device__ void operator()(int64_t b, int64_t m, int64_t n, T v) const {
    p[(b * M + m) * N + n] = ortc_cvt<S>(v);
  }
};

/// Where a GEMM finds the matrices of a batch (the CPU library's MatLayout): matrix b
/// starts at at(b), its rows `ld` apart with unit-stride columns.
struct MatLayout {
  int64_t ld, inner, outerStride, innerStride;
  __host__ __device__ int64_t at(int64_t b) const {
    return (b / inner) * outerStride + (b % inner) * innerStride;
  }
};
/// An operand read through a MatLayout (a strided view): element (i, j) of op(X[b]),
/// the stored matrix read transposed when `trans` (A's (m, k), B's (k, n)).
template <typename T> struct LayoutOperand {
  const T *p;
  MatLayout l;
  bool trans;
  __device__ T operator()(int64_t b, int64_t i, int64_t j) const {
    const T *q = p + l.at(b);
    return trans ? q[j * l.ld + i] : q[i * l.ld + j];
  }
};
template <typename T> struct LayoutC {
  T *p;
  MatLayout l;
  __device__ void operator()(int64_t b, int64_t m, int64_t n, T v) const { p[l.at(b) + m * l.ld + n] = v; }
};

/// ORTC_GPU_GEMM=ortc at run time makes every GEMM use ortc's tiled kernel even where
/// the vendor library is present (to test and compare the two on one machine).
inline bool ownGemmForced() {
  static const bool forced = [] {
    const char *e = getenv("ORTC_GPU_GEMM");
    return e && e[0] == 'o' && e[1] == 'r' && e[2] == 't' && e[3] == 'c' && !e[4];
  }();
  return forced;
}

/// torch.bmm with optional transposes (the CPU's kern::matmul). With
/// ORTC_VENDOR_GEMM (CUDA: cuBLASLt) the vendor library runs it; else the tiled kernel.
/// `acc` other than Float (16-bit accumulation, emulated) always runs the tiled kernel.
template <typename T>
void matmulAccum(const T *A, const T *B, T *C, int64_t batch, int64_t M, int64_t N, int64_t K, bool transA,
                 bool transB, Accum acc, ortcStream_t s) {
#ifdef ORTC_VENDOR_GEMM
  if (acc.kind == Accum::Float && !ownGemmForced() &&
      ORTC_VENDOR_GEMM(A, B, C, batch, M, N, K, transA, transB, s))
    return;
#endif
  if (K == 0) {
    ORTC_MEMSET_ASYNC(C, 0, batch * M * N * sizeof(T), s);
    return;
  }
  gemmTiled<T>(batch, M, N, K, MatA<T>{A, M * K, M, K, transA}, MatB<T>{B, K * N, K, N, transB}, MatC<T>{C, M, N},
               acc, s);
}
template <typename T>
void matmul(const T *A, const T *B, T *C, int64_t batch, int64_t M, int64_t N, int64_t K, bool transA, bool transB,
            ortcStream_t s) {
  matmulAccum(A, B, C, batch, M, N, K, transA, transB, Accum(), s);
}
/// C[b] = op(A[b]) @ op(B[b]), each matrix where its layout says (the CPU's
/// matmulLayout): the tiled kernel, which reads the strided operands as it loads its tiles.
template <typename T>
void matmulLayout(const T *A, MatLayout la, const T *B, MatLayout lb, T *C, MatLayout lc, int64_t batch, int64_t M,
                  int64_t N, int64_t K, bool transA, bool transB, ortcStream_t s) {
  if (batch <= 0 || M <= 0 || N <= 0)
    return;
  // K == 0 too: the tiles' sums stay 0 and are stored.
  gemmTiled<T>(batch, M, N, K, LayoutOperand<T>{A, la, transA}, LayoutOperand<T>{B, lb, transB}, LayoutC<T>{C, lc},
               Accum(), s);
}
/// A gemm kernel's epilogue over a product already in C (contiguous [batch, M, N]):
/// `st(b, m, n, v)` on each element, one thread per element.
template <typename T, typename ST>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) epilogueKernel(const T *C, int64_t M, int64_t N, int64_t n, ST st) {
  ORTC_FOR(i, n) {
    const int64_t row = i / N;
    st(row / M, row % M, i % N, C[i]);
  }
}
/// C[b] = op(A[b]) @ op(B[b]) (the CPU's matmulEpilogue) with a gemm kernel's epilogue:
/// `st(b, m, n, v)` receives element (m, n) of product b and writes the kernel's
/// results. The tiled kernel calls it as it stores its registers, so the product never
/// reaches memory. With ORTC_VENDOR_GEMM, contiguous operands and a C (one of the
/// kernel's results that no input shares a buffer with; else null) the vendor library
/// writes the product into C and a second kernel runs `st` over it (cuBLASLt's own
/// epilogues cover bias, ReLU and GELU, not every pointwise chain).
template <typename T, typename ST>
void matmulEpilogue(const T *A, MatLayout la, const T *B, MatLayout lb, T *C, int64_t batch, int64_t M, int64_t N,
                    int64_t K, bool transA, bool transB, ST st, ortcStream_t s) {
  if (batch <= 0 || M <= 0 || N <= 0)
    return;
#ifdef ORTC_VENDOR_GEMM
  const bool contiguous = la.inner == 1 && lb.inner == 1 && la.ld == (transA ? M : K) && la.outerStride == M * K &&
                          lb.ld == (transB ? K : N) && lb.outerStride == K * N;
  if (C && contiguous && K > 0 && !ownGemmForced() && ORTC_VENDOR_GEMM(A, B, C, batch, M, N, K, transA, transB, s)) {
    const int64_t n = batch * M * N;
    epilogueKernel<<<gridFor(n), kBlock, 0, s>>>(C, M, N, n, st);
    return;
  }
#endif
  (void)C;
  // K == 0 too: the tiles' sums stay 0 and are stored.
  gemmTiled<T>(batch, M, N, K, LayoutOperand<T>{A, la, transA}, LayoutOperand<T>{B, lb, transB}, st, Accum(), s);
}
/// matmul of 16-bit operands (ortc_bf16 / ortc_half) into C, summed in float: a float C
/// (matmul f32_result) or one of the operands' type, each sum rounded as it is stored.
/// With ORTC_VENDOR_GEMM_WIDE (CUDA: cuBLASLt, bf16/fp16 inputs on tensor cores, FP32
/// compute) the vendor library runs it; else the tiled kernel, which widens each operand
/// as it loads its tile.
template <typename S, typename O = float>
void matmulWide(const S *A, const S *B, O *C, int64_t batch, int64_t M, int64_t N, int64_t K, bool transA,
                bool transB, ortcStream_t s) {
#ifdef ORTC_VENDOR_GEMM_WIDE
  if (!ownGemmForced() && ORTC_VENDOR_GEMM_WIDE(A, B, C, batch, M, N, K, transA, transB, s))
    return;
#endif
  if (K == 0) {
    ORTC_MEMSET_ASYNC(C, 0, batch * M * N * sizeof(O), s);
    return;
  }
  gemmTiled<float>(batch, M, N, K, MatA<float, S>{A, M * K, M, K, transA}, MatB<float, S>{B, K * N, K, N, transB},
                   MatC<float, O>{C, M, N}, Accum(), s);
}

//===----------------------------------------------------------------------===//
// Convolution: implicit im2col feeding the tiled GEMM
//===----------------------------------------------------------------------===//

/// Spatial geometry normalised to three dims (the CPU's detail::Spatial3).
struct Spatial3 {
  int64_t in[3], k[3], out[3], s[3], p[3], d[3];
  int64_t pe[3]; ///< end pads (pooling's count_include_pad bound; 0 for convolutions)
  int64_t inSize, kSize, outSize;
};
struct ConvGeom {
  int nSpatial;
  int64_t N, C, M, group;
  int64_t in[3], kernel[3], out[3], stride[3], padBegin[3], dilation[3];
  Accum accum; ///< how the GEMM sums
};
struct PoolGeom {
  int nSpatial;
  int64_t N, C;
  int64_t in[3], kernel[3], out[3], stride[3], padBegin[3], dilation[3];
  int64_t padEnd[3];
  bool countIncludePad;
};
inline Spatial3 toSpatial3(int nSpatial, const int64_t *in, const int64_t *kernel, const int64_t *out,
                           const int64_t *stride, const int64_t *padBegin, const int64_t *dilation) {
  Spatial3 g;
  const int off = 3 - nSpatial;
  for (int i = 0; i < 3; ++i) {
    if (i < off) {
      g.in[i] = g.k[i] = g.out[i] = g.s[i] = g.d[i] = 1;
      g.p[i] = g.pe[i] = 0;
    } else {
      const int j = i - off;
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

/// Input offset (within one image's channel group) of im2col entry (row r = (c,
/// kd, kh, kw), column q = (od, oh, ow)), or -1 for a padding tap.
__device__ inline int64_t im2colOffset(const Spatial3 &g, int64_t r, int64_t q) {
  const int64_t c = r / g.kSize, kk = r % g.kSize;
  const int64_t kd = kk / (g.k[1] * g.k[2]), kh = (kk / g.k[2]) % g.k[1], kw = kk % g.k[2];
  const int64_t ow = q % g.out[2], oh = (q / g.out[2]) % g.out[1], od = q / (g.out[1] * g.out[2]);
  const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
  const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
  const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.d[2];
  if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2])
    return -1;
  return c * g.inSize + (id * g.in[1] + ih) * g.in[2] + iw;
}

// Forward: batch b = (n, group); A = w[g] (Mg x Kd); B = im2col(x[n, g]) (Kd x P).
template <typename T> struct ConvFwdA {
  const T *w;
  int64_t G, Mg, Kd;
  __device__ T operator()(int64_t b, int64_t m, int64_t k) const { return w[((b % G) * Mg + m) * Kd + k]; }
};
template <typename T> struct ConvFwdB {
  const T *x;
  Spatial3 g;
  int64_t G, C, Cg;
  __device__ T operator()(int64_t b, int64_t k, int64_t q) const {
    const int64_t off = im2colOffset(g, k, q);
    return off < 0 ? T(0) : x[((b / G) * C + (b % G) * Cg) * g.inSize + off];
  }
};
template <typename T> struct ConvFwdC {
  T *y;
  const T *bias;
  int64_t G, Mg, M, P;
  __device__ void operator()(int64_t b, int64_t m, int64_t q, T v) const {
    const int64_t ch = (b % G) * Mg + m;
    y[((b / G) * M + ch) * P + q] = bias ? v + bias[ch] : v;
  }
};
template <typename T>
void convForward(const T *x, const T *w, const T *bias, T *y, const ConvGeom &c, ortcStream_t s) {
  const Spatial3 g = toSpatial3(c.nSpatial, c.in, c.kernel, c.out, c.stride, c.padBegin, c.dilation);
  const int64_t G = c.group, Cg = c.C / G, Mg = c.M / G, Kd = Cg * g.kSize, P = g.outSize;
  gemmTiled<T>(c.N * G, Mg, P, Kd, ConvFwdA<T>{w, G, Mg, Kd}, ConvFwdB<T>{x, g, G, c.C, Cg},
               ConvFwdC<T>{y, bias, G, Mg, c.M, P}, c.accum, s);
}

// Input gradient, gathered: batch b = (n, group); dx[n, g] (Cg x inSize) = w[g]
// regrouped (Cg x Mg*kSize) times the dy taps that reach each input position
// (Mg*kSize x inSize; zero where a tap falls between strides or outside dy). Every dx
// element is one dot product in a fixed order, stored once: no atomics, the same bits
// on every run (a strided conv multiplies the zeros between its strides).
template <typename T> struct ConvDxA {
  const T *w;
  int64_t G, Mg, Kd, kSize;
  __device__ T operator()(int64_t b, int64_t c, int64_t k) const {
    return w[((b % G) * Mg + k / kSize) * Kd + c * kSize + k % kSize];
  }
};
template <typename T> struct ConvDxB {
  const T *dy;
  Spatial3 g;
  int64_t G, Mg, M;
  __device__ T operator()(int64_t b, int64_t k, int64_t i) const {
    const int64_t m = k / g.kSize, kk = k % g.kSize;
    const int64_t tap[3] = {kk / (g.k[1] * g.k[2]), (kk / g.k[2]) % g.k[1], kk % g.k[2]};
    const int64_t at[3] = {i / (g.in[1] * g.in[2]), (i / g.in[2]) % g.in[1], i % g.in[2]};
    int64_t o = 0;
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      const int64_t t = at[a] + g.p[a] - tap[a] * g.d[a];
      if (t < 0 || t % g.s[a] != 0 || t / g.s[a] >= g.out[a])
        return T(0);
      o = o * g.out[a] + t / g.s[a];
    }
    return dy[((b / G) * M + (b % G) * Mg + m) * g.outSize + o];
  }
};
template <typename T> struct ConvDxC {
  T *dx;
  int64_t G, C, Cg, inSize;
  __device__ void operator()(int64_t b, int64_t c, int64_t i, T v) const {
    dx[((b / G) * C + (b % G) * Cg + c) * inSize + i] = v;
  }
};
template <typename T> void convGradInput(const T *dy, const T *w, T *dx, const ConvGeom &c, ortcStream_t s) {
  const Spatial3 g = toSpatial3(c.nSpatial, c.in, c.kernel, c.out, c.stride, c.padBegin, c.dilation);
  const int64_t G = c.group, Cg = c.C / G, Mg = c.M / G, Kd = Cg * g.kSize;
  gemmTiled<T>(c.N * G, Cg, g.inSize, Mg * g.kSize, ConvDxA<T>{w, G, Mg, Kd, g.kSize},
               ConvDxB<T>{dy, g, G, Mg, c.M}, ConvDxC<T>{dx, G, c.C, Cg, g.inSize}, c.accum, s);
}

// Weight gradient: batch = group; dw[g] (Mg x Kd) = sum over k = (n, q) of
// dy[n, g, m, q] * im2col(x[n, g])[r, q]: one GEMM with K = N * P, no atomics.
template <typename T> struct ConvDwA {
  const T *dy;
  int64_t Mg, M, P;
  __device__ T operator()(int64_t b, int64_t m, int64_t k) const {
    return dy[((k / P) * M + b * Mg + m) * P + k % P];
  }
};
template <typename T> struct ConvDwB {
  const T *x;
  Spatial3 g;
  int64_t C, Cg, P;
  __device__ T operator()(int64_t b, int64_t k, int64_t r) const {
    const int64_t off = im2colOffset(g, r, k % P);
    return off < 0 ? T(0) : x[((k / P) * C + b * Cg) * g.inSize + off];
  }
};
template <typename T> struct ConvDwC {
  T *dw;
  int64_t Mg, Kd;
  __device__ void operator()(int64_t b, int64_t m, int64_t r, T v) const { dw[(b * Mg + m) * Kd + r] = v; }
};
template <typename T> void convGradWeight(const T *dy, const T *x, T *dw, const ConvGeom &c, ortcStream_t s) {
  const Spatial3 g = toSpatial3(c.nSpatial, c.in, c.kernel, c.out, c.stride, c.padBegin, c.dilation);
  const int64_t G = c.group, Cg = c.C / G, Mg = c.M / G, Kd = Cg * g.kSize, P = g.outSize;
  if (c.N == 0 || P == 0) {
    ORTC_MEMSET_ASYNC(dw, 0, c.M * Kd * sizeof(T), s);
    return;
  }
  gemmTiled<T>(G, Mg, Kd, c.N * P, ConvDwA<T>{dy, Mg, c.M, P}, ConvDwB<T>{x, g, c.C, Cg, P}, ConvDwC<T>{dw, Mg, Kd},
               c.accum, s);
}

//===----------------------------------------------------------------------===//
// Pooling: one thread per output element
//===----------------------------------------------------------------------===//

template <typename T>
__device__ inline int64_t maxPoolArg(const T *plane, const Spatial3 &g, int64_t od, int64_t oh, int64_t ow) {
  int64_t best = -1;
  T mx = -ortc_inf<T>();
  for (int64_t kd = 0; kd < g.k[0]; ++kd) {
    const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
    if (id < 0 || id >= g.in[0])
      continue;
    for (int64_t kh = 0; kh < g.k[1]; ++kh) {
      const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
      if (ih < 0 || ih >= g.in[1])
        continue;
      const int64_t rowBase = (id * g.in[1] + ih) * g.in[2];
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.d[2];
        if (iw < 0 || iw >= g.in[2])
          continue;
        const T v = plane[rowBase + iw];
        if (best < 0 || v > mx || isNaN(v)) {
          mx = v;
          best = rowBase + iw;
        }
      }
    }
  }
  return best;
}
__device__ inline int64_t avgDivisor(const Spatial3 &g, bool cip, const int64_t *o) {
  int64_t div = 1;
  for (int i = 0; i < 3; ++i) {
    const int64_t lo = cip ? -g.p[i] : 0, hi = cip ? g.in[i] + g.pe[i] : g.in[i];
    int64_t n = 0;
    for (int64_t k = 0; k < g.k[i]; ++k) {
      const int64_t c = o[i] * g.s[i] - g.p[i] + k * g.d[i];
      n += (c >= lo && c < hi);
    }
    div *= n;
  }
  return div;
}

/// Forward pooling, one output element per thread (max: the first maximum; average:
/// the sum in double over the window's in-range taps).
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) poolKernel(const T *x, T *out, Spatial3 g, bool cip, bool isMax, int64_t total) {
  ORTC_FOR(t, total) {
    const int64_t pl = t / g.outSize, q = t % g.outSize;
    const int64_t o[3] = {q / (g.out[1] * g.out[2]), (q / g.out[2]) % g.out[1], q % g.out[2]};
    if (isMax) {
      const int64_t a = maxPoolArg(x + pl * g.inSize, g, o[0], o[1], o[2]);
      out[t] = a < 0 ? -ortc_inf<T>() : x[pl * g.inSize + a];
      continue;
    }
    const int64_t div = avgDivisor(g, cip, o);
    double sum = 0;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t id = o[0] * g.s[0] - g.p[0] + kd * g.d[0];
      if (id < 0 || id >= g.in[0])
        continue;
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t ih = o[1] * g.s[1] - g.p[1] + kh * g.d[1];
        if (ih < 0 || ih >= g.in[1])
          continue;
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t iw = o[2] * g.s[2] - g.p[2] + kw * g.d[2];
          if (iw >= 0 && iw < g.in[2])
            sum += static_cast<double>(x[pl * g.inSize + (id * g.in[1] + ih) * g.in[2] + iw]);
        }
      }
    }
    out[t] = div > 0 ? static_cast<T>(sum / static_cast<double>(div)) : T(0);
  }
}

/// The window index along one axis whose tap k lands on input position i, or -1.
__device__ inline int64_t poolWindowOf(const Spatial3 &g, int a, int64_t i, int64_t k) {
  const int64_t t = i + g.p[a] - k * g.d[a];
  return t < 0 || t % g.s[a] != 0 || t / g.s[a] >= g.out[a] ? -1 : t / g.s[a];
}

/// Pooling gradients, gathered: one thread per input element adds, in window order
/// and in double, dy of every window that takes it (max: the windows whose first
/// maximum it is; average: dy / the window's divisor), and stores the sum once. No
/// atomics: the same bits on every run.
template <typename T>
__global__ void ORTC_LAUNCH_BOUNDS(kBlock) poolGradKernel(const T *x, const T *dy, T *dx, Spatial3 g, bool cip, bool isMax, int64_t total) {
  ORTC_FOR(t, total) {
    const int64_t pl = t / g.inSize, a = t % g.inSize;
    const int64_t at[3] = {a / (g.in[1] * g.in[2]), (a / g.in[2]) % g.in[1], a % g.in[2]};
    double sum = 0;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t od = poolWindowOf(g, 0, at[0], kd);
      if (od < 0)
        continue;
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t oh = poolWindowOf(g, 1, at[1], kh);
        if (oh < 0)
          continue;
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t ow = poolWindowOf(g, 2, at[2], kw);
          if (ow < 0)
            continue;
          const double d = static_cast<double>(dy[pl * g.outSize + (od * g.out[1] + oh) * g.out[2] + ow]);
          if (isMax) {
            if (maxPoolArg(x + pl * g.inSize, g, od, oh, ow) == a)
              sum += d;
          } else {
            const int64_t o[3] = {od, oh, ow};
            const int64_t div = avgDivisor(g, cip, o);
            if (div > 0)
              sum += d / static_cast<double>(div);
          }
        }
      }
    }
    dx[t] = static_cast<T>(sum);
  }
}
inline Spatial3 toSpatial3(const PoolGeom &p) {
  Spatial3 g = toSpatial3(p.nSpatial, p.in, p.kernel, p.out, p.stride, p.padBegin, p.dilation);
  for (int j = 0; j < p.nSpatial; ++j)
    g.pe[3 - p.nSpatial + j] = p.padEnd[j];
  return g;
}
template <typename T> void maxPool(const T *x, T *y, const PoolGeom &p, ortcStream_t s) {
  const Spatial3 g = toSpatial3(p);
  const int64_t total = p.N * p.C * g.outSize;
  poolKernel<<<gridFor(total), kBlock, 0, s>>>(x, y, g, false, true, total);
}
template <typename T> void avgPool(const T *x, T *y, const PoolGeom &p, ortcStream_t s) {
  const Spatial3 g = toSpatial3(p);
  const int64_t total = p.N * p.C * g.outSize;
  poolKernel<<<gridFor(total), kBlock, 0, s>>>(x, y, g, p.countIncludePad, false, total);
}
template <typename T> void maxPoolGrad(const T *x, const T *dy, T *dx, const PoolGeom &p, ortcStream_t s) {
  const Spatial3 g = toSpatial3(p);
  const int64_t total = p.N * p.C * g.inSize;
  poolGradKernel<<<gridFor(total), kBlock, 0, s>>>(x, dy, dx, g, false, true, total);
}
template <typename T> void avgPoolGrad(const T *dy, T *dx, const PoolGeom &p, ortcStream_t s) {
  const Spatial3 g = toSpatial3(p);
  const int64_t total = p.N * p.C * g.inSize;
  poolGradKernel<<<gridFor(total), kBlock, 0, s>>>((const T *)nullptr, dy, dx, g, p.countIncludePad, false, total);
}

} // namespace gpu
} // namespace ortc

//===----------------------------------------------------------------------===//
// Runtime glue: the device API the ortc runtime reaches through this shared
// object (dlsym), so the runtime itself links no vendor library. Spelled once
// through ORTC_API(x) (cuda##x / hip##x) and the seam's ortcDeviceProp /
// ORTC_ARCH_NAME. Every function returns 0 or an error with ortc_gpu_error().
//===----------------------------------------------------------------------===//

namespace ortc {
namespace gpu {
inline char *errorText() {
  static char text[512];
  return text;
}
inline int setError(const char *what, ORTC_API(Error_t) e) {
  snprintf(errorText(), 512, "%s: %s", what, ORTC_API(GetErrorString)(e));
  return 1;
}
} // namespace gpu
} // namespace ortc

extern "C" {
const char *ortc_gpu_error(void) { return ortc::gpu::errorText(); }

/// Picks the device (the launcher's local rank modulo the visible devices, so that the
/// ranks of a data-parallel run on one node take one GPU each; else device 0) and
/// writes its arch name ("sm_90", "gfx90a") into `arch`.
int ortc_gpu_init(char *arch, int archLen) {
  int count = 0;
  ORTC_API(Error_t) e = ORTC_API(GetDeviceCount)(&count);
  if (e != ORTC_API(Success))
    return ortc::gpu::setError("no usable GPU", e);
  if (count == 0) {
    snprintf(ortc::gpu::errorText(), 512, "no GPU is visible");
    return 1;
  }
  int device = 0;
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *v = getenv(name); v && *v) {
      device = atoi(v) % count;
      break;
    }
  if ((e = ORTC_API(SetDevice)(device)) != ORTC_API(Success))
    return ortc::gpu::setError("selecting the GPU", e);
  ortcDeviceProp prop;
  if ((e = ORTC_API(GetDeviceProperties)(&prop, device)) != ORTC_API(Success))
    return ortc::gpu::setError("reading the GPU's properties", e);
  ORTC_ARCH_NAME(prop, arch, archLen);
  return 0;
}
int ortc_gpu_malloc(void **p, size_t bytes) {
  ORTC_API(Error_t) e = ORTC_API(Malloc)(p, bytes < 256 ? 256 : bytes);
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("device allocation", e);
}
void ortc_gpu_free(void *p) { (void)ORTC_API(Free)(p); }
/// Copies on `stream` and waits for it (a pageable cudaMemcpy could still be in
/// flight when a kernel on a non-blocking stream starts).
int ortc_gpu_upload(void *dst, const void *src, size_t bytes, void *stream) {
  ORTC_API(Error_t) e = ORTC_API(MemcpyAsync)(dst, src, bytes, ORTC_API(MemcpyHostToDevice),
                                              (ortcStream_t)stream);
  if (e == ORTC_API(Success))
    e = ORTC_API(StreamSynchronize)((ortcStream_t)stream);
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("host-to-device copy", e);
}
int ortc_gpu_download(void *dst, const void *src, size_t bytes, void *stream) {
  ORTC_API(Error_t) e = ORTC_API(MemcpyAsync)(dst, src, bytes, ORTC_API(MemcpyDeviceToHost),
                                              (ortcStream_t)stream);
  if (e == ORTC_API(Success))
    e = ORTC_API(StreamSynchronize)((ortcStream_t)stream);
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("device-to-host copy", e);
}
int ortc_gpu_memset(void *dst, int v, size_t bytes, void *stream) {
  ORTC_API(Error_t) e = ORTC_API(MemsetAsync)(dst, v, bytes, (ortcStream_t)stream);
  if (e == ORTC_API(Success))
    e = ORTC_API(StreamSynchronize)((ortcStream_t)stream);
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("device memset", e);
}
int ortc_gpu_stream_create(void **stream) {
  ortcStream_t s;
  ORTC_API(Error_t) e = ORTC_API(StreamCreateWithFlags)(&s, ORTC_API(StreamNonBlocking));
  *stream = (void *)s;
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("creating a stream", e);
}
void ortc_gpu_stream_destroy(void *stream) { (void)ORTC_API(StreamDestroy)((ortcStream_t)stream); }
/// Waits for the stream; reports the first error of any kernel launched on it.
int ortc_gpu_sync(void *stream) {
  ORTC_API(Error_t) e = ORTC_API(StreamSynchronize)((ortcStream_t)stream);
  if (e == ORTC_API(Success))
    e = ORTC_API(GetLastError)();
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("running the step", e);
}
int ortc_gpu_capture_begin(void *stream) {
  ORTC_API(Error_t) e =
      ORTC_API(StreamBeginCapture)((ortcStream_t)stream, ORTC_API(StreamCaptureModeThreadLocal));
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("beginning graph capture", e);
}
/// Ends the capture and instantiates it into *exec (a graph exec handle).
int ortc_gpu_capture_end(void *stream, void **exec) {
  ORTC_API(Graph_t) graph = nullptr;
  ORTC_API(Error_t) e = ORTC_API(StreamEndCapture)((ortcStream_t)stream, &graph);
  if (e != ORTC_API(Success))
    return ortc::gpu::setError("ending graph capture", e);
  ORTC_API(GraphExec_t) x = nullptr;
  e = ORTC_API(GraphInstantiateWithFlags)(&x, graph, 0);
  (void)ORTC_API(GraphDestroy)(graph);
  *exec = (void *)x;
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("instantiating the step graph", e);
}
int ortc_gpu_graph_launch(void *exec, void *stream) {
  ORTC_API(Error_t) e = ORTC_API(GraphLaunch)((ORTC_API(GraphExec_t))exec, (ortcStream_t)stream);
  return e == ORTC_API(Success) ? 0 : ortc::gpu::setError("launching the step graph", e);
}
void ortc_gpu_graph_destroy(void *exec) {
  (void)ORTC_API(GraphExecDestroy)((ORTC_API(GraphExec_t))exec);
}
} // extern "C"

#endif // ORTC_GPU_KERNELS_H
