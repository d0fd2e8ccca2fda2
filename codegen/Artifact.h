//===- Artifact.h - Persistent tensors and the model.ortc folder -*- C++ -*-===//
//
// Shared by every target: the table of persistent tensors (inputs, scalars,
// parameters, buffers, optimizer state, constants, outputs) that the runtime
// allocates and the kernels address by index, and the writer of the artifact folder.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_CODEGEN_ARTIFACT_H
#define ORTC_CODEGEN_ARTIFACT_H

#include "compiler/Import/OnnxImporter.h"

#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ortc {

struct TensorInfo {
  std::string name, role, dtype;
  std::vector<int64_t> shape;
  const WeightData *init = nullptr; ///< initial value; null: zero-filled
};

/// The persistent tensors of a planned module, in manifest order.
class TensorTable {
public:
  /// Collects the tensors of @train_step and @eval_step; fails with a message on
  /// inconsistent names.
  static mlir::FailureOr<TensorTable> build(mlir::ModuleOp module,
                                            const WeightStore &weights,
                                            std::string &error);
  const std::vector<TensorInfo> &tensors() const { return list; }
  /// Index of a tensor by name (asserts it exists).
  unsigned indexOf(const std::string &name) const { return byName.at(name); }

private:
  std::vector<TensorInfo> list;
  std::map<std::string, unsigned> byName;
};

/// One step function as the runtime sees it.
struct FunctionKernels {
  std::string name;
  std::vector<std::string> kernels;
  std::vector<std::string> inputs, outputs;
  int64_t arenaBytes = 0, arenaLowerBound = 0;
};

/// The dtype name of an element type ("f32", "i64", "bool"...), or "" if none.
std::string dtypeOf(mlir::Type elementType);

struct ArtifactOptions {
  std::string target, output;
  std::vector<std::string> arch; ///< recorded in the manifest (resolved by the target)
  std::vector<std::string> cpuFeatures; ///< flags a `--cpu native` build requires
  bool timing = false;
};

/// What a target puts into the artifact besides the manifest and params.bin, and
/// how it compiles it.
struct KernelBuild {
  std::string sourceName;  ///< "kernels.cpp", "kernels.cu", "kernels.hip"
  std::string libraryName; ///< the kernel library header the source includes
  std::string librarySource;
  /// Files the compile produces, all hashed into the manifest; the first is the
  /// shared object the runtime loads.
  std::vector<std::string> products;
  std::string compilerId; ///< compiler and flags, part of the cache key
  /// Compiles in `dir` (source and library already there) into `products`.
  std::function<bool(const std::string &dir, std::string &error)> compile;
};

/// The default x86-64 level of the cpu target: AVX2 + FMA, which every x86-64
/// server CPU since 2013 (Intel Haswell) and 2017 (AMD Zen) has.
constexpr const char *kDefaultCpuLevel = "x86-64-v3";

/// The CPU build: the system C++ compiler at an explicit ISA level (`level`, or
/// "native" for the build machine, whose `nativeFeatures` key the kernel cache),
/// OpenMP, oneDNN.
KernelBuild cpuKernelBuild(const std::string &level,
                           const std::vector<std::string> &nativeFeatures);

/// `s` quoted for a POSIX shell.
std::string shellQuote(const std::string &s);

/// Runs shell `commands` in order, stdout/stderr into `dir`/compile.log; on failure
/// sets `error` to "<what> failed:" and the log's head.
bool runCompileCommands(const std::vector<std::string> &commands, const std::string &dir,
                        const std::string &what, std::string &error);

/// Writes `options.output` (a folder) from emitted kernel source: compiles it
/// (reusing $ORTC_KERNEL_CACHE, keyed by the SHA-256 of source, library and
/// compiler), writes params.bin and manifest.json with hashes, all in a temporary
/// folder renamed into place at the end. Returns false with `error` on failure.
bool writeArtifact(const ArtifactOptions &options, const TensorTable &table,
                   const std::vector<FunctionKernels> &functions,
                   const std::string &kernelSource, const KernelBuild &build,
                   std::string &error);

} // namespace ortc

#endif // ORTC_CODEGEN_ARTIFACT_H
