//===- TargetInfo.cpp - Shared parts of the GPU target seam ---------------===//
//
// The file prelude every generated CUDA/HIP file starts with, --arch checking and
// finding the device compiler, written once for both vendors.
//
//===----------------------------------------------------------------------===//
#include "codegen/gpu/TargetInfo.h"

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <unistd.h>

namespace ortc {

std::string TargetInfo::warpSizeText() const {
  std::map<unsigned, std::string> others;
  for (const LaunchLimits &l : launchLimits)
    if (l.warpSize && l.warpSize != warpSize)
      others[l.warpSize] += (others[l.warpSize].empty() ? "" : ", ") + l.arch;
  std::string s = std::to_string(warpSize);
  for (const auto &[size, archs] : others)
    s += "; " + std::to_string(size) + " on " + archs;
  return s;
}

std::string TargetInfo::prelude() const {
  std::string s = "// Target: " + displayName + " (warp size " + warpSizeText() + ")\n";
  // The warp size of the arch being compiled (the device compiler defines archMacro
  // for it); the host pass sees the target's.
  std::map<unsigned, std::string> cond;
  for (const LaunchLimits &l : launchLimits)
    if (l.warpSize && l.warpSize != warpSize) {
      char macro[64];
      std::snprintf(macro, sizeof macro, archMacro.c_str(), l.arch.c_str());
      cond[l.warpSize] += std::string(cond[l.warpSize].empty() ? "" : " || ") + "defined(" + macro + ")";
    }
  std::string head = "#if";
  for (const auto &[size, test] : cond) {
    s += head + " " + test + "\n#define ORTC_WARP_SIZE " + std::to_string(size) + "\n";
    head = "#elif";
  }
  s += cond.empty() ? "#define ORTC_WARP_SIZE " + std::to_string(warpSize) + "\n"
                    : "#else\n#define ORTC_WARP_SIZE " + std::to_string(warpSize) + "\n#endif\n";
  s += includes;
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

std::string findExecutable(const std::string &c) {
  if (c.find('/') != std::string::npos)
    return access(c.c_str(), X_OK) == 0 ? c : "";
  if (const char *path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');)
      if (!d.empty() && access((d + "/" + c).c_str(), X_OK) == 0)
        return d + "/" + c;
  }
  return "";
}

std::string TargetInfo::findCompiler(std::string &error) const {
  const char *env = std::getenv(compilerEnv.c_str());
  std::string c = env && *env ? env : compilerDefault;
  if (std::string found = findExecutable(c); !found.empty())
    return found;
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
