//===- Shape.cpp - Data movement and reductions --------------------------===//
//
// Shape rules (also the verifiers, through InferTypeOpInterface), folders and gradient
// rules of broadcasts, reshapes, permutations, slices, pads, gathers and scatters,
// reductions (arg-reductions, top-k and cumulative sums among them).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;

namespace ortc {

namespace {
bool isFloat(Value v) { return isa<FloatType>(tensorTypeOf(v).getElementType()); }
bool allEqual(ArrayRef<int64_t> xs, int64_t v) {
  return llvm::all_of(xs, [&](int64_t x) { return x == v; });
}
/// Gives `op` the stage of `from` (ops made by rewrites run where the op they replace ran).
void inheritStage(Operation *op, Operation *from) {
  if (StringRef stage = stageOf(from); !stage.empty())
    setStage(op, stage);
}
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

// A sum over leading dims joins the kernel that computes its input (a bias gradient
// is accumulated as the gradient it sums is computed); FormKernels checks the axes.
FusionRole ReduceSumOp::getFusionRole() { return FusionRole::Reduction; }
bool ReduceSumOp::sumsInLowPrecision() { return true; }
bool ReduceMeanOp::sumsInLowPrecision() { return true; }
bool ReduceMaxOp::sumsInLowPrecision() { return false; }
bool ReduceProdOp::sumsInLowPrecision() { return false; }

// A kernel reads x at the broadcast index: no copy, and every consumer may do so.
FusionRole BroadcastToOp::getFusionRole() { return FusionRole::IndexMap; }
bool BroadcastToOp::isCheapToRecompute() { return true; }

LogicalResult BroadcastToOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                           SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0] && isFloat(getX()))
    grads[0] = sumToShape(b, getLoc(), dys[0], getX().getType().getShape());
  return success();
}

//===-- reshape -----------------------------------------------------------===//

int64_t ReshapeOp::getRecomputeFlops() { return 0; } // a view: no data moves

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

namespace {
/// concat(a, concat(b, c), d) along one axis -> concat(a, b, c, d) when the inner
/// concat has no other user.
struct SpliceNestedConcat : OpRewritePattern<ConcatOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConcatOp op, PatternRewriter &rw) const override {
    SmallVector<Value> inputs;
    bool spliced = false;
    for (Value v : op.getInputs()) {
      auto inner = v.getDefiningOp<ConcatOp>();
      if (inner && inner.getAxis() == op.getAxis() && inner->hasOneUse()) {
        llvm::append_range(inputs, inner.getInputs());
        spliced = true;
      } else {
        inputs.push_back(v);
      }
    }
    if (!spliced)
      return failure();
    auto merged = ConcatOp::create(rw, op.getLoc(), inputs, op.getAxis());
    inheritStage(merged, op);
    rw.replaceOp(op, merged.getResult());
    return success();
  }
};
} // namespace

void ConcatOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *ctx) {
  patterns.add<SpliceNestedConcat>(ctx);
}

//===-- slice -------------------------------------------------------------===//

LogicalResult StridedViewOp::verify() {
  ArrayRef<int64_t> shape = getType().getShape(), strides = getStrides();
  if (getX().getType().getElementType() != getType().getElementType())
    return emitOpError("element type changes");
  if (strides.size() != shape.size())
    return emitOpError("needs one stride per result dim");
  if (numElements(shape) == 0)
    return success();
  int64_t last = getOffset();
  for (auto [n, s] : llvm::zip(shape, strides)) {
    if (s < 0)
      return emitOpError("has a negative stride");
    last += (n - 1) * s;
  }
  if (getOffset() < 0 || last >= numElements(getX().getType().getShape()))
    return emitOpError("reads outside its operand");
  return success();
}

std::optional<MatrixLayout> StridedViewOp::getMatrixLayout() {
  return matrixLayout(getType().getShape(), getStrides());
}

