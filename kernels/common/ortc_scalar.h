//===- ortc_scalar.h - The scalar math of ortc's ops, host and device -*- C++ -*-===//
//
// Why this file exists: an op's per-element formula (GELU and its gradient, the
// sigmoid, dropout's counter-based draw and scale, ONNX Mod on integers) was
// written out in the CPU kernel library, the GPU kernel library, the evaluator and
// the printer's expressions, and a change to one (the dropout hash) had to be made
// in each. Here each is written once, for host and device code alike: the CPU
// library (kernels/cpu), the GPU library (kernels/gpu, also under the emulator)
// and the evaluator include it, and generated kernels call it through their
// library's names (geluOf, sigmoidOf, dropoutOf, imod).
//
// The formulas that call transcendental functions take them from a math policy M
// (static M::exp, M::erf, M::tanh): the CPU library's is its vectorisation-stable
// vm:: functions, the GPU library's the device's libm, the evaluator's std::. The
// formula and its order of operations are the same for every policy, so two
// targets differ only by the rounding of those functions.
//
// This header is inlined into the libraries' text when the compiler embeds them
// (codegen/EmbedFile.cmake), so an artifact still ships one header per library.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_KERNELS_COMMON_ORTC_SCALAR_H
#define ORTC_KERNELS_COMMON_ORTC_SCALAR_H

#include <stdint.h>

// Callable from host and device code; always inlined on the host (an out-of-line
// call keeps a loop scalar: see ORTC_KERN_ALWAYS_INLINE in kernels/cpu).
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define ORTC_SCALAR_FN __host__ __device__ inline
#elif defined(__GNUC__)
#define ORTC_SCALAR_FN inline __attribute__((always_inline))
#else
#define ORTC_SCALAR_FN inline
#endif

