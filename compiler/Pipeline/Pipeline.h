//===- Pipeline.h - The phase pipeline builder ------------------*- C++ -*-===//
//
// Which passes make up each phase. `ortc build` runs the phases in order; `ortc-opt`
// sees the same passes by name.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_PIPELINE_PIPELINE_H
#define ORTC_PIPELINE_PIPELINE_H

#include "compiler/Pipeline/Options.h"

#include "mlir/Pass/PassManager.h"

namespace ortc {

/// Adds the passes of `phase` (for the given options) to `pm`.
void buildPhasePipeline(Phase phase, mlir::OpPassManager &pm,
                        const BuildOptions &options);

/// True when a phase is carried out by passes (rather than by the driver itself).
bool phaseHasPasses(Phase phase);

} // namespace ortc

#endif // ORTC_PIPELINE_PIPELINE_H
