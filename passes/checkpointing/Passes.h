//===- Passes.h - Recompute passes ------------------------------*- C++ -*-===//
#ifndef ORTC_PASSES_CHECKPOINTING_PASSES_H
#define ORTC_PASSES_CHECKPOINTING_PASSES_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Pass/Pass.h"

#include <utility>
#include <vector>

namespace ortc {
#define GEN_PASS_DECL
#include "passes/checkpointing/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/checkpointing/Passes.h.inc"

/// What `--recompute budget=` chooses among in `fn` (a step function with a backward), in
/// the order it tries them (most bytes per operation first). For tests that compare the
/// pass with brute force over subsets.
std::vector<mlir::Value> budgetCandidates(mlir::func::FuncOp fn);

/// The arena of `fn` with `chosen` (values of budgetCandidates(fn)) recomputed, kernels
/// formed if `fusion`, and memory planned, on a copy; and the operations the recompute
/// adds.
std::pair<int64_t, int64_t> plannedWith(mlir::func::FuncOp fn, llvm::ArrayRef<mlir::Value> chosen,
                                        bool fusion);
/// Whether `op` has RecomputeOpInterface and costs at most `cheapFlops` operations per
/// result element to recompute (what `selective` admits; heavier ops are GEMMs, convolutions).
bool isCheapToRecompute(mlir::Operation *op, int64_t cheapFlops);

/// The repeated blocks of a forward (its ops in order): by node name scope (a module
/// path with an index: "/encoder/layer.3/...") where the export kept them, else by
/// back-to-back repeats of its heavy ops (more than `cheapFlops` operations per element to
/// recompute), cut where the fewest activation bytes cross (RepeatedBlocks.cpp).
/// `--recompute layers` recomputes them.
std::vector<std::vector<mlir::Operation *>>
findRepeatedBlocks(llvm::ArrayRef<mlir::Operation *> forward, int64_t cheapFlops = 16);
} // namespace ortc

#endif // ORTC_PASSES_CHECKPOINTING_PASSES_H