std::optional<MatrixLayout> matrixLayout(ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  const size_t r = shape.size();
  if (r < 2)
    return std::nullopt;
  MatrixLayout l;
  int64_t rows = shape[r - 2], cols = shape[r - 1];
  int64_t rowStride = rows == 1 ? std::max<int64_t>(cols, 1) : strides[r - 2];
  int64_t colStride = cols == 1 ? 1 : strides[r - 1];
  if (colStride == 1 && rowStride >= std::max<int64_t>(cols, 1)) {
    l.ld = rowStride;
  } else if (rowStride == 1 && colStride >= std::max<int64_t>(rows, 1)) {
    l.ld = colStride;
    l.transposed = true;
  } else {
    return std::nullopt;
  }
  // The batch dims, size-1 dims dropped and contiguous neighbours merged: at most two.
  SmallVector<std::pair<int64_t, int64_t>> batch; // (size, stride)
  for (size_t d = 0; d + 2 < r; ++d) {
    if (shape[d] == 1)
      continue;
    if (!batch.empty() && batch.back().second == strides[d] * shape[d])
      batch.back() = {batch.back().first * shape[d], strides[d]};
    else
      batch.push_back({shape[d], strides[d]});
  }
  if (batch.size() > 2)
    return std::nullopt;
  if (batch.size() == 2) {
    l.outerStride = batch[0].second;
    l.inner = batch[1].first;
    l.innerStride = batch[1].second;
  } else if (batch.size() == 1) {
    l.inner = batch[0].first;
    l.innerStride = batch[0].second;
  }
  return l;
}

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

//===-- slice_grad --------------------------------------------------------===//

LogicalResult SliceGradOp::verify() {
  auto dy = tensorTypeOf(getDy()), res = tensorTypeOf(getResult());
  ArrayRef<int64_t> starts = getStarts(), steps = getSteps();
  if (dy.getRank() != res.getRank() || dy.getElementType() != res.getElementType())
    return emitOpError("dy and the result differ in rank or element type");
  if (starts.size() != static_cast<size_t>(res.getRank()) || steps.size() != starts.size())
    return emitOpError("starts and steps need one entry per dim");
  for (int64_t d = 0; d < res.getRank(); ++d) {
    int64_t n = dy.getDimSize(d), last = starts[d] + (n - 1) * steps[d];
    if (steps[d] == 0 || (n > 0 && (starts[d] < 0 || starts[d] >= res.getDimSize(d) || last < 0 ||
                                    last >= res.getDimSize(d))))
      return emitOpError("dim ") << d << ": dy's box leaves the result";
  }
  return success();
}

OpFoldResult SliceGradOp::fold(FoldAdaptor) {
  if (getDy().getType() == getType() && allEqual(getStarts(), 0) && allEqual(getSteps(), 1))
    return getDy();
  return {};
}

namespace {
/// add(slice_grad(a), slice_grad(b)) -> slice_grad(concat(a, b)) when both have unit
/// steps and their boxes agree on every dim but one, along which they abut. Each
/// slice grad must have no other user (else nothing is saved).
struct AddAbuttingSliceGrads : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rw) const override {
    auto a = add.getLhs().getDefiningOp<SliceGradOp>();
    auto b = add.getRhs().getDefiningOp<SliceGradOp>();
    if (!a || !b || a == b || !a->hasOneUse() || !b->hasOneUse() ||
        a.getType() != add.getType() || b.getType() != add.getType() ||
        !allEqual(a.getSteps(), 1) || !allEqual(b.getSteps(), 1))
      return failure();
    ArrayRef<int64_t> sa = a.getStarts(), sb = b.getStarts();
    ArrayRef<int64_t> da = tensorTypeOf(a.getDy()).getShape(), db = tensorTypeOf(b.getDy()).getShape();
    int64_t axis = -1;
    for (size_t d = 0; d < sa.size(); ++d) {
      if (sa[d] == sb[d] && da[d] == db[d])
        continue;
      if (axis >= 0)
        return failure();
      axis = static_cast<int64_t>(d);
    }
    if (axis < 0)
      return failure();
    if (sb[axis] + db[axis] == sa[axis])
      std::swap(a, b);
    else if (sa[axis] + da[axis] != sb[axis])
      return failure();
    auto cat = ConcatOp::create(rw, add.getLoc(), ValueRange{a.getDy(), b.getDy()}, axis);
    inheritStage(cat, add);
    auto merged = SliceGradOp::create(rw, add.getLoc(), add.getType(), cat, a.getStarts(),
                                      a.getSteps());
    inheritStage(merged, add);
    rw.replaceOp(add, merged.getResult());
    return success();
  }
};
} // namespace

void SliceGradOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *ctx) {
  patterns.add<AddAbuttingSliceGrads>(ctx);
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

void GatherOp::getIndexRanges(SmallVectorImpl<IndexRange> &ranges) {
  auto data = cast<RankedTensorType>(getData().getType());
  int64_t axis = getAxis() < 0 ? getAxis() + data.getRank() : getAxis();
  int64_t n = data.getDimSize(axis); // negative indices count from the end
  ranges.push_back({getIndices(), -n, n, std::nullopt, "indices"});
}

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

// One operation per element read.
int64_t ReduceSumOp::getRecomputeFlops() { return numElements(getX().getType().getShape()); }
int64_t ReduceMeanOp::getRecomputeFlops() { return numElements(getX().getType().getShape()); }
int64_t ReduceMaxOp::getRecomputeFlops() { return numElements(getX().getType().getShape()); }
int64_t ReduceProdOp::getRecomputeFlops() { return numElements(getX().getType().getShape()); }

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
ORTC_REDUCE_INFER(ReduceProdOp)
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

LogicalResult ReduceProdOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (!dys[0] || !isFloat(getX()))
    return success();
  // Move the reduced axes last, view x as [groups, n], take the product of the other
  // elements of each row (right where x has zeros, unlike prod / x), and undo.
  Location loc = getLoc();
  RankedTensorType xt = getX().getType();
  SmallVector<bool> reduced(xt.getRank(), false);
  for (int64_t a : getAxes())
    reduced[a] = true;
  SmallVector<int64_t> perm, permutedShape;
  int64_t groups = 1, n = 1;
  for (int64_t d = 0; d < xt.getRank(); ++d)
    if (!reduced[d]) {
      perm.push_back(d);
      groups *= xt.getDimSize(d);
    }
  for (int64_t a : getAxes()) {
    perm.push_back(a);
    n *= xt.getDimSize(a);
  }
  for (int64_t p : perm)
    permutedShape.push_back(xt.getDimSize(p));
  Value x = getX();
  bool identity = true;
  for (auto [i, p] : llvm::enumerate(perm))
    identity &= static_cast<int64_t>(i) == p;
  if (!identity)
    x = TransposeOp::create(b, loc, x, perm);
  x = reshapeTo(b, loc, x, {groups, n});
  Value dy = reshapeTo(b, loc, dys[0], {groups});
  Value dx = ReduceProdGradOp::create(b, loc, tensorTypeOf(x), x, dy);
  dx = reshapeTo(b, loc, dx, permutedShape);
  if (!identity) {
    SmallVector<int64_t> inverse(perm.size());
    for (auto [i, p] : llvm::enumerate(perm))
      inverse[p] = i;
    dx = TransposeOp::create(b, loc, dx, inverse);
  }
  grads[0] = dx;
  return success();
}

LogicalResult ReduceProdGradOp::verify() {
  RankedTensorType x = getX().getType(), dy = getDy().getType();
  if (x.getRank() < 1 || dy.getShape() != x.getShape().drop_back() ||
      getType() != x || dy.getElementType() != x.getElementType())
    return emitOpError("needs x [..., n], dy [...] and a result typed like x");
  return success();
}

//===-- argmax / argmin ---------------------------------------------------===//

namespace {
template <typename AdaptorT>
LogicalResult inferArgReduce(std::optional<Location> loc, AdaptorT adaptor,
                             SmallVectorImpl<Type> &types) {
  auto in = cast<RankedTensorType>(adaptor.getX().getType());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= in.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range");
  auto shape = reducedShape(loc, in, {axis}, adaptor.getKeepdims());
  if (failed(shape))
    return failure();
  types.push_back(RankedTensorType::get(*shape, IntegerType::get(in.getContext(), 64)));
  return success();
}
} // namespace

LogicalResult ArgMaxOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferArgReduce(loc, adaptor, types);
}

LogicalResult ArgMinOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  return inferArgReduce(loc, adaptor, types);
}

//===-- topk --------------------------------------------------------------===//

LogicalResult TopKOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto in = cast<RankedTensorType>(adaptor.getX().getType());
  int64_t axis = adaptor.getAxis(), k = adaptor.getK();
  if (axis < 0 || axis >= in.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range");
  if (k < 0 || k > in.getDimSize(axis))
    return emitOptionalError(loc, "k = ", k, " is not in [0, ", in.getDimSize(axis), "]");
  SmallVector<int64_t> shape(in.getShape());
  shape[axis] = k;
  types.push_back(in.clone(shape));
  types.push_back(RankedTensorType::get(shape, IntegerType::get(ctx, 64)));
  return success();
}

