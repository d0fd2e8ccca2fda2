//===- Passes.h - Scheduling and memory planning ----------------*- C++ -*-===//
#ifndef ORTC_PASSES_MEMORY_PLANNING_PASSES_H
#define ORTC_PASSES_MEMORY_PLANNING_PASSES_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

namespace ortc {
#define GEN_PASS_DECL
#include "passes/memory_planning/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/memory_planning/Passes.h.inc"

/// Byte size of a tensor value (i1 takes one byte).
int64_t byteSize(mlir::Type type);

/// Where a value of a planned step function lives.
struct Placement {
  enum Kind { Arena, Argument, Weight, Constant, Output } kind;
  int64_t offset = 0;      ///< Arena: byte offset
  unsigned index = 0;      ///< Argument: arg number; Output: result number
  std::string name;        ///< Weight: global name
};

/// Resolves a value of a function planned by ortc-memory-plan (following reshape
/// views to the tensor they alias).
Placement placementOf(mlir::Value v);
} // namespace ortc

#endif // ORTC_PASSES_MEMORY_PLANNING_PASSES_H
