//===- Passes.h - Recompute passes ------------------------------*- C++ -*-===//
#ifndef ORTC_PASSES_CHECKPOINTING_PASSES_H
#define ORTC_PASSES_CHECKPOINTING_PASSES_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

namespace ortc {
#define GEN_PASS_DECL
#include "passes/checkpointing/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/checkpointing/Passes.h.inc"
} // namespace ortc

#endif // ORTC_PASSES_CHECKPOINTING_PASSES_H
