//===- NN.cpp - GEMM, convolution, pooling, normalisation, softmax -------===//
//
// Shape rules and gradient rules of the neural-network ops. Their gradients are
// dedicated ops (conv_grad_*, *_pool_grad, *_norm_grad, softmax_grad...) because
// composing them from core ops would cost memory and time at run time.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"

using namespace mlir;

namespace ortc {

//===-- matmul ------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto a = cast<RankedTensorType>(adaptor.getA().getType());
  auto b = cast<RankedTensorType>(adaptor.getB().getType());
  if (a.getRank() < 2 || a.getRank() != b.getRank())
    return emitOptionalError(loc, "operands need equal rank >= 2, got ", a, " and ", b);
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "element types differ");
  if (adaptor.getF32Result() && !isa<BFloat16Type, Float16Type>(a.getElementType()))
    return emitOptionalError(loc, "f32_result takes bf16 or f16 operands, not ", a);
  int64_t r = a.getRank();
  if (a.getShape().drop_back(2) != b.getShape().drop_back(2))
    return emitOptionalError(loc, "batch dims differ: ", a, " and ", b);
  int64_t m = a.getDimSize(r - (adaptor.getTransA() ? 1 : 2));
  int64_t ka = a.getDimSize(r - (adaptor.getTransA() ? 2 : 1));
  int64_t kb = b.getDimSize(r - (adaptor.getTransB() ? 1 : 2));
  int64_t n = b.getDimSize(r - (adaptor.getTransB() ? 2 : 1));
  if (ka != kb)
    return emitOptionalError(loc, "contraction sizes differ: ", ka, " vs ", kb);
  SmallVector<int64_t> shape(a.getShape().drop_back(2));
  shape.push_back(m);
  shape.push_back(n);
  types.push_back(adaptor.getF32Result() ? RankedTensorType::get(shape, Float32Type::get(a.getContext()))
                                         : a.clone(shape));
  return success();
}

/// The input of `v`'s defining transpose when it swaps only the last two dims.
static Value lastTwoSwapped(Value v) {
  auto t = v.getDefiningOp<TransposeOp>();
  if (!t)
    return Value();
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t r = perm.size();
  if (r < 2 || perm[r - 1] != r - 2 || perm[r - 2] != r - 1)
    return Value();
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[i] != i)
      return Value();
  return t.getX();
}

OpFoldResult MatMulOp::fold(FoldAdaptor) {
  bool changed = false;
  if (Value a = lastTwoSwapped(getA())) {
    getAMutable().assign(a);
    setTransA(!getTransA());
    changed = true;
  }
  if (Value b = lastTwoSwapped(getB())) {
    getBMutable().assign(b);
    setTransB(!getTransB());
    changed = true;
  }
  return changed ? getResult() : OpFoldResult();
}

LogicalResult MatMulOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                      SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  Value dc = dys[0];
  if (!dc)
    return success();
  Location loc = getLoc();
  bool ta = getTransA(), tb = getTransB();
  // d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, transposed back where needed.
  grads[0] = ta ? MatMulOp::create(b, loc, getB(), dc, tb, true)
                : MatMulOp::create(b, loc, dc, getB(), false, !tb);
  grads[1] = tb ? MatMulOp::create(b, loc, dc, getA(), true, ta)
                : MatMulOp::create(b, loc, getA(), dc, !ta, false);
  return success();
}

int64_t MatMulOp::getRecomputeFlops() {
  // Two per multiply-add: result elements times the contracted length.
  auto a = getA().getType();
  return 2 * resultElements(*this) * a.getDimSize(a.getRank() - (getTransA() ? 2 : 1));
}

// GEMMs and convolutions run on 16-bit operands in 16-bit training (autocast's list).
PrecisionRule MatMulOp::getPrecisionRule() { return PrecisionRule::Low; }
PrecisionRule ConvOp::getPrecisionRule() { return PrecisionRule::Low; }
PrecisionRule ConvGradInputOp::getPrecisionRule() { return PrecisionRule::Low; }
PrecisionRule ConvGradWeightOp::getPrecisionRule() { return PrecisionRule::Low; }
bool MatMulOp::sumsInLowPrecision() { return true; }
bool ConvOp::sumsInLowPrecision() { return true; }
bool ConvGradInputOp::sumsInLowPrecision() { return true; }
bool ConvGradWeightOp::sumsInLowPrecision() { return true; }

