//===- KernelsTest.cpp - Tests of the ortc CPU kernel library -------------===//
//
// Every kernel of kernels/cpu/ortc_kernels.h is checked against a
// naive reference written here (direct loops over coordinates), gradients
// against central finite differences of the forward kernel in double, and
// the optimizers against hand-computed two-step references.
//
//===----------------------------------------------------------------------===//

#include "ortc_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace ortc::kern;

namespace {

using Vec = std::vector<double>;
using Dims = std::vector<int64_t>;

/// Random source of every test; ORTC_KERNELS_TEST_SEED overrides the seed.
std::mt19937_64 &rng() {
  static std::mt19937_64 r([] {
    const char *s = std::getenv("ORTC_KERNELS_TEST_SEED");
    return s ? std::strtoull(s, nullptr, 10) : 0x5eedull;
  }());
  return r;
}

int64_t randInt(int64_t lo, int64_t hi) { // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng());
}

Vec randVec(size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double &x : v)
    x = d(rng());
  return v;
}

int64_t prod(const Dims &d) {
  int64_t p = 1;
  for (int64_t x : d)
    p *= x;
  return p;
}

Dims unravel(int64_t i, const Dims &dims) {
  Dims c(dims.size());
  for (int d = (int)dims.size() - 1; d >= 0; --d) {
    c[d] = i % dims[d];
    i /= dims[d];
  }
  return c;
}

int64_t ravel(const Dims &c, const Dims &dims) {
  int64_t i = 0;
  for (size_t d = 0; d < dims.size(); ++d)
    i = i * dims[d] + c[d];
  return i;
}

std::vector<float> toFloat(const Vec &v) {
  return std::vector<float>(v.begin(), v.end());
}

double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

::testing::AssertionResult allClose(const Vec &got, const Vec &want,
                                    double atol, double rtol = 0.0) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = atol + rtol * std::abs(want[i]);
    const bool bothNaN = std::isnan(got[i]) && std::isnan(want[i]);
    if (!bothNaN && !(std::abs(got[i] - want[i]) <= tol))
      return ::testing::AssertionFailure()
             << "at " << i << ": got " << got[i] << " want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

template <typename F>
::testing::AssertionResult allCloseF(const std::vector<F> &got, const Vec &want,
                                     double atol, double rtol = 0.0) {
  return allClose(Vec(got.begin(), got.end()), want, atol, rtol);
}

/// Central finite differences of the scalar function f at x.
Vec numGrad(const std::function<double(const Vec &)> &f, Vec x,
            double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

constexpr double kFdTol = 1e-6;
constexpr double kFdRel = 1e-5;

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

Vec refMatmul(const Vec &A, const Vec &B, int64_t batch, int64_t M, int64_t N,
              int64_t K, bool tA, bool tB) {
  Vec C(batch * M * N, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double a =
              tA ? A[b * M * K + k * M + i] : A[b * M * K + i * K + k];
          const double bb =
              tB ? B[b * K * N + j * K + k] : B[b * K * N + k * N + j];
          s += a * bb;
        }
        C[b * M * N + i * N + j] = s;
      }
  return C;
}

TEST(Matmul, AllTransposesDoubleAndFloat) {
  for (int trial = 0; trial < 4; ++trial) {
    for (int tA = 0; tA < 2; ++tA)
      for (int tB = 0; tB < 2; ++tB) {
        const int64_t batch = randInt(1, 3), M = randInt(1, 7),
                      N = randInt(1, 7), K = randInt(1, 9);
        Vec A = randVec(batch * M * K), B = randVec(batch * K * N);
        Vec want = refMatmul(A, B, batch, M, N, K, tA, tB);
        Vec C(batch * M * N, 42.0);
        matmul(A.data(), B.data(), C.data(), batch, M, N, K, tA, tB);
        EXPECT_TRUE(allClose(C, want, 1e-12));
        // accumulate: C += A @ B.
        Vec C2 = randVec(batch * M * N);
        Vec want2 = C2;
        for (size_t i = 0; i < want2.size(); ++i)
          want2[i] += want[i];
        matmul(A.data(), B.data(), C2.data(), batch, M, N, K, tA, tB, true);
        EXPECT_TRUE(allClose(C2, want2, 1e-12));
        auto Af = toFloat(A), Bf = toFloat(B);
        std::vector<float> Cf(batch * M * N);
        matmul(Af.data(), Bf.data(), Cf.data(), batch, M, N, K, tA, tB);
        EXPECT_TRUE(allCloseF(Cf, want, 1e-5));
      }
  }
}

TEST(Matmul, StridedBroadcastOperand) {
  const int64_t batch = 3, M = 4, N = 5, K = 6;
  for (int tA = 0; tA < 2; ++tA)
    for (int tB = 0; tB < 2; ++tB) {
      Vec A = randVec(batch * M * K), B = randVec(K * N);
      Vec Bfull;
      for (int b = 0; b < batch; ++b)
        Bfull.insert(Bfull.end(), B.begin(), B.end());
      Vec want = refMatmul(A, Bfull, batch, M, N, K, tA, tB);
      Vec C(batch * M * N);
      matmulStrided(A.data(), M * K, B.data(), 0, C.data(), batch, M, N, K, tA,
                    tB);
      EXPECT_TRUE(allClose(C, want, 1e-12));
      // Broadcast A instead.
      Vec A1(A.begin(), A.begin() + M * K), Afull;
      for (int b = 0; b < batch; ++b)
        Afull.insert(Afull.end(), A1.begin(), A1.end());
      Vec B3 = randVec(batch * K * N);
      Vec want3 = refMatmul(Afull, B3, batch, M, N, K, tA, tB);
      matmulStrided(A1.data(), 0, B3.data(), K * N, C.data(), batch, M, N, K,
                    tA, tB);
      EXPECT_TRUE(allClose(C, want3, 1e-12));
    }
}

// Attention's heads read where they lie (kernel formation's strided views): q and k of
// head h are columns [h*D, (h+1)*D) of the q and k thirds of a [B, T, 3C] projection,
// k read transposed; the scores are written into a [B, T, H, T] buffer (a permuted
// result), as the reference computes them from gathered copies.
TEST(Matmul, LayoutsReadAttentionHeadsInPlace) {
  const int64_t Bn = 3, T = 5, H = 2, D = 4, C = H * D, batch = Bn * H;
  Vec qkv = randVec(Bn * T * 3 * C);
  Vec q(batch * T * D), k(batch * T * D);
  for (int64_t b = 0; b < Bn; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          q[((b * H + h) * T + t) * D + d] = qkv[(b * T + t) * 3 * C + h * D + d];
          k[((b * H + h) * T + t) * D + d] = qkv[(b * T + t) * 3 * C + C + h * D + d];
        }
  Vec want = refMatmul(q, k, batch, T, T, D, false, true);
  const MatLayout heads{3 * C, H, T * 3 * C, D}, scores{H * T, H, T * H * T, T};
  auto check = [&](const auto &x) {
    using E = typename std::decay_t<decltype(x)>::value_type;
    std::vector<E> out(Bn * T * H * T, E(42));
    matmulLayout(x.data(), heads, x.data() + C, heads, out.data(), scores, batch, T, T, D,
                 false, true);
    for (int64_t b = 0; b < Bn; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j)
            EXPECT_NEAR(out[((b * T + i) * H + h) * T + j], want[((b * H + h) * T + i) * T + j],
                        (std::is_same<E, float>::value ? 1e-5 : 1e-12));
  };
  check(qkv);
  check(toFloat(qkv));
}

// A gemm kernel's GEMM (matmulEpilogue): every row of every product is handed to the
// epilogue exactly once, in a panel that holds the product, for shapes that split into
// uneven panels (M not a multiple of the panel's rows), batches, transposed operands, a
// product too small to split, panels aligned to blocks of 64 rows (a kernel's sums) and,
// with more than one thread, short matrices that run as one GEMM on the pool (M under 64
// rows a thread, also with uneven 64-row blocks); the epilogue here adds a bias and
// writes two outputs, as generated code does.
TEST(Matmul, EpilogueSeesEveryPanelOnce) {
  struct Case {
    int64_t batch, M, N, K;
    bool tA, tB;
    int64_t align;
  };
  for (Case c : {Case{1, 300, 1024, 24, false, false, 1}, Case{3, 70, 40, 9, true, false, 1},
                 Case{2, 1, 7, 5, false, true, 1}, Case{1, 33, 5000, 3, true, true, 1},
                 Case{1, 300, 1024, 24, false, false, 64}, Case{1, 130, 96, 7, true, true, 64},
                 Case{1, 64, 1024, 78, false, true, 1}, Case{1, 100, 300, 50, false, false, 64}}) {
    Vec A = randVec(c.batch * c.M * c.K), B = randVec(c.batch * c.K * c.N),
        bias = randVec(c.N);
    Vec want = refMatmul(A, B, c.batch, c.M, c.N, c.K, c.tA, c.tB);
    const MatLayout la{c.tA ? c.M : c.K, 1, c.M * c.K, 0}, lb{c.tB ? c.K : c.N, 1, c.K * c.N, 0};
    // In double (a reference GEMM) and in float (the GEMM of generated code).
    auto check = [&](const auto &a, const auto &b, double tol) {
      using E = typename std::decay_t<decltype(a)>::value_type;
      std::vector<E> C(c.batch * c.M * c.N, E(42)), relu(C.size(), E(42));
      std::vector<int> seen(c.batch * c.M, 0);
      std::mutex m;
      matmulEpilogue(a.data(), la, b.data(), lb, c.batch, c.M, c.N, c.K, c.tA, c.tB, c.align,
                     [&](int64_t o0, int64_t o1, const E *panel) {
                       {
                         std::lock_guard<std::mutex> lock(m);
                         for (int64_t o = o0; o < o1; ++o)
                           ++seen[o];
                         // Panels start at multiples of `align` rows of their matrix.
                         EXPECT_EQ(o0 % c.M % c.align, 0);
                       }
                       for (int64_t o = o0; o < o1; ++o)
                         for (int64_t j = 0; j < c.N; ++j) {
                           const E v = panel[(o - o0) * c.N + j] + E(bias[j]);
                           C[o * c.N + j] = v;
                           relu[o * c.N + j] = v > 0 ? v : E(0);
                         }
                     });
      for (int64_t o = 0; o < c.batch * c.M; ++o)
        ASSERT_EQ(seen[o], 1) << "row " << o;
      for (int64_t i = 0; i < c.batch * c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          const double v = want[i * c.N + j] + bias[j];
          ASSERT_NEAR(C[i * c.N + j], v, tol);
          ASSERT_NEAR(relu[i * c.N + j], v > 0 ? v : 0, tol);
        }
    };
    check(A, B, 1e-12);
    check(toFloat(A), toFloat(B), 1e-4);
  }
}

// Operands whose rows lie a multiple of 1 KiB apart (gemm copies them first where
// oneDNN would read them in place: detail::aliasedOperand): the product is the one of
// the same matrices at an unaliased stride, bit for bit in oneDNN's build (the copy moves
// the operand, not the order of the sums), and near the reference in both builds. Also
// through matmulEpilogue's panels, which copy B once for all of them.
TEST(Matmul, AliasedStridesGiveTheSameBits) {
  struct Case {
    int64_t M, N, K;
    bool tA, tB;
  };
  for (Case c : {Case{64, 300, 512, false, false}, Case{256, 512, 256, false, false},
                 Case{200, 96, 1024, true, false}, Case{40, 64, 512, true, true},
                 Case{128, 160, 256, false, true}}) {
    // Stored rows/cols of A and B, each stored twice: at a row stride of 512 floats
    // (2 KiB: aliased) and at cols + 7 (not).
    const int64_t rA = c.tA ? c.K : c.M, cA = c.tA ? c.M : c.K;
    const int64_t rB = c.tB ? c.N : c.K, cB = c.tB ? c.K : c.N;
    const int64_t wide = 1024;
    Vec A = randVec(rA * cA), B = randVec(rB * cB);
    Vec want = refMatmul(A, B, 1, c.M, c.N, c.K, c.tA, c.tB);
    auto store = [](const Vec &x, int64_t rows, int64_t cols, int64_t ld) {
      std::vector<float> out(rows * ld, 1e30f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j)
          out[r * ld + j] = float(x[r * cols + j]);
      return out;
    };
    const int64_t ldA = cA <= 512 ? 512 : wide, ldB = cB <= 512 ? 512 : wide;
    auto aliasedA = store(A, rA, cA, ldA), aliasedB = store(B, rB, cB, ldB);
    auto plainA = store(A, rA, cA, cA + 7), plainB = store(B, rB, cB, cB + 7);
    std::vector<float> got(c.M * c.N), ref(c.M * c.N);
    gemm(c.tA, c.tB, c.M, c.N, c.K, 1.0f, aliasedA.data(), ldA, aliasedB.data(), ldB, 0.0f,
         got.data(), c.N);
    gemm(c.tA, c.tB, c.M, c.N, c.K, 1.0f, plainA.data(), cA + 7, plainB.data(), cB + 7, 0.0f,
         ref.data(), c.N);
    EXPECT_TRUE(allCloseF(got, want, 1e-4));
#if defined(ORTC_KERN_DNNL)
    EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)))
        << c.M << "x" << c.N << "x" << c.K;
#endif
  }
  // Panels (a product past the whole-GEMM path's 4M elements): B's rows 4 KiB apart.
  const int64_t M = 4200, N = 1024, K = 8;
  Vec A = randVec(M * K), B = randVec(K * N);
  Vec want = refMatmul(A, B, 1, M, N, K, false, false);
  auto Af = toFloat(A), Bf = toFloat(B);
  std::vector<float> C(M * N, 42.0f);
  matmulEpilogue(Af.data(), MatLayout{K, 1, 0, 0}, Bf.data(), MatLayout{N, 1, 0, 0}, 1, M, N,
                 K, false, false, 1, [&](int64_t o0, int64_t o1, const float *panel) {
                   std::memcpy(C.data() + o0 * N, panel, size_t((o1 - o0) * N) * sizeof(float));
                 });
  EXPECT_TRUE(allCloseF(C, want, 1e-4));
}

#if defined(ORTC_KERN_DNNL)
// gemm's oneDNN matmul-primitive path (products of at least 2M multiply-adds on a CPU
// where oneDNN has brgemm kernels, which oneDNN 2.6 has for dense operands only; sgemm
// elsewhere): every transpose, accumulation into C, dense and with row strides wider
// than the matrices, within float rounding of the definition. On an AVX-512 CPU the
// dense products must take the path (unless DNNL_MAX_CPU_ISA lowers the level).
TEST(Matmul, PrimitivePathAgreesWithTheDefinition) {
  // oneDNN's avx512_core: F, BW, VL and DQ.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      !std::getenv("DNNL_MAX_CPU_ISA");
  struct Case { int64_t M, N, K; };
  for (Case c : {Case{64, 1024, 48}, Case{150, 130, 120}, Case{300, 96, 256}})
    for (int t = 0; t < 16; ++t) {
      const bool tA = t & 1, tB = t & 2, acc = t & 4, dense = !(t & 8);
      const int64_t rA = tA ? c.K : c.M, cA = tA ? c.M : c.K;
      const int64_t rB = tB ? c.N : c.K, cB = tB ? c.K : c.N;
      const int64_t ldA = cA + (dense ? 0 : 5), ldB = cB + (dense ? 0 : 3),
                    ldC = c.N + (dense ? 0 : 9);
      Vec A = randVec(rA * cA), B = randVec(rB * cB), C0 = randVec(c.M * c.N);
      Vec want = refMatmul(A, B, 1, c.M, c.N, c.K, tA, tB);
      std::vector<float> a(rA * ldA), b(rB * ldB), cm(c.M * ldC, 7.0f);
      for (int64_t r = 0; r < rA; ++r)
        for (int64_t j = 0; j < cA; ++j)
          a[r * ldA + j] = float(A[r * cA + j]);
      for (int64_t r = 0; r < rB; ++r)
        for (int64_t j = 0; j < cB; ++j)
          b[r * ldB + j] = float(B[r * cB + j]);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          cm[i * ldC + j] = float(C0[i * c.N + j]);
          if (acc)
            want[i * c.N + j] += double(float(C0[i * c.N + j]));
        }
      const std::string what = std::to_string(c.M) + "x" + std::to_string(c.N) + "x" +
                               std::to_string(c.K) + " tA " + std::to_string(tA) + " tB " +
                               std::to_string(tB) + " acc " + std::to_string(acc) +
                               (dense ? " dense" : " strided");
      std::vector<float> probe(cm);
      const bool took = dnnl_detail::gemmF32(tA, tB, c.M, c.N, c.K, a.data(), ldA, b.data(),
                                             ldB, acc, probe.data(), ldC);
      if (avx512 && dense)
        EXPECT_TRUE(took) << what;
      gemm(tA, tB, c.M, c.N, c.K, 1.0f, a.data(), ldA, b.data(), ldB, acc ? 1.0f : 0.0f,
           cm.data(), ldC);
      std::vector<float> got(c.M * c.N);
      for (int64_t i = 0; i < c.M; ++i) {
        for (int64_t j = 0; j < c.N; ++j)
          got[i * c.N + j] = cm[i * ldC + j];
        for (int64_t j = c.N; j < ldC; ++j)
          ASSERT_EQ(cm[i * ldC + j], 7.0f) << "wrote past row " << i << ": " << what;
      }
      EXPECT_TRUE(allCloseF(got, want, 1e-4)) << what;
      if (took) // gemm takes that path too: the same bits
        EXPECT_EQ(0, std::memcmp(probe.data(), cm.data(), cm.size() * sizeof(float))) << what;
    }
}
#endif

