//===- Kernel.cpp - The kernel-level region op ----------------------------===//
//
// ortc.fused is the unit codegen prints as one kernel. Its verifier holds what the
// printers and the memory plan rely on: block arguments mirror the operands, the
// yield mirrors the results, and a pointwise or rows kernel yields values of one
// shape (a rows kernel: one row op, e.g. a softmax along the last axis, with the
// pointwise ops that compute its operands and consume its result).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"

using namespace mlir;

namespace ortc {

Operation::operand_range FusedOp::getYielded() {
  return getBody().front().getTerminator()->getOperands();
}

ArrayRef<int64_t> FusedOp::getIterationShape() {
  for (Operation &op : getBody().front())
    if (auto r = dyn_cast<ReduceSumOp>(op))
      return r.getX().getType().getShape();
  return cast<RankedTensorType>(getResult(0).getType()).getShape();
}

bool FusedOp::readsAtOwnIndex(unsigned i) {
  BlockArgument arg = getBody().front().getArgument(i);
  if (getKind() == "multi_tensor") // each update reads its tensors elementwise
    return true;
  if (cast<RankedTensorType>(arg.getType()).getShape() != getIterationShape())
    return false;
  return llvm::none_of(arg.getUsers(), [](Operation *u) {
    auto f = dyn_cast<FusionOpInterface>(u);
    return !f || f.getFusionRole() != FusionRole::Pointwise;
  });
}

LogicalResult FusedOp::verify() {
  Block &block = getBody().front();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError("has ") << block.getNumArguments() << " block arguments for "
                               << getInputs().size() << " operands";
  for (auto [arg, in] : llvm::zip(block.getArguments(), getInputs()))
    if (arg.getType() != in.getType())
      return emitOpError("block argument type ")
             << arg.getType() << " differs from its operand's " << in.getType();
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield)
    return emitOpError("body must end with ortc.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ") << yield.getValues().getTypes() << " but returns "
                                  << getResultTypes();
  if (getNumResults() == 0)
    return emitOpError("yields nothing");
  if (getKind() == "multi_tensor") {
    std::optional<OperationName> name;
    for (Operation &op : block.without_terminator()) {
      if (isa<ConstantOp>(op))
        continue;
      auto f = dyn_cast<FusionOpInterface>(op);
      if (!f || f.getFusionRole() != FusionRole::MultiTensor || (name && *name != op.getName()))
        return emitOpError("a multi_tensor kernel holds ops of one multi-tensor kind");
      name = op.getName();
    }
    return success();
  }
  if (getKind() != "pointwise" && getKind() != "rows")
    return emitOpError("unknown kind '") << getKind() << "'";
  ArrayRef<int64_t> shape = getIterationShape();
  if (getKind() == "rows") {
    int rows = 0;
    for (Operation &op : block.without_terminator()) {
      auto f = dyn_cast<FusionOpInterface>(op);
      FusionRole role = f ? f.getFusionRole() : FusionRole::Opaque;
      if (role == FusionRole::Row)
        ++rows;
      else if (role != FusionRole::Pointwise && role != FusionRole::IndexMap &&
               !isa<ConstantOp>(op))
        return emitOpError("a rows kernel holds one row op and pointwise ops");
      if (!isa<ConstantOp>(op) && (op.getNumResults() != 1 ||
          cast<RankedTensorType>(op.getResult(0).getType()).getShape() != shape))
        return emitOpError("the ops of a rows kernel compute values of one shape");
    }
    if (rows != 1)
      return emitOpError("a rows kernel holds exactly one row op, not ") << rows;
  }
  std::optional<ArrayRef<int64_t>> sumAxes;
  for (Operation &op : block.without_terminator())
    if (auto r = dyn_cast<ReduceSumOp>(op)) {
      ArrayRef<int64_t> axes = r.getAxes();
      if (sumAxes && *sumAxes != axes)
        return emitOpError("the sums of a pointwise kernel reduce the same leading dims");
      sumAxes = axes;
      for (auto [i, a] : llvm::enumerate(axes))
        if (a != static_cast<int64_t>(i) || axes.size() >= shape.size())
          return emitOpError("a pointwise kernel sums over leading dims only");
      if (r.getX().getType().getShape() != shape)
        return emitOpError("a pointwise kernel's sums read values of its shape");
    }
  for (Value y : yield.getValues())
    if (!y.getDefiningOp<ReduceSumOp>() &&
        cast<RankedTensorType>(y.getType()).getShape() != shape)
      return emitOpError("a pointwise kernel yields values of one shape (and their sums)");
  return success();
}

} // namespace ortc