//===-- convolution and pooling geometry ----------------------------------===//

int64_t ConvOp::getRecomputeFlops() {
  // Two per multiply-add: each result element sums C/group x the kernel's volume taps.
  ArrayRef<int64_t> w = getW().getType().getShape();
  return 2 * resultElements(*this) * numElements(w.drop_front());
}

namespace {
/// Output extent of a sliding window (conv or pooling) along one dim.
int64_t windowOut(int64_t in, int64_t k, int64_t stride, int64_t padB, int64_t padE,
                  int64_t dil, bool ceilMode) {
  int64_t span = in + padB + padE - dil * (k - 1) - 1;
  if (span < 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch/ONNX: the last window must start inside the input or the begin padding.
  if (ceilMode && (out - 1) * stride >= in + padB)
    --out;
  return out;
}

LogicalResult checkGeometry(std::optional<Location> loc, int64_t nSpatial,
                            ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                            ArrayRef<int64_t> dilations) {
  if ((int64_t)strides.size() != nSpatial || (int64_t)pads.size() != 2 * nSpatial ||
      (int64_t)dilations.size() != nSpatial)
    return emitOptionalError(loc, "strides/dilations need ", nSpatial,
                             " entries and pads ", 2 * nSpatial);
  for (int64_t i = 0; i < nSpatial; ++i)
    if (strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 || pads[i + nSpatial] < 0)
      return emitOptionalError(loc, "strides and dilations must be >= 1, pads >= 0");
  return success();
}
} // namespace

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor, SmallVectorImpl<Type> &types) {
  auto x = cast<RankedTensorType>(adaptor.getX().getType());
  auto w = cast<RankedTensorType>(adaptor.getW().getType());
  int64_t ns = x.getRank() - 2, group = adaptor.getGroup();
  if (ns < 1 || ns > 3 || w.getRank() != x.getRank())
    return emitOptionalError(loc, "conv needs 1-3 spatial dims, got ", x, " and ", w);
  if (failed(checkGeometry(loc, ns, adaptor.getStrides(), adaptor.getPads(),
                           adaptor.getDilations())))
    return failure();
  if (group < 1 || x.getDimSize(1) != w.getDimSize(1) * group ||
      w.getDimSize(0) % group != 0)
    return emitOptionalError(loc, "channels ", x.getDimSize(1), " do not match weight ",
                             w, " with group ", group);
  if (auto bias = adaptor.getBias()) {
    auto bt = cast<RankedTensorType>(bias.getType());
    if (bt.getRank() != 1 || bt.getDimSize(0) != w.getDimSize(0))
      return emitOptionalError(loc, "bias must be [", w.getDimSize(0), "]");
  }
  SmallVector<int64_t> shape{x.getDimSize(0), w.getDimSize(0)};
  for (int64_t i = 0; i < ns; ++i)
    shape.push_back(windowOut(x.getDimSize(i + 2), w.getDimSize(i + 2),
                              adaptor.getStrides()[i], adaptor.getPads()[i],
                              adaptor.getPads()[i + ns], adaptor.getDilations()[i],
                              false));
  types.push_back(x.clone(shape));
  return success();
}

LogicalResult ConvOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                    SmallVectorImpl<Value> &grads) {
  grads.assign(getNumOperands(), Value());
  Value dy = dys[0];
  if (!dy)
    return success();
  Location loc = getLoc();
  grads[0] = ConvGradInputOp::create(b, loc, getX().getType(), dy, getW(), getStrides(),
                                     getPads(), getDilations(), getGroup());
  grads[1] = ConvGradWeightOp::create(b, loc, getW().getType(), dy, getX(),
                                      getStrides(), getPads(), getDilations(), getGroup());
  if (getBias()) {
    SmallVector<int64_t> axes{0};
    for (int64_t d = 2; d < getType().getRank(); ++d)
      axes.push_back(d);
    grads[2] = ReduceSumOp::create(b, loc, dy, axes, /*keepdims=*/false);
  }
  return success();
}

