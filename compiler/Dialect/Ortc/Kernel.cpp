//===- Kernel.cpp - The kernel-level region op ----------------------------===//
//
// ortc.fused is the unit codegen prints as one kernel. Its verifier holds what the
// printers and the memory plan rely on: block arguments mirror the operands, the
// yield mirrors the results, and a pointwise or rows kernel yields values of one
// shape (a rows kernel: one row op, e.g. a softmax along the last axis, with the
// pointwise ops that compute its operands and consume its result; a gemm kernel: one
// float32 matmul whose product its pointwise ops read).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"
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

MatMulOp FusedOp::getGemm() {
  if (getKind() != "gemm" && getKind() != "rows")
    return {};
  for (Operation &op : getBody().front())
    if (auto mm = dyn_cast<MatMulOp>(op))
      return mm;
  return {};
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
  if (getKind() != "pointwise" && getKind() != "rows" && getKind() != "gemm")
    return emitOpError("unknown kind '") << getKind() << "'";
  ArrayRef<int64_t> shape = getIterationShape();
  // The matmul of a gemm (or rows) kernel and the reshape of its product; checked here,
  // skipped by the kind's own rules below.
  MatMulOp gemm;
  ReshapeOp productReshape;
  for (Operation &op : block.without_terminator()) {
    auto f = dyn_cast<FusionOpInterface>(op);
    if (!f || f.getFusionRole() != FusionRole::Epilogue || !isa<MatMulOp>(op) ||
        (getKind() != "gemm" && getKind() != "rows"))
      continue;
    if (gemm)
      return emitOpError("a ") << getKind() << " kernel holds at most one matmul";
    gemm = cast<MatMulOp>(op);
    if (!isa<BlockArgument>(gemm.getA()) || !isa<BlockArgument>(gemm.getB()))
      return emitOpError("a ") << getKind() << " kernel's matmul reads kernel inputs";
    if (gemm.getType().getShape().back() != shape.back())
      return emitOpError("a ") << getKind() << " kernel runs along its matmul product's rows";
    if (llvm::is_contained(yield.getValues(), gemm.getResult()))
      return emitOpError("a ") << getKind() << " kernel does not yield its matmul product";
    for (Operation *u : gemm->getUsers())
      if (auto reshape = dyn_cast<ReshapeOp>(u)) {
        if (reshape.getType().getShape() != shape)
          return emitOpError("a ") << getKind()
                                   << " kernel reshapes its product to its iteration shape only";
        productReshape = reshape;
      }
  }
  auto isProduct = [&](Operation &op) {
    return &op == gemm.getOperation() || &op == productReshape.getOperation();
  };
  if (getKind() == "gemm") {
    if (!gemm)
      return emitOpError("a gemm kernel holds one float32 matmul and pointwise ops");
    for (Operation &op : block.without_terminator()) {
      auto f = dyn_cast<FusionOpInterface>(op);
      FusionRole role = f ? f.getFusionRole() : FusionRole::Opaque;
      if (isProduct(op))
        continue;
      if (isa<ReshapeOp>(op))
        return emitOpError("a gemm kernel reshapes only its product, to its iteration shape");
      if (role != FusionRole::Pointwise && role != FusionRole::IndexMap &&
          role != FusionRole::Reduction && !isa<ConstantOp>(op))
        return emitOpError("a gemm kernel holds one float32 matmul and pointwise ops");
    }
  }
  if (getKind() == "rows") {
    int rows = 0;
    for (Operation &op : block.without_terminator()) {
      auto f = dyn_cast<FusionOpInterface>(op);
      FusionRole role = f ? f.getFusionRole() : FusionRole::Opaque;
      if (isProduct(op))
        continue;
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

SmallVector<int64_t> MatMulIntoOp::getProductShape() {
  ArrayRef<int64_t> as = getA().getType().getShape(), bs = getB().getType().getShape();
  const size_t r = as.size();
  SmallVector<int64_t> shape(as.drop_back(2));
  shape.push_back(as[r - (getTransA() ? 1 : 2)]);
  shape.push_back(bs[r - (getTransB() ? 2 : 1)]);
  return shape;
}

LogicalResult MatMulIntoOp::verify() {
  auto a = getA().getType(), b = getB().getType();
  const int64_t r = a.getRank();
  if (r < 2 || b.getRank() != r || a.getShape().drop_back(2) != b.getShape().drop_back(2))
    return emitOpError("operands need equal rank >= 2 and equal batch dims");
  if (!a.getElementType().isF32() || !b.getElementType().isF32() ||
      getDest().getType() != getType() || !getType().getElementType().isF32())
    return emitOpError("takes float32 operands and a float32 dest of the result's type");
  if (a.getDimSize(r - (getTransA() ? 2 : 1)) != b.getDimSize(r - (getTransB() ? 1 : 2)))
    return emitOpError("contraction sizes differ");
  SmallVector<int64_t> shape = getProductShape();
  ArrayRef<int64_t> strides = getStrides();
  if (strides.size() != shape.size())
    return emitOpError("needs one stride per product dim");
  int64_t last = getOffset();
  for (auto [n, s] : llvm::zip(shape, strides)) {
    if (s < 0)
      return emitOpError("has a negative stride");
    last += (n - 1) * s;
  }
  if (llvm::is_contained(shape, 0))
    return success();
  if (getOffset() < 0 || last >= numElements(getType().getShape()))
    return emitOpError("writes outside its dest");
  std::optional<MatrixLayout> l = matrixLayout(shape, strides);
  if (!l || l->transposed)
    return emitOpError("writes a slot a GEMM cannot write (rows need unit-stride columns)");
  return success();
}

} // namespace ortc
