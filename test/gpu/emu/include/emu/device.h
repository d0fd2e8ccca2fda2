//===- device.h - The emulated GPU as the kernel source sees it -*- C++ -*-===//
//
// Why: no machine of this project has a GPU, yet the generated CUDA/HIP code and
// the GPU kernel library must run in CI. This header (pulled in by the emulator's
// cuda_runtime.h / hip/hip_runtime.h) gives the host C++ compiler the device
// dialect the generated file is written in: the function and variable qualifiers,
// the index builtins, shuffles, votes, atomics and the launch that the emulator's
// compiler driver (emu_cc.py) rewrites `k<<<g, b, s, st>>>(args)` into. The
// machinery behind it (cooperative threads, streams, checks) is runtime.cpp.
//
// EMU_WARP_SIZE (32 for the CUDA front, 64 for HIP) is set by the front header.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_EMU_DEVICE_H
#define ORTC_EMU_DEVICE_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#if !defined(EMU_WARP_SIZE) || !defined(EMU_HIP_FRONT)
#error "include cuda_runtime.h or hip/hip_runtime.h of the emulator"
#endif

// Qualifiers: every function runs on the host; __shared__ arrays live in one
// section (one copy, valid because blocks run one at a time) so that the checks
// can tell a shared access from any other and find its array.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ __attribute__((section("emu_shared"), aligned(EMU_SHARED_ALIGN))) static
/// Shared arrays are this far apart, so a small overflow lands in no array.
#define EMU_SHARED_ALIGN 1024

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

namespace emu {

struct Stream; ///< a stream of the emulated device (runtime.cpp)

/// The emulated thread now running (null on the host).
struct Thread {
  uint3 threadIdx, blockIdx;
  dim3 blockDim, gridDim;
};
extern "C" Thread *emu_current;

/// One kernel launch as the source wrote it; the body runs once per thread.
struct Launch {
  const char *kernel;          ///< the callee's spelling at the launch site
  const char *file;
  int line;
  dim3 grid, block;
  size_t dynamicShared;
  int warpSize;                ///< the front's: 32 (CUDA), 64 (HIP on CDNA) or 32 (HIP on RDNA)
  bool hip;                    ///< the HIP front (its device names a gfx arch)
  void (*invoke)(void *call);  ///< runs the kernel on `call` (one thread's body)
  std::shared_ptr<void> call;  ///< the kernel and its arguments, evaluated once at the launch
  size_t callSize;             ///< its bytes (readable by the kernel, never written)
  const void *module;          ///< an address inside the object the kernel is in
};
/// Enqueues on `stream` (or records into the graph it is capturing). Bad launch
/// configurations become the stream's sticky error, naming the kernel.
extern "C" void emu_submit(Stream *stream, Launch *launch);

namespace {
const char moduleAnchor = 0;
}

/// A kernel bound to its arguments. `f` is the launch site's captureless generic
/// lambda `[](auto... p) { kernel(p...); }`, which deduces the kernel's template
/// arguments from the argument types as the device compiler would.
template <typename... P> struct Call {
  void (*fn)(P...);
  std::tuple<P...> args;
  static void invoke(void *c) {
    auto *k = static_cast<Call *>(c);
    std::apply(k->fn, k->args);
  }
};

template <typename F, typename... A>
inline void launch(const char *kernel, const char *file, int line, dim3 grid, dim3 block, size_t shared,
                   Stream *stream, F f, A &&...a) {
  using C = Call<std::decay_t<A>...>;
  auto call = std::make_shared<C>(C{f, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)});
  Launch l{kernel, file, line, grid, block, shared, EMU_WARP_SIZE, EMU_HIP_FRONT, &C::invoke, call, sizeof(C),
           &moduleAnchor};
  emu_submit(stream, &l);
}

// Warp-collective operations: every lane of the warp named by `mask` meets here,
// then each gets its result (runtime.cpp). Values travel as their bits.
enum WarpOp { ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp };
extern "C" uint64_t emu_warp(int op, uint64_t bits, int size, int arg, int width, uint64_t mask);
extern "C" void emu_syncthreads();
extern "C" void emu_threadfence();

template <typename T> inline T shuffle(int op, uint64_t mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = emu_warp(op, bits, sizeof(T), arg, width, mask);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

// Atomics live in runtime.cpp: not instrumented, so the race check exempts them.
extern "C" float emu_atomic_add_f32(float *p, float v);
extern "C" double emu_atomic_add_f64(double *p, double v);
extern "C" long long emu_atomic_rmw_i64(long long *p, long long v, int op, int size);
enum AtomicOp { AtomAdd, AtomMax, AtomMin, AtomExch, AtomOr, AtomAnd };

// The load/store tracing callbacks (-fsanitize-coverage=trace-loads,trace-stores)
// of the kernel's own object: a flag test inline, the checks in runtime.cpp only
// while a checked launch runs.
extern "C" bool emu_checking;
extern "C" void emu_access(const void *p, size_t bytes, bool write);

} // namespace emu