LogicalResult ConvGradInputOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                             SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  Value g = dys[0];
  if (!g)
    return success();
  // y = conv^T(dy; w) is the adjoint of x -> conv(x; w): <conv(g; w), dy> = <g, y>, so
  // d/d dy = conv(g; w) with the same geometry and d/dw = conv_grad_weight(dy, x = g).
  Location loc = getLoc();
  auto dyType = getDy().getType();
  auto wType = getW().getType();
  int64_t ns = dyType.getRank() - 2;
  ArrayRef<int64_t> strides = getStrides(), pads = getPads(), dil = getDilations();
  SmallVector<int64_t> shape{getType().getDimSize(0), wType.getDimSize(0)};
  for (int64_t i = 0; i < ns; ++i)
    shape.push_back(windowOut(getType().getDimSize(i + 2), wType.getDimSize(i + 2),
                              strides[i], pads[i], pads[i + ns], dil[i], false));
  if (ArrayRef<int64_t>(shape) != dyType.getShape())
    return emitOpError("has no gradient rule: a convolution of its result gives ")
           << dyType.clone(shape) << ", not the shape of dy " << dyType;
  grads[0] = ConvOp::create(b, loc, dyType, g, getW(), Value(), strides, pads, dil,
                            getGroup());
  grads[1] = ConvGradWeightOp::create(b, loc, wType, getDy(), g, strides, pads, dil,
                                      getGroup());
  return success();
}

#define ORTC_POOL_INFER(OP)                                                    \
  LogicalResult OP::inferReturnTypes(MLIRContext *, std::optional<Location> loc, \
                                     Adaptor adaptor,                          \
                                     SmallVectorImpl<Type> &types) {           \
    auto x = cast<RankedTensorType>(adaptor.getX().getType());                 \
    int64_t ns = x.getRank() - 2;                                              \
    ArrayRef<int64_t> k = adaptor.getKernelShape();                            \
    if (ns < 1 || ns > 3 || (int64_t)k.size() != ns)                           \
      return emitOptionalError(loc, "pooling needs 1-3 spatial dims and a kernel per dim"); \
    if (failed(checkGeometry(loc, ns, adaptor.getStrides(), adaptor.getPads(), \
                             adaptor.getDilations())))                         \
      return failure();                                                        \
    SmallVector<int64_t> shape(x.getShape().take_front(2));                    \
    for (int64_t i = 0; i < ns; ++i)                                           \
      shape.push_back(windowOut(x.getDimSize(i + 2), k[i], adaptor.getStrides()[i], \
                                adaptor.getPads()[i], adaptor.getPads()[i + ns], \
                                adaptor.getDilations()[i], adaptor.getCeilMode())); \
    types.push_back(x.clone(shape));                                           \
    return success();                                                          \
  }
ORTC_POOL_INFER(MaxPoolOp)
ORTC_POOL_INFER(AvgPoolOp)
#undef ORTC_POOL_INFER

LogicalResult MaxPoolOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0])
    grads[0] = MaxPoolGradOp::create(b, getLoc(), getX().getType(), getX(), dys[0],
                                     getKernelShape(), getStrides(), getPads(),
                                     getDilations());
  return success();
}

LogicalResult AvgPoolOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0])
    grads[0] = AvgPoolGradOp::create(b, getLoc(), getX().getType(), dys[0],
                                     getKernelShape(), getStrides(), getPads(),
                                     getDilations(), getCountIncludePad());
  return success();
}

//===-- normalisation -----------------------------------------------------===//

// A normalisation reads x twice (statistics, then the affine map): about eight
// operations per element of x.
static int64_t normFlops(Value x) { return 8 * numElements(tensorTypeOf(x).getShape()); }
int64_t BatchNormTrainOp::getRecomputeFlops() { return normFlops(getX()); }
int64_t BatchNormInferOp::getRecomputeFlops() { return normFlops(getX()); }
int64_t LayerNormOp::getRecomputeFlops() { return normFlops(getX()); }

