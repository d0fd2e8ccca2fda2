//===- cpu_features.h - x86-64 instruction-set levels of a CPU --*- C++ -*-===//
//
// Why this exists: the CPU target compiles its kernels for one explicit level
// (`ortc build --cpu x86-64-v2|v3|v4|native`) and the runtime must refuse a
// CPU that lacks it with a message naming both, instead of dying of SIGILL in
// the first kernel. The compiler (which records what `native` meant on the
// build machine) and the runtime (which checks it) share these definitions.
// Flags use the names of /proc/cpuinfo.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_CPU_FEATURES_H
#define ORTC_CPU_FEATURES_H

#include <set>
#include <string>
#include <vector>

namespace ortc {

/// The levels `ortc build --cpu` accepts besides "native", lowest first.
const std::vector<std::string> &cpuLevels();

/// The CPU flags a level requires (empty for an unknown level).
std::vector<std::string> cpuLevelFlags(const std::string &level);

/// This CPU's flags, as /proc/cpuinfo lists them (empty where unreadable).
std::set<std::string> hostCpuFlags();

/// This CPU's model name, e.g. "AMD EPYC 7B13" ("unknown CPU" if unreadable).
std::string hostCpuName();

/// The highest level of cpuLevels() this CPU runs ("x86-64" if none).
std::string hostCpuLevel();

/// Physical cores this process may run on (hyperthread siblings counted once);
/// at least 1.
int hostPhysicalCores();

/// The instruction-set extensions of this CPU that `-march=native` code may use:
/// what a `native` artifact records and the runtime then requires.
std::vector<std::string> hostNativeFeatures();

/// Empty when this CPU runs kernels built for `arch` (a level, or "native"
/// with the recorded `features`); otherwise a sentence naming the artifact's
/// level, this CPU and what it lacks.
std::string cpuMismatch(const std::string &arch, const std::vector<std::string> &features);

} // namespace ortc

#endif // ORTC_CPU_FEATURES_H