#if EMU_WARP_SIZE // in the kernels' object only, not in runtime.cpp
#define EMU_TRACE(kind, n, T, write)                                                             \
  extern "C" __attribute__((weak, visibility("hidden"), no_sanitize("coverage"))) void           \
      __sanitizer_cov_##kind##n(T *p) {                                                          \
    if (__builtin_expect(::emu::emu_checking, 0))                                                \
      ::emu::emu_access(p, n, write);                                                            \
  }
EMU_TRACE(load, 1, uint8_t, false)
EMU_TRACE(load, 2, uint16_t, false)
EMU_TRACE(load, 4, uint32_t, false)
EMU_TRACE(load, 8, uint64_t, false)
EMU_TRACE(load, 16, __int128, false)
EMU_TRACE(store, 1, uint8_t, true)
EMU_TRACE(store, 2, uint16_t, true)
EMU_TRACE(store, 4, uint32_t, true)
EMU_TRACE(store, 8, uint64_t, true)
EMU_TRACE(store, 16, __int128, true)
#undef EMU_TRACE
#endif

#define threadIdx (::emu::emu_current->threadIdx)
#define blockIdx (::emu::emu_current->blockIdx)
#define blockDim (::emu::emu_current->blockDim)
#define gridDim (::emu::emu_current->gridDim)

inline void __syncthreads() { emu::emu_syncthreads(); }
inline void __threadfence() { emu::emu_threadfence(); }
inline void __threadfence_block() { emu::emu_threadfence(); }

inline float atomicAdd(float *p, float v) { return emu::emu_atomic_add_f32(p, v); }
inline double atomicAdd(double *p, double v) { return emu::emu_atomic_add_f64(p, v); }
template <typename T, typename = std::enable_if_t<std::is_integral<T>::value>>
inline T emuAtomic(T *p, T v, int op) {
  return static_cast<T>(emu::emu_atomic_rmw_i64(reinterpret_cast<long long *>(p), static_cast<long long>(v), op,
                                                 static_cast<int>(sizeof(T)) * (std::is_signed<T>::value ? 1 : -1)));
}
inline int atomicAdd(int *p, int v) { return emuAtomic(p, v, emu::AtomAdd); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return emuAtomic(p, v, emu::AtomAdd); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return emuAtomic(p, v, emu::AtomAdd);
}
inline int atomicMax(int *p, int v) { return emuAtomic(p, v, emu::AtomMax); }
inline int atomicMin(int *p, int v) { return emuAtomic(p, v, emu::AtomMin); }
inline int atomicExch(int *p, int v) { return emuAtomic(p, v, emu::AtomExch); }
inline unsigned atomicExch(unsigned *p, unsigned v) { return emuAtomic(p, v, emu::AtomExch); }
inline int atomicOr(int *p, int v) { return emuAtomic(p, v, emu::AtomOr); }
inline unsigned atomicOr(unsigned *p, unsigned v) { return emuAtomic(p, v, emu::AtomOr); }
inline int atomicAnd(int *p, int v) { return emuAtomic(p, v, emu::AtomAnd); }

// Bit casts and fast math as the device spells them.
inline int __float_as_int(float v) { int r; std::memcpy(&r, &v, 4); return r; }
inline unsigned __float_as_uint(float v) { unsigned r; std::memcpy(&r, &v, 4); return r; }
inline float __int_as_float(int v) { float r; std::memcpy(&r, &v, 4); return r; }
inline float __uint_as_float(unsigned v) { float r; std::memcpy(&r, &v, 4); return r; }
inline long long __double_as_longlong(double v) { long long r; std::memcpy(&r, &v, 8); return r; }
inline double __longlong_as_double(long long v) { double r; std::memcpy(&r, &v, 8); return r; }
inline float __expf(float v) { return std::exp(v); }
inline float __logf(float v) { return std::log(v); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline double rsqrt(double v) { return 1.0 / std::sqrt(v); }
template <typename T> inline T __ldg(const T *p) { return *p; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }
using std::exp; using std::log; using std::sqrt; using std::tanh; using std::erf; using std::pow; using std::fabs;

#endif // ORTC_EMU_DEVICE_H
