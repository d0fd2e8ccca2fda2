//===- LowPrecisionTest.cpp - float to float16 / bfloat16 and back --------===//
//
// The kernel library's 16-bit conversions (ortc_kernels.h, ortc_cvt) against a
// reference written from the definition, over all 2^32 float bit patterns: the
// reference lists every finite 16-bit value (in order, as doubles), finds the two that
// bracket the input and takes the nearer, the one with an even last bit on a tie; one
// past the largest finite value stands the next power of two, whose encoding is
// infinity, so overflow follows the same rule. NaNs must come out as quiet NaNs. Built
// twice (CMakeLists.txt): with the baseline instruction set (integer code) and at
// x86-64-v3 (F16C instructions, vectorised loops), which must give the same bits.
//
//===----------------------------------------------------------------------===//

#include "ortc_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using ortc::kern::bitsFloat;

/// One 16-bit format: its finite non-negative values in bit order, then the next power
/// of two at the index of infinity.
struct Format {
  const char *name;
  uint16_t infBits;
  double (*decode)(uint16_t); ///< the exact value of a finite pattern
  uint16_t (*ours)(uint32_t);
  std::vector<double> values;

  void build() {
    for (uint32_t b = 0; b < infBits; ++b)
      values.push_back(decode(uint16_t(b)));
    // The value the next pattern would have with the exponent continued.
    values.push_back(std::ldexp(1.0, infBits == 0x7c00 ? 16 : 128));
  }
  /// The reference rounding of non-negative finite or infinite x, given the index i of
  /// the largest value <= x (values[i] <= x < values[i + 1]).
  uint16_t nearest(double x, size_t i) const {
    if (i + 1 >= values.size())
      return infBits;
    double lo = values[i], hi = values[i + 1], mid = lo + (hi - lo) / 2;
    if (x < mid || (x == mid && (i & 1) == 0))
      return uint16_t(i);
    return uint16_t(i + 1);
  }
};

double decodeHalf(uint16_t b) {
  int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  return e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m | 0x400), e - 25);
}
double decodeBf16(uint16_t b) {
  int e = (b >> 7) & 0xff, m = b & 0x7f;
  return e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(m | 0x80), e - 134);
}

bool quietNaN(uint16_t h, uint16_t infBits) {
  uint16_t quiet = infBits == 0x7c00 ? 0x200 : 0x40;
  return (h & infBits) == infBits && (h & ~(infBits | 0x8000) & 0xffff) != 0 && (h & quiet);
}

/// Every float through `f.ours`: returns the number of mismatches (and the first).
int64_t sweep(const Format &f, uint32_t &firstBad) {
  const uint32_t kEnd = 0x7f800001u; // the non-negative floats, infinity included
  const uint32_t kChunk = 1u << 22;
  int64_t bad = 0;
  uint32_t first = 0xffffffffu;
#pragma omp parallel for schedule(dynamic) reduction(+ : bad)
  for (int64_t c = 0; c < int64_t((kEnd + kChunk - 1) / kChunk); ++c) {
    uint32_t from = uint32_t(c) * kChunk, to = std::min<uint64_t>(uint64_t(from) + kChunk, kEnd);
    double x0 = double(bitsFloat(from));
    size_t i = size_t(std::upper_bound(f.values.begin(), f.values.end(), x0) - f.values.begin()) - 1;
    int64_t localBad = 0;
    uint32_t localFirst = 0xffffffffu;
    for (uint32_t u = from; u < to; ++u) {
      double x = double(bitsFloat(u));
      while (i + 1 < f.values.size() && f.values[i + 1] <= x)
        ++i;
      uint16_t want = f.nearest(x, i);
      if (f.ours(u) != want || f.ours(u | 0x80000000u) != (want | 0x8000)) {
        ++localBad;
        localFirst = std::min(localFirst, u);
      }
    }
    bad += localBad;
    if (localBad) {
#pragma omp critical
      first = std::min(first, localFirst);
    }
  }
  // NaNs, both signs: quiet, sign kept.
  for (uint32_t u = 0x7f800001u; u != 0x80000000u; ++u)
    for (uint32_t s : {0u, 0x80000000u}) {
      uint16_t h = f.ours(u | s);
      if (!quietNaN(h, f.infBits) || (h & 0x8000) != (s >> 16)) {
        ++bad;
        first = std::min(first, u | s);
      }
    }
  firstBad = first;
  return bad;
}

