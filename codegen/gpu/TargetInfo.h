//===- TargetInfo.h - The one seam between the GPU emitter and a vendor -*- C++ -*-===//
//
// Everything the shared GPU emitter (GpuEmitter.cpp) and the shared kernel library
// (kernels/gpu/ortc_gpu_kernels.h) need to know about a vendor lives here: warp/wavefront
// size, the prelude of every generated file (headers, and the macros the library is
// written against: ORTC_WARP_SIZE, ORTC_SHFL_DOWN, ORTC_SHFL_XOR, ORTC_BARRIER,
// ORTC_LAUNCH_BOUNDS, ortcStream_t, ORTC_MEMCPY_ASYNC, ORTC_MEMSET_ASYNC,
// ORTC_SYMBOL_ADDRESS, and optionally ORTC_VENDOR_GEMM), the file extension, the
// valid --arch values and the compiler commands. codegen/cuda/CudaTarget.cpp and
// codegen/hip/HipTarget.cpp each fill one of these.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_CODEGEN_GPU_TARGETINFO_H
#define ORTC_CODEGEN_GPU_TARGETINFO_H

#include <string>
#include <vector>

namespace ortc {

/// What one launch may ask of an arch: the vendor's documented hardware limits.
/// The prelude writes them into every generated file (ortc_gpu_launch_limits), where
/// the emulated device (test/gpu/emu) enforces them.
struct LaunchLimits {
  std::string arch;
  unsigned threadsPerBlock;
  unsigned grid[3];           ///< x, y, z
  unsigned staticShared;      ///< bytes of __shared__ per block without opt-in
  unsigned dynamicShared;     ///< bytes per block with the opt-in (all of LDS on AMD)
  unsigned warpSize = 0;      ///< lanes the code for this arch is compiled for; 0: the target's
};

struct TargetInfo {
  std::string name;          ///< the --target value: "cuda" or "rocm"
  std::string displayName;   ///< "CUDA", "ROCm/HIP"
  unsigned warpSize = 32;    ///< 32 (NVIDIA warp) or 64 (CDNA wavefront); per arch: launchLimits
  /// The macro the device compiler defines while compiling for an arch, "%s" standing
  /// for the arch ("__%s__": __gfx1100__); how the prelude picks a per-arch warp size.
  std::string archMacro;
  std::string includes;      ///< #include lines of the generated file
  std::string shuffleDown;   ///< spelling of a shuffle-down of (v, offset): macro body
  std::string shuffleXor;    ///< spelling of a butterfly shuffle of (v, mask)
  std::string barrier;       ///< block-wide barrier
  std::string launchBounds;  ///< spelling of launch bounds for (n) threads
  std::string runtimeApi;    ///< #defines mapping ortcStream_t / async copies / symbols
  std::string vendorCode;    ///< extra vendor code (cuBLASLt GEMM); defines ORTC_VENDOR_GEMM
  std::string fileExtension; ///< ".cu" / ".hip"
  std::string deviceObject;  ///< the device object file in the artifact
  std::vector<std::string> validArchs, defaultArchs;
  /// Launch limits of every valid arch (and the archs a device may report beyond them).
  std::vector<LaunchLimits> launchLimits;
  /// The portable code (PTX) embedded beside the machine code of `archs`, so that a
  /// newer GPU can compile it when loading (a "compute_NN" entry the commands build
  /// as such), or "" where the target has none.
  std::string (*portableArch)(const std::vector<std::string> &archs) = nullptr;
  /// Archs the vendor has but this build refuses, with the reason.
  std::vector<std::pair<std::string, std::string>> refusedArchs;
  /// The device compiler: $<compilerEnv> if set, else compilerDefault (a path, or
  /// a name looked up in PATH); installHint says how to get it.
  std::string compilerEnv, compilerDefault, installHint;
  /// Shell commands (run in order in `dir`) that compile `dir/kernels<ext>` with
  /// `compiler` into `dir/<deviceObject>` and the host shared object `dir/kernels.so`.
  std::vector<std::string> (*commands)(const std::string &compiler,
                                       const std::vector<std::string> &archs,
                                       const std::string &dir) = nullptr;

  /// The prelude of a generated file: includes and the seam macros.
  std::string prelude() const;
  /// "64", or "64; 32 on gfx1100, gfx1201" where some archs differ: for comments.
  std::string warpSizeText() const;
  /// Empty `archs` -> defaultArchs, then (unless noPortable) the portable arch
  /// appended. Fails with a message listing the valid archs.
  bool resolveArchs(std::vector<std::string> &archs, bool noPortable, std::string &error) const;
  /// The device compiler's path, or "" with `error` naming what is missing.
  std::string findCompiler(std::string &error) const;
};

/// The NVIDIA target (codegen/cuda/CudaTarget.cpp).
const TargetInfo &cudaTarget();
/// The AMD target (codegen/hip/HipTarget.cpp).
const TargetInfo &rocmTarget();
/// "cuda" / "rocm" -> the target, else null.
/// `name` if it holds a '/' and is executable, else the first executable `name`
/// in $PATH; "" if none.
std::string findExecutable(const std::string &name);

const TargetInfo *gpuTargetByName(const std::string &name);

} // namespace ortc

#endif // ORTC_CODEGEN_GPU_TARGETINFO_H
