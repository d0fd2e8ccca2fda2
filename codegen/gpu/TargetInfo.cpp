//===- TargetInfo.cpp - Shared parts of the GPU target seam ---------------===//
//
// The file prelude every generated CUDA/HIP file starts with, --arch checking and
// finding the device compiler, written once for both vendors.
//
//===----------------------------------------------------------------------===//
#include "codegen/gpu/TargetInfo.h"

#include <algorithm>

#include <cstdlib>
#include <sstream>
#include <unistd.h>

namespace ortc {

std::string TargetInfo::prelude() const {
  std::string s = "// Target: " + displayName + " (warp size " + std::to_string(warpSize) + ")\n";
  s += includes;
  s += "#define ORTC_WARP_SIZE " + std::to_string(warpSize) + "\n";
  s += "#define ORTC_SHFL_DOWN(v, o) " + shuffleDown + "\n";
  s += "#define ORTC_SHFL_XOR(v, m) " + shuffleXor + "\n";
  s += "#define ORTC_BARRIER() " + barrier + "\n";
  s += "#define ORTC_LAUNCH_BOUNDS(n) " + launchBounds + "\n";
  s += runtimeApi;
  s += vendorCode;
  s += "\n/// Launch limits per arch (codegen/gpu/TargetInfo): arch, threads per block, grid x/y/z,\n"
       "/// static and opt-in shared memory per block. The emulated device enforces them.\n"
       "struct ortcLaunchLimits {\n  const char *arch;\n  unsigned threadsPerBlock, gridX, gridY, gridZ, "
       "staticShared, dynamicShared;\n};\n"
       "extern \"C\" const ortcLaunchLimits ortc_gpu_launch_limits[] = {\n";
  for (const LaunchLimits &l : launchLimits)
    s += "    {\"" + l.arch + "\", " + std::to_string(l.threadsPerBlock) + ", " + std::to_string(l.grid[0]) + "u, " +
         std::to_string(l.grid[1]) + "u, " + std::to_string(l.grid[2]) + "u, " + std::to_string(l.staticShared) +
         ", " + std::to_string(l.dynamicShared) + "},\n";
  s += "    {nullptr, 0, 0, 0, 0, 0, 0}};\n";
  return s;
}

bool TargetInfo::resolveArchs(std::vector<std::string> &archs, bool noPortable, std::string &error) const {
  if (archs.empty())
    archs = defaultArchs;
  std::string valid;
  for (const std::string &a : validArchs)
    valid += (valid.empty() ? "" : ", ") + a;
  for (const std::string &a : archs) {
    bool ok = false;
    for (const std::string &v : validArchs)
      ok |= v == a;
    if (ok)
      continue;
    for (const auto &[name, why] : refusedArchs)
      if (name == a) {
        error = "--arch " + a + " is not supported for --target " + this->name + ": " + why +
                " (valid: " + valid + ")";
        return false;
      }
    error = "unknown --arch '" + a + "' for --target " + this->name + " (valid: " + valid + ")";
    return false;
  }
  std::vector<std::string> unique;
  for (const std::string &a : archs)
    if (std::find(unique.begin(), unique.end(), a) == unique.end())
      unique.push_back(a);
  archs = unique;
  if (portableArch && !noPortable)
    archs.push_back(portableArch(archs));
  return true;
}

std::string TargetInfo::findCompiler(std::string &error) const {
  const char *env = std::getenv(compilerEnv.c_str());
  std::string c = env && *env ? env : compilerDefault;
  if (c.find('/') != std::string::npos) {
    if (access(c.c_str(), X_OK) == 0)
      return c;
  } else if (const char *path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');)
      if (!d.empty() && access((d + "/" + c).c_str(), X_OK) == 0)
        return d + "/" + c;
  }
  error = "--target " + name + " needs " + c + ", which was not found" +
          (env && *env ? " ($" + compilerEnv + ")" : "") + ": " + installHint +
          " (or set " + compilerEnv + " to the compiler)";
  return "";
}

const TargetInfo *gpuTargetByName(const std::string &name) {
  if (name == "cuda")
    return &cudaTarget();
  if (name == "rocm" || name == "hip")
    return &rocmTarget();
  return nullptr;
}

} // namespace ortc
