//===- train_loop.h - The loop behind `ortc train` and `ortc-run` -*- C++ -*-===//
//
// Feeds batches from an .npz, runs the artifact's train step N times with a run-time
// learning rate, logs the loss, and stops with an error naming the step when the
// step's guard reports a non-finite loss or gradient (that step changed nothing).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_TRAIN_LOOP_H
#define ORTC_RUNTIME_TRAIN_LOOP_H

#include <cstdint>
#include <string>

namespace ortc {

struct TrainOptions {
  std::string artifact, data;
  int64_t steps = 10;
  double lr = 0.01;
  int64_t seed = 0;
  std::string logJson, saveParams, loadParams, saveCheckpoint, loadCheckpoint;
  bool eval = false;
  std::string program = "ortc train"; ///< prefix of messages
};

/// Runs the loop; returns the process exit code (0 ok, 1 error, message on stderr).
int runTrainLoop(const TrainOptions &options);

} // namespace ortc

#endif // ORTC_RUNTIME_TRAIN_LOOP_H