TEST(Matmul, EmptyInnerDimension) {
  Vec C(6, 3.0);
  matmul<double>(nullptr, nullptr, C.data(), 1, 2, 3, 0, false, false);
  EXPECT_TRUE(allClose(C, Vec(6, 0.0), 0));
  Vec C2(6, 3.0);
  matmul<double>(nullptr, nullptr, C2.data(), 1, 2, 3, 0, false, false, true);
  EXPECT_TRUE(allClose(C2, Vec(6, 3.0), 0));
}

//===----------------------------------------------------------------------===//
// Layout kernels
//===----------------------------------------------------------------------===//

Dims randDims(int rank, int64_t lo, int64_t hi) {
  Dims d(rank);
  for (auto &x : d)
    x = randInt(lo, hi);
  return d;
}

TEST(BroadcastTo, RandomShapes) {
  for (int trial = 0; trial < 40; ++trial) {
    const int rank = (int)randInt(0, 4);
    Dims out = randDims(rank, 1, 5), in = out;
    for (auto &x : in)
      if (randInt(0, 1))
        x = 1;
    Vec x = randVec(prod(in));
    Vec want(prod(out));
    for (int64_t i = 0; i < prod(out); ++i) {
      Dims c = unravel(i, out);
      for (int d = 0; d < rank; ++d)
        if (in[d] == 1)
          c[d] = 0;
      want[i] = x[ravel(c, in)];
    }
    Vec got(prod(out), -7.0);
    broadcastTo(x.data(), in.data(), got.data(), out.data(), rank);
    EXPECT_TRUE(allClose(got, want, 0));
    auto xf = toFloat(x);
    std::vector<float> gf(prod(out));
    broadcastTo(xf.data(), in.data(), gf.data(), out.data(), rank);
    EXPECT_TRUE(allCloseF(gf, want, 1e-7));
  }
}

Vec refReduce(const Vec &x, const Dims &dims, const std::vector<int> &axes,
              ReduceKind kind) {
  const int rank = (int)dims.size();
  Dims od = dims;
  std::vector<bool> red(rank, false);
  for (int a : axes) {
    int aa = a < 0 ? a + rank : a;
    red[aa] = true;
    od[aa] = 1;
  }
  const int64_t n = prod(od);
  Vec sum(n, 0.0), mx(n, -INFINITY);
  std::vector<int64_t> cnt(n, 0);
  for (int64_t i = 0; i < prod(dims); ++i) {
    Dims c = unravel(i, dims);
    for (int d = 0; d < rank; ++d)
      if (red[d])
        c[d] = 0;
    const int64_t o = ravel(c, od);
    sum[o] += x[i];
    mx[o] = std::max(mx[o], x[i]);
    cnt[o]++;
  }
  if (kind == ReduceKind::Sum)
    return sum;
  if (kind == ReduceKind::Max)
    return mx;
  for (int64_t o = 0; o < n; ++o)
    sum[o] /= cnt[o];
  return sum;
}

TEST(Reduce, SumMeanMaxRandomAxes) {
  for (int trial = 0; trial < 120; ++trial) {
    const int rank = (int)randInt(1, 4);
    Dims dims = randDims(rank, 1, 6);
    if (trial % 10 == 0)
      dims.back() = 300; // exercises the blocked kept-inner path
    std::vector<int> axes;
    for (int d = 0; d < rank; ++d)
      if (randInt(0, 1))
        axes.push_back(randInt(0, 1) ? d : d - rank); // negative axes too
    Vec x = randVec(prod(dims));
    std::vector<int64_t> ax(axes.begin(), axes.end());
    for (ReduceKind k : {ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max}) {
      Vec want = refReduce(x, dims, axes, k);
      Vec got(want.size(), -9.0);
      reduce(x.data(), dims.data(), rank, ax.data(), (int)ax.size(), got.data(),
             k);
      EXPECT_TRUE(allClose(got, want, 1e-12)) << "trial " << trial;
      auto xf = toFloat(x);
      std::vector<float> gf(want.size());
      reduce(xf.data(), dims.data(), rank, ax.data(), (int)ax.size(), gf.data(),
             k);
      EXPECT_TRUE(allCloseF(gf, want, 1e-5));
    }
  }
}

TEST(Reduce, MaxPropagatesNaNAndEmptyReductions) {
  Vec x = {1, 2, NAN, 4, 5, 6};
  Dims dims = {2, 3};
  int64_t ax1 = 1, ax0 = 0;
  Vec got(2);
  reduce(x.data(), dims.data(), 2, &ax1, 1, got.data(), ReduceKind::Max);
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], 6.0);
  Vec g3(3);
  reduce(x.data(), dims.data(), 2, &ax0, 1, g3.data(), ReduceKind::Max);
  EXPECT_EQ(g3[0], 4.0);
  EXPECT_EQ(g3[1], 5.0);
  EXPECT_TRUE(std::isnan(g3[2]));
  Dims empty = {2, 0};
  Vec s(2, 5.0);
  reduce(x.data(), empty.data(), 2, &ax1, 1, s.data(), ReduceKind::Sum);
  EXPECT_EQ(s[0], 0.0);
  reduce(x.data(), empty.data(), 2, &ax1, 1, s.data(), ReduceKind::Mean);
  EXPECT_TRUE(std::isnan(s[0]));
  reduce(x.data(), empty.data(), 2, &ax1, 1, s.data(), ReduceKind::Max);
  EXPECT_EQ(s[0], -INFINITY);
}

TEST(Reduce, IntegerMaxOfNegativeValues) {
  // numeric_limits<int64_t>::infinity() is 0: the identity must be the lowest value.
  std::vector<int64_t> x = {-5, -3, -9, -1, -7, -2}, got(2);
  Dims dims = {2, 3};
  int64_t ax1 = 1;
  reduce(x.data(), dims.data(), 2, &ax1, 1, got.data(), ReduceKind::Max);
  EXPECT_EQ(got[0], -3);
  EXPECT_EQ(got[1], -1);
  Dims empty = {2, 0};
  reduce(x.data(), empty.data(), 2, &ax1, 1, got.data(), ReduceKind::Max);
  EXPECT_EQ(got[0], std::numeric_limits<int64_t>::lowest());
}

TEST(Transpose, RandomPermutations) {
  for (int trial = 0; trial < 40; ++trial) {
    const int rank = (int)randInt(1, 5);
    Dims dims = randDims(rank, 1, 5);
    std::vector<int64_t> perm(rank);
    for (int i = 0; i < rank; ++i)
      perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng());
    Dims od(rank);
    for (int i = 0; i < rank; ++i)
      od[i] = dims[perm[i]];
    Vec x = randVec(prod(dims)), want(prod(dims));
    for (int64_t i = 0; i < prod(dims); ++i) {
      Dims c = unravel(i, dims), oc(rank);
      for (int k = 0; k < rank; ++k)
        oc[k] = c[perm[k]];
      want[ravel(oc, od)] = x[i];
    }
    Vec got(prod(dims));
    transpose(x.data(), dims.data(), rank, perm.data(), got.data());
    EXPECT_TRUE(allClose(got, want, 0));
  }
}

TEST(Concat, ConcatAndSplitRoundTrip) {
  for (int trial = 0; trial < 20; ++trial) {
    const int rank = (int)randInt(1, 4);
    const int axis = (int)randInt(0, rank - 1);
    Dims base = randDims(rank, 1, 4);
    const int nIn = (int)randInt(1, 4);
    std::vector<Dims> shapes;
    std::vector<Vec> ins;
    std::vector<int64_t> sizes;
    Dims od = base;
    od[axis] = 0;
    for (int i = 0; i < nIn; ++i) {
      Dims s = base;
      s[axis] = randInt(0, 3);
      shapes.push_back(s);
      sizes.push_back(s[axis]);
      od[axis] += s[axis];
      ins.push_back(randVec(prod(s)));
    }
    Vec want(prod(od));
    int64_t off = 0;
    for (int i = 0; i < nIn; ++i) {
      for (int64_t e = 0; e < prod(shapes[i]); ++e) {
        Dims c = unravel(e, shapes[i]);
        c[axis] += off;
        want[ravel(c, od)] = ins[i][e];
      }
      off += sizes[i];
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d)
      outer *= base[d];
    for (int d = axis + 1; d < rank; ++d)
      inner *= base[d];
    std::vector<const double *> ptrs;
    for (auto &v : ins)
      ptrs.push_back(v.data());
    Vec got(prod(od));
    concat(ptrs.data(), sizes.data(), nIn, outer, inner, got.data());
    EXPECT_TRUE(allClose(got, want, 0));
    std::vector<Vec> outs;
    for (int i = 0; i < nIn; ++i)
      outs.emplace_back(prod(shapes[i]), -1.0);
    std::vector<double *> optr;
    for (auto &v : outs)
      optr.push_back(v.data());
    split(got.data(), sizes.data(), nIn, outer, inner, optr.data());
    for (int i = 0; i < nIn; ++i)
      EXPECT_TRUE(allClose(outs[i], ins[i], 0));
  }
}

TEST(Slice, RandomStartsAndNegativeSteps) {
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = (int)randInt(1, 4);
    Dims in = randDims(rank, 1, 7), out(rank), starts(rank), steps(rank);
    for (int d = 0; d < rank; ++d) {
      static const int64_t kSteps[] = {-3, -2, -1, 1, 2, 3};
      steps[d] = kSteps[randInt(0, 5)];
      starts[d] = randInt(0, in[d] - 1);
      const int64_t maxLen = steps[d] > 0
                                 ? (in[d] - starts[d] + steps[d] - 1) / steps[d]
                                 : starts[d] / -steps[d] + 1;
      out[d] = randInt(1, maxLen);
    }
    Vec x = randVec(prod(in)), want(prod(out));
    Vec wantGrad(prod(in), 0.0), dy = randVec(prod(out));
    for (int64_t i = 0; i < prod(out); ++i) {
      Dims c = unravel(i, out), ic(rank);
      for (int d = 0; d < rank; ++d)
        ic[d] = starts[d] + c[d] * steps[d];
      want[i] = x[ravel(ic, in)];
      wantGrad[ravel(ic, in)] = dy[i];
    }
    Vec got(prod(out));
    slice(x.data(), in.data(), rank, starts.data(), steps.data(), got.data(),
          out.data());
    EXPECT_TRUE(allClose(got, want, 0));
    Vec dx(prod(in), 99.0);
    sliceGrad(dy.data(), out.data(), rank, starts.data(), steps.data(),
              dx.data(), in.data());
    EXPECT_TRUE(allClose(dx, wantGrad, 0));
  }
}

TEST(Pad, ConstantWithNegativePadsCrop) {
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = (int)randInt(1, 4);
    Dims in = randDims(rank, 3, 5), out(rank), pb(rank), pe(rank);
    for (int d = 0; d < rank; ++d) {
      pb[d] = randInt(-1, 2);
      pe[d] = randInt(-1, 2);
      out[d] = in[d] + pb[d] + pe[d];
    }
    Vec x = randVec(prod(in)), want(prod(out));
    const double value = 0.25;
    for (int64_t i = 0; i < prod(out); ++i) {
      Dims c = unravel(i, out);
      bool inside = true;
      for (int d = 0; d < rank; ++d) {
        c[d] -= pb[d];
        inside &= c[d] >= 0 && c[d] < in[d];
      }
      want[i] = inside ? x[ravel(c, in)] : value;
    }
    Vec got(prod(out));
    pad(x.data(), in.data(), rank, pb.data(), value, got.data(), out.data());
    EXPECT_TRUE(allClose(got, want, 0));
  }
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

struct GatherCase {
  Dims dims;
  int axis; // as passed (may be negative)
  std::vector<int64_t> idx;
  Dims outDims() const {
    const int r = (int)dims.size();
    const int a = axis < 0 ? axis + r : axis;
    Dims o(dims.begin(), dims.begin() + a);
    o.push_back((int64_t)idx.size());
    o.insert(o.end(), dims.begin() + a + 1, dims.end());
    return o;
  }
};

Vec refGather(const Vec &x, const GatherCase &g) {
  const int r = (int)g.dims.size();
  const int a = g.axis < 0 ? g.axis + r : g.axis;
  Dims od = g.outDims();
  Vec out(prod(od));
  for (int64_t i = 0; i < prod(od); ++i) {
    Dims c = unravel(i, od);
    int64_t k = g.idx[c[a]];
    if (k < 0)
      k += g.dims[a];
    c[a] = k;
    out[i] = x[ravel(c, g.dims)];
  }
  return out;
}

GatherCase randGather() {
  GatherCase g;
  const int rank = (int)randInt(1, 3);
  g.dims = randDims(rank, 1, 5);
  const int a = (int)randInt(0, rank - 1);
  g.axis = randInt(0, 1) ? a : a - rank;
  const int64_t A = g.dims[a];
  g.idx.resize(randInt(1, 7));
  for (auto &k : g.idx)
    k = randInt(-A, A - 1);
  return g;
}

TEST(Gather, ForwardNegativeIndicesAndAxes) {
  for (int trial = 0; trial < 40; ++trial) {
    GatherCase g = randGather();
    Vec x = randVec(prod(g.dims));
    Vec want = refGather(x, g);
    Vec got(want.size());
    ASSERT_TRUE(gather(x.data(), g.dims.data(), (int)g.dims.size(), g.axis,
                       g.idx.data(), (int64_t)g.idx.size(), got.data()));
    EXPECT_TRUE(allClose(got, want, 0));
  }
}

TEST(Gather, OutOfRangeIndexReportsFalse) {
  Dims dims = {3, 2};
  Vec x = randVec(6), out(4, 7.0), dx(6, 7.0);
  std::vector<int64_t> bad = {0, 3}, bad2 = {-4, 0};
  EXPECT_FALSE(gather(x.data(), dims.data(), 2, 0, bad.data(), 2, out.data()));
  EXPECT_FALSE(gather(x.data(), dims.data(), 2, 0, bad2.data(), 2, out.data()));
  EXPECT_FALSE(
      gatherGrad(out.data(), dims.data(), 2, 0, bad.data(), 2, dx.data()));
  EXPECT_TRUE(allClose(out, Vec(4, 7.0), 0)); // nothing written
  EXPECT_TRUE(allClose(dx, Vec(6, 7.0), 0));
}

