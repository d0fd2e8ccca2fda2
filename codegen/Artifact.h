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
  std::vector<std::string> arch;
  bool timing = false;
};

/// Writes `options.output` (a folder) from emitted kernel source: compiles it,
/// writes params.bin and manifest.json with hashes, all in a temporary folder that
/// is renamed into place at the end. Returns false with `error` set on failure.
bool writeArtifact(const ArtifactOptions &options, const TensorTable &table,
                   const std::vector<FunctionKernels> &functions,
                   const std::string &kernelSource, std::string &error);

} // namespace ortc

#endif // ORTC_CODEGEN_ARTIFACT_H
