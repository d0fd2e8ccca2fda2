//===- Commands.h - `ortc inspect` -----------------------------*- C++ -*-===//
// (`ortc train` is the runtime's runTrainLoop, ortc/train_loop.h.)
#ifndef ORTC_TOOLS_ORTC_COMMANDS_H
#define ORTC_TOOLS_ORTC_COMMANDS_H

#include "compiler/Pipeline/Options.h"

#include <string>

namespace ortc {

/// Prints what ortc imports from a model: inputs, outputs, weights, op counts.
int runInspect(const BuildOptions &options);

} // namespace ortc

#endif // ORTC_TOOLS_ORTC_COMMANDS_H
