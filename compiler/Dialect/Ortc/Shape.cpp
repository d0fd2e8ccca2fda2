//===- Shape.cpp - Data movement and reductions --------------------------===//
//
// Shape rules (also the verifiers, through InferTypeOpInterface), folders and gradient
// rules of broadcasts, reshapes, permutations, slices, pads, gathers and reductions.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"

using namespace mlir;

namespace ortc {

namespace {
bool isFloat(Value v) { return isa<FloatType>(tensorTypeOf(v).getElementType()); }
} // namespace

//===-- broadcast_to ------------------------------------------------------===//

LogicalResult BroadcastToOp::verify() {
  ArrayRef<int64_t> in = getX().getType().getShape(), out = getType().getShape();
  if (getX().getType().getElementType() != getType().getElementType())
    return emitOpError("element type changes");
  auto shape = broadcastShapes(in, out);
  if (in.size() > out.size() || failed(shape) || ArrayRef<int64_t>(*shape) != out)
    return emitOpError("cannot broadcast ") << getX().getType() << " to " << getType();
  return success();
}

OpFoldResult BroadcastToOp::fold(FoldAdaptor adaptor) {
  if (getX().getType() == getType())
    return getX();
  if (auto splat = dyn_cast_or_null<SplatElementsAttr>(adaptor.getX()))
    return splat.resizeSplat(getType());
  return {};
}

LogicalResult BroadcastToOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                           SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0] && isFloat(getX()))
    grads[0] = sumToShape(b, getLoc(), dys[0], getX().getType().getShape());
  return success();
}

//===-- reshape -----------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  if (getX().getType().getElementType() != getType().getElementType())
    return emitOpError("element type changes");
  if (numElements(getX().getType().getShape()) != numElements(getType().getShape()))
    return emitOpError("element count changes from ")
           << getX().getType() << " to " << getType();
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getX().getType() == getType())
    return getX();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getX()))
    return dense.reshape(getType());
  if (auto inner = getX().getDefiningOp<ReshapeOp>()) {
    getXMutable().assign(inner.getX());
    return getResult();
  }
  return {};
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0] && isFloat(getX()))
    grads[0] = reshapeTo(b, getLoc(), dys[0], getX().getType().getShape());
  return success();
}

//===-- transpose ---------------------------------------------------------===//

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto in = cast<RankedTensorType>(adaptor.getX().getType());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (perm.size() != static_cast<size_t>(in.getRank()))
    return emitOptionalError(loc, "perm has ", perm.size(), " entries for rank ",
                             in.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOptionalError(loc, "perm is not a permutation");
    seen[p] = true;
    shape.push_back(in.getDimSize(p));
  }
  types.push_back(in.clone(shape));
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  for (auto [i, p] : llvm::enumerate(getPerm()))
    if (static_cast<int64_t>(i) != p)
      return {};
  return getX();
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (!dys[0] || !isFloat(getX()))
    return success();
  SmallVector<int64_t> inverse(getPerm().size());
  for (auto [i, p] : llvm::enumerate(getPerm()))
    inverse[p] = i;
  grads[0] = TransposeOp::create(b, getLoc(), dys[0], inverse);
  return success();
}

//===-- concat ------------------------------------------------------------===//

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "needs at least one input");
  auto first = cast<RankedTensorType>(adaptor.getInputs()[0].getType());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= first.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ",
                             first.getRank());
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value v : adaptor.getInputs()) {
    auto t = cast<RankedTensorType>(v.getType());
    if (t.getRank() != first.getRank() || t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "inputs differ in rank or element type");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && t.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "inputs differ in dim ", d);
    shape[axis] += t.getDimSize(axis);
  }
  types.push_back(first.clone(shape));
  return success();
}

LogicalResult ConcatOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &grads) {
  grads.assign(getInputs().size(), Value());
  if (!dys[0] || !isFloat(getResult()))
    return success();
  int64_t rank = getType().getRank(), offset = 0, axis = getAxis();
  for (auto [i, in] : llvm::enumerate(getInputs())) {
    SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
    SmallVector<int64_t> sizes(tensorTypeOf(in).getShape());
    starts[axis] = offset;
    offset += sizes[axis];
    grads[i] = SliceOp::create(b, getLoc(), dys[0], starts, sizes, steps);
  }
  return success();
}

//===-- slice -------------------------------------------------------------===//

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto in = cast<RankedTensorType>(adaptor.getX().getType());
  ArrayRef<int64_t> starts = adaptor.getStarts(), sizes = adaptor.getSizes(),
                    steps = adaptor.getSteps();
  if (starts.size() != (size_t)in.getRank() || sizes.size() != starts.size() ||
      steps.size() != starts.size())
    return emitOptionalError(loc, "starts/sizes/steps need one entry per dim");
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (steps[d] == 0 || sizes[d] < 0)
      return emitOptionalError(loc, "dim ", d, ": zero step or negative size");
    int64_t last = starts[d] + (sizes[d] - 1) * steps[d];
    if (sizes[d] > 0 && (starts[d] < 0 || starts[d] >= in.getDimSize(d) || last < 0 ||
                         last >= in.getDimSize(d)))
      return emitOptionalError(loc, "dim ", d, ": slice leaves the input");
  }
  types.push_back(in.clone(sizes));
  return success();
}

