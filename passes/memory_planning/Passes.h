//===- Passes.h - Scheduling and memory planning ----------------*- C++ -*-===//
#ifndef ORTC_PASSES_MEMORY_PLANNING_PASSES_H
#define ORTC_PASSES_MEMORY_PLANNING_PASSES_H

#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

#include <vector>

namespace ortc {
#define GEN_PASS_DECL
#include "passes/memory_planning/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/memory_planning/Passes.h.inc"

/// Byte size of a tensor value (i1 takes one byte).
int64_t byteSize(mlir::Type type);

/// ortc-memory-plan on one function: schedules its ops and records arena offsets,
/// `ortc.arena_bytes` and `ortc.arena_lower_bound` (the recompute pass plans trial
/// copies of a step with it).
llvm::LogicalResult planMemory(mlir::func::FuncOp fn);

/// Of a planned function: the arena bytes in use at each op of its schedule (the union of
/// the slots of the values live there), for the memory timeline of `ortc build`.
std::vector<int64_t> arenaBytesOverSchedule(mlir::func::FuncOp fn);

} // namespace ortc

#endif // ORTC_PASSES_MEMORY_PLANNING_PASSES_H
