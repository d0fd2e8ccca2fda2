//===- Train.cpp - `ortc train` on the runtime's train loop --------------===//
#include "tools/ortc/Commands.h"

#include <iostream>

namespace ortc {

int runTrain(const TrainCommand &command) {
  std::cerr << "ortc: error: train: artifacts are not produced by this build yet\n";
  return 1;
}

} // namespace ortc