LogicalResult SliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                     SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0] && isFloat(getX()))
    grads[0] = SliceGradOp::create(b, getLoc(), getX().getType(), dys[0], getStarts(),
                                   getSteps());
  return success();
}

//===-- pad ---------------------------------------------------------------===//

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                      Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto in = cast<RankedTensorType>(adaptor.getX().getType());
  ArrayRef<int64_t> pads = adaptor.getPads();
  int64_t rank = in.getRank();
  if ((int64_t)pads.size() != 2 * rank)
    return emitOptionalError(loc, "pads needs 2 * rank entries");
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    shape.push_back(in.getDimSize(d) + pads[d] + pads[d + rank]);
    if (shape.back() < 0)
      return emitOptionalError(loc, "dim ", d, " becomes negative");
  }
  types.push_back(in.clone(shape));
  return success();
}

LogicalResult PadOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                   SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (!dys[0] || !isFloat(getX()))
    return success();
  // The adjoint of padding by p is cropping by p, i.e. padding by -p.
  SmallVector<int64_t> neg;
  for (int64_t p : getPads())
    neg.push_back(-p);
  grads[0] = PadOp::create(b, getLoc(), dys[0], neg, APFloat(0.0));
  return success();
}

//===-- gather ------------------------------------------------------------===//

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto data = cast<RankedTensorType>(adaptor.getData().getType());
  auto idx = cast<RankedTensorType>(adaptor.getIndices().getType());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= data.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range");
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, idx.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  types.push_back(data.clone(shape));
  return success();
}

LogicalResult GatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  if (dys[0] && isFloat(getData()))
    grads[0] = GatherGradOp::create(b, getLoc(), getData().getType(), getIndices(),
                                    dys[0], getAxis());
  return success();
}

//===-- reductions --------------------------------------------------------===//

namespace {
FailureOr<SmallVector<int64_t>> reducedShape(std::optional<Location> loc,
                                             RankedTensorType in, ArrayRef<int64_t> axes,
                                             bool keepdims) {
  SmallVector<bool> reduced(in.getRank(), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= in.getRank() || reduced[a]) {
      (void)emitOptionalError(loc, "bad or repeated reduction axis ", a);
      return failure();
    }
    reduced[a] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (!reduced[d])
      shape.push_back(in.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  return shape;
}

/// dy of a reduction, reshaped to keepdims form and broadcast back to x's shape.
Value expandReduced(OpBuilder &b, Location loc, Value dy, RankedTensorType x,
                    ArrayRef<int64_t> axes) {
  SmallVector<int64_t> kept(x.getShape());
  for (int64_t a : axes)
    kept[a] = 1;
  return broadcastTo(b, loc, reshapeTo(b, loc, dy, kept), x.getShape());
}
} // namespace

#define ORTC_REDUCE_INFER(OP)                                                  \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> loc, \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    auto in = cast<RankedTensorType>(adaptor.getX().getType());                \
    auto shape = reducedShape(loc, in, adaptor.getAxes(), adaptor.getKeepdims()); \
    if (failed(shape))                                                         \
      return failure();                                                        \
    types.push_back(in.clone(*shape));                                         \
    return success();                                                          \
  }
ORTC_REDUCE_INFER(ReduceSumOp)
ORTC_REDUCE_INFER(ReduceMeanOp)
ORTC_REDUCE_INFER(ReduceMaxOp)
#undef ORTC_REDUCE_INFER

LogicalResult ReduceSumOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0] && isFloat(getX()))
    grads[0] = expandReduced(b, getLoc(), dys[0], getX().getType(), getAxes());
  return success();
}

LogicalResult ReduceMeanOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (!dys[0] || !isFloat(getX()))
    return success();
  int64_t count = 1;
  for (int64_t a : getAxes())
    count *= getX().getType().getDimSize(a);
  Value dx = expandReduced(b, getLoc(), dys[0], getX().getType(), getAxes());
  grads[0] = scale(b, getLoc(), dx, 1.0 / static_cast<double>(count));
  return success();
}

LogicalResult ReduceMaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (!dys[0] || !isFloat(getX()))
    return success();
  // Like torch.amax: dy is shared evenly between the elements equal to the max.
  Location loc = getLoc();
  RankedTensorType xt = getX().getType();
  Value maxB = expandReduced(b, loc, getResult(), xt, getAxes());
  Value isMax = EqualOp::create(b, loc, xt.clone(b.getI1Type()), getX(), maxB);
  Value ones = CastOp::create(b, loc, xt, isMax);
  Value count = ReduceSumOp::create(b, loc, ones, getAxes(), getKeepdims());
  Value share = DivOp::create(b, loc, dys[0], count);
  grads[0] = MulOp::create(b, loc, ones, expandReduced(b, loc, share, xt, getAxes()));
  return success();
}

} // namespace ortc