TEST(Gather, GradFiniteDifferencesAndRepeatedIndices) {
  for (int trial = 0; trial < 20; ++trial) {
    GatherCase g = randGather();
    if (trial == 0) {
      g.dims = {4, 3};
      g.axis = 0;
      g.idx = {1, 1, -3, 2, 1}; // row 1 four times (-3 wraps to 1)
    }
    const int rank = (int)g.dims.size();
    Vec x = randVec(prod(g.dims));
    Vec r = randVec(prod(g.outDims()));
    auto f = [&](const Vec &xx) {
      Vec y(r.size());
      gather(xx.data(), g.dims.data(), rank, g.axis, g.idx.data(),
             (int64_t)g.idx.size(), y.data());
      return dot(y, r);
    };
    Vec dx(x.size(), 5.0);
    ASSERT_TRUE(gatherGrad(r.data(), g.dims.data(), rank, g.axis, g.idx.data(),
                           (int64_t)g.idx.size(), dx.data()));
    EXPECT_TRUE(allClose(dx, numGrad(f, x), kFdTol, kFdRel));
    if (trial == 0) {
      for (int i = 0; i < 3; ++i) // row 1 gets dy rows 0, 1, 2 and 4.
        EXPECT_NEAR(dx[3 + i], r[i] + r[3 + i] + r[6 + i] + r[12 + i], 1e-15);
    }
  }
}

TEST(IndexOps, GatherAndScatterElementsAgainstLoops) {
  // data [3, 4], indices/updates [2, 3] along axis 1, repeated and negative indices.
  Dims dd = {3, 4}, id = {2, 3};
  Vec data = randVec(12), upd = randVec(6);
  std::vector<int64_t> idx = {0, 3, 0, -1, 1, 3};
  Vec g(6);
  ASSERT_TRUE(gatherElements(data.data(), dd.data(), idx.data(), id.data(), 2, 1, g.data()));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      int64_t k = idx[r * 3 + c] < 0 ? idx[r * 3 + c] + 4 : idx[r * 3 + c];
      EXPECT_EQ(g[r * 3 + c], data[r * 4 + k]);
    }
  for (int red = 0; red < 5; ++red) {
    Vec out(12), want = data;
    ASSERT_TRUE(scatterElements(data.data(), dd.data(), idx.data(), upd.data(), id.data(), 2, 1,
                                red, out.data()));
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) {
        int64_t k = idx[r * 3 + c] < 0 ? idx[r * 3 + c] + 4 : idx[r * 3 + c];
        double &d = want[r * 4 + k], u = upd[r * 3 + c];
        d = red == 1   ? d + u
            : red == 2 ? d * u
            : red == 3 ? std::max(d, u)
            : red == 4 ? std::min(d, u)
                       : u;
      }
    EXPECT_TRUE(allClose(out, want, 0)) << "reduction " << red;
  }
  idx[4] = 4;
  EXPECT_FALSE(gatherElements(data.data(), dd.data(), idx.data(), id.data(), 2, 1, g.data()));
  Vec out(12);
  EXPECT_FALSE(scatterElements(data.data(), dd.data(), idx.data(), upd.data(), id.data(), 2, 1, 0,
                               out.data()));
}

TEST(IndexOps, ScatterAddRepeatedIndicesThreadIndependent) {
  Dims dd = {64, 300}, id = {2000, 300};
  std::vector<int64_t> idx(2000 * 300);
  for (auto &k : idx)
    k = randInt(0, 63);
  Vec data = randVec(64 * 300), upd = randVec(idx.size()), a(data.size()), b(data.size());
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  ASSERT_TRUE(scatterElements(data.data(), dd.data(), idx.data(), upd.data(), id.data(), 2, 0, 1,
                              a.data()));
#ifdef _OPENMP
  omp_set_num_threads(3);
#endif
  ASSERT_TRUE(scatterElements(data.data(), dd.data(), idx.data(), upd.data(), id.data(), 2, 0, 1,
                              b.data()));
  EXPECT_TRUE(allClose(a, b, 0));
}

TEST(IndexOps, ArgReduceTiesAndNaN) {
  // [outer 1, A 5, inner 2]: column 0 ties at 3 (indices 1 and 3), column 1 a NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Vec x = {1, 0, 3, 2, 0, nan, 3, 5, -1, 1};
  int64_t out[2];
  argReduce(x.data(), 1, 5, 2, false, false, out);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
  argReduce(x.data(), 1, 5, 2, false, true, out);
  EXPECT_EQ(out[0], 3);
  argReduce(x.data(), 1, 5, 2, true, true, out);
  EXPECT_EQ(out[0], 4);
  EXPECT_EQ(out[1], 2);
}

TEST(IndexOps, TopKSortedWithTiesByIndex) {
  Vec x = {1, 4, 2, 4, 0, 2};
  Vec v(3);
  int64_t i[3];
  topK(x.data(), 1, 6, 1, 3, true, v.data(), i);
  EXPECT_EQ(v, (Vec{4, 4, 2}));
  EXPECT_EQ(i[0], 1);
  EXPECT_EQ(i[1], 3);
  EXPECT_EQ(i[2], 2);
  topK(x.data(), 1, 6, 1, 3, false, v.data(), i);
  EXPECT_EQ(v, (Vec{0, 1, 2}));
  EXPECT_EQ(i[0], 4);
  EXPECT_EQ(i[2], 2);
}

TEST(IndexOps, CumSumForms) {
  Vec x = {1, 2, 3, 4}, y(4);
  cumsum(x.data(), 1, 4, 1, false, false, y.data());
  EXPECT_EQ(y, (Vec{1, 3, 6, 10}));
  cumsum(x.data(), 1, 4, 1, true, false, y.data());
  EXPECT_EQ(y, (Vec{0, 1, 3, 6}));
  cumsum(x.data(), 1, 4, 1, false, true, y.data());
  EXPECT_EQ(y, (Vec{10, 9, 7, 4}));
  cumsum(x.data(), 1, 4, 1, true, true, y.data());
  EXPECT_EQ(y, (Vec{9, 7, 4, 0}));
  // Axis 0 of [2, 2]: lines are columns.
  cumsum(x.data(), 1, 2, 2, false, false, y.data());
  EXPECT_EQ(y, (Vec{1, 2, 4, 6}));
}

TEST(IndexOps, ReduceProdAndItsGradWithZeros) {
  Vec x = {2, 3, 4, 0, 5, 6, 0, 7, 0};
  Dims dims = {3, 3};
  int64_t axes[] = {1};
  Vec p(3);
  reduce(x.data(), dims.data(), 2, axes, 1, p.data(), ReduceKind::Prod);
  EXPECT_EQ(p, (Vec{24, 0, 0}));
  Vec dy = {1, 2, 3}, dx(9);
  reduceProdGrad(x.data(), dy.data(), dx.data(), 3, 3);
  EXPECT_EQ(dx, (Vec{12, 8, 6, 60, 0, 0, 0, 0, 0}));
}

TEST(IndexOps, IntegerModSigns) {
  EXPECT_EQ(imod<int64_t>(-7, 3, false), 2);
  EXPECT_EQ(imod<int64_t>(7, -3, false), -2);
  EXPECT_EQ(imod<int64_t>(-7, 3, true), -1);
  EXPECT_EQ(imod<int64_t>(7, -3, true), 1);
  EXPECT_EQ(imod<int32_t>(6, 3, false), 0);
  EXPECT_EQ(imod<int64_t>(5, 0, false), 0);
  EXPECT_EQ(imod<int64_t>(std::numeric_limits<int64_t>::min(), -1, false), 0);
}

TEST(Gather, GradLargeEmbeddingIsThreadIndependent) {
  Dims dims = {50, 700};
  std::vector<int64_t> idx(300);
  for (auto &k : idx)
    k = randInt(0, 49);
  Vec dy = randVec(idx.size() * 700);
  Vec a(50 * 700), b(50 * 700);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  gatherGrad(dy.data(), dims.data(), 2, 0, idx.data(), 300, a.data());
#ifdef _OPENMP
  omp_set_num_threads(3);
#endif
  gatherGrad(dy.data(), dims.data(), 2, 0, idx.data(), 300, b.data());
  EXPECT_TRUE(allClose(a, b, 0));
  // Reference scatter-add.
  Vec want(50 * 700, 0.0);
  for (size_t j = 0; j < idx.size(); ++j)
    for (int i = 0; i < 700; ++i)
      want[idx[j] * 700 + i] += dy[j * 700 + i];
  EXPECT_TRUE(allClose(a, want, 1e-12));
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

int64_t outSize(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe,
                int64_t d, bool ceilMode) {
  const int64_t span = in + pb + pe - d * (k - 1) - 1;
  if (span < 0)
    return 0;
  return (ceilMode ? (span + s - 1) / s : span / s) + 1;
}

ConvGeom randConvGeom(int nSpatial) {
  for (;;) {
    ConvGeom g{};
    g.nSpatial = nSpatial;
    g.N = randInt(1, 2);
    g.group = randInt(1, 3);
    g.C = g.group * randInt(1, 3);
    g.M = g.group * randInt(1, 3);
    bool ok = true;
    const bool ceilMode = randInt(0, 1);
    for (int i = 0; i < nSpatial; ++i) {
      g.in[i] = randInt(nSpatial == 3 ? 2 : 3, nSpatial == 3 ? 5 : 8);
      g.kernel[i] = randInt(1, 3);
      g.stride[i] = randInt(1, 2);
      g.dilation[i] = randInt(1, 2);
      g.padBegin[i] = randInt(0, 2);
      const int64_t pe = randInt(0, 2);
      g.out[i] = outSize(g.in[i], g.kernel[i], g.stride[i], g.padBegin[i], pe,
                         g.dilation[i], ceilMode);
      ok &= g.out[i] >= 1;
    }
    if (ok)
      return g;
  }
}

int64_t spatialProd(const int64_t *a, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i)
    p *= a[i];
  return p;
}

/// Direct-loop convolution over generic nSpatial coordinates.
Vec refConv(const Vec &x, const Vec &w, const Vec *bias, const ConvGeom &g) {
  const int ns = g.nSpatial;
  const Dims in(g.in, g.in + ns), k(g.kernel, g.kernel + ns),
      out(g.out, g.out + ns);
  const int64_t P = prod(out), I = prod(in), KS = prod(k);
  const int64_t Cg = g.C / g.group, Mg = g.M / g.group;
  Vec y(g.N * g.M * P, 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t m = 0; m < g.M; ++m) {
      const int64_t grp = m / Mg;
      for (int64_t o = 0; o < P; ++o) {
        Dims oc = unravel(o, out);
        double s = bias ? (*bias)[m] : 0.0;
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kk = 0; kk < KS; ++kk) {
            Dims kc = unravel(kk, k), ic(ns);
            bool inside = true;
            for (int i = 0; i < ns; ++i) {
              ic[i] =
                  oc[i] * g.stride[i] - g.padBegin[i] + kc[i] * g.dilation[i];
              inside &= ic[i] >= 0 && ic[i] < in[i];
            }
            if (!inside)
              continue;
            s += w[(m * Cg + c) * KS + kk] *
                 x[(n * g.C + grp * Cg + c) * I + ravel(ic, in)];
          }
        y[(n * g.M + m) * P + o] = s;
      }
    }
  return y;
}

struct ConvData {
  ConvGeom g;
  Vec x, w, b;
  int64_t xSize, wSize, ySize;
};

ConvData makeConv(const ConvGeom &g) {
  ConvData d;
  d.g = g;
  const int ns = g.nSpatial;
  d.xSize = g.N * g.C * spatialProd(g.in, ns);
  d.wSize = g.M * (g.C / g.group) * spatialProd(g.kernel, ns);
  d.ySize = g.N * g.M * spatialProd(g.out, ns);
  d.x = randVec(d.xSize);
  d.w = randVec(d.wSize);
  d.b = randVec(g.M);
  return d;
}

TEST(Conv, ForwardMatchesDirectLoops) {
  for (int trial = 0; trial < 60; ++trial) {
    const int ns = trial % 10 == 9 ? 3 : 1 + trial % 2;
    ConvData d = makeConv(randConvGeom(ns));
    const bool withBias = trial % 3 != 0;
    Vec want = refConv(d.x, d.w, withBias ? &d.b : nullptr, d.g);
    Vec got(d.ySize, 123.0);
    convForward(d.x.data(), d.w.data(), withBias ? d.b.data() : nullptr,
                got.data(), d.g);
    EXPECT_TRUE(allClose(got, want, 1e-12)) << "trial " << trial;
    auto xf = toFloat(d.x), wf = toFloat(d.w), bf = toFloat(d.b);
    std::vector<float> yf(d.ySize);
    convForward(xf.data(), wf.data(), withBias ? bf.data() : nullptr, yf.data(),
                d.g);
    EXPECT_TRUE(allCloseF(yf, want, 1e-5));
  }
}

TEST(Conv, BatchedFormsMatchPerImageForms) {
  // The whole-batch GEMM forms (small feature maps) against the per-image forms
  // and the direct loops, over random geometries (groups, strides, dilations,
  // padding, 1-3 spatial dims), in double and float.
  for (int trial = 0; trial < 60; ++trial) {
    const int ns = trial % 10 == 9 ? 3 : 1 + trial % 2;
    ConvData d = makeConv(randConvGeom(ns));
    const bool withBias = trial % 3 != 0;
    Vec want = refConv(d.x, d.w, withBias ? &d.b : nullptr, d.g);
    Vec got(d.ySize, 123.0);
    convForwardBatched(d.x.data(), d.w.data(), withBias ? d.b.data() : nullptr, got.data(),
                       d.g);
    EXPECT_TRUE(allClose(got, want, 1e-12)) << "forward, trial " << trial;
    Vec r = randVec(d.ySize), dx(d.xSize, 9.0), dw(d.wSize, 9.0), dxRef(d.xSize),
        dwRef(d.wSize);
    convGradInputBatched(r.data(), d.w.data(), dx.data(), d.g);
    convGradWeightBatched(r.data(), d.x.data(), dw.data(), d.g);
    convGradInput(r.data(), d.w.data(), dxRef.data(), d.g);
    convGradWeight(r.data(), d.x.data(), dwRef.data(), d.g);
    EXPECT_TRUE(allClose(dx, dxRef, 1e-12)) << "backward-data, trial " << trial;
    EXPECT_TRUE(allClose(dw, dwRef, 1e-12)) << "backward-weights, trial " << trial;
    auto xf = toFloat(d.x), wf = toFloat(d.w), rf = toFloat(r);
    std::vector<float> dwf(d.wSize);
    convGradWeightBatched(rf.data(), xf.data(), dwf.data(), d.g);
    EXPECT_TRUE(allCloseF(dwf, dwRef, 1e-4)) << "float backward-weights, trial " << trial;
  }
}

TEST(Conv, PointwiseFastPath) {
  ConvGeom g{};
  g.nSpatial = 2;
  g.N = 2;
  g.C = 4;
  g.M = 6;
  g.group = 2;
  for (int i = 0; i < 2; ++i) {
    g.in[i] = g.out[i] = 5;
    g.kernel[i] = g.stride[i] = g.dilation[i] = 1;
    g.padBegin[i] = 0;
  }
  ConvData d = makeConv(g);
  Vec want = refConv(d.x, d.w, &d.b, g);
  Vec got(d.ySize);
  convForward(d.x.data(), d.w.data(), d.b.data(), got.data(), g);
  EXPECT_TRUE(allClose(got, want, 1e-12));
  Vec r = randVec(d.ySize), dx(d.xSize, 9.0), dw(d.wSize, 9.0);
  convGradInput(r.data(), d.w.data(), dx.data(), g);
  convGradWeight(r.data(), d.x.data(), dw.data(), g);
  auto fx = [&](const Vec &xx) { return dot(refConv(xx, d.w, nullptr, g), r); };
  auto fw = [&](const Vec &ww) { return dot(refConv(d.x, ww, nullptr, g), r); };
  EXPECT_TRUE(allClose(dx, numGrad(fx, d.x), kFdTol, kFdRel));
  EXPECT_TRUE(allClose(dw, numGrad(fw, d.w), kFdTol, kFdRel));
}

