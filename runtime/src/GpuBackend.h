//===- GpuBackend.h - The runtime's view of a GPU artifact ------*- C++ -*-===//
//
// Why: the runtime must build and run on machines with no GPU SDK, so it links no
// vendor library. A CUDA or ROCm artifact's kernels.so carries the device API the
// runtime needs (the glue at the end of ortc_gpu_kernels.h: allocation, copies,
// streams, graph capture), statically linked to the CUDA runtime (which loads the
// driver when first used) or dynamically to libamdhip64; the runtime reaches it
// with dlsym. This header is that interface and the arch compatibility rule.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_GPUBACKEND_H
#define ORTC_RUNTIME_GPUBACKEND_H

#include <cstddef>
#include <string>
#include <vector>

namespace ortc {

struct GpuApi {
  const char *(*error)() = nullptr;
  int (*init)(char *arch, int archLen) = nullptr;
  int (*malloc)(void **p, size_t bytes) = nullptr;
  void (*free)(void *p) = nullptr;
  int (*upload)(void *dst, const void *src, size_t bytes, void *stream) = nullptr;
  int (*download)(void *dst, const void *src, size_t bytes, void *stream) = nullptr;
  int (*memset)(void *dst, int v, size_t bytes, void *stream) = nullptr;
  int (*streamCreate)(void **stream) = nullptr;
  void (*streamDestroy)(void *stream) = nullptr;
  int (*sync)(void *stream) = nullptr;
  int (*captureBegin)(void *stream) = nullptr;
  int (*captureEnd)(void *stream, void **exec) = nullptr;
  int (*graphLaunch)(void *exec, void *stream) = nullptr;
  void (*graphDestroy)(void *exec) = nullptr;

  /// Resolves every entry point from `handle`; false with the missing symbol named.
  bool resolve(void *handle, std::string &missing);
  /// The last error of the GPU glue as text.
  std::string lastError() const { return error ? error() : "unknown GPU error"; }
};

/// Whether code built for `built` runs on a device of arch `device`. CUDA: cubins for
/// sm_XY run on sm_XZ with Z >= Y (same major), PTX compute_XY on any sm at or after
/// XY (the driver compiles it); ROCm: the gfx names must be equal.
bool gpuArchRuns(const std::string &target, const std::string &built, const std::string &device);

/// The vendor name of a GPU target for messages ("an NVIDIA GPU", "an AMD GPU").
std::string gpuKind(const std::string &target);

} // namespace ortc

#endif // ORTC_RUNTIME_GPUBACKEND_H