/// The gradient of an op that picks elements of `like` along `axis` at `indices`
/// (TopK's values, GatherElements): `dy` scatter-added into zeros of like's type.
static Value scatterAddIntoZeros(OpBuilder &b, Location loc, Value like, Value indices,
                                 Value dy, int64_t axis) {
  return ScatterElementsOp::create(b, loc, like.getType(), splatLike(b, loc, like, 0.0),
                                   indices, dy, axis, "add");
}

LogicalResult TopKOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (!dys[0] || !isFloat(getX()))
    return success();
  grads[0] = scatterAddIntoZeros(b, getLoc(), getX(), getIndices(), dys[0], getAxis());
  return success();
}

//===-- cumsum ------------------------------------------------------------===//

LogicalResult CumSumOp::verify() {
  if (getAxis() < 0 || getAxis() >= getType().getRank())
    return emitOpError("axis ") << getAxis() << " out of range";
  return success();
}

LogicalResult CumSumOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0] && isFloat(getX()))
    grads[0] = CumSumOp::create(b, getLoc(), dys[0], getAxis(), getExclusive(), !getReverse());
  return success();
}

//===-- gather_elements / scatter_elements --------------------------------===//

namespace {
/// Checks the shared shape rule: indices of data's rank, no larger outside `axis`.
LogicalResult checkElementsIndices(std::optional<Location> loc, RankedTensorType data,
                                   RankedTensorType idx, int64_t axis) {
  if (axis < 0 || axis >= data.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range");
  if (idx.getRank() != data.getRank())
    return emitOptionalError(loc, "indices must have the rank of the data");
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != axis && idx.getDimSize(d) > data.getDimSize(d))
      return emitOptionalError(loc, "indices are larger than the data in dim ", d);
  return success();
}
} // namespace

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto data = cast<RankedTensorType>(adaptor.getData().getType());
  auto idx = cast<RankedTensorType>(adaptor.getIndices().getType());
  if (failed(checkElementsIndices(loc, data, idx, adaptor.getAxis())))
    return failure();
  types.push_back(data.clone(idx.getShape()));
  return success();
}

LogicalResult GatherElementsOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                              SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  if (!dys[0] || !isFloat(getData()))
    return success();
  grads[0] = scatterAddIntoZeros(b, getLoc(), getData(), getIndices(), dys[0], getAxis());
  return success();
}

LogicalResult ScatterElementsOp::verify() {
  RankedTensorType data = getData().getType(), upd = getUpdates().getType();
  if (failed(checkElementsIndices(getLoc(), data, getIndices().getType(), getAxis())))
    return failure();
  if (upd.getShape() != getIndices().getType().getShape() ||
      upd.getElementType() != data.getElementType() || getType() != data)
    return emitOpError("updates must be shaped like the indices and typed like the data");
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, getReduction()))
    return emitOpError("unknown reduction '") << getReduction() << "'";
  return success();
}

int ScatterElementsOp::reductionCode() {
  return llvm::StringSwitch<int>(getReduction())
      .Case("add", 1)
      .Case("mul", 2)
      .Case("max", 3)
      .Case("min", 4)
      .Default(0);
}

LogicalResult ScatterElementsOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                               SmallVectorImpl<Value> &grads) {
  grads.assign(3, Value());
  if (!dys[0] || !isFloat(getData()))
    return success();
  if (getReduction() != "none" && getReduction() != "add")
    return emitOpError("has no gradient rule for reduction '") << getReduction() << "'";
  Location loc = getLoc();
  // add: data passes dy through; none: the overwritten positions get nothing.
  grads[0] = getReduction() == "add"
                 ? dys[0]
                 : Value(ScatterElementsOp::create(b, loc, getType(), dys[0], getIndices(),
                                                   splatLike(b, loc, getUpdates(), 0.0),
                                                   getAxis(), "none"));
  grads[2] = GatherElementsOp::create(b, loc, getUpdates().getType(), dys[0], getIndices(),
                                      getAxis());
  return success();
}

} // namespace ortc