TEST(Conv, GradInputAndWeightFiniteDifferences) {
  for (int trial = 0; trial < 24; ++trial) {
    const int ns = trial % 8 == 7 ? 3 : 1 + trial % 2;
    ConvData d = makeConv(randConvGeom(ns));
    const ConvGeom g = d.g;
    Vec r = randVec(d.ySize);
    auto fx = [&](const Vec &xx) {
      Vec y(d.ySize);
      convForward(xx.data(), d.w.data(), d.b.data(), y.data(), g);
      return dot(y, r);
    };
    auto fw = [&](const Vec &ww) {
      Vec y(d.ySize);
      convForward(d.x.data(), ww.data(), d.b.data(), y.data(), g);
      return dot(y, r);
    };
    Vec dx(d.xSize, 9.0), dw(d.wSize, 9.0);
    convGradInput(r.data(), d.w.data(), dx.data(), g);
    convGradWeight(r.data(), d.x.data(), dw.data(), g);
    EXPECT_TRUE(allClose(dx, numGrad(fx, d.x), kFdTol, kFdRel))
        << "trial " << trial;
    EXPECT_TRUE(allClose(dw, numGrad(fw, d.w), kFdTol, kFdRel))
        << "trial " << trial;
    // Bias gradient via reduce over N and spatial dims.
    const int64_t P = spatialProd(g.out, ns);
    Dims yd = {g.N, g.M, P};
    int64_t axes[] = {0, 2};
    Vec db(g.M);
    reduce(r.data(), yd.data(), 3, axes, 2, db.data(), ReduceKind::Sum);
    auto fb = [&](const Vec &bb) {
      Vec y(d.ySize);
      convForward(d.x.data(), d.w.data(), bb.data(), y.data(), g);
      return dot(y, r);
    };
    EXPECT_TRUE(allClose(db, numGrad(fb, d.b), kFdTol, kFdRel));
  }
}

/// The float passes agree with the double ones (in the oneDNN build: oneDNN's
/// blocked-layout kernels, or the im2col fallback where it refuses a geometry,
/// e.g. outputs that leave the end of the input unread).
TEST(Conv, FloatGradientsMatchDouble) {
  for (int trial = 0; trial < 40; ++trial) {
    const int ns = trial % 8 == 7 ? 3 : 1 + trial % 2;
    ConvData d = makeConv(randConvGeom(ns));
    const ConvGeom g = d.g;
    Vec r = randVec(d.ySize);
    Vec dx(d.xSize), dw(d.wSize);
    convGradInput(r.data(), d.w.data(), dx.data(), g);
    convGradWeight(r.data(), d.x.data(), dw.data(), g);
    auto rf = toFloat(r), xf = toFloat(d.x), wf = toFloat(d.w);
    std::vector<float> dxf(d.xSize, 7.0f), dwf(d.wSize, 7.0f);
    convGradInput(rf.data(), wf.data(), dxf.data(), g);
    convGradWeight(rf.data(), xf.data(), dwf.data(), g);
    EXPECT_TRUE(allCloseF(dxf, dx, 1e-5)) << "trial " << trial;
    EXPECT_TRUE(allCloseF(dwf, dw, 1e-5)) << "trial " << trial;
  }
}

/// A ResNet-sized layer (blocked layouts and reorders in the oneDNN build).
TEST(Conv, ResNetLayerFloatMatchesDouble) {
  ConvGeom g{};
  g.nSpatial = 2;
  g.N = 2;
  g.C = 32;
  g.M = 64;
  g.group = 1;
  for (int i = 0; i < 2; ++i) {
    g.in[i] = 12;
    g.kernel[i] = 3;
    g.stride[i] = 2;
    g.padBegin[i] = 1;
    g.dilation[i] = 1;
    g.out[i] = 6;
  }
  ConvData d = makeConv(g);
  Vec r = randVec(d.ySize);
  Vec y(d.ySize), dx(d.xSize), dw(d.wSize);
  convForward(d.x.data(), d.w.data(), d.b.data(), y.data(), g);
  convGradInput(r.data(), d.w.data(), dx.data(), g);
  convGradWeight(r.data(), d.x.data(), dw.data(), g);
  auto rf = toFloat(r), xf = toFloat(d.x), wf = toFloat(d.w), bf = toFloat(d.b);
  std::vector<float> yf(d.ySize), dxf(d.xSize), dwf(d.wSize);
  for (int rep = 0; rep < 2; ++rep) { // the second run reuses the plans
    convForward(xf.data(), wf.data(), bf.data(), yf.data(), g);
    convGradInput(rf.data(), wf.data(), dxf.data(), g);
    convGradWeight(rf.data(), xf.data(), dwf.data(), g);
    EXPECT_TRUE(allCloseF(yf, y, 1e-4));
    EXPECT_TRUE(allCloseF(dxf, dx, 1e-4));
    EXPECT_TRUE(allCloseF(dwf, dw, 1e-4));
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

PoolGeom randPoolGeom(int ns, bool countIncludePad) {
  for (;;) {
    PoolGeom g{};
    g.nSpatial = ns;
    g.N = randInt(1, 2);
    g.C = randInt(1, 3);
    g.countIncludePad = countIncludePad;
    const bool ceilMode = randInt(0, 1);
    bool ok = true;
    for (int i = 0; i < ns; ++i) {
      g.in[i] = randInt(ns == 3 ? 3 : 4, ns == 3 ? 5 : 9);
      g.kernel[i] = randInt(1, 3);
      g.stride[i] = randInt(1, 2);
      g.dilation[i] = randInt(1, 2);
      g.padBegin[i] = randInt(0, g.kernel[i] / 2); // PyTorch: pad <= k / 2
      g.padEnd[i] = g.padBegin[i];                  // and the same at both ends
      int64_t o = outSize(g.in[i], g.kernel[i], g.stride[i], g.padBegin[i],
                          g.padBegin[i], g.dilation[i], ceilMode);
      // PyTorch ceil mode: the last window must start inside the input or
      // the left padding.
      if (ceilMode && (o - 1) * g.stride[i] >= g.in[i] + g.padBegin[i])
        --o;
      g.out[i] = o;
      ok &= o >= 1;
    }
    if (ok)
      return g;
  }
}

/// Direct loops over generic coordinates; op 0 = max, 1 = avg.
Vec refPool(const Vec &x, const PoolGeom &g, int op,
            std::vector<int64_t> *argmax = nullptr) {
  const int ns = g.nSpatial;
  const Dims in(g.in, g.in + ns), k(g.kernel, g.kernel + ns),
      out(g.out, g.out + ns);
  const int64_t P = prod(out), I = prod(in), KS = prod(k);
  Vec y(g.N * g.C * P);
  if (argmax)
    argmax->assign(y.size(), -1);
  for (int64_t pl = 0; pl < g.N * g.C; ++pl)
    for (int64_t o = 0; o < P; ++o) {
      Dims oc = unravel(o, out);
      double best = -INFINITY, sum = 0;
      int64_t arg = -1, valid = 0, padded = 0;
      for (int64_t kk = 0; kk < KS; ++kk) {
        Dims kc = unravel(kk, k), ic(ns);
        bool inside = true, insidePadded = true;
        for (int i = 0; i < ns; ++i) {
          ic[i] = oc[i] * g.stride[i] - g.padBegin[i] + kc[i] * g.dilation[i];
          inside &= ic[i] >= 0 && ic[i] < in[i];
          insidePadded &=
              ic[i] >= -g.padBegin[i] && ic[i] < in[i] + g.padBegin[i];
        }
        padded += insidePadded;
        if (!inside)
          continue;
        const double v = x[pl * I + ravel(ic, in)];
        ++valid;
        sum += v;
        if (arg < 0 || v > best) {
          best = v;
          arg = ravel(ic, in);
        }
      }
      if (op == 0) {
        y[pl * P + o] = best;
        if (argmax)
          (*argmax)[pl * P + o] = arg;
      } else {
        const int64_t div = g.countIncludePad ? padded : valid;
        y[pl * P + o] = div ? sum / div : 0.0;
      }
    }
  return y;
}

int64_t poolIn(const PoolGeom &g) {
  return g.N * g.C * spatialProd(g.in, g.nSpatial);
}
int64_t poolOut(const PoolGeom &g) {
  return g.N * g.C * spatialProd(g.out, g.nSpatial);
}

TEST(Pool, MaxForwardMatchesDirectLoops) {
  for (int trial = 0; trial < 60; ++trial) {
    const int ns = trial % 10 == 9 ? 3 : 1 + trial % 2;
    PoolGeom g = randPoolGeom(ns, false);
    Vec x = randVec(poolIn(g));
    Vec want = refPool(x, g, 0);
    Vec got(poolOut(g));
    maxPool(x.data(), got.data(), g);
    EXPECT_TRUE(allClose(got, want, 0)) << "trial " << trial;
    auto xf = toFloat(x);
    std::vector<float> yf(poolOut(g));
    maxPool(xf.data(), yf.data(), g);
    EXPECT_TRUE(allCloseF(yf, want, 1e-7));
  }
}

// ONNX pads differ per end: with count_include_pad a window counts the end pad it
// covers (ONNX's reference: taps below in + pad_end), not the begin pad's width.
TEST(Pool, AvgCountIncludePadUsesEachEndsPad) {
  PoolGeom g{};
  g.nSpatial = 1;
  g.N = g.C = 1;
  g.in[0] = 3;
  g.kernel[0] = 2;
  g.stride[0] = 1;
  g.padBegin[0] = 0;
  g.padEnd[0] = 1;
  g.dilation[0] = 1;
  g.out[0] = 3;
  g.countIncludePad = true;
  const Vec x = {2.0, 4.0, 8.0};
  Vec y(3);
  avgPool(x.data(), y.data(), g);
  EXPECT_DOUBLE_EQ(y[0], 3.0);
  EXPECT_DOUBLE_EQ(y[1], 6.0);
  EXPECT_DOUBLE_EQ(y[2], 4.0); // (8 + pad) / 2
  Vec dx(3);
  const Vec dy = {1.0, 1.0, 1.0};
  avgPoolGrad(dy.data(), dx.data(), g);
  EXPECT_DOUBLE_EQ(dx[0], 0.5);
  EXPECT_DOUBLE_EQ(dx[1], 1.0);
  EXPECT_DOUBLE_EQ(dx[2], 1.0);
}

TEST(Pool, MaxPaddingNeverWinsAndTiesGoToFirst) {
  PoolGeom g{};
  g.nSpatial = 2;
  g.N = g.C = 1;
  for (int i = 0; i < 2; ++i) {
    g.in[i] = 4;
    g.kernel[i] = 3;
    g.stride[i] = 2;
    g.padBegin[i] = 1;
    g.dilation[i] = 1;
    g.out[i] = 2;
  }
  Vec x(16, -5.0); // all negative, all tied
  Vec y(4), dy = {1, 2, 3, 4}, dx(16);
  maxPool(x.data(), y.data(), g);
  EXPECT_TRUE(allClose(y, Vec(4, -5.0), 0)); // not the 0 of the padding
  maxPoolGrad(x.data(), dy.data(), dx.data(), g);
  // Window (0,0) covers input rows/cols 0..1: first in-bounds tap (0,0).
  // Window (0,1) covers cols 1..3: first tap (0,1). (1,0): (1,0). (1,1):(1,1)
  Vec want(16, 0.0);
  want[0] = 1;
  want[1] = 2;
  want[4] = 3;
  want[5] = 4;
  EXPECT_TRUE(allClose(dx, want, 0));
}

// Rows wider than the 64 outputs maxPool works on at a time, windows that overlap
// (stride below the kernel, with dilation) and padding: each dy element is added to its
// window's argmax (the reference's first maximal in-bounds tap), in output order, so the
// gradient equals the reference's bit for bit.
TEST(Pool, MaxGradAddsToEachArgmaxInOutputOrder) {
  PoolGeom a{};
  a.nSpatial = 1;
  a.N = 2;
  a.C = 3;
  a.in[0] = 150;
  a.kernel[0] = 3;
  a.stride[0] = 1;
  a.padBegin[0] = a.padEnd[0] = 1;
  a.dilation[0] = 1;
  a.out[0] = 150;
  PoolGeom b{};
  b.nSpatial = 2;
  b.N = 1;
  b.C = 2;
  b.in[0] = 5, b.in[1] = 140;
  b.kernel[0] = 2, b.kernel[1] = 3;
  b.stride[0] = 1, b.stride[1] = 1;
  b.padBegin[0] = 0, b.padBegin[1] = 2;
  b.padEnd[0] = 0, b.padEnd[1] = 2;
  b.dilation[0] = 1, b.dilation[1] = 2;
  b.out[0] = 4, b.out[1] = 140;
  for (const PoolGeom &g : {a, b}) {
    Vec x = randVec(poolIn(g));
    for (size_t i = 0; i < x.size(); i += 7)
      x[i] = x[i / 7 * 7 + 3 < x.size() ? i / 7 * 7 + 3 : i]; // ties
    std::vector<int64_t> arg;
    Vec want = refPool(x, g, 0, &arg);
    Vec y(poolOut(g));
    maxPool(x.data(), y.data(), g);
    EXPECT_TRUE(allClose(y, want, 0));
    const Vec dy = randVec(poolOut(g));
    Vec wantDx(poolIn(g), 0.0), dx(poolIn(g), 5.0);
    const int64_t P = poolOut(g) / (g.N * g.C), I = poolIn(g) / (g.N * g.C);
    for (int64_t o = 0; o < poolOut(g); ++o)
      if (arg[o] >= 0)
        wantDx[o / P * I + arg[o]] += dy[o];
    maxPoolGrad(x.data(), dy.data(), dx.data(), g);
    EXPECT_TRUE(allClose(dx, wantDx, 0)) << g.nSpatial << "-d";
  }
}

TEST(Pool, MaxGradFiniteDifferences) {
  for (int trial = 0; trial < 30; ++trial) {
    const int ns = trial % 10 == 9 ? 3 : 1 + trial % 2;
    PoolGeom g = randPoolGeom(ns, false);
    Vec x = randVec(poolIn(g));
    Vec r = randVec(poolOut(g));
    auto f = [&](const Vec &xx) {
      Vec y(poolOut(g));
      maxPool(xx.data(), y.data(), g);
      return dot(y, r);
    };
    Vec dx(poolIn(g), 3.0);
    maxPoolGrad(x.data(), r.data(), dx.data(), g);
    EXPECT_TRUE(allClose(dx, numGrad(f, x, 1e-7), 1e-6, kFdRel))
        << "trial " << trial;
  }
}

TEST(Pool, AvgForwardMatchesDirectLoops) {
  for (int trial = 0; trial < 80; ++trial) {
    const int ns = trial % 10 == 9 ? 3 : 1 + trial % 2;
    PoolGeom g = randPoolGeom(ns, trial % 4 < 2);
    Vec x = randVec(poolIn(g));
    Vec want = refPool(x, g, 1);
    Vec got(poolOut(g));
    avgPool(x.data(), got.data(), g);
    EXPECT_TRUE(allClose(got, want, 1e-14)) << "trial " << trial;
  }
}

/// Port of PyTorch's avg_pool2d CPU formula (dilation 1).
Vec torchAvgPool2d(const Vec &x, const PoolGeom &g) {
  const int64_t iH = g.in[0], iW = g.in[1], oH = g.out[0], oW = g.out[1];
  const int64_t kH = g.kernel[0], kW = g.kernel[1], dH = g.stride[0],
                dW = g.stride[1], padH = g.padBegin[0], padW = g.padBegin[1];
  Vec y(g.N * g.C * oH * oW);
  for (int64_t pl = 0; pl < g.N * g.C; ++pl)
    for (int64_t oh = 0; oh < oH; ++oh)
      for (int64_t ow = 0; ow < oW; ++ow) {
        int64_t hstart = oh * dH - padH, wstart = ow * dW - padW;
        int64_t hend = std::min(hstart + kH, iH + padH);
        int64_t wend = std::min(wstart + kW, iW + padW);
        const int64_t poolSize = (hend - hstart) * (wend - wstart);
        hstart = std::max<int64_t>(hstart, 0);
        wstart = std::max<int64_t>(wstart, 0);
        hend = std::min(hend, iH);
        wend = std::min(wend, iW);
        double s = 0;
        for (int64_t ih = hstart; ih < hend; ++ih)
          for (int64_t iw = wstart; iw < wend; ++iw)
            s += x[(pl * iH + ih) * iW + iw];
        const int64_t div =
            g.countIncludePad ? poolSize : (hend - hstart) * (wend - wstart);
        y[(pl * oH + oh) * oW + ow] = s / div;
      }
  return y;
}

TEST(Pool, AvgMatchesPyTorchFormulaIncludingCeilMode) {
  for (int trial = 0; trial < 40; ++trial) {
    PoolGeom g = randPoolGeom(2, trial % 2 == 0);
    g.dilation[0] = g.dilation[1] = 1;
    // Recompute ceil-mode sizes for dilation 1.
    for (int i = 0; i < 2; ++i) {
      int64_t o = outSize(g.in[i], g.kernel[i], g.stride[i], g.padBegin[i],
                          g.padBegin[i], 1, true);
      if ((o - 1) * g.stride[i] >= g.in[i] + g.padBegin[i])
        --o;
      g.out[i] = o;
    }
    Vec x = randVec(poolIn(g));
    Vec got(poolOut(g));
    avgPool(x.data(), got.data(), g);
    EXPECT_TRUE(allClose(got, torchAvgPool2d(x, g), 1e-14));
  }
}

TEST(Pool, AvgGradFiniteDifferences) {
  for (int trial = 0; trial < 30; ++trial) {
    const int ns = trial % 10 == 9 ? 3 : 1 + trial % 2;
    PoolGeom g = randPoolGeom(ns, trial % 2 == 0);
    Vec x = randVec(poolIn(g));
    Vec r = randVec(poolOut(g));
    auto f = [&](const Vec &xx) {
      Vec y(poolOut(g));
      avgPool(xx.data(), y.data(), g);
      return dot(y, r);
    };
    Vec dx(poolIn(g), 3.0);
    avgPoolGrad(r.data(), dx.data(), g);
    EXPECT_TRUE(allClose(dx, numGrad(f, x), kFdTol, kFdRel))
        << "trial " << trial;
  }
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

Vec refSoftmax(const Vec &x, int64_t outer, int64_t L, int64_t inner,
               bool log) {
  Vec y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double s = 0;
      for (int64_t a = 0; a < L; ++a)
        s += std::exp(x[(o * L + a) * inner + i]);
      for (int64_t a = 0; a < L; ++a) {
        const double v = x[(o * L + a) * inner + i];
        y[(o * L + a) * inner + i] = log ? v - std::log(s) : std::exp(v) / s;
      }
    }
  return y;
}

TEST(Softmax, ForwardAndLogForward) {
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t outer = randInt(1, 4), L = randInt(1, 6),
                  inner = randInt(1, 4);
    Vec x = randVec(outer * L * inner, -3, 3);
    Vec y(x.size()), ly(x.size());
    softmax(x.data(), y.data(), outer, L, inner);
    logSoftmax(x.data(), ly.data(), outer, L, inner);
    EXPECT_TRUE(allClose(y, refSoftmax(x, outer, L, inner, false), 1e-14));
    EXPECT_TRUE(allClose(ly, refSoftmax(x, outer, L, inner, true), 1e-13));
    auto xf = toFloat(x);
    std::vector<float> yf(x.size());
    softmax(xf.data(), yf.data(), outer, L, inner);
    EXPECT_TRUE(allCloseF(yf, refSoftmax(x, outer, L, inner, false), 1e-6));
  }
}

TEST(Softmax, NumericallyStableForLargeLogits) {
  Vec x = {1000.0, 1001.0, 1002.0};
  Vec y(3), ly(3);
  softmax(x.data(), y.data(), 1, 3, 1);
  logSoftmax(x.data(), ly.data(), 1, 3, 1);
  Vec want = refSoftmax({0.0, 1.0, 2.0}, 1, 3, 1, false);
  Vec lwant = refSoftmax({0.0, 1.0, 2.0}, 1, 3, 1, true);
  EXPECT_TRUE(allClose(y, want, 1e-15));
  EXPECT_TRUE(allClose(ly, lwant, 1e-12));
  std::vector<float> xf = {-1e4f, 0.0f, 88.0f, 100.0f}, yf(4);
  softmax(xf.data(), yf.data(), 1, 4, 1);
  for (float v : yf)
    EXPECT_TRUE(std::isfinite(v));
}

TEST(Softmax, GradsFiniteDifferences) {
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t outer = randInt(1, 3), L = randInt(1, 5),
                  inner = randInt(1, 3);
    Vec x = randVec(outer * L * inner, -2, 2), r = randVec(x.size());
    for (int log = 0; log < 2; ++log) {
      auto f = [&](const Vec &xx) {
        Vec y(xx.size());
        if (log)
          logSoftmax(xx.data(), y.data(), outer, L, inner);
        else
          softmax(xx.data(), y.data(), outer, L, inner);
        return dot(y, r);
      };
      Vec y(x.size()), dx(x.size());
      if (log) {
        logSoftmax(x.data(), y.data(), outer, L, inner);
        logSoftmaxGrad(y.data(), r.data(), dx.data(), outer, L, inner);
      } else {
        softmax(x.data(), y.data(), outer, L, inner);
        softmaxGrad(y.data(), r.data(), dx.data(), outer, L, inner);
      }
      EXPECT_TRUE(allClose(dx, numGrad(f, x), kFdTol, kFdRel));
    }
  }
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

TEST(LayerNorm, ForwardMatchesNaive) {
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t outer = randInt(1, 5), inner = randInt(1, 9);
    const double eps = 1e-5;
    Vec x = randVec(outer * inner, -2, 3), s = randVec(inner),
        b = randVec(inner);
    const bool withBias = trial % 2;
    Vec want(x.size()), wm(outer), wis(outer);
    for (int64_t r = 0; r < outer; ++r) {
      double mu = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i)
        mu += x[r * inner + i] / inner;
      for (int64_t i = 0; i < inner; ++i)
        var += (x[r * inner + i] - mu) * (x[r * inner + i] - mu) / inner;
      wm[r] = mu;
      wis[r] = 1 / std::sqrt(var + eps);
      for (int64_t i = 0; i < inner; ++i)
        want[r * inner + i] =
            (x[r * inner + i] - mu) * wis[r] * s[i] + (withBias ? b[i] : 0.0);
    }
    Vec y(x.size()), m(outer), is(outer);
    layerNorm(x.data(), s.data(), withBias ? b.data() : nullptr, y.data(),
              m.data(), is.data(), outer, inner, eps);
    EXPECT_TRUE(allClose(y, want, 1e-12));
    EXPECT_TRUE(allClose(m, wm, 1e-14));
    EXPECT_TRUE(allClose(is, wis, 1e-9, 1e-12));
  }
}

