//===- Commands.h - `ortc inspect` and `ortc train` ------------*- C++ -*-===//
#ifndef ORTC_TOOLS_ORTC_COMMANDS_H
#define ORTC_TOOLS_ORTC_COMMANDS_H

#include "compiler/Pipeline/Options.h"

#include <string>

namespace ortc {

/// Prints what ortc imports from a model: inputs, outputs, weights, op counts.
int runInspect(const BuildOptions &options);

struct TrainCommand {
  std::string artifact, data, logJson, saveParams, loadParams, saveCheckpoint,
      loadCheckpoint;
  int64_t steps = 10;
  double lr = 0.01;
  int64_t seed = 0;
  bool eval = false;
};

/// `ortc train`: runs the artifact's train step through the runtime.
int runTrain(const TrainCommand &command);

} // namespace ortc

#endif // ORTC_TOOLS_ORTC_COMMANDS_H
