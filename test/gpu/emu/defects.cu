// Why: the emulator's checks are only worth something if they fire. Each case here is a
// kernel with one planted defect of the kind that passes on a CPU and fails on the first
// GPU a user owns; test_emu.py's EmulatorChecks runs each (`defects CASE`) on the
// emulated device and asserts that the run fails with the emulator's report (or, for the
// defects whose symptom is a wrong value, with this program's own comparison). Every case
// also has a correct twin ("CASE-ok") that must pass, so a check that fires on everything
// does not count. Built like a generated file: the target's prelude (ortc-gpu-prelude
// cuda|rocm) then this file, compiled by emu_cc.py.
#define API(x) ORTC_API(x)
#include "ortc/kernel_abi.h"
#include <cmath>
#include <dlfcn.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// --- A block sum through shared memory: with and without the barrier. ---
__global__ void blockSum(const float *x, float *out, int n, bool barrier) {
  __shared__ float buf[256];
  buf[threadIdx.x] = threadIdx.x < n ? x[threadIdx.x] : 0.0f;
  if (barrier)
    __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (int i = 0; i < 256; ++i)
      s += buf[i];
    *out = s;
  }
}

// --- An elementwise kernel whose bound is off by one. ---
__global__ void scale(const float *x, float *y, int n, int extra) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n + extra)
    y[i] = 2.0f * x[i];
}

// --- A warp reduction written for a fixed lane count. ---
template <int Lanes> __global__ void warpSum(const float *x, float *out) {
  float v = x[threadIdx.x];
  for (int o = Lanes / 2; o > 0; o >>= 1)
    v += ORTC_SHFL_DOWN(v, o);
  if (threadIdx.x == 0)
    *out = v;
}

// --- Every thread stores to the same word (no atomics). ---
__global__ void lastWins(float *out, bool atomic) {
  if (atomic)
    atomicAdd(out, 1.0f);
  else
    *out = static_cast<float>(threadIdx.x);
}

// --- Shared memory over the arch's static limit (48 KiB NVIDIA, 64 KiB CDNA). ---
template <int Words> __global__ void bigShared(float *out) {
  __shared__ float big[Words];
  for (int i = threadIdx.x; i < Words; i += blockDim.x)
    big[i] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0)
    *out = big[Words - 1];
}

// --- A grid as tall as the arch allows (or one more). ---
__global__ void lastRow(float *y) {
  if (blockIdx.y == gridDim.y - 1)
    *y = 1.0f;
}

__global__ void fill(float *y, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = v;
}

static int check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "defects: %s\n", what);
    return 1;
  }
  return 0;
}

/// Synchronises and reports the emulator's error, as the runtime does.
static int sync(API(Stream_t) s) {
  auto e = API(StreamSynchronize)(s);
  if (e != API(Success)) {
    std::fprintf(stderr, "defects: %s\n", API(GetErrorString)(e));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  const std::string c = argv[1];
  API(Stream_t) s;
  API(StreamCreateWithFlags)(&s, API(StreamNonBlocking));
  const int n = 256;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i)
    host[i] = static_cast<float>(i % 7);
  float *x, *y;
  API(Malloc)((void **)&x, n * sizeof(float));
  API(Malloc)((void **)&y, n * sizeof(float));
  API(MemcpyAsync)(x, host.data(), n * sizeof(float), API(MemcpyHostToDevice), s);
  float want = 0;
  for (float v : host)
    want += v;
  float got = 0;

  if (c == "barrier" || c == "barrier-ok") {
    blockSum<<<1, 256, 0, s>>>(x, y, n, c == "barrier-ok");
  } else if (c == "off-by-one" || c == "off-by-one-ok") {
    scale<<<2, 256, 0, s>>>(x, y, n, c == "off-by-one" ? 1 : 0);
  } else if (c == "warp32" || c == "warp-native") {
    // Lane count 32 on a 64-lane wavefront sums two halves into lane 0 wrongly.
    if (c == "warp32")
      warpSum<32><<<1, warpSize, 0, s>>>(x, y);
    else
      warpSum<warpSize><<<1, warpSize, 0, s>>>(x, y);
    want = 0;
    for (int i = 0; i < warpSize; ++i)
      want += host[i];
  } else if (c == "global-race" || c == "global-race-ok") {
    API(MemsetAsync)(y, 0, sizeof(float), s);
    lastWins<<<1, 64, 0, s>>>(y, c == "global-race-ok");
  } else if (c == "grid-y" || c == "grid-y-ok") {
    lastRow<<<dim3(1, c == "grid-y" ? 70000 : 65535), 1, 0, s>>>(y);
  } else if (c == "shared-limit" || c == "shared-limit-ok") {
    if (c == "shared-limit") // 80000 bytes
      bigShared<20000><<<1, 256, 0, s>>>(y);
    else
      bigShared<4000><<<1, 256, 0, s>>>(y);
  } else if (c == "operand-overrun" || c == "operand-overrun-ok") {
    // An arena holding a launch's two operands with other data between and after them,
    // named as the runtime names them: the off-by-one stays inside the allocation.
    float *arena;
    API(Malloc)((void **)&arena, 4 * n * sizeof(float));
    API(MemcpyAsync)(arena, host.data(), n * sizeof(float), API(MemcpyHostToDevice), s);
    void *ptrs[] = {arena, arena + 2 * n};
    const unsigned long long bytes[] = {n * sizeof(float), n * sizeof(float)};
    auto operands = reinterpret_cast<ortc_launch_operands_fn>(dlsym(RTLD_DEFAULT, "ortc_launch_operands"));
    if (check(operands != nullptr, "the device has no ortc_launch_operands"))
      return 1;
    operands("ortc_scale_test", "/layer/Mul", 2, ptrs, bytes);
    scale<<<2, 256, 0, s>>>(arena, arena + 2 * n, n, c == "operand-overrun" ? 1 : 0);
    operands("ortc_scale_test", "/layer/Mul", 0, nullptr, nullptr);
  } else if (c == "missing-sync" || c == "missing-sync-ok") {
    fill<<<1, 256, 0, s>>>(y, n, 3.0f);
    API(MemcpyAsync)(&got, y, sizeof(float), API(MemcpyDeviceToHost), s);
    if (c == "missing-sync-ok" && sync(s))
      return 1;
    int bad = check(got == 3.0f, ("the host read " + std::to_string(got) + " before the copy was done").c_str());
    return bad | sync(s);
  } else {
    return 2;
  }
  if (sync(s))
    return 1;
  API(MemcpyAsync)(&got, y, sizeof(float), API(MemcpyDeviceToHost), s);
  if (sync(s))
    return 1;
  if (c.rfind("barrier", 0) == 0 || c.rfind("warp", 0) == 0)
    return check(got == want, ("sum " + std::to_string(got) + ", want " + std::to_string(want)).c_str());
  return 0;
}