TEST(LayerNorm, GradFiniteDifferences) {
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t outer = randInt(1, 4), inner = randInt(2, 8);
    const double eps = 1e-5;
    Vec x = randVec(outer * inner, -2, 2), s = randVec(inner),
        b = randVec(inner), r = randVec(outer * inner);
    auto run = [&](const Vec &xx, const Vec &ss, const Vec &bb) {
      Vec y(xx.size());
      layerNorm(xx.data(), ss.data(), bb.data(), y.data(), (double *)nullptr,
                (double *)nullptr, outer, inner, eps);
      return dot(y, r);
    };
    Vec y(x.size()), m(outer), is(outer);
    layerNorm(x.data(), s.data(), b.data(), y.data(), m.data(), is.data(),
              outer, inner, eps);
    Vec dx(x.size()), ds(inner), db(inner);
    layerNormGrad(x.data(), s.data(), m.data(), is.data(), r.data(), dx.data(),
                  ds.data(), db.data(), outer, inner);
    EXPECT_TRUE(allClose(dx,
                         numGrad([&](const Vec &v) { return run(v, s, b); }, x),
                         kFdTol, kFdRel));
    EXPECT_TRUE(allClose(ds,
                         numGrad([&](const Vec &v) { return run(x, v, b); }, s),
                         kFdTol, kFdRel));
    EXPECT_TRUE(allClose(db,
                         numGrad([&](const Vec &v) { return run(x, s, v); }, b),
                         kFdTol, kFdRel));
  }
}

TEST(LayerNorm, GradThreadIndependent) {
  const int64_t outer = 300, inner = 400;
  Vec x = randVec(outer * inner), s = randVec(inner), b = randVec(inner),
      dy = randVec(outer * inner), y(outer * inner), m(outer), is(outer);
  layerNorm(x.data(), s.data(), b.data(), y.data(), m.data(), is.data(), outer,
            inner, 1e-5);
  Vec dx1(x.size()), ds1(inner), db1(inner), dx2(x.size()), ds2(inner),
      db2(inner);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  layerNormGrad(x.data(), s.data(), m.data(), is.data(), dy.data(), dx1.data(),
                ds1.data(), db1.data(), outer, inner);
#ifdef _OPENMP
  omp_set_num_threads(3);
#endif
  layerNormGrad(x.data(), s.data(), m.data(), is.data(), dy.data(), dx2.data(),
                ds2.data(), db2.data(), outer, inner);
  EXPECT_TRUE(allClose(dx1, dx2, 0));
  EXPECT_TRUE(allClose(ds1, ds2, 0));
  EXPECT_TRUE(allClose(db1, db2, 0));
}

TEST(BatchNorm, TrainForwardAndInferMatchNaive) {
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t N = randInt(1, 3), C = randInt(1, 4), S = randInt(1, 6);
    const double eps = 1e-5;
    Vec x = randVec(N * C * S, -1, 3), s = randVec(C), b = randVec(C);
    Vec want(x.size()), wm(C), wv(C);
    for (int64_t c = 0; c < C; ++c) {
      double mu = 0, var = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < S; ++k)
          mu += x[(n * C + c) * S + k] / (N * S);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < S; ++k)
          var += std::pow(x[(n * C + c) * S + k] - mu, 2) / (N * S);
      wm[c] = mu;
      wv[c] = var;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < S; ++k)
          want[(n * C + c) * S + k] =
              (x[(n * C + c) * S + k] - mu) / std::sqrt(var + eps) * s[c] +
              b[c];
    }
    Vec y(x.size()), m(C), v(C), is(C);
    batchNormTrain(x.data(), s.data(), b.data(), y.data(), m.data(), v.data(),
                   is.data(), N, C, S, eps);
    EXPECT_TRUE(allClose(y, want, 1e-12));
    EXPECT_TRUE(allClose(m, wm, 1e-14));
    EXPECT_TRUE(allClose(v, wv, 1e-14));
    // Inference with running stats = the batch stats gives the same y.
    Vec yi(x.size());
    batchNormInfer(x.data(), s.data(), b.data(), wm.data(), wv.data(),
                   yi.data(), N, C, S, eps);
    EXPECT_TRUE(allClose(yi, want, 1e-12));
    // And with other running stats.
    Vec rm = randVec(C), rv = randVec(C, 0.5, 2.0), want2(x.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t k = 0; k < S; ++k)
          want2[(n * C + c) * S + k] =
              (x[(n * C + c) * S + k] - rm[c]) / std::sqrt(rv[c] + eps) * s[c] +
              b[c];
    batchNormInfer(x.data(), s.data(), b.data(), rm.data(), rv.data(),
                   yi.data(), N, C, S, eps);
    EXPECT_TRUE(allClose(yi, want2, 1e-12));
  }
}

TEST(BatchNorm, TrainGradFiniteDifferences) {
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t N = randInt(1, 3), C = randInt(1, 3), S = randInt(1, 5);
    if (N * S < 2)
      continue;
    const double eps = 1e-5;
    Vec x = randVec(N * C * S, -1, 2), s = randVec(C), b = randVec(C),
        r = randVec(N * C * S);
    auto run = [&](const Vec &xx, const Vec &ss, const Vec &bb) {
      Vec y(xx.size());
      batchNormTrain(xx.data(), ss.data(), bb.data(), y.data(),
                     (double *)nullptr, (double *)nullptr, (double *)nullptr, N,
                     C, S, eps);
      return dot(y, r);
    };
    Vec y(x.size()), m(C), v(C), is(C);
    batchNormTrain(x.data(), s.data(), b.data(), y.data(), m.data(), v.data(),
                   is.data(), N, C, S, eps);
    Vec dx(x.size()), ds(C), db(C);
    batchNormGrad(x.data(), s.data(), m.data(), is.data(), r.data(), dx.data(),
                  ds.data(), db.data(), N, C, S);
    EXPECT_TRUE(allClose(dx,
                         numGrad([&](const Vec &w) { return run(w, s, b); }, x),
                         kFdTol, kFdRel));
    EXPECT_TRUE(allClose(ds,
                         numGrad([&](const Vec &w) { return run(x, w, b); }, s),
                         kFdTol, kFdRel));
    EXPECT_TRUE(allClose(db,
                         numGrad([&](const Vec &w) { return run(x, s, w); }, b),
                         kFdTol, kFdRel));
  }
}

/// Two "ranks" on two threads: sum(v, n) adds both threads' v element-wise (in
/// place on both) and returns 2, as a data-parallel run's all-reduce does.
class TwoRanks {
public:
  double sum(int rank, double *v, int64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    size_t round = rounds;
    parts[rank].assign(v, v + n);
    if (++arrived == 2) {
      arrived = 0;
      ++rounds;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return rounds != round; });
    }
    for (int64_t i = 0; i < n; ++i)
      v[i] = parts[0][i] + parts[1][i];
    ++read;
    if (read == 2) { // both have read this round's parts before they are reused
      read = 0;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return read == 0; });
    }
    return 2.0;
  }

private:
  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> parts[2];
  int arrived = 0, read = 0;
  size_t rounds = 0;
};

TEST(BatchNorm, SyncOverTwoRanksIsTheWholeBatch) {
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t Nh = randInt(1, 3), C = randInt(1, 4), S = randInt(1, 5), N = 2 * Nh;
    const double eps = 1e-5;
    Vec x = randVec(N * C * S, -1, 2), s = randVec(C), b = randVec(C), dy = randVec(N * C * S);
    Vec y(x.size()), m(C), v(C), is(C), dx(x.size()), ds(C), db(C);
    batchNormTrain(x.data(), s.data(), b.data(), y.data(), m.data(), v.data(), is.data(), N,
                   C, S, eps);
    batchNormGrad(x.data(), s.data(), m.data(), is.data(), dy.data(), dx.data(), ds.data(),
                  db.data(), N, C, S);
    // Rank r holds batch rows [r * Nh, (r + 1) * Nh).
    TwoRanks comm;
    const int64_t half = Nh * C * S;
    Vec ys(x.size()), dxs(x.size()), ms[2], vs[2], dss[2], dbs[2];
    auto rank = [&](int r) {
      auto sum = [&](double *p, int64_t n) { return comm.sum(r, p, n); };
      ms[r].resize(C), vs[r].resize(C), dss[r].resize(C), dbs[r].resize(C);
      batchNormTrainSync(x.data() + r * half, s.data(), b.data(), ys.data() + r * half,
                         ms[r].data(), vs[r].data(), nullptr, Nh, C, S, eps, sum);
      Vec inv(C);
      for (int64_t c = 0; c < C; ++c)
        inv[c] = 1.0 / std::sqrt(vs[r][c] + eps);
      batchNormGradSync(x.data() + r * half, s.data(), ms[r].data(), inv.data(),
                        dy.data() + r * half, dxs.data() + r * half, dss[r].data(),
                        dbs[r].data(), Nh, C, S, sum);
    };
    std::thread other(rank, 1);
    rank(0);
    other.join();
    EXPECT_TRUE(allClose(ys, y, 1e-12));
    EXPECT_TRUE(allClose(dxs, dx, 1e-12));
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(allClose(ms[r], m, 1e-14));
      EXPECT_TRUE(allClose(vs[r], v, 1e-14));
    }
    // Each rank's dscale / dbias are its own half's: they add up to the whole batch's.
    Vec dsum(C), bsum(C);
    for (int64_t c = 0; c < C; ++c)
      dsum[c] = dss[0][c] + dss[1][c], bsum[c] = dbs[0][c] + dbs[1][c];
    EXPECT_TRUE(allClose(dsum, ds, 1e-12));
    EXPECT_TRUE(allClose(bsum, db, 1e-12));
  }
}

//===----------------------------------------------------------------------===//
// Softmax cross-entropy
//===----------------------------------------------------------------------===//

