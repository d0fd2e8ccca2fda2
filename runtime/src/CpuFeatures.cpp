//===- CpuFeatures.cpp - x86-64 instruction-set levels of a CPU -----------===//
//
// Reads /proc/cpuinfo once. The level definitions are those of the x86-64 psABI
// (the same that GCC's -march=x86-64-vN enables).
//
//===----------------------------------------------------------------------===//
#include "ortc/cpu_features.h"

#include <sched.h>

#include <algorithm>
#include <thread>
#include <fstream>
#include <sstream>

namespace ortc {
namespace {

struct CpuInfo {
  std::set<std::string> flags;
  std::string name = "unknown CPU";
};

const CpuInfo &cpuInfo() {
  static const CpuInfo info = [] {
    CpuInfo c;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    bool haveFlags = false, haveName = false;
    while (std::getline(in, line) && !(haveFlags && haveName)) {
      size_t colon = line.find(':');
      if (colon == std::string::npos)
        continue;
      std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
      std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      if (key == "flags" && !haveFlags) {
        std::istringstream ss(value);
        std::string f;
        while (ss >> f)
          c.flags.insert(f);
        haveFlags = true;
      } else if (key == "model name" && !haveName && !value.empty()) {
        c.name = value;
        haveName = true;
      }
    }
    return c;
  }();
  return info;
}

std::string join(const std::vector<std::string> &v) {
  std::string s;
  for (const std::string &x : v)
    s += (s.empty() ? "" : " ") + x;
  return s;
}

} // namespace

const std::vector<std::string> &cpuLevels() {
  static const std::vector<std::string> levels = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};
  return levels;
}

std::vector<std::string> cpuLevelFlags(const std::string &level) {
  // Each level includes the ones below it. lzcnt shows as "abm" in cpuinfo.
  static const std::vector<std::vector<std::string>> added = {
      {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"},
      {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
      {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}};
  const std::vector<std::string> &levels = cpuLevels();
  auto it = std::find(levels.begin(), levels.end(), level);
  if (it == levels.end())
    return {};
  std::vector<std::string> flags;
  for (size_t i = 0; i <= size_t(it - levels.begin()); ++i)
    flags.insert(flags.end(), added[i].begin(), added[i].end());
  return flags;
}

std::set<std::string> hostCpuFlags() { return cpuInfo().flags; }

std::string hostCpuName() { return cpuInfo().name; }

std::string hostCpuLevel() {
  std::string best = "x86-64";
  for (const std::string &level : cpuLevels()) {
    std::vector<std::string> need = cpuLevelFlags(level);
    if (!std::all_of(need.begin(), need.end(),
                     [](const std::string &f) { return cpuInfo().flags.count(f); }))
      break;
    best = level;
  }
  return best;
}

int hostPhysicalCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return std::max(1u, std::thread::hardware_concurrency());
  std::set<std::pair<std::string, std::string>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set))
      continue;
    std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::string package, core;
    std::ifstream(dir + "physical_package_id") >> package;
    std::ifstream(dir + "core_id") >> core;
    if (package.empty() || core.empty())
      return std::max(1, CPU_COUNT(&set)); // no topology: count CPUs
    cores.insert({package, core});
  }
  return std::max<int>(1, int(cores.size()));
}

std::vector<std::string> hostNativeFeatures() {
  // What GCC's -march=native can turn on beyond x86-64 that changes the code it
  // emits (vector and bit-manipulation extensions).
  static const char *const known[] = {
      "sse3", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm", "movbe", "xsave",
      "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "adx", "aes", "pclmulqdq",
      "sha_ni", "vaes", "vpclmulqdq", "gfni", "avx_vnni", "avx512f", "avx512bw",
      "avx512cd", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vbmi2",
      "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "avx512_bf16", "avx512_fp16",
      "amx_tile", "amx_bf16", "amx_int8"};
  std::vector<std::string> have;
  for (const char *f : known)
    if (cpuInfo().flags.count(f))
      have.push_back(f);
  return have;
}

std::string cpuMismatch(const std::string &arch, const std::vector<std::string> &features) {
  std::vector<std::string> need;
  if (arch == "native") {
    need = features;
  } else if (arch == "x86-64" || arch == "x86-64-v1") {
    return "";
  } else {
    need = cpuLevelFlags(arch);
    if (need.empty())
      return "the kernels were compiled for '" + arch + "', which this runtime cannot run";
  }
  std::vector<std::string> missing;
  for (const std::string &f : need)
    if (!cpuInfo().flags.count(f))
      missing.push_back(f);
  if (missing.empty())
    return "";
  return "the kernels were compiled for " +
         (arch == "native" ? std::string("the build machine's CPU (--cpu native)") : arch) +
         ", which this CPU (" + cpuInfo().name + ", " + hostCpuLevel() +
         ") does not support: it lacks " + join(missing) + "; rebuild with --cpu " +
         hostCpuLevel();
}

} // namespace ortc
