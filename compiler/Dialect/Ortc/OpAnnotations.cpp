//===- OpAnnotations.cpp - Stages and arena offsets on ops ---------------===//
//
// See OpAnnotations.h. The dialect's attribute verifier (OrtcDialect.cpp) checks
// the attributes wherever they appear.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OpAnnotations.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace ortc {

bool isStage(StringRef stage) {
  return stage == "forward" || stage == "backward" || stage == "optimizer";
}

void setStage(Operation *op, StringRef stage) {
  op->setAttr(kStageAttr, StringAttr::get(op->getContext(), stage));
}

StringRef stageOf(Operation *op) {
  auto s = op->getAttrOfType<StringAttr>(kStageAttr);
  return s ? s.getValue() : StringRef();
}

void setRecompute(Operation *op) { op->setAttr(kRecomputeAttr, UnitAttr::get(op->getContext())); }

bool isRecompute(Operation *op) { return op->hasAttrOfType<UnitAttr>(kRecomputeAttr); }

void setAccumulation(Operation *op, const Accumulation &a) {
  MLIRContext *ctx = op->getContext();
  Builder b(ctx);
  op->setAttr(kAccumAttr, b.getDictionaryAttr({b.getNamedAttr("type", TypeAttr::get(a.type)),
                                                b.getNamedAttr("chunk", b.getI64IntegerAttr(a.chunk))}));
}

std::optional<Accumulation> accumulationOf(Operation *op) {
  auto d = op->getAttrOfType<DictionaryAttr>(kAccumAttr);
  if (!d)
    return std::nullopt;
  auto type = d.getAs<TypeAttr>("type");
  auto chunk = d.getAs<IntegerAttr>("chunk");
  if (!type || !chunk || !isa<FloatType>(type.getValue()))
    return std::nullopt; // the verifier refuses it
  return Accumulation{cast<FloatType>(type.getValue()), chunk.getInt()};
}

StringRef onnxNodeName(Operation *op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc); fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  auto name = dyn_cast<NameLoc>(loc);
  return name ? name.getName().getValue() : StringRef();
}

void setArenaOffsets(Operation *op, ArrayRef<int64_t> offsets) {
  op->setAttr(kArenaOffsetsAttr, DenseI64ArrayAttr::get(op->getContext(), offsets));
}

Placement placementOf(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return {Placement::Argument, 0, arg.getArgNumber(), ""};
  Operation *op = v.getDefiningOp();
  if (auto w = dyn_cast<WeightOp>(op))
    return {Placement::Weight, 0, 0, w.getName().str()};
  if (isa<ConstantOp>(op))
    return {Placement::Constant, 0, 0, ""};
  if (auto r = dyn_cast<ReshapeOp>(op))
    return placementOf(r.getX());
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(kArenaOffsetsAttr);
  int64_t off = offsets ? offsets[cast<OpResult>(v).getResultNumber()] : -1;
  if (off >= 0)
    return {Placement::Arena, off, 0, ""};
  Operation *ret = op->getBlock()->getTerminator();
  for (OpOperand &use : ret->getOpOperands())
    if (use.get() == v)
      return {Placement::Output, 0, use.getOperandNumber(), ""};
  return {Placement::Arena, -1, 0, ""}; // unplanned
}

} // namespace ortc