TEST(SoftmaxCrossEntropy, ForwardWithIgnoreIndex) {
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t N = randInt(1, 6), C = randInt(1, 5);
    const bool hasIgnore = trial % 2;
    const int64_t ignore = -100;
    Vec x = randVec(N * C, -3, 3);
    std::vector<int64_t> lab(N);
    for (auto &l : lab)
      l = hasIgnore && randInt(0, 3) == 0 ? ignore : randInt(0, C - 1);
    double s = 0;
    int kept = 0;
    for (int64_t n = 0; n < N; ++n) {
      if (hasIgnore && lab[n] == ignore)
        continue;
      double z = 0;
      for (int64_t c = 0; c < C; ++c)
        z += std::exp(x[n * C + c]);
      s += std::log(z) - x[n * C + lab[n]];
      ++kept;
    }
    double loss = -1;
    ASSERT_TRUE(softmaxCrossEntropy(x.data(), lab.data(), N, C, ignore,
                                    hasIgnore, &loss));
    if (kept == 0) {
      EXPECT_TRUE(std::isnan(loss));
    } else {
      EXPECT_NEAR(loss, s / kept, 1e-13);
    }
    float lf = -1;
    auto xf = toFloat(x);
    ASSERT_TRUE(softmaxCrossEntropy(xf.data(), lab.data(), N, C, ignore,
                                    hasIgnore, &lf));
    if (kept) {
      EXPECT_NEAR(lf, s / kept, 1e-5);
    }
  }
}

TEST(SoftmaxCrossEntropy, AllIgnoredIsNaNWithZeroGrad) {
  Vec x = randVec(6), dx(6, 4.0);
  std::vector<int64_t> lab = {7, 7};
  double loss = 0, dl = 1.0;
  ASSERT_TRUE(softmaxCrossEntropy(x.data(), lab.data(), 2, 3, 7, true, &loss));
  EXPECT_TRUE(std::isnan(loss));
  ASSERT_TRUE(softmaxCrossEntropyGrad(x.data(), lab.data(), 2, 3, 7, true, &dl,
                                      dx.data()));
  EXPECT_TRUE(allClose(dx, Vec(6, 0.0), 0));
}

TEST(SoftmaxCrossEntropy, InvalidLabelReportsFalse) {
  Vec x = randVec(6), dx(6, 4.0);
  double loss = 5, dl = 1;
  std::vector<int64_t> lab = {0, 3};
  EXPECT_FALSE(
      softmaxCrossEntropy(x.data(), lab.data(), 2, 3, -100, true, &loss));
  EXPECT_FALSE(softmaxCrossEntropyGrad(x.data(), lab.data(), 2, 3, -100, true,
                                       &dl, dx.data()));
  lab = {-100, 1};
  EXPECT_FALSE( // -100 is not ignored without hasIgnore.
      softmaxCrossEntropy(x.data(), lab.data(), 2, 3, -100, false, &loss));
  EXPECT_EQ(loss, 5.0);
  EXPECT_TRUE(allClose(dx, Vec(6, 4.0), 0));
}

TEST(SoftmaxCrossEntropy, GradFiniteDifferences) {
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t N = randInt(1, 5), C = randInt(2, 5);
    Vec x = randVec(N * C, -2, 2);
    std::vector<int64_t> lab(N);
    for (auto &l : lab)
      l = randInt(0, 3) == 0 ? -1 : randInt(0, C - 1);
    lab[0] = randInt(0, C - 1); // at least one kept row
    const double dl = 0.7;
    auto f = [&](const Vec &xx) {
      double l;
      softmaxCrossEntropy(xx.data(), lab.data(), N, C, -1, true, &l);
      return dl * l;
    };
    Vec dx(x.size());
    ASSERT_TRUE(softmaxCrossEntropyGrad(x.data(), lab.data(), N, C, -1, true,
                                        &dl, dx.data()));
    EXPECT_TRUE(allClose(dx, numGrad(f, x), kFdTol, kFdRel));
  }
}

// Mixed precision's loss reads the stored 16-bit logits and writes 16-bit dlogits
// (ReadsStoredFloats): the bits of the float32 kernels on widened logits, their dlogits
// then cast.
TEST(SoftmaxCrossEntropy, SixteenBitLogitsAndGradAreTheCastFloatOnes) {
  const int64_t N = 37, C = 301;
  Vec x = randVec(N * C, -6, 6);
  std::vector<ortc_bf16> x16(x.size());
  std::vector<float> xw(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x16[i] = ortc_cvt<ortc_bf16>(x[i]);
    xw[i] = ortc_cvt<float>(x16[i]);
  }
  std::vector<int64_t> lab(N);
  for (auto &l : lab)
    l = randInt(0, 4) == 0 ? -100 : randInt(0, C - 1);
  lab[0] = 3;
  float loss16 = 0, lossw = 0, dl = 1.7f;
  ASSERT_TRUE(softmaxCrossEntropy(x16.data(), lab.data(), N, C, -100, true, &loss16));
  ASSERT_TRUE(softmaxCrossEntropy(xw.data(), lab.data(), N, C, -100, true, &lossw));
  EXPECT_EQ(loss16, lossw);
  std::vector<ortc_bf16> d16(x.size());
  std::vector<float> dw(x.size());
  ASSERT_TRUE(softmaxCrossEntropyGrad(x16.data(), lab.data(), N, C, -100, true, &dl, d16.data()));
  ASSERT_TRUE(softmaxCrossEntropyGrad(xw.data(), lab.data(), N, C, -100, true, &dl, dw.data()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(d16[i].bits, ortc_cvt<ortc_bf16>(dw[i]).bits) << "element " << i;
}

// A 16-bit GEMM result (matmulWide into ortc_bf16 / ortc_half) is the float result
// (f32_result) rounded, for every transpose and for more rows than one block holds: the
// same bits where the result fits one block of rows; past it the float GEMM runs per
// block, and the BLAS may sum a block's rows in another order (as it may for another
// thread count): the float sums then differ by float rounding, so the 16-bit result is
// within one 16-bit ulp plus that rounding (K float ulps of the sum of |products|).
/// n random 16-bit values in [-2, 2].
template <typename S> std::vector<S> random16(int64_t n) {
  std::vector<S> v(n);
  for (S &x : v)
    x = ortc_cvt<S>(randVec(1, -2, 2)[0]);
  return v;
}

template <typename S> void expectWideRoundsAsCast() {
  struct Case { int64_t batch, M, N, K; };
  for (Case c : {Case{1, 700, 512, 64}, Case{3, 5, 7, 9}, Case{2, 300, 300, 33}})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      std::vector<S> a = random16<S>(c.batch * c.M * c.K), b = random16<S>(c.batch * c.K * c.N);
      std::vector<float> wide(c.batch * c.M * c.N);
      std::vector<S> narrow(wide.size());
      matmulWide(a.data(), b.data(), wide.data(), c.batch, c.M, c.N, c.K, ta, tb);
      matmulWide(a.data(), b.data(), narrow.data(), c.batch, c.M, c.N, c.K, ta, tb);
      const bool oneBlock = c.M * c.N <= kWideTile;
      const double ulp16 = std::is_same<S, ortc_bf16>::value ? 0x1p-7 : 0x1p-10;
      for (int64_t bt = 0; bt < c.batch; ++bt)
        for (int64_t m = 0; m < c.M; ++m)
          for (int64_t n = 0; n < c.N; ++n) {
            const size_t i = (bt * c.M + m) * c.N + n;
            if (oneBlock) {
              ASSERT_EQ(narrow[i].bits, ortc_cvt<S>(wide[i]).bits) << "element " << i;
              continue;
            }
            double mag = 0;
            for (int64_t k = 0; k < c.K; ++k)
              mag += std::abs(ortc_cvt<double>(a[bt * c.M * c.K + (ta ? k * c.M + m : m * c.K + k)]) *
                              ortc_cvt<double>(b[bt * c.K * c.N + (tb ? n * c.K + k : k * c.N + n)]));
            ASSERT_LE(std::abs(ortc_cvt<double>(narrow[i]) - wide[i]),
                      ulp16 * std::abs(wide[i]) + c.K * 0x1p-23 * mag)
                << "element " << i << " of " << c.batch << "x" << c.M << "x" << c.N << "x" << c.K
                << " transA " << ta << " transB " << tb;
          }
    }
}
TEST(Matmul, SixteenBitResultIsTheCastFloatResult) {
  expectWideRoundsAsCast<ortc_bf16>();
  expectWideRoundsAsCast<ortc_half>();
}

#if defined(ORTC_KERN_DNNL)
// On a CPU with AVX-512 BF16 (AMX included) a bfloat16 GEMM runs as oneDNN's bf16 matmul:
// the path is taken there (unless DNNL_MAX_CPU_ISA lowers the level), its float sums are
// within float rounding of the exact sum of the 16-bit products, and its 16-bit result is
// its float result rounded. Elsewhere the path refuses and matmulWide widens.
TEST(Matmul, Bf16NativeWhereTheCpuHasIt) {
  const bool cpuHas = __builtin_cpu_supports("avx512bf16");
  const bool capped = std::getenv("DNNL_MAX_CPU_ISA") != nullptr;
  if (!capped)
    EXPECT_EQ(dnnl_detail::nativeBf16(), cpuHas);
  if (!dnnl_detail::nativeBf16())
    GTEST_SKIP() << "no AVX-512 BF16 here: bfloat16 GEMMs widen to float";
  struct Case { int64_t batch, M, N, K; };
  for (Case c : {Case{1, 512, 384, 128}, Case{32, 64, 64, 32}, Case{3, 5, 7, 9}})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      std::vector<ortc_bf16> a = random16<ortc_bf16>(c.batch * c.M * c.K),
                             b = random16<ortc_bf16>(c.batch * c.K * c.N);
      std::vector<float> wide(c.batch * c.M * c.N);
      std::vector<ortc_bf16> narrow(wide.size());
      ASSERT_TRUE(dnnl_detail::matmulBf16(a.data(), b.data(), wide.data(), false, c.batch, c.M,
                                          c.N, c.K, ta, tb));
      ASSERT_TRUE(dnnl_detail::matmulBf16(a.data(), b.data(), narrow.data(), true, c.batch, c.M,
                                          c.N, c.K, ta, tb));
      for (int64_t bt = 0; bt < c.batch; ++bt)
        for (int64_t m = 0; m < c.M; ++m)
          for (int64_t n = 0; n < c.N; ++n) {
            double exact = 0, mag = 0;
            for (int64_t k = 0; k < c.K; ++k) {
              const double p =
                  ortc_cvt<double>(a[bt * c.M * c.K + (ta ? k * c.M + m : m * c.K + k)]) *
                  ortc_cvt<double>(b[bt * c.K * c.N + (tb ? n * c.K + k : k * c.N + n)]);
              exact += p;
              mag += std::abs(p);
            }
            const size_t i = (bt * c.M + m) * c.N + n;
            ASSERT_LE(std::abs(wide[i] - exact), c.K * 0x1p-24 * mag + 1e-30)
                << "element " << i << " of " << c.batch << "x" << c.M << "x" << c.N << "x"
                << c.K << " transA " << ta << " transB " << tb;
            ASSERT_EQ(narrow[i].bits, ortc_cvt<ortc_bf16>(wide[i]).bits) << "element " << i;
          }
    }
}

// The native bf16 GEMM's rounding of its float sums to a bfloat16 result, checked as a
// cast: every 64th float pattern is written as h + m + l, three bfloat16 values (the
// top, middle and low 8 bits of its significand), and a [rows, 3] x [3, 1] product of
// ones sums them exactly in float; the bfloat16 result must be ortc_cvt's rounding of
// the float. AMX treats subnormal bfloat16 inputs as zero (as PyTorch's oneDNN path does),
// so where a part is subnormal (values below about 2^-100) the float sum itself differs:
// those rows are left out, every other row must match.
TEST(Matmul, Bf16NativeRoundsItsSumsAsTheCast) {
  if (!dnnl_detail::nativeBf16())
    GTEST_SKIP() << "no AVX-512 BF16 here: bfloat16 GEMMs widen to float";
  const int64_t rows = int64_t(1) << 20, step = 64;
  std::vector<ortc_bf16> a(rows * 3), ones(3, ortc_cvt<ortc_bf16>(1.0f)), narrow(rows);
  std::vector<float> wide(rows), exact(rows);
  auto top = [](float f) { return bitsFloat(floatBits(f) & 0xffff0000u); };
  int64_t checked = 0, left = 0;
  for (uint64_t base = 0; base < (uint64_t(1) << 32); base += uint64_t(rows) * step) {
    for (int64_t i = 0; i < rows; ++i) {
      float f = bitsFloat(uint32_t(base + uint64_t(i) * step));
      if (!std::isfinite(f))
        f = 0;
      const float h = top(f), m = top(f - h), l = f - h - m;
      a[i * 3] = {uint16_t(floatBits(h) >> 16)};
      a[i * 3 + 1] = {uint16_t(floatBits(m) >> 16)};
      a[i * 3 + 2] = {uint16_t(floatBits(l) >> 16)};
      exact[i] = f;
    }
    ASSERT_TRUE(dnnl_detail::matmulBf16(a.data(), ones.data(), wide.data(), false, 1, rows, 1,
                                        3, false, false));
    ASSERT_TRUE(dnnl_detail::matmulBf16(a.data(), ones.data(), narrow.data(), true, 1, rows,
                                        1, 3, false, false));
    for (int64_t i = 0; i < rows; ++i) {
      if (wide[i] != exact[i]) {
        ASSERT_LT(std::fabs(exact[i]), 0x1p-100f) << "float bits 0x" << std::hex
                                                   << floatBits(exact[i]);
        ++left;
        continue;
      }
      ++checked;
      if (exact[i] == 0) { // a sum of -0s is +0, as in any GEMM (0 + -0 = +0)
        ASSERT_EQ(narrow[i].bits & 0x7fffu, 0u);
        continue;
      }
      ASSERT_EQ(narrow[i].bits, ortc_cvt<ortc_bf16>(exact[i]).bits)
          << "float bits 0x" << std::hex << floatBits(exact[i]);
    }
  }
  EXPECT_GT(checked, 10 * left); // the rows left out are those below 2^-100, about 6%
}
#endif

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

TEST(Dropout, Mix64IsSplitMix64Finaliser) {
  // First output of splitmix64 seeded with 0 = finaliser(golden gamma).
  EXPECT_EQ(mix64(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
  EXPECT_EQ(mix64(0), 0ull);
}

TEST(Dropout, CounterBitsAreTheSplitMix64StreamOfTheTensorsState) {
  // Element i draws output i of SplitMix64 seeded with counterState(seed, key): the
  // generator stepped the usual way (state += gamma, then the finaliser) gives the
  // same 53 bits, element by element, far into the tensor as near its start.
  const uint64_t seed = 99, key = 0x1234abcdull;
  uint64_t state = counterState(seed, key);
  EXPECT_EQ(state, mix64(seed ^ mix64(key)));
  for (uint64_t i = 0; i < 1000; ++i) {
    state += 0x9e3779b97f4a7c15ull;
    ASSERT_EQ(counterBits(seed, key, i), mix64(state) >> 11) << "element " << i;
  }
  const uint64_t far = (uint64_t(1) << 40) + 5;
  EXPECT_EQ(counterBits(seed, key, far),
            mix64(counterState(seed, key) + (far + 1) * 0x9e3779b97f4a7c15ull) >> 11);
  // Another key or seed: another stream.
  EXPECT_NE(counterBits(seed, key + 1, 0), counterBits(seed, key, 0));
  EXPECT_NE(counterBits(seed + 1, key, 0), counterBits(seed, key, 0));
}

TEST(Dropout, MasksIdenticalForFloatDoubleAndThreads) {
  const int64_t n = 200000;
  const double ratio = 0.3;
  const uint64_t seed = 1234, key = 77;
  Vec xd(n, 1.0), yd(n), yd1(n);
  std::vector<float> xf(n, 1.0f), yf(n);
  dropout(xd.data(), yd.data(), n, ratio, seed, key);
  dropout(xf.data(), yf.data(), n, ratio, seed, key);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  dropout(xd.data(), yd1.data(), n, ratio, seed, key);
#ifdef _OPENMP
  omp_set_num_threads(3);
#endif
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(yd[i] != 0.0, yf[i] != 0.0f) << i;
    ASSERT_EQ(yd[i], yd1[i]) << i;
    ASSERT_EQ(yd[i] != 0.0, counterUniform(seed, key, i) >= ratio); // the definition
    if (yd[i] != 0.0) {
      ++kept;
      ASSERT_DOUBLE_EQ(yd[i], 1.0 / 0.7);
    }
  }
  EXPECT_NEAR(double(kept) / n, 0.7, 0.01);
  std::vector<uint8_t> mask(n);
  dropoutMask(mask.data(), n, ratio, seed, key);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(mask[i] != 0, yd[i] != 0.0);
  // A different key or seed gives a different mask.
  Vec yk(n);
  dropout(xd.data(), yk.data(), n, ratio, seed, key + 1);
  int64_t diff = 0;
  for (int64_t i = 0; i < n; ++i)
    diff += (yk[i] != 0.0) != (yd[i] != 0.0);
  EXPECT_GT(diff, n / 10);
}

/// The integer keep test equals u >= ratio for bits around the threshold.
TEST(Dropout, IntegerThresholdIsTheUniformTest) {
  const double ratios[] = {0.0, 1e-17, 0x1.0p-53, 0.3, 0.5, 0.1 + 0x1.0p-40,
                           1.0 - 0x1.0p-53, 1.0, 1.5, -0.1,
                           std::numeric_limits<double>::quiet_NaN()};
  const uint64_t top = uint64_t(1) << 53;
  for (double r : ratios) {
    const uint64_t t = keepThreshold(r);
    for (int64_t d = -2; d <= 2; ++d) {
      const int64_t b = int64_t(std::min(t, top - 1)) + d;
      if (b < 0 || uint64_t(b) >= top)
        continue;
      EXPECT_EQ(uint64_t(b) >= t, double(b) * 0x1.0p-53 >= r) << "ratio " << r << " bits " << b;
    }
  }
}

TEST(Dropout, GradUsesSameMaskAndEdgeRatios) {
  const int64_t n = 1000;
  Vec x = randVec(n), y(n), dy = randVec(n), dx(n);
  dropout(x.data(), y.data(), n, 0.5, 9, 3);
  dropoutGrad(dy.data(), dx.data(), n, 0.5, 9, 3);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropoutKeep(9, 3, i, 0.5);
    EXPECT_EQ(y[i], keep ? x[i] * 2.0 : 0.0);
    EXPECT_EQ(dx[i], keep ? dy[i] * 2.0 : 0.0);
  }
  dropout(x.data(), y.data(), n, 0.0, 9, 3);
  EXPECT_TRUE(allClose(y, x, 0));
  dropout(x.data(), y.data(), n, 1.0, 9, 3);
  EXPECT_TRUE(allClose(y, Vec(n, 0.0), 0));
}