namespace ortc {
namespace scalar {

//===----------------------------------------------------------------------===//
// Dropout and random draws (counter-based)
//===----------------------------------------------------------------------===//

/// SplitMix64's increment, the golden ratio's 64 fraction bits (2^64 / phi).
constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

/// splitmix64 finaliser (Stafford variant 13): a bijective 64-bit mixer.
ORTC_SCALAR_FN uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The SplitMix64 state of the tensor identified by `key` under `seed`.
ORTC_SCALAR_FN uint64_t counterState(uint64_t seed, uint64_t key) {
  return mix64(seed ^ mix64(key));
}

/// The 53 random bits of element i of the tensor identified by `key` under
/// `seed`: output i of SplitMix64 (Steele, Lea and Flood, 2014) from that
/// tensor's state, mix64(state + (i + 1) * golden gamma) >> 11. A pure function of
/// its arguments, so draws depend on neither the element type, the thread count
/// nor the target. In a loop the state is the same for every element (hoisted) and
/// (i + 1) * gamma an induction, so an element costs one mix64.
ORTC_SCALAR_FN uint64_t counterBits(uint64_t seed, uint64_t key, uint64_t i) {
  return mix64(counterState(seed, key) + (i + 1) * kGoldenGamma) >> 11;
}

/// The uniform draw u = counterBits * 2^-53 in [0, 1) (dropout, RandomUniform).
ORTC_SCALAR_FN double counterUniform(uint64_t seed, uint64_t key, uint64_t i) {
  return static_cast<double>(counterBits(seed, key, i)) * 0x1.0p-53;
}

/// ONNX RandomUniform(Like) element i: low + (high - low) * u, in double.
ORTC_SCALAR_FN double uniformOf(double low, double high, uint64_t seed, uint64_t key,
                                uint64_t i) {
  return low + (high - low) * counterUniform(seed, key, i);
}

/// Dropout keeps an element iff u >= ratio, i.e. (u = bits * 2^-53 and
/// ratio * 2^53 are exact) iff bits >= ceil(ratio * 2^53): an integer test,
/// which vectorises. A NaN ratio drops everything, as u >= NaN is false.
/// (ceil by hand: this header calls no math library, so that it declares nothing
/// beside the includer's own math functions.)
ORTC_SCALAR_FN uint64_t keepThreshold(double ratio) {
  const double t = ratio * 0x1.0p53; // exact
  if (!(t < 0x1.0p53))
    return uint64_t(1) << 53;
  if (t <= 0)
    return 0;
  const uint64_t k = static_cast<uint64_t>(t); // floor, exact below 2^53
  return static_cast<double>(k) < t ? k + 1 : k;
}

/// Dropout's keep decision for element i (see keepThreshold).
ORTC_SCALAR_FN bool dropoutKeep(uint64_t seed, uint64_t key, uint64_t i, double ratio) {
  return counterBits(seed, key, i) >= keepThreshold(ratio);
}

/// Inverted dropout of element i (torch.nn.functional.dropout, ONNX Dropout):
/// dropoutKeep(seed, key, i, ratio) ? x / (1 - ratio) : 0, the scale computed in
/// double and rounded to T; ratio >= 1 drops everything. Its gradient draws the
/// same mask: dropout_grad(dy) is dropoutOf(dy).
template <typename T>
ORTC_SCALAR_FN T dropoutOf(T x, uint64_t seed, uint64_t key, int64_t i, double ratio) {
  const T scale = ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
  return counterBits(seed, key, static_cast<uint64_t>(i)) >= keepThreshold(ratio) ? x * scale
                                                                                : T(0);
}

//===----------------------------------------------------------------------===//
// Integer and activation formulas
//===----------------------------------------------------------------------===//

/// ONNX Mod on integers: the remainder with the divisor's sign (Python's %),
/// or the dividend's with fmod (C's %). A zero divisor gives 0, as numpy does
/// (and so does -1, whose remainder is 0 and whose quotient may overflow).
template <typename T> ORTC_SCALAR_FN T imod(T a, T b, bool fmod) {
  if (b == 0 || b == T(-1))
    return T(0);
  T r = a % b;
  if (!fmod && r != 0 && ((r < 0) != (b < 0)))
    r += b;
  return r;
}

/// The logistic function 1 / (1 + e^-x) (ONNX Sigmoid), computed in T.
template <typename M, typename T> ORTC_SCALAR_FN T sigmoid(T v) {
  return T(1) / (T(1) + M::exp(-v));
}

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

/// torch.nn.functional.gelu / ONNX Gelu of one element: approximate='none':
/// y = x * 0.5 * (1 + erf(x / sqrt(2))); approximate='tanh' (tanhApprox):
/// y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))). Computed in T like
/// PyTorch.
template <typename M, typename T> ORTC_SCALAR_FN T gelu(T v, bool tanhApprox) {
  const T half = T(0.5), one = T(1);
  if (tanhApprox) {
    const T inner = T(kSqrt2OverPi) * (v + T(kGeluKappa) * v * v * v);
    return half * v * (one + M::tanh(inner));
  }
  return v * half * (one + M::erf(v * T(kSqrt1_2)));
}

/// dx of gelu for one element (PyTorch's GeluBackward formulas): 'none':
/// dx = dy * (0.5 * (1 + erf(x / sqrt(2))) + x * exp(-x^2 / 2) / sqrt(2 pi));
/// 'tanh': with u = sqrt(2 / pi) * (x + 0.044715 x^3), t = tanh(u):
/// dx = dy * (0.5 * (1 + t) + 0.5 * x * (1 - t^2) * sqrt(2 / pi) * (1 + 3 * 0.044715 x^2)).
template <typename M, typename T> ORTC_SCALAR_FN T geluGrad(T v, T dy, bool tanhApprox) {
  const T half = T(0.5), one = T(1);
  if (tanhApprox) {
    const T beta = T(kSqrt2OverPi), kappa = T(kGeluKappa);
    const T v2 = v * v;
    const T t = M::tanh(beta * (v + kappa * v2 * v));
    const T leftD = half * (one + t);
    const T rightD = (one - t * t) * (beta * (one + T(3) * kappa * v2));
    return dy * (leftD + half * v * rightD);
  }
  const T cdf = half * (one + M::erf(v * T(kSqrt1_2)));
  const T pdf = T(kInvSqrt2Pi) * M::exp(-half * v * v);
  return dy * (cdf + v * pdf);
}

} // namespace scalar
} // namespace ortc

#endif // ORTC_KERNELS_COMMON_ORTC_SCALAR_H
