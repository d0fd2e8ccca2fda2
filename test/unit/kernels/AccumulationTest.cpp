//===- AccumulationTest.cpp - 16-bit accumulation (--accum-dtype) ---------===//
//
// The kernel library's emulated 16-bit accumulation (ortc_kernels.h, Accum): long sums
// in chunks of C bfloat16/float16 additions stay near the float64 sum where one 16-bit
// running sum (plain16) stalls; the GEMM and the reduction add exactly as a scalar
// reference written from the definition (each addition rounded to nearest even in the
// 16-bit type, chunk sums added in float, in k order); convolutions sum that way too.
// Built at the baseline instruction set and at x86-64-v3 (F16C, vectorised loops) like
// the conversion test, which must agree bit for bit.
//
//===----------------------------------------------------------------------===//

#include "ortc_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using ortc::kern::Accum;

/// x rounded to the 16-bit type of `kind` (the library's conversions, checked over every
/// float by LowPrecisionTest).
float round16(float x, int kind) {
  return kind == Accum::Bf16 ? ortc_cvt<float>(ortc_cvt<ortc_bf16>(x))
                             : ortc_cvt<float>(ortc_cvt<ortc_half>(x));
}

/// The definition: terms added in order, each sum rounded; every `chunk` terms (0: never)
/// the partial sum moves into a float total.
float referenceSum(const std::vector<float> &terms, Accum acc) {
  float part = 0, total = 0;
  int64_t n = 0;
  for (float t : terms) {
    part = round16(part + t, acc.kind);
    if (++n == acc.chunk) {
      total += part;
      part = 0;
      n = 0;
    }
  }
  return total + part;
}

/// n values uniform in [lo, hi), each a value of the 16-bit type of `kind`.
std::vector<float> sixteenBitValues(int64_t n, int kind, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = round16(u(rng), kind);
  return v;
}

double exactSum(const std::vector<float> &v) {
  double s = 0;
  for (float x : v)
    s += x;
  return s;
}

TEST(Accumulation, ChunkedSumsOfAMillionStayNearFloat64) {
  struct Case {
    int kind;
    const char *name;
    float lo, hi;
  } cases[] = {{Accum::Bf16, "bf16", 0.0f, 1.0f},
               // float16 tops out at 65504: terms small enough for the whole sum to fit
               {Accum::Half, "fp16", 0.0f, 0.1f}};
  for (const Case &c : cases) {
    std::vector<float> v = sixteenBitValues(1000000, c.kind, c.lo, c.hi, 7);
    const double exact = exactSum(v);
    const float chunked =
        ortc::kern::sumAccum(v.data(), int64_t(v.size()), Accum{c.kind, ortc::kern::kDefaultAccumChunk});
    const float plain = ortc::kern::sumAccum(v.data(), int64_t(v.size()), Accum{c.kind, 0});
    const double chunkedErr = std::fabs(chunked - exact) / exact;
    const double plainErr = std::fabs(plain - exact) / exact;
    std::printf("%s: sum of 1e6 = %.6g (float64); chunked16 (C = 64) %.6g, relative error "
                "%.2e; plain16 %.6g, relative error %.2e\n",
                c.name, exact, chunked, chunkedErr, plain, plainErr);
    EXPECT_LE(chunkedErr, 1e-3) << c.name;
    EXPECT_GE(plainErr, 100 * chunkedErr) << c.name;
    EXPECT_GE(plainErr, 0.5) << c.name << ": one 16-bit running sum stalls far below";
    // The library adds exactly as the definition does.
    EXPECT_EQ(chunked, referenceSum(v, Accum{c.kind, ortc::kern::kDefaultAccumChunk})) << c.name;
    EXPECT_EQ(plain, referenceSum(v, Accum{c.kind, 0})) << c.name;
  }
}

TEST(Accumulation, EachAdditionRoundsToNearestEven) {
  // bfloat16 holds 256 and 258 but not 257: 256 + 1 ties, and goes to the even 256.
  std::vector<float> v = {256.0f, 1.0f, 1.0f, 1.0f};
  EXPECT_EQ(referenceSum(v, Accum{Accum::Bf16, 0}), 256.0f);
  EXPECT_EQ(ortc::kern::sumAccum(v.data(), 4, Accum{Accum::Bf16, 0}), 256.0f);
  // Chunks of two: 256 + 1 -> 256, then 1 + 1 = 2: 258 in float.
  EXPECT_EQ(ortc::kern::sumAccum(v.data(), 4, Accum{Accum::Bf16, 2}), 258.0f);
  // float16 holds 2048 and 2050: 2048 + 1 ties to 2048, 2048 + 3 = 2051 ties to 2052.
  std::vector<float> h = {2048.0f, 1.0f, 3.0f};
  EXPECT_EQ(ortc::kern::sumAccum(h.data(), 3, Accum{Accum::Half, 0}), 2052.0f);
}

/// C = op(A) op(B) by the definition, every dot product a referenceSum.
std::vector<float> referenceMatmul(const std::vector<float> &A, const std::vector<float> &B,
                                   int64_t M, int64_t N, int64_t K, bool tA, bool tB, Accum acc) {
  std::vector<float> C(static_cast<size_t>(M * N));
  std::vector<float> terms(static_cast<size_t>(K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t k = 0; k < K; ++k)
        terms[k] = (tA ? A[k * M + i] : A[i * K + k]) * (tB ? B[j * K + k] : B[k * N + j]);
      C[i * N + j] = referenceSum(terms, acc);
    }
  return C;
}