//===----------------------------------------------------------------------===//
// GELU
//===----------------------------------------------------------------------===//

TEST(Gelu, ForwardKnownValuesAndFormulas) {
  Vec x = {1.0, -1.0, 0.0, 2.5, -3.0}, y(5), yt(5);
  gelu(x.data(), y.data(), 5, false);
  gelu(x.data(), yt.data(), 5, true);
  EXPECT_NEAR(y[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(yt[0], 0.8411919906082768, 1e-15);
  for (int i = 0; i < 5; ++i) {
    const double v = x[i];
    EXPECT_NEAR(y[i], v * 0.5 * std::erfc(-v / std::sqrt(2.0)), 1e-15);
    EXPECT_NEAR(
        yt[i],
        0.5 * v *
            (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))),
        1e-15);
  }
  std::vector<float> xf = toFloat(x), yf(5);
  gelu(xf.data(), yf.data(), 5, false);
  EXPECT_TRUE(allCloseF(yf, y, 1e-6));
}

TEST(Gelu, GradFiniteDifferences) {
  for (int approx = 0; approx < 2; ++approx) {
    const int64_t n = 50;
    Vec x = randVec(n, -4, 4), r = randVec(n), dx(n);
    auto f = [&](const Vec &xx) {
      Vec y(n);
      gelu(xx.data(), y.data(), n, approx);
      return dot(y, r);
    };
    geluGrad(x.data(), r.data(), dx.data(), n, approx);
    EXPECT_TRUE(allClose(dx, numGrad(f, x), kFdTol, kFdRel));
  }
}

/// The shared formulas (kernels/common/ortc_scalar.h) under the CPU library's policy
/// (vectorisation-stable vm:: math, float) against the same formulas under libm in
/// double, and the sigmoid against its definition: one formula, every policy near it.
struct LibmMath {
  template <typename T> static T exp(T x) { return std::exp(x); }
  template <typename T> static T erf(T x) { return std::erf(x); }
  template <typename T> static T tanh(T x) { return std::tanh(x); }
};
TEST(ScalarFormulas, PoliciesAgreeWithLibmInDouble) {
  for (int approx = 0; approx < 2; ++approx)
    for (double v = -9.0; v <= 9.0; v += 0.0625) {
      const float f = static_cast<float>(v);
      const double y = ortc::scalar::gelu<LibmMath>(v, approx);
      const double dy = ortc::scalar::geluGrad<LibmMath>(v, 0.75, approx);
      // Both in float: a few float ulps of the larger of the value and the input.
      EXPECT_NEAR(geluOf(f, approx), y, 4e-7 * std::max(1.0, std::fabs(v))) << v;
      EXPECT_NEAR(geluGradOf(f, 0.75f, approx), dy, 4e-7 * std::max(1.0, v * v)) << v;
      EXPECT_EQ(geluOf(v, approx), y) << v; // double: the CPU library is libm's
      const double sg = 1.0 / (1.0 + std::exp(-v));
      EXPECT_NEAR(sigmoidOf(f), sg, 4e-7 * sg) << v;
      EXPECT_EQ(sigmoidOf(v), sg) << v;
    }
}

/// The keep threshold (computed without a math library) is ceil(ratio * 2^53).
TEST(ScalarFormulas, KeepThresholdIsTheCeiling) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int k = 0; k < 100000; ++k) {
    const double r = k < 10 ? k / 10.0 : u(rng);
    EXPECT_EQ(keepThreshold(r), static_cast<uint64_t>(std::ceil(r * 0x1.0p53))) << r;
  }
  EXPECT_EQ(keepThreshold(1.0), uint64_t(1) << 53);
  EXPECT_EQ(keepThreshold(-0.5), 0u);
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

TEST(Optim, SgdTwoStepsHandComputed) {
  // p = 1, grads 0.5 then -0.25, lr 0.1, momentum 0.9, dampening 0.1,
  // weight decay 0.01 (values from torch.optim.SGD's update rule by hand).
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    double p = 1.0, buf = -123.0;
    const uint8_t on = 1;
    double g1 = 0.5, g2 = -0.25;
    sgdUpdate(&p, &g1, &buf, 1, 0.1, 0.9, 0.1, nesterov, 0.01, 1, &on);
    sgdUpdate(&p, &g2, &buf, 1, 0.1, 0.9, 0.1, nesterov, 0.01, 2, &on);
    EXPECT_NEAR(p, nesterov ? 0.905405389 : 0.9247459, 1e-15);
    EXPECT_NEAR(buf, nesterov ? 0.2421279 : 0.242541, 1e-15);
  }
  // Vector version against a scalar loop; momentum 0 with null buffer.
  const int64_t n = 7;
  Vec p = randVec(n), g1 = randVec(n), g2 = randVec(n), want = p;
  for (int64_t i = 0; i < n; ++i) {
    want[i] -= 0.05 * (g1[i] + 0.1 * want[i]);
    want[i] -= 0.05 * (g2[i] + 0.1 * want[i]);
  }
  sgdUpdate(p.data(), g1.data(), (double *)nullptr, n, 0.05, 0.0, 0.0, false,
            0.1, 1, nullptr);
  sgdUpdate(p.data(), g2.data(), (double *)nullptr, n, 0.05, 0.0, 0.0, false,
            0.1, 2, nullptr);
  EXPECT_TRUE(allClose(p, want, 1e-15));
  // Float instantiation.
  float pf = 1.0f, bf = 0.0f, gf1 = 0.5f, gf2 = -0.25f;
  sgdUpdate(&pf, &gf1, &bf, 1, 0.1f, 0.9f, 0.1f, false, 0.01f, 1, nullptr);
  sgdUpdate(&pf, &gf2, &bf, 1, 0.1f, 0.9f, 0.1f, false, 0.01f, 2, nullptr);
  EXPECT_NEAR(pf, 0.9247459, 1e-6);
}

TEST(Optim, AdamWTwoStepsHandComputed) {
  // p = 1, grads 0.5 then -0.25, lr 0.01, betas (0.9, 0.999), eps 1e-8,
  // weight decay 0.1 (torch.optim.AdamW's update rule by hand).
  double p = 1.0, m = 0.0, v = 0.0, g1 = 0.5, g2 = -0.25;
  const uint8_t on = 1;
  adamwUpdate(&p, &g1, &m, &v, 1, 0.01, 0.9, 0.999, 1e-8, 0.1, 1, &on);
  EXPECT_NEAR(p, 0.989, 1e-9); // 0.999 - 0.1 * 0.05 / (0.5 + 1e-8)
  adamwUpdate(&p, &g2, &m, &v, 1, 0.01, 0.9, 0.999, 1e-8, 0.1, 2, &on);
  EXPECT_NEAR(p, 0.9853476298705847, 1e-14);
  EXPECT_NEAR(m, 0.02, 1e-15);
  EXPECT_NEAR(v, 0.00031225, 1e-17);
  // Vector version against a scalar loop.
  const int64_t n = 9;
  Vec P = randVec(n), G1 = randVec(n), G2 = randVec(n), M(n, 0.0), V(n, 0.0);
  Vec wp = P, wm = M, wv = V;
  const double lr = 3e-3, b1 = 0.8, b2 = 0.99, eps = 1e-6, wd = 0.05;
  int t = 0;
  for (const Vec *G : {&G1, &G2}) {
    ++t;
    for (int64_t i = 0; i < n; ++i) {
      wp[i] *= 1 - lr * wd;
      wm[i] = b1 * wm[i] + (1 - b1) * (*G)[i];
      wv[i] = b2 * wv[i] + (1 - b2) * (*G)[i] * (*G)[i];
      // Textbook form: eps is added to sqrt of the bias-corrected v.
      const double mh = wm[i] / (1 - std::pow(b1, t));
      const double vh = wv[i] / (1 - std::pow(b2, t));
      wp[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
    adamwUpdate(P.data(), G->data(), M.data(), V.data(), n, lr, b1, b2, eps, wd,
                t, nullptr);
  }
  // torch's (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps) equals the
  // textbook form up to rounding.
  EXPECT_TRUE(allClose(P, wp, 1e-13));
  EXPECT_TRUE(allClose(M, wm, 1e-15));
  EXPECT_TRUE(allClose(V, wv, 1e-15));
  float pf = 1.0f, mf = 0, vf = 0, gf1 = 0.5f, gf2 = -0.25f;
  adamwUpdate(&pf, &gf1, &mf, &vf, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1,
              nullptr);
  adamwUpdate(&pf, &gf2, &mf, &vf, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 2,
              nullptr);
  EXPECT_NEAR(pf, 0.9853476298705847, 1e-6);
}

// The multi-tensor updates (one parallel region over all tensors' elements as one
// index space) equal one update per tensor, bit for bit, at any thread count, with
// tensors that straddle the threads' ranges and an empty one.
TEST(Optim, MultiTensorEqualsOneUpdatePerTensor) {
  const std::vector<int64_t> sizes = {7, 0, 40000, 3, 12345};
  std::vector<Vec> p, g, m, v, buf;
  for (int64_t n : sizes) {
    p.push_back(randVec(n)), g.push_back(randVec(n)), m.push_back(randVec(n));
    v.push_back(randVec(n, 0, 1)), buf.push_back(randVec(n));
  }
  const uint8_t on = 1;
  for (int threads : {1, 3}) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    std::vector<Vec> wp = p, wm = m, wv = v, sp = p, sb = buf;
    std::vector<Vec> mp = p, mm = m, mv = v, msp = p, msb = buf;
    std::vector<UpdateTensor<double>> adam, sgd;
    for (size_t k = 0; k < sizes.size(); ++k) {
      adamwUpdate(wp[k].data(), g[k].data(), wm[k].data(), wv[k].data(), sizes[k], 1e-3, 0.9,
                  0.999, 1e-8, 0.01, 3, &on);
      sgdUpdate(sp[k].data(), g[k].data(), sb[k].data(), sizes[k], 0.1, 0.9, 0.1, true, 0.01, 2,
                &on);
      adam.push_back({mp[k].data(), g[k].data(), mm[k].data(), mv[k].data(), sizes[k]});
      sgd.push_back({msp[k].data(), g[k].data(), msb[k].data(), nullptr, sizes[k]});
    }
    adamwUpdateMulti(adam.data(), (int)adam.size(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 3, &on);
    sgdUpdateMulti(sgd.data(), (int)sgd.size(), 0.1, 0.9, 0.1, true, 0.01, 2, &on);
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_TRUE(allClose(mp[k], wp[k], 0)) << "adamw p, tensor " << k;
      EXPECT_TRUE(allClose(mm[k], wm[k], 0)) << "adamw m, tensor " << k;
      EXPECT_TRUE(allClose(mv[k], wv[k], 0)) << "adamw v, tensor " << k;
      EXPECT_TRUE(allClose(msp[k], sp[k], 0)) << "sgd p, tensor " << k;
      EXPECT_TRUE(allClose(msb[k], sb[k], 0)) << "sgd buffer, tensor " << k;
    }
  }
}

// Each SGD flag combination (weight decay, momentum, first step, Nesterov) and both of
// AdamW's lerp forms run a loop of their own (dispatchFlags): every one against the
// formulas of sgdUpdateMulti / adamwUpdateMulti written per element, over a length
// that leaves a vector tail, in double (the same operations in the same order: equal).
TEST(Optim, EveryFlagCombinationFollowsTheFormula) {
  const int64_t n = 37;
  const Vec p0 = randVec(n), g = randVec(n), buf0 = randVec(n), m0 = randVec(n),
            v0 = randVec(n, 0, 1);
  for (double wd : {0.0, 0.01})
    for (double mom : {0.0, 0.9})
      for (int64_t step : {1, 3})
        for (bool nest : {false, true}) {
          Vec p = p0, buf = buf0, wantP = p0, wantB = buf0;
          const double damp = 1.0 - 0.25;
          for (int64_t i = 0; i < n; ++i) {
            double d = g[i];
            if (wd != 0)
              d = d + wd * wantP[i];
            if (mom != 0) {
              const double b = step <= 1 ? d : wantB[i] * mom + d * damp;
              wantB[i] = b;
              d = nest ? d + mom * b : b;
            }
            wantP[i] = wantP[i] - 0.1 * d;
          }
          sgdUpdate(p.data(), g.data(), buf.data(), n, 0.1, mom, 0.25, nest, wd, step, nullptr);
          EXPECT_TRUE(allClose(p, wantP, 0)) << "sgd p: wd " << wd << " momentum " << mom
                                             << " step " << step << " nesterov " << nest;
          EXPECT_TRUE(allClose(buf, wantB, 0)) << "sgd buffer: wd " << wd << " momentum " << mom
                                               << " step " << step << " nesterov " << nest;
        }
  for (double beta1 : {0.9, 0.3}) { // 1 - beta1 below and above 0.5: the two lerp forms
    Vec p = p0, m = m0, v = v0, wantP = p0, wantM = m0, wantV = v0;
    const double lr = 1e-3, beta2 = 0.999, eps = 1e-8, wd = 0.01;
    const int64_t step = 2;
    const double w1 = 1.0 - beta1, stepSize = lr / (1.0 - std::pow(beta1, step));
    const double bc2Sqrt = std::sqrt(1.0 - std::pow(beta2, step));
    for (int64_t i = 0; i < n; ++i) {
      const double pi = wantP[i] * (1.0 - lr * wd), diff = g[i] - wantM[i];
      const double mi = w1 < 0.5 ? wantM[i] + w1 * diff : g[i] - diff * (1.0 - w1);
      const double vi = wantV[i] * beta2 + (1.0 - beta2) * g[i] * g[i];
      wantM[i] = mi;
      wantV[i] = vi;
      wantP[i] = pi - stepSize * mi / (std::sqrt(vi) / bc2Sqrt + eps);
    }
    adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, lr, beta1, beta2, eps, wd, step,
                nullptr);
    EXPECT_TRUE(allClose(p, wantP, 0)) << "adamw p, beta1 " << beta1;
    EXPECT_TRUE(allClose(m, wantM, 0)) << "adamw m, beta1 " << beta1;
    EXPECT_TRUE(allClose(v, wantV, 0)) << "adamw v, beta1 " << beta1;
  }
}

