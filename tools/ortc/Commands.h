//===- Commands.h - `ortc inspect` and `ortc export` -----------*- C++ -*-===//
// (`ortc train` is the runtime's runTrainLoop, ortc/train_loop.h.)
#ifndef ORTC_TOOLS_ORTC_COMMANDS_H
#define ORTC_TOOLS_ORTC_COMMANDS_H

#include "compiler/Pipeline/Options.h"

#include <string>

namespace ortc {

/// Prints what ortc imports from a model: inputs, outputs, weights, op counts.
int runInspect(const BuildOptions &options);

struct ExportOptions {
  std::string artifact;   ///< the model.ortc folder
  std::string output;     ///< the .onnx to write
  std::string params;     ///< trained parameters and buffers (.npz), or
  std::string checkpoint; ///< a checkpoint (.npz; its optimizer state is left out)
};

/// Writes the artifact's ONNX graph with trained initializers (Export.cpp).
int runExport(const ExportOptions &options);

} // namespace ortc

#endif // ORTC_TOOLS_ORTC_COMMANDS_H