/// ortc_cvt<T> of every float against the reference rounding of `f`.
void expectEveryFloatRounds(Format f) {
  f.build();
  uint32_t first = 0;
  int64_t bad = sweep(f, first);
  EXPECT_EQ(bad, 0) << f.name << ": first wrong: float bits 0x" << std::hex << first << " -> 0x"
                    << f.ours(first);
}

TEST(LowPrecision, FloatToHalfRoundsToNearestEvenOnEveryFloat) {
  expectEveryFloatRounds({"float16", 0x7c00, decodeHalf, [](uint32_t u) {
                            return ortc_cvt<ortc_half>(bitsFloat(u)).bits;
                          }});
}

TEST(LowPrecision, FloatToBf16RoundsToNearestEvenOnEveryFloat) {
  expectEveryFloatRounds({"bfloat16", 0x7f80, decodeBf16, [](uint32_t u) {
                            return ortc_cvt<ortc_bf16>(bitsFloat(u)).bits;
                          }});
}

TEST(LowPrecision, SixteenBitsToFloatIsExact) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t h = uint16_t(b);
    float half = ortc_cvt<float>(ortc_half{h}), bf = ortc_cvt<float>(ortc_bf16{h});
    bool halfSpecial = (h & 0x7c00) == 0x7c00, bfSpecial = (h & 0x7f80) == 0x7f80;
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (!halfSpecial)
      ASSERT_EQ(double(half), sign * decodeHalf(h & 0x7fff)) << std::hex << b;
    else if (h & 0x3ff)
      ASSERT_TRUE(std::isnan(half) && (ortc::kern::floatBits(half) & 0x400000u)) << std::hex << b;
    else
      ASSERT_EQ(half, float(sign * INFINITY)) << std::hex << b;
    if (!bfSpecial)
      ASSERT_EQ(double(bf), sign * decodeBf16(h & 0x7fff)) << std::hex << b;
    else if (h & 0x7f)
      ASSERT_TRUE(std::isnan(bf)) << std::hex << b;
    else
      ASSERT_EQ(bf, float(sign * INFINITY)) << std::hex << b;
    // Round trips: every finite 16-bit value is a float that converts back to itself.
    if (!halfSpecial)
      ASSERT_EQ(ortc_cvt<ortc_half>(half).bits, h) << std::hex << b;
    if (!bfSpecial)
      ASSERT_EQ(ortc_cvt<ortc_bf16>(bf).bits, h) << std::hex << b;
  }
}

/// A loop the compiler vectorises gives the element-by-element calls' bits; the
/// branch-free conversions, the branching integer code and, where the build has F16C
/// (x86-64-v3), the instructions agree on every float.
TEST(LowPrecision, VectorLoopsInstructionsAndIntegerCodeAgree) {
  const int64_t n = 1 << 20;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = bitsFloat(uint32_t(i) * 4093u + 0x2f000000u);
  std::vector<ortc_half> h(n);
  std::vector<ortc_bf16> b(n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    h[i].bits = ortc_cvt<ortc_half>(x[i]).bits;
    b[i].bits = ortc_cvt<ortc_bf16>(x[i]).bits;
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i].bits, ortc::kern::floatToHalfBitsScalar(ortc::kern::floatBits(x[i]))) << i;
    ASSERT_EQ(b[i].bits, ortc::kern::floatToBf16Bits(ortc::kern::floatBits(x[i]))) << i;
  }
  // The branch-free conversions (what kernels use) against the branching integer code
  // and, where the build has F16C, the instructions, on every float.
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
  for (int64_t c = 0; c < 1024; ++c)
    for (uint64_t u = uint64_t(c) << 22; u < (uint64_t(c + 1) << 22); ++u) {
      const uint16_t ours = ortc::kern::floatToHalfBits(uint32_t(u));
      bad += ours != ortc::kern::floatToHalfBitsScalar(uint32_t(u));
#if defined(__F16C__)
      bad += ours != _cvtss_sh(bitsFloat(uint32_t(u)), _MM_FROUND_TO_NEAREST_INT);
#endif
    }
  EXPECT_EQ(bad, 0);
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const uint32_t ours = ortc::kern::floatBits(ortc::kern::halfBitsToFloat(uint16_t(v)));
    ASSERT_EQ(ours, ortc::kern::floatBits(ortc::kern::halfBitsToFloatScalar(uint16_t(v))))
        << std::hex << v;
#if defined(__F16C__)
    ASSERT_EQ(ours, ortc::kern::floatBits(_cvtsh_ss(uint16_t(v)))) << std::hex << v;
#endif
  }
}

} // namespace
