//===- Training.cpp - Loss, optimizer updates, finiteness ----------------===//
#include "compiler/Dialect/Ortc/Builders.h"

using namespace mlir;

namespace ortc {

LogicalResult SoftmaxCrossEntropyOp::inferReturnTypes(MLIRContext *,
                                                      std::optional<Location> loc,
                                                      Adaptor adaptor,
                                                      SmallVectorImpl<Type> &types) {
  auto logits = cast<RankedTensorType>(adaptor.getLogits().getType());
  Type element = logits.getElementType();
  // A loss of 16-bit logits is float32 (autocast's float32 list): the kernel computes it
  // in double from the stored bits.
  if (element.getIntOrFloatBitWidth() < 32)
    element = Float32Type::get(logits.getContext());
  types.push_back(RankedTensorType::get({}, element));
  return success();
}

void SoftmaxCrossEntropyOp::getIndexRanges(SmallVectorImpl<IndexRange> &ranges) {
  int64_t classes = cast<RankedTensorType>(getLogits().getType()).getDimSize(1);
  std::optional<int64_t> ignore;
  if (auto i = getIgnoreIndex())
    ignore = *i;
  ranges.push_back({getLabels(), 0, classes, ignore, "class labels"});
}

LogicalResult SoftmaxCrossEntropyOp::verify() {
  auto logits = getLogits().getType();
  auto labels = getLabels().getType();
  if (logits.getRank() != 2 || labels.getRank() != 1 ||
      labels.getDimSize(0) != logits.getDimSize(0))
    return emitOpError("needs logits [N,C] and labels [N], got ")
           << logits << " and " << labels;
  if (getReduction() != "mean" && getReduction() != "sum")
    return emitOpError("reduction must be 'mean' or 'sum'");
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                                   SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  if (dys[0])
    grads[0] = SoftmaxCrossEntropyGradOp::create(
        b, getLoc(), getLogits().getType(), getLogits(), getLabels(), dys[0],
        getIgnoreIndexAttr(), getReductionAttr());
  return success();
}

LogicalResult SoftmaxCrossEntropyGradOp::verify() {
  auto logits = getLogits().getType();
  if (logits.getRank() != 2 || getResult().getType().getShape() != logits.getShape())
    return emitOpError("needs logits [N,C] and a result of their shape, got ")
           << logits << " and " << getResult().getType();
  return success();
}

LogicalResult AllFiniteOp::verify() {
  if (cast<RankedTensorType>(getEach().getType()).getDimSize(0) != int64_t(getInputs().size()))
    return emitOpError("`each` needs one element per input");
  return success();
}

LogicalResult AllReduceOp::verify() {
  StringRef r = getReduction();
  if (r != "mean" && r != "sum" && r != "min")
    return emitOpError("reduction must be \"mean\", \"sum\" or \"min\", got \"") << r << "\"";
  if (cast<RankedTensorType>(getType()).getElementType().isInteger(1) && r != "min")
    return emitOpError("reduces i1 flags with \"min\" only");
  return success();
}

/// The 1-D shard shapes of ZeRO's collectives: whole = ranks * part, one element type.
static LogicalResult verifyShards(Operation *op, int64_t ranks, Value whole, Value part) {
  auto w = cast<RankedTensorType>(whole.getType()), p = cast<RankedTensorType>(part.getType());
  if (ranks < 1)
    return op->emitOpError("needs ranks >= 1, got ") << ranks;
  if (w.getElementType() != p.getElementType())
    return op->emitOpError("input and result must have one element type");
  if (w.getDimSize(0) != ranks * p.getDimSize(0))
    return op->emitOpError("the whole tensor has ")
           << w.getDimSize(0) << " elements, not ranks (" << ranks << ") times the shard's "
           << p.getDimSize(0);
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  if (getReduction() != "mean" && getReduction() != "sum")
    return emitOpError("reduction must be \"mean\" or \"sum\", got \"") << getReduction() << "\"";
  return verifyShards(*this, getRanks(), getInput(), getResult());
}

LogicalResult AllGatherOp::verify() {
  return verifyShards(*this, getRanks(), getResult(), getInput());
}

LogicalResult RankShardOp::verify() {
  return verifyShards(*this, getRanks(), getInput(), getResult());
}

LogicalResult SgdUpdateOp::verify() {
  bool hasBuffer = static_cast<bool>(getMomentumBuffer());
  if (hasBuffer != (getMomentum().convertToDouble() != 0.0))
    return emitOpError("a momentum buffer is needed exactly when momentum != 0");
  if (getNumResults() != (hasBuffer ? 2u : 1u))
    return emitOpError("returns the parameter and, with momentum, the buffer");
  for (Value r : getResults())
    if (r.getType() != getParam().getType())
      return emitOpError("results must have the parameter's type");
  return success();
}

// Every parameter's update reads the same lr, step and gate: one kernel runs them all.
FusionRole SgdUpdateOp::getFusionRole() { return FusionRole::MultiTensor; }
FusionRole AdamWUpdateOp::getFusionRole() { return FusionRole::MultiTensor; }

} // namespace ortc
