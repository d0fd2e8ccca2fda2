// Times ortc's GEMM kernel alone (ortc::kern::gemm, the call generated CPU code makes),
// for bench_cpu.py's per-op table: the train-step measurement there also counts the
// step's other work. Built with the flags of an artifact's kernels.so.
//
// Usage: gemm_kernel N WARMUP STEPS; prints {"NN": ms, "NT": ms, "TN": ms} (medians).
#include "ortc_kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: gemm_kernel N WARMUP STEPS\n");
    return 2;
  }
  const int64_t n = std::atoll(argv[1]);
  const int warmup = std::atoi(argv[2]), steps = std::atoi(argv[3]);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
    b[i] = float((i * 104729) % 1000) * 1e-3f - 0.5f;
  }
  std::printf("{");
  const char *names[] = {"NN", "NT", "TN"};
  for (int k = 0; k < 3; ++k) {
    const bool ta = k == 2, tb = k == 1;
    std::vector<double> ms;
    for (int s = 0; s < warmup + steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      ortc::kern::gemm(ta, tb, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      auto t1 = std::chrono::steady_clock::now();
      if (s >= warmup)
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s\"%s\": %.4f", k ? ", " : "", names[k], ms[ms.size() / 2]);
  }
  std::printf("}\n");
  return 0;
}
