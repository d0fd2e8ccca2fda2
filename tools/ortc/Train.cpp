//===- Train.cpp - `ortc train` on the runtime's train loop --------------===//
#include "tools/ortc/Commands.h"

#include "ortc/train_loop.h"

namespace ortc {

int runTrain(const TrainCommand &c) {
  TrainOptions o;
  o.artifact = c.artifact;
  o.data = c.data;
  o.steps = c.steps;
  o.lr = c.lr;
  o.seed = c.seed;
  o.logJson = c.logJson;
  o.saveParams = c.saveParams;
  o.loadParams = c.loadParams;
  o.saveCheckpoint = c.saveCheckpoint;
  o.loadCheckpoint = c.loadCheckpoint;
  o.eval = c.eval;
  return runTrainLoop(o);
}

} // namespace ortc