TEST(Accumulation, MatmulSumsAsTheDefinition) {
  const int64_t M = 7, N = 19, K = 300;
  for (int kind : {int(Accum::Bf16), int(Accum::Half)})
    for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(64), int64_t(1000)})
      for (bool tA : {false, true})
        for (bool tB : {false, true}) {
          Accum acc{kind, chunk};
          std::vector<float> A = sixteenBitValues(M * K, kind, -1, 1, 1);
          std::vector<float> B = sixteenBitValues(K * N, kind, -1, 1, 2);
          std::vector<float> C(static_cast<size_t>(M * N), 5.0f);
          ortc::kern::matmul(A.data(), B.data(), C.data(), 1, M, N, K, tA, tB, false, acc);
          EXPECT_EQ(C, referenceMatmul(A, B, M, N, K, tA, tB, acc))
              << "kind " << kind << " chunk " << chunk << " tA " << tA << " tB " << tB;
          // Accumulating into C adds the float result.
          std::vector<float> D(static_cast<size_t>(M * N), 0.5f);
          ortc::kern::matmul(A.data(), B.data(), D.data(), 1, M, N, K, tA, tB, true, acc);
          for (size_t e = 0; e < D.size(); ++e)
            ASSERT_EQ(D[e], 0.5f + C[e]);
        }
}

TEST(Accumulation, ReduceSumsTheReducedAxesInRowMajorOrder) {
  // x [5, 40, 3] summed over axes 0 and 1: each output adds x[:, :, c] in row-major order.
  const int64_t dims[] = {5, 40, 3}, axes[] = {0, 1};
  std::vector<float> x = sixteenBitValues(5 * 40 * 3, Accum::Bf16, 0, 4, 3);
  for (int64_t chunk : {int64_t(0), int64_t(16)}) {
    Accum acc{Accum::Bf16, chunk};
    float sum[3], mean[3];
    ortc::kern::reduce(x.data(), dims, 3, axes, 2, sum, ortc::kern::ReduceKind::Sum, acc);
    ortc::kern::reduce(x.data(), dims, 3, axes, 2, mean, ortc::kern::ReduceKind::Mean, acc);
    for (int c = 0; c < 3; ++c) {
      std::vector<float> terms;
      for (int64_t r = 0; r < 200; ++r)
        terms.push_back(x[r * 3 + c]);
      EXPECT_EQ(sum[c], referenceSum(terms, acc));
      EXPECT_EQ(mean[c], referenceSum(terms, acc) / 200.0f);
    }
  }
}

TEST(Accumulation, ConvolutionsSumInSixteenBits) {
  // A 1x1 convolution is a matmul per image: W [M, C] x X [C, P], with every product
  // summed over C as the definition says. A 3x3 one is near the float result and not
  // equal to it (its sums were rounded), for all three passes.
  ortc::kern::ConvGeom g{};
  g.nSpatial = 2;
  g.N = 2;
  g.C = 96;
  g.M = 5;
  g.group = 1;
  for (int i = 0; i < 2; ++i) {
    g.in[i] = g.out[i] = 6;
    g.kernel[i] = g.stride[i] = g.dilation[i] = 1;
    g.padBegin[i] = 0;
  }
  const int64_t P = 36;
  Accum acc{Accum::Bf16, 32};
  std::vector<float> x = sixteenBitValues(g.N * g.C * P, Accum::Bf16, -1, 1, 4);
  std::vector<float> w = sixteenBitValues(g.M * g.C, Accum::Bf16, -1, 1, 5);
  std::vector<float> y(static_cast<size_t>(g.N * g.M * P));
  g.accum = acc;
  ortc::kern::convForward<float>(x.data(), w.data(), nullptr, y.data(), g);
  for (int64_t n = 0; n < g.N; ++n) {
    std::vector<float> xn(x.begin() + n * g.C * P, x.begin() + (n + 1) * g.C * P);
    std::vector<float> ref = referenceMatmul(w, xn, g.M, P, g.C, false, false, acc);
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), y.begin() + n * g.M * P)) << "image " << n;
  }

  for (int i = 0; i < 2; ++i) {
    g.kernel[i] = 3;
    g.padBegin[i] = 1;
  }
  w = sixteenBitValues(g.M * g.C * 9, Accum::Bf16, -1, 1, 6);
  std::vector<float> dy = sixteenBitValues(g.N * g.M * P, Accum::Bf16, -1, 1, 7);
  auto run = [&](Accum a, int pass) {
    g.accum = a;
    std::vector<float> out(pass == 0 ? y.size() : pass == 1 ? x.size() : w.size());
    if (pass == 0)
      ortc::kern::convForward<float>(x.data(), w.data(), nullptr, out.data(), g);
    else if (pass == 1)
      ortc::kern::convGradInput<float>(dy.data(), w.data(), out.data(), g);
    else
      ortc::kern::convGradWeight<float>(dy.data(), x.data(), out.data(), g);
    return out;
  };
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<float> f = run(Accum{}, pass), c = run(Accum{Accum::Bf16, 0}, pass);
    double diff = 0, scale = 0;
    for (size_t e = 0; e < f.size(); ++e) {
      diff = std::max(diff, double(std::fabs(f[e] - c[e])));
      scale = std::max(scale, double(std::fabs(f[e])));
    }
    EXPECT_GT(diff, 0.0) << "pass " << pass << ": the 16-bit sums were not used";
    EXPECT_LT(diff, 0.1 * scale) << "pass " << pass;
  }
}

} // namespace
