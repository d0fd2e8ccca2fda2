//===- Passes.h - Fusion passes ---------------------------------*- C++ -*-===//
#ifndef ORTC_PASSES_FUSION_PASSES_H
#define ORTC_PASSES_FUSION_PASSES_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

namespace ortc {
#define GEN_PASS_DECL
#include "passes/fusion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/fusion/Passes.h.inc"

/// ortc-form-kernels on one function (the recompute pass forms the kernels of trial
/// copies of a step with it, to plan them as the build will).
void formKernels(mlir::func::FuncOp fn);
} // namespace ortc

#endif // ORTC_PASSES_FUSION_PASSES_H
