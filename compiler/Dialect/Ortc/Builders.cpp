//===- Builders.cpp - Helpers that build small ortc op patterns ----------===//
#include "compiler/Dialect/Ortc/Builders.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;

namespace ortc {

int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Value splat(OpBuilder &b, Location loc, RankedTensorType type, double value) {
  Type elt = type.getElementType();
  Attribute scalar;
  if (auto ft = dyn_cast<FloatType>(elt))
    scalar = b.getFloatAttr(ft, value);
  else
    scalar = b.getIntegerAttr(elt, static_cast<int64_t>(value));
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, scalar));
}

Value splatLike(OpBuilder &b, Location loc, Value like, double value) {
  return splat(b, loc, tensorTypeOf(like), value);
}

FailureOr<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Value broadcastTo(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  auto type = tensorTypeOf(v);
  if (type.getShape() == shape)
    return v;
  return BroadcastToOp::create(b, loc, type.clone(shape), v);
}

Value reshapeTo(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  auto type = tensorTypeOf(v);
  if (type.getShape() == shape)
    return v;
  return ReshapeOp::create(b, loc, type.clone(shape), v);
}

Value sumToShape(OpBuilder &b, Location loc, Value grad, ArrayRef<int64_t> shape) {
  ArrayRef<int64_t> from = tensorTypeOf(grad).getShape();
  if (from == shape)
    return grad;
  size_t lead = from.size() - shape.size();
  SmallVector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1))
      axes.push_back(i);
  Value summed = grad;
  if (!axes.empty())
    summed = ReduceSumOp::create(b, loc, grad, axes, /*keepdims=*/true);
  return reshapeTo(b, loc, summed, shape);
}

Value scale(OpBuilder &b, Location loc, Value x, double s) {
  if (s == 1.0)
    return x;
  return ScaleOp::create(b, loc, x, b.getF64FloatAttr(s));
}

Value addOrNull(OpBuilder &b, Location loc, Value x, Value y) {
  if (!x)
    return y;
  if (!y)
    return x;
  return AddOp::create(b, loc, x, y);
}

} // namespace ortc
