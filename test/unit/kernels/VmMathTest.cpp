//===- VmMathTest.cpp - The kernel library's vectorisation-stable math ----===//
//
// ortc::kern::vm's exp, log, tanh and erf replace libm's in generated kernels so that
// an element's bits do not depend on whether a vector body, a scalar remainder or an
// unvectorised loop computed it (the recompute pass relies on it: a clone runs in
// another kernel than the original). Built with the flags of generated kernels (see
// CMakeLists.txt), this checks both halves of that contract: the same bits from a
// vectorised loop and from scalar calls, and accuracy within 2 ulp of float64 libm over
// a dense sweep of all floats, with libm's special values.
//
//===----------------------------------------------------------------------===//

#include "ortc_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using Fn = float (*)(float);
struct Case {
  const char *name;
  Fn ours;
  double (*exact)(double);
};
const Case kCases[] = {
    {"exp", [](float x) { return ortc::kern::vm::exp(x); }, [](double x) { return std::exp(x); }},
    {"log", [](float x) { return ortc::kern::vm::log(x); }, [](double x) { return std::log(x); }},
    {"tanh", [](float x) { return ortc::kern::vm::tanh(x); }, [](double x) { return std::tanh(x); }},
    {"erf", [](float x) { return ortc::kern::vm::erf(x); }, [](double x) { return std::erf(x); }},
};

/// Floats ordered as integers, so that the difference counts the floats between.
int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : i;
}

/// Every `stride`-th float (both signs), the specials, and values near each range split.
std::vector<float> sweep(uint32_t stride) {
  std::vector<float> xs;
  for (uint64_t b = 0; b < 0x7f800000u; b += stride)
    for (uint32_t sign : {0u, 0x80000000u}) {
      uint32_t bits = static_cast<uint32_t>(b) | sign;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      xs.push_back(f);
    }
  for (float split : {0.875f, 2.0f, 3.9375f, 0.34657359f, 0.69314718f, 9.5f, 88.7f, -103.9f,
                      1.41421356f})
    for (int k = -64; k <= 64; ++k)
      xs.push_back(std::nextafter(split, k < 0 ? 0.0f : 1e30f) + k * 1e-7f * split);
  return xs;
}

// The two halves of each comparison: one loop the compiler vectorises (with a remainder:
// the count is odd), one call per element through a function it cannot inline.
__attribute__((noinline)) float scalarCall(Fn f, float x) { return f(x); }

template <float (*F)(float)> void vectorLoop(const float *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = F(x[i]);
}

float vmExp(float x) { return ortc::kern::vm::exp(x); }
float vmLog(float x) { return ortc::kern::vm::log(x); }
float vmTanh(float x) { return ortc::kern::vm::tanh(x); }
float vmErf(float x) { return ortc::kern::vm::erf(x); }

TEST(VectorStableMath, VectorAndScalarGiveTheSameBits) {
  std::vector<float> xs = sweep(4099);
  if (xs.size() % 2 == 0)
    xs.pop_back();
  std::vector<float> y(xs.size());
  using Loop = void (*)(const float *, float *, int64_t);
  const Loop loops[] = {vectorLoop<vmExp>, vectorLoop<vmLog>, vectorLoop<vmTanh>,
                        vectorLoop<vmErf>};
  for (size_t c = 0; c < 4; ++c) {
    loops[c](xs.data(), y.data(), static_cast<int64_t>(xs.size()));
    int64_t differ = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      float s = scalarCall(kCases[c].ours, xs[i]);
      differ += std::memcmp(&s, &y[i], sizeof s) != 0 && !(std::isnan(s) && std::isnan(y[i]));
    }
    EXPECT_EQ(differ, 0) << kCases[c].name << ": elements whose bits differ";
  }
}

TEST(VectorStableMath, WithinTwoUlpOfFloat64) {
  const std::vector<float> xs = sweep(257);
  for (const Case &c : kCases) {
    int64_t worst = 0;
    float at = 0;
    for (float x : xs) {
      const double exact = c.exact(static_cast<double>(x));
      const float want = static_cast<float>(exact), got = c.ours(x);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << c.name << "(" << x << ") = " << got;
        continue;
      }
      // Below the smallest normal, ulps are absolute: count them from the exact value.
      int64_t d = std::llabs(ordered(got) - ordered(want));
      if (d > worst) {
        worst = d;
        at = x;
      }
    }
    EXPECT_LE(worst, 2) << c.name << ": worst at x = " << at;
    std::printf("%-5s worst %lld ulp (at %.9g) over %zu values\n", c.name,
                static_cast<long long>(worst), at, xs.size());
  }
}

TEST(VectorStableMath, SpecialValues) {
  using namespace ortc::kern::vm;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(exp(inf), inf);
  EXPECT_EQ(exp(-inf), 0.0f);
  EXPECT_EQ(exp(0.0f), 1.0f);
  EXPECT_EQ(exp(100.0f), inf);
  EXPECT_GT(exp(-100.0f), 0.0f); // a denormal
  EXPECT_EQ(log(1.0f), 0.0f);
  EXPECT_EQ(log(0.0f), -inf);
  EXPECT_EQ(log(inf), inf);
  EXPECT_TRUE(std::isnan(log(-1.0f)));
  EXPECT_EQ(tanh(inf), 1.0f);
  EXPECT_EQ(tanh(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(tanh(-0.0f)));
  EXPECT_EQ(erf(inf), 1.0f);
  EXPECT_EQ(erf(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(erf(-0.0f)));
  for (float (*f)(float) : {vmExp, vmLog, vmTanh, vmErf})
    EXPECT_TRUE(std::isnan(f(nan)));
}

} // namespace
