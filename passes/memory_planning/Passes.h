//===- Passes.h - Scheduling and memory planning ----------------*- C++ -*-===//
#ifndef ORTC_PASSES_MEMORY_PLANNING_PASSES_H
#define ORTC_PASSES_MEMORY_PLANNING_PASSES_H

#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

namespace ortc {
#define GEN_PASS_DECL
#include "passes/memory_planning/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/memory_planning/Passes.h.inc"

/// Byte size of a tensor value (i1 takes one byte).
int64_t byteSize(mlir::Type type);

} // namespace ortc

#endif // ORTC_PASSES_MEMORY_PLANNING_PASSES_H