// y again from the saved mean and inv_std: ((x - mean) * inv_std) * scale + bias in
// double, rounded once, which is how the layer_norm kernels normalise a row (with the
// statistics as saved), so the bits are the forward's on the CPU (kernels built without
// FMA contraction; a GPU compiler may contract, so there they agree to an ulp). Each
// operand is broadcast to x's shape before it is widened, so the chain is one pointwise
// kernel once kernels are formed, where a clone would compute the statistics again.
// f32/f64 only: a 16-bit kernel normalises with unrounded statistics.
Value LayerNormOp::buildCheaperRecompute(OpBuilder &b, unsigned index, IRMapping &map,
                                         function_ref<bool(Value)> kept, int64_t &flops) {
  RankedTensorType yType = getY().getType();
  Type et = yType.getElementType();
  if (index != 0 || !(et.isF32() || et.isF64()) || !kept(getMean()) || !kept(getInvStd()))
    return {};
  Location loc = getLoc();
  ArrayRef<int64_t> shape = yType.getShape();
  // `v` broadcast to x's shape, as f64.
  auto wide = [&](Value v) -> Value {
    v = broadcastTo(b, loc, map.lookupOrDefault(v), shape);
    return et.isF64() ? v : CastOp::create(b, loc, yType.clone(b.getF64Type()), v).getResult();
  };
  Value x = wide(getX());
  Value y = SubOp::create(b, loc, x, wide(getMean()));
  y = MulOp::create(b, loc, y, wide(getInvStd()));
  y = MulOp::create(b, loc, y, wide(getScale()));
  if (getBias())
    y = AddOp::create(b, loc, y, wide(getBias()));
  flops = (getBias() ? 4 : 3) * numElements(shape); // (the conversions not counted)
  return et.isF64() ? y : CastOp::create(b, loc, yType, y).getResult();
}

LogicalResult BatchNormTrainOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto x = cast<RankedTensorType>(adaptor.getX().getType());
  if (x.getRank() < 2)
    return emitOptionalError(loc, "BatchNorm input needs rank >= 2");
  auto stat = RankedTensorType::get({x.getDimSize(1)}, x.getElementType());
  for (Value v : {adaptor.getScale(), adaptor.getBias(), adaptor.getRunningMean(),
                  adaptor.getRunningVar()})
    if (v.getType() != stat)
      return emitOptionalError(loc, "scale, bias and running stats must be ", stat);
  types.append({x, stat, stat});
  return success();
}

LogicalResult BatchNormTrainOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                              SmallVectorImpl<Value> &grads) {
  grads.assign(5, Value());
  if (!dys[0])
    return success();
  auto g = BatchNormGradOp::create(b, getLoc(), TypeRange{getX().getType(),
                                   getScale().getType(), getBias().getType()},
                                   getX(), getScale(), getMean(), getVar(), dys[0],
                                   getEpsilonAttr(), getSyncAttr());
  grads[0] = g.getDx();
  grads[1] = g.getDscale();
  grads[2] = g.getDbias();
  return success();
}

LogicalResult BatchNormInferOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                              SmallVectorImpl<Value> &grads) {
  grads.assign(5, Value());
  Value dy = dys[0];
  if (!dy)
    return success();
  Location loc = getLoc();
  auto xType = getX().getType();
  int64_t channels = xType.getDimSize(1);
  // Per-channel [C] vectors broadcast along dim 1 of x.
  SmallVector<int64_t> chanShape(xType.getRank(), 1);
  chanShape[1] = channels;
  auto perChannel = [&](Value v) {
    return broadcastTo(b, loc, reshapeTo(b, loc, v, chanShape), xType.getShape());
  };
  SmallVector<int64_t> others;
  for (int64_t d = 0; d < xType.getRank(); ++d)
    if (d != 1)
      others.push_back(d);
  auto sumPerChannel = [&](Value v) {
    return reshapeTo(b, loc, ReduceSumOp::create(b, loc, v, others, false), {channels});
  };
  Value eps = splatLike(b, loc, getVar(), getEpsilon().convertToDouble());
  Value invStd = DivOp::create(b, loc, splatLike(b, loc, getVar(), 1.0),
                               SqrtOp::create(b, loc, AddOp::create(b, loc, getVar(), eps)));
  grads[0] = MulOp::create(b, loc, dy, perChannel(MulOp::create(b, loc, getScale(), invStd)));
  Value xhat = MulOp::create(b, loc, SubOp::create(b, loc, getX(), perChannel(getMean())),
                             perChannel(invStd));
  grads[1] = sumPerChannel(MulOp::create(b, loc, dy, xhat));
  grads[2] = sumPerChannel(dy);
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto x = cast<RankedTensorType>(adaptor.getX().getType());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= x.getRank())
    return emitOptionalError(loc, "axis ", axis, " out of range for ", x);
  auto norm = RankedTensorType::get(x.getShape().drop_front(axis), x.getElementType());
  if (adaptor.getScale().getType() != norm ||
      (adaptor.getBias() && adaptor.getBias().getType() != norm))
    return emitOptionalError(loc, "scale and bias must be ", norm);
  SmallVector<int64_t> statShape(x.getShape());
  for (int64_t d = axis; d < x.getRank(); ++d)
    statShape[d] = 1;
  auto stat = x.clone(statShape);
  types.append({x, stat, stat});
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                         SmallVectorImpl<Value> &grads) {
  grads.assign(getNumOperands(), Value());
  if (!dys[0])
    return success();
  auto g = LayerNormGradOp::create(
      b, getLoc(),
      TypeRange{getX().getType(), getScale().getType(), getScale().getType()}, getX(),
      getScale(), getMean(), getInvStd(), dys[0], getAxis());
  grads[0] = g.getDx();
  grads[1] = g.getDscale();
  if (getBias())
    grads[2] = g.getDbias();
  return success();
}