TEST(Optim, ApplyZeroLeavesEverythingUntouched) {
  const int64_t n = 5;
  const uint8_t off = 0;
  Vec p = randVec(n), g = randVec(n), buf = randVec(n), m = randVec(n),
      v = randVec(n, 0, 1);
  const Vec p0 = p, buf0 = buf, m0 = m, v0 = v, g0 = g;
  for (int64_t step : {1, 2})
    sgdUpdate(p.data(), g.data(), buf.data(), n, 0.1, 0.9, 0.0, true, 0.01,
              step, &off);
  for (int64_t step : {1, 2})
    adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, 0.1, 0.9, 0.999,
                1e-8, 0.01, step, &off);
  EXPECT_TRUE(allClose(p, p0, 0));
  EXPECT_TRUE(allClose(buf, buf0, 0));
  EXPECT_TRUE(allClose(m, m0, 0));
  EXPECT_TRUE(allClose(v, v0, 0));
  EXPECT_TRUE(allClose(g, g0, 0));
  // Garbage in the gated-off buffers must not matter either: NaN stays NaN.
  Vec pn(n, NAN);
  sgdUpdate(pn.data(), g.data(), buf.data(), n, 0.1, 0.9, 0.0, false, 0.0, 2,
            &off);
  for (double x : pn)
    EXPECT_TRUE(std::isnan(x));
}

//===----------------------------------------------------------------------===//
// Checks and norms
//===----------------------------------------------------------------------===//

TEST(Checks, AllFinite) {
  Vec x = randVec(100000);
  EXPECT_TRUE(allFinite(x.data(), (int64_t)x.size()));
  EXPECT_TRUE(allFinite(x.data(), 0));
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    Vec y = x;
    y[77777] = bad;
    EXPECT_FALSE(allFinite(y.data(), (int64_t)y.size()));
    std::vector<float> f = toFloat(y);
    EXPECT_FALSE(allFinite(f.data(), (int64_t)f.size()));
  }
  std::vector<float> f = toFloat(x);
  EXPECT_TRUE(allFinite(f.data(), (int64_t)f.size()));
  float big = 3e38f;
  EXPECT_TRUE(allFinite(&big, 1));
}

TEST(Checks, SumSquaresDeterministicDoubleAccumulation) {
  const int64_t n = 100003;
  Vec x = randVec(n);
  double want = 0;
  for (double v : x)
    want += v * v;
  EXPECT_NEAR(sumSquares(x.data(), n), want, 1e-9);
  std::vector<float> f = toFloat(x);
  double wantF = 0;
  for (float v : f)
    wantF += double(v) * double(v);
  EXPECT_NEAR(sumSquares(f.data(), n), wantF, wantF * 1e-6);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  const double a = sumSquares(x.data(), n);
#ifdef _OPENMP
  omp_set_num_threads(3);
#endif
  const double b = sumSquares(x.data(), n);
  EXPECT_EQ(a, b);
  EXPECT_EQ(sumSquares(x.data(), 0), 0.0);
}

TEST(Reduce, LargeThreadIndependent) {
  Dims dims = {64, 50, 30};
  Vec x = randVec(prod(dims));
  int64_t axes[] = {0, 2};
  Vec a(50), b(50);
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  reduce(x.data(), dims.data(), 3, axes, 2, a.data(), ReduceKind::Sum);
#ifdef _OPENMP
  omp_set_num_threads(3);
#endif
  reduce(x.data(), dims.data(), 3, axes, 2, b.data(), ReduceKind::Sum);
  EXPECT_TRUE(allClose(a, b, 0));
  EXPECT_TRUE(allClose(a, refReduce(x, dims, {0, 2}, ReduceKind::Sum), 1e-11));
}

//===----------------------------------------------------------------------===//
// Float32 accumulation accuracy: sums over many elements must not lose more
// than rounding of the result, whatever the count or the order of the values.
//===----------------------------------------------------------------------===//

/// ||got - want|| / ||want|| (want in double).
template <typename F> double relDist(const std::vector<F> &got, const Vec &want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += std::pow(double(got[i]) - want[i], 2);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

/// The float values of v, back in double: the float64 reference of a float32
/// kernel computes on exactly the inputs the kernel sees.
Vec roundToFloat(const Vec &v) {
  const std::vector<float> f = toFloat(v);
  return Vec(f.begin(), f.end());
}

/// Sum and mean of 1e6 float32 values, reduced along the innermost axis, an
/// outer axis (the blocked path that keeps the inner axis) and all axes.
TEST(Accuracy, Float32ReduceSumMeanOfAMillion) {
  const int64_t n = 1000000;
  // Positive values: the relative error of the sum is well defined.
  std::vector<float> x = toFloat(randVec(n, 0.5, 1.5));
  struct Case {
    Dims dims;
    std::vector<int> axes;
  };
  for (const Case &c : {Case{{n}, {0}}, Case{{n / 4, 4}, {0}},
                        Case{{4, n / 4}, {1}}, Case{{1000, 1000}, {0, 1}}}) {
    const Vec want = refReduce(Vec(x.begin(), x.end()), c.dims, c.axes,
                               ReduceKind::Sum);
    const int64_t count = n / (int64_t)want.size();
    for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean}) {
      std::vector<float> got(want.size());
      const std::vector<int64_t> axes(c.axes.begin(), c.axes.end());
      reduce(x.data(), c.dims.data(), (int)c.dims.size(), axes.data(),
             (int)axes.size(), got.data(), kind);
      Vec w = want;
      if (kind == ReduceKind::Mean)
        for (double &v : w)
          v /= double(count);
      EXPECT_TRUE(allCloseF(got, w, 0, 1e-6))
          << "dims " << c.dims[0] << "x" << (c.dims.size() > 1 ? c.dims[1] : 1)
          << (kind == ReduceKind::Sum ? " sum" : " mean");
    }
  }
}

/// A few large values first, then a million tiny ones: a float32 running sum
/// stops growing once the tiny values fall below half its ulp.
TEST(Accuracy, Float32ReduceLargeThenManyTiny) {
  const int64_t big = 16, tiny = 1000000, n = big + tiny;
  std::vector<float> x(n, 1.0f);
  std::fill(x.begin(), x.begin() + big, 1e8f);
  const double want = 16 * 1e8 + 1e6;
  float naive = 0;
  for (float v : x)
    naive += v;
  // The order is adversarial: summed naively in float32 it loses every 1.
  EXPECT_GT(std::abs(naive - want) / want, 1e-4);
  // Along the reduced axis, and along an outer axis (inner axis of 3 kept).
  Dims flat = {n}, rows = {n, 3};
  std::vector<float> x3(3 * n);
  for (int64_t i = 0; i < 3 * n; ++i)
    x3[i] = x[i / 3];
  int64_t axis = 0;
  for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Mean}) {
    const double w = kind == ReduceKind::Sum ? want : want / double(n);
    std::vector<float> got(1), got3(3);
    reduce(x.data(), flat.data(), 1, &axis, 1, got.data(), kind);
    reduce(x3.data(), rows.data(), 2, &axis, 1, got3.data(), kind);
    EXPECT_TRUE(allCloseF(got, Vec{w}, 0, 1e-6));
    EXPECT_TRUE(allCloseF(got3, Vec(3, w), 0, 1e-6));
  }
  // Global average pooling over a 1000x1000 plane in the same order.
  PoolGeom g{};
  g.nSpatial = 2;
  g.N = g.C = 1;
  g.in[0] = g.in[1] = g.kernel[0] = g.kernel[1] = 1000;
  g.out[0] = g.out[1] = g.stride[0] = g.stride[1] = g.dilation[0] =
      g.dilation[1] = 1;
  std::vector<float> pooled(1);
  avgPool(x.data(), pooled.data(), g); // the first 1e6 values: 16 big, then 1s
  const double wantPool = (16 * 1e8 + (1e6 - 16)) / 1e6;
  EXPECT_TRUE(allCloseF(pooled, Vec{wantPool}, 0, 1e-6));
}

/// Training-mode BatchNorm in float32 over 8192 elements per channel (8 x 1024)
/// against the same kernels in float64 on the same float inputs: statistics,
/// output and all three gradients. Channels have means away from zero relative
/// to their spread, where a one-pass E[x^2] - E[x]^2 variance would cancel (the
/// last one only in the forward check: its float32 saved mean alone moves
/// x - mean by 1e-5 of the spread, in any implementation).
TEST(Accuracy, Float32BatchNormOver8192PerChannel) {
  const int64_t N = 8, C = 4, S = 1024, M = N * C * S;
  const double offset[C] = {0.25, -20.0, 60.0, 3000.0},
               spread[C] = {1.0, 0.5, 2.0, 1.0};
  Vec xd(M);
  for (int64_t k = 0; k < M; ++k) {
    const int64_t c = (k / S) % C;
    xd[k] = offset[c] + spread[c] * randVec(1, -1, 1)[0];
  }
  xd = roundToFloat(xd);
  const Vec sd = roundToFloat(randVec(C, 0.5, 1.5)),
            bd = roundToFloat(randVec(C)), dyd = roundToFloat(randVec(M));
  const std::vector<float> x = toFloat(xd), s = toFloat(sd), b = toFloat(bd),
                           dy = toFloat(dyd);
  const double eps = 1e-5;

  Vec y64(M), m64(C), v64(C), is64(C), dx64(M), ds64(C), db64(C);
  batchNormTrain(xd.data(), sd.data(), bd.data(), y64.data(), m64.data(),
                 v64.data(), is64.data(), N, C, S, eps);
  batchNormGrad(xd.data(), sd.data(), m64.data(), is64.data(), dyd.data(),
                dx64.data(), ds64.data(), db64.data(), N, C, S);

  std::vector<float> y(M), m(C), v(C), is(C), dx(M), ds(C), db(C);
  batchNormTrain(x.data(), s.data(), b.data(), y.data(), m.data(), v.data(),
                 is.data(), N, C, S, eps);
  // As the generated code does: the saved statistics are float32 tensors.
  batchNormGrad(x.data(), s.data(), m.data(), is.data(), dy.data(), dx.data(),
                ds.data(), db.data(), N, C, S);

  EXPECT_TRUE(allCloseF(m, m64, 0, 1e-6));
  EXPECT_TRUE(allCloseF(v, v64, 0, 1e-6));
  EXPECT_TRUE(allCloseF(is, is64, 0, 1e-6));
  EXPECT_LE(relDist(y, y64), 1e-5);
  EXPECT_TRUE(allCloseF(db, db64, 0, 1e-5));
  // dx and dscale of the channels whose saved float32 mean is exact enough.
  const int64_t Cg = C - 1;
  Vec dxg64, dxg;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < Cg * S; ++k) {
      dxg64.push_back(dx64[n * C * S + k]);
      dxg.push_back(dx[n * C * S + k]);
    }
  EXPECT_LE(relDist(dxg, dxg64), 1e-5);
  // dscale = sum(dy * xhat) nearly cancels; bound it by the size of its terms.
  for (int64_t c = 0; c < Cg; ++c) {
    double terms = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) {
        const int64_t i = (n * C + c) * S + k;
        terms += std::abs(dyd[i] * (xd[i] - m64[c]) * is64[c]);
      }
    EXPECT_NEAR(ds[c], ds64[c], 1e-6 * terms) << "channel " << c;
  }
}

/// LayerNorm and its gradient over rows of 65536 float32 values.
TEST(Accuracy, Float32LayerNormLongRows) {
  const int64_t outer = 4, inner = 65536, n = outer * inner;
  Vec xd = randVec(n, -1, 1);
  for (int64_t i = 0; i < n; ++i)
    xd[i] += 2.0 * double(i / inner + 1); // rows away from zero
  xd = roundToFloat(xd);
  const Vec sd = roundToFloat(randVec(inner, 0.5, 1.5)),
            bd = roundToFloat(randVec(inner)),
            dyd = roundToFloat(randVec(n, -0.5, 1.5));
  const std::vector<float> x = toFloat(xd), s = toFloat(sd), b = toFloat(bd),
                           dy = toFloat(dyd);
  Vec y64(n), m64(outer), is64(outer), dx64(n), ds64(inner), db64(inner);
  layerNorm(xd.data(), sd.data(), bd.data(), y64.data(), m64.data(),
            is64.data(), outer, inner, 1e-5);
  layerNormGrad(xd.data(), sd.data(), m64.data(), is64.data(), dyd.data(),
                dx64.data(), ds64.data(), db64.data(), outer, inner);
  std::vector<float> y(n), m(outer), is(outer), dx(n), ds(inner), db(inner);
  layerNorm(x.data(), s.data(), b.data(), y.data(), m.data(), is.data(), outer,
            inner, 1e-5);
  layerNormGrad(x.data(), s.data(), m.data(), is.data(), dy.data(), dx.data(),
                ds.data(), db.data(), outer, inner);
  EXPECT_TRUE(allCloseF(m, m64, 0, 1e-6));
  EXPECT_TRUE(allCloseF(is, is64, 0, 1e-6));
  EXPECT_LE(relDist(y, y64), 1e-5);
  EXPECT_LE(relDist(dx, dx64), 1e-5);
  EXPECT_LE(relDist(ds, ds64), 1e-5);
  EXPECT_LE(relDist(db, db64), 1e-5);
}

} // namespace

namespace {

TEST(Api, NullptrAndLiteralScalarsDeduceFromTensors) {
  // T is deduced from the tensor arguments only: nullptr for nullable
  // pointers and double literals for float scalars must compile and work.
  std::vector<float> x = {1, 2, 3, 4}, y(4), m(2), is(2), buf(4, 0.0f);
  layerNorm(x.data(), nullptr, nullptr, y.data(), nullptr, nullptr, 2, 2, 1e-5);
  EXPECT_NEAR(y[0], -1.0f, 1e-4);
  EXPECT_NEAR(y[1], 1.0f, 1e-4);
  batchNormTrain(x.data(), nullptr, nullptr, y.data(), m.data(), nullptr,
                 is.data(), 1, 2, 2, 1e-5);
  EXPECT_NEAR(m[1], 3.5f, 1e-6);
  batchNormInfer(x.data(), nullptr, nullptr, m.data(), is.data(), y.data(), 1,
                 2, 2, 0.0);
  std::vector<float> dx(4);
  batchNormGrad(x.data(), nullptr, m.data(), is.data(), x.data(), dx.data(),
                nullptr, nullptr, 1, 2, 2);
  Dims d = {4};
  int64_t pb = 1;
  std::vector<float> padded(6);
  Dims od = {6};
  pad(x.data(), d.data(), 1, &pb, 0.5, padded.data(), od.data());
  EXPECT_EQ(padded[0], 0.5f);
  EXPECT_EQ(padded[5], 0.5f);
  std::vector<float> g = {1, 1, 1, 1};
  sgdUpdate(x.data(), g.data(), nullptr, 4, 0.5, 0.0, 0.0, false, 0.0, 1,
            nullptr);
  EXPECT_EQ(x[0], 0.5f);
  sgdUpdate(x.data(), g.data(), buf.data(), 4, 0.5, 0.9, 0.0, false, 0.0, 1,
            nullptr);
  EXPECT_EQ(buf[0], 1.0f);
  std::vector<float> mm(4, 0.0f), vv(4, 0.0f);
  adamwUpdate(x.data(), g.data(), mm.data(), vv.data(), 4, 1e-3, 0.9, 0.999,
              1e-8, 0.0, 1, nullptr);
  EXPECT_NEAR(x[0], 0.0f - 1e-3f, 1e-6);
  ConvGeom cg{};
  cg.nSpatial = 1;
  cg.N = cg.C = cg.M = cg.group = 1;
  cg.in[0] = 4;
  cg.kernel[0] = cg.stride[0] = cg.dilation[0] = 1;
  cg.out[0] = 4;
  std::vector<float> w = {2.0f}, cy(4);
  convForward(g.data(), w.data(), nullptr, cy.data(), cg);
  EXPECT_EQ(cy[3], 2.0f);
}

} // namespace
