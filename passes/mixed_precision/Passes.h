//===- Passes.h - Mixed-precision passes ------------------------*- C++ -*-===//
#ifndef ORTC_PASSES_MIXED_PRECISION_PASSES_H
#define ORTC_PASSES_MIXED_PRECISION_PASSES_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

namespace ortc {
#define GEN_PASS_DECL
#include "passes/mixed_precision/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/mixed_precision/Passes.h.inc"
} // namespace ortc

#endif // ORTC_PASSES_MIXED_PRECISION_PASSES_H