//===-- softmax and dropout -----------------------------------------------===//

// max, exp, sum, scale (log for log_softmax): about five per element.
int64_t SoftmaxOp::getRecomputeFlops() { return 5 * resultElements(*this); }
int64_t LogSoftmaxOp::getRecomputeFlops() { return 5 * resultElements(*this); }

// Along the last axis each row of the result depends on that row of the operands only:
// a row kernel computes it with its pointwise producers and consumers (FormKernels).
static FusionRole rowRole(Operation *op, int64_t axis) {
  int64_t rank = cast<RankedTensorType>(op->getResult(0).getType()).getRank();
  return rank >= 1 && (axis == rank - 1 || axis == -1) ? FusionRole::Row : FusionRole::Opaque;
}
FusionRole SoftmaxOp::getFusionRole() { return rowRole(*this, getAxis()); }

// A float32 GEMM hands its product to its pointwise consumers panel by panel (the
// kernel libraries' matmulEpilogue); 16-bit GEMMs take contiguous library paths.
FusionRole MatMulOp::getFusionRole() {
  auto f32 = [](Value v) { return cast<RankedTensorType>(v.getType()).getElementType().isF32(); };
  return f32(getA()) && f32(getB()) && f32(getResult()) ? FusionRole::Epilogue
                                                         : FusionRole::Opaque;
}
FusionRole LogSoftmaxOp::getFusionRole() { return rowRole(*this, getAxis()); }
FusionRole SoftmaxGradOp::getFusionRole() { return rowRole(*this, getAxis()); }
FusionRole LogSoftmaxGradOp::getFusionRole() { return rowRole(*this, getAxis()); }

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0])
    grads[0] = SoftmaxGradOp::create(b, getLoc(), getResult(), dys[0], getAxis());
  return success();
}

LogicalResult LogSoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                          SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value());
  if (dys[0])
    grads[0] = LogSoftmaxGradOp::create(b, getLoc(), getResult(), dys[0], getAxis());
  return success();
}

LogicalResult RandomUniformOp::buildGradient(OpBuilder &, ArrayRef<Value>,
                                             SmallVectorImpl<Value> &grads) {
  grads.assign(1, Value()); // a function of the seed only
  return success();
}

LogicalResult DropoutOp::buildGradient(OpBuilder &b, ArrayRef<Value> dys,
                                       SmallVectorImpl<Value> &grads) {
  grads.assign(2, Value());
  if (dys[0])
    grads[0] = DropoutGradOp::create(b, getLoc(), dys[0], getSeed(), getRatioAttr(),
                                     getKeyAttr());
  return success();
}

// The mask of (seed, key, ratio): a dropout and the dropout_grad of the same draw.
template <typename A, typename B> static bool sameMask(A a, B b) {
  return a.getSeed() == b.getSeed() && a.getKey() == b.getKey() && a.getRatio() == b.getRatio();
}
template <typename A> static bool sameMaskAs(A a, Operation *other) {
  if (auto d = dyn_cast<DropoutOp>(other))
    return sameMask(a, d);
  if (auto d = dyn_cast<DropoutGradOp>(other))
    return sameMask(a, d);
  return false;
}
bool DropoutOp::sharesWorkWith(Operation *other) { return sameMaskAs(*this, other); }
bool DropoutGradOp::sharesWorkWith(Operation *other) { return sameMaskAs(*this, other); }

} // namespace ortc
