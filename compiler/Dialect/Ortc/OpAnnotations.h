//===- OpAnnotations.h - What later phases record on ops --------*- C++ -*-===//
//
// Five facts about an op of a step function live in the IR as attributes of the ortc
// dialect (checked by its attribute verifier), so that every later phase and codegen
// reads them from the IR rather than from a pass's header:
//   ortc.stage = "forward" | "backward" | "optimizer": which part of the training step
//     the op belongs to (set by the training passes; a fused kernel takes the stage
//     of its last op). Recompute and mixed precision decide by it.
//   ortc.recompute (unit): a forward op cloned into the backward by the recompute pass
//     (passes/checkpointing), so that its result need not live from the forward to
//     the backward. The mark keeps CSE from merging the clone with the original (their
//     attributes differ) and tells the memory planner to run it no earlier than where
//     the pass put it; a fused kernel of marked ops only is marked.
//   ortc.loss_seed (unit): the backward's seed, d loss / d loss = 1 (set by autodiff),
//     which dynamic loss scaling replaces by its scale (ortc-optimizer), which then
//     removes the mark.
//   ortc.arena_offsets = array<i64: ...>: per result, its byte offset in the step's
//     arena, or -1 when the value is not in the arena (set by ortc-memory-plan).
//   ortc.accum = {type = bf16 | f16, chunk = C : i64}: the op's kernel adds its sums
//     in that 16-bit type, in chunks of C terms whose sums add in float (C = 0: one
//     chunk), as `ortc build --accum-dtype chunked16 | plain16` asks (set by
//     ortc-mixed-precision on ops whose PrecisionOpInterface says they sum; read by
//     codegen and the evaluator; such an op is not fused).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_DIALECT_ORTC_OPANNOTATIONS_H
#define ORTC_DIALECT_ORTC_OPANNOTATIONS_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

#include <optional>
#include <string>

namespace ortc {

constexpr llvm::StringLiteral kStageAttr = "ortc.stage";
constexpr llvm::StringLiteral kArenaOffsetsAttr = "ortc.arena_offsets";
constexpr llvm::StringLiteral kRecomputeAttr = "ortc.recompute";
constexpr llvm::StringLiteral kLossSeedAttr = "ortc.loss_seed";
constexpr llvm::StringLiteral kAccumAttr = "ortc.accum";

/// True for "forward", "backward" and "optimizer".
bool isStage(llvm::StringRef stage);
/// Records `stage` on `op`.
void setStage(mlir::Operation *op, llvm::StringRef stage);
/// The stage of `op`, or "" when none was recorded (ops made by canonicalization).
llvm::StringRef stageOf(mlir::Operation *op);

/// Marks `op` as a recomputed clone of a forward op.
void setRecompute(mlir::Operation *op);
/// True for an op the recompute pass cloned (or a kernel of such ops only).
bool isRecompute(mlir::Operation *op);

/// The ONNX node `op` came from: its NameLoc's name (the first of a fused location's),
/// or "" when its location carries none.
llvm::StringRef onnxNodeName(mlir::Operation *op);

/// How an op's sums accumulate when not in float (ortc.accum).
struct Accumulation {
  mlir::FloatType type; ///< bf16 or f16
  int64_t chunk = 0;    ///< terms per 16-bit partial sum; 0: one for the whole sum
};
/// Records ortc.accum on `op`.
void setAccumulation(mlir::Operation *op, const Accumulation &a);
/// `op`'s ortc.accum, or std::nullopt (float accumulation).
std::optional<Accumulation> accumulationOf(mlir::Operation *op);

/// Records the arena offset of each result of `op` (-1: not in the arena).
void setArenaOffsets(mlir::Operation *op, llvm::ArrayRef<int64_t> offsets);

/// Where a value of a planned step function lives.
struct Placement {
  enum Kind { Arena, Argument, Weight, Constant, Output } kind;
  int64_t offset = 0; ///< Arena: byte offset
  unsigned index = 0; ///< Argument: arg number; Output: result number
  std::string name;   ///< Weight: global name
};

/// Resolves a value of a planned function (following reshape views to the tensor
/// they alias).
Placement placementOf(mlir::Value v);

} // namespace ortc

#endif // ORTC_DIALECT_ORTC_OPANNOTATIONS_H
