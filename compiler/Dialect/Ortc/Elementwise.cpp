//===- Elementwise.cpp - Elementwise ops: verifiers and gradient rules ---===//
//
// Operands of elementwise ops have identical shapes, so every rule here is a plain
// pointwise formula; un-broadcasting is the gradient rule of `broadcast_to`.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"

#include <cmath>

using namespace mlir;

namespace ortc {

// A comparison is one instruction per element: a kernel reading it through a broadcast
// recomputes it from its broadcast operands (an attention mask from a buffer) instead
// of launching a kernel of its own (FormKernels).
bool EqualOp::isCheapToRecompute() { return true; }
bool LessOp::isCheapToRecompute() { return true; }
bool GreaterOp::isCheapToRecompute() { return true; }
bool AndOp::isCheapToRecompute() { return true; }

namespace {
bool isFloat(Value v) {
  return isa<FloatType>(tensorTypeOf(v).getElementType());
}
/// Sets a single-operand gradient when the result received one.
LogicalResult unaryGrad(SmallVectorImpl<Value> &out, Value dy,
                        function_ref<Value()> rule) {
  out.assign(1, Value());
  if (dy)
    out[0] = rule();
  return success();
}
Value zerosLike(OpBuilder &b, Location loc, Value v) { return splatLike(b, loc, v, 0); }
} // namespace

#define ORTC_UNARY_GRAD(OP, BODY)                                              \
  LogicalResult OP::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,   \
                                  SmallVectorImpl<Value> &operandGrads) {      \
    Location loc = getLoc();                                                   \
    Value x = getX(), y = getResult(), dy = resultGrads[0];                    \
    (void)x;                                                                   \
    (void)y;                                                                   \
    return unaryGrad(operandGrads, isFloat(x) ? dy : Value(),                  \
                     [&]() -> Value { BODY });                                 \
  }

ORTC_UNARY_GRAD(NegOp, return NegOp::create(b, loc, dy);)
ORTC_UNARY_GRAD(ExpOp, return MulOp::create(b, loc, dy, y);)
ORTC_UNARY_GRAD(LogOp, return DivOp::create(b, loc, dy, x);)
ORTC_UNARY_GRAD(SqrtOp, return DivOp::create(b, loc, scale(b, loc, dy, 0.5), y);)
ORTC_UNARY_GRAD(ErfOp, {
  Value sq = MulOp::create(b, loc, x, x);
  Value e = ExpOp::create(b, loc, NegOp::create(b, loc, sq));
  return MulOp::create(b, loc, dy, scale(b, loc, e, 2.0 / std::sqrt(M_PI)));
})
ORTC_UNARY_GRAD(SinOp, return MulOp::create(b, loc, dy, CosOp::create(b, loc, x));)
ORTC_UNARY_GRAD(CosOp, return NegOp::create(b, loc, MulOp::create(b, loc, dy, SinOp::create(b, loc, x)));)
ORTC_UNARY_GRAD(TanhOp, {
  Value one = splatLike(b, loc, y, 1.0);
  Value d = SubOp::create(b, loc, one, MulOp::create(b, loc, y, y));
  return MulOp::create(b, loc, dy, d);
})
ORTC_UNARY_GRAD(SigmoidOp, {
  Value one = splatLike(b, loc, y, 1.0);
  Value d = MulOp::create(b, loc, y, SubOp::create(b, loc, one, y));
  return MulOp::create(b, loc, dy, d);
})
ORTC_UNARY_GRAD(ReluOp, {
  Value pos = GreaterOp::create(b, loc, tensorTypeOf(x).clone(b.getI1Type()), x,
                                zerosLike(b, loc, x));
  return SelectOp::create(b, loc, pos, dy, zerosLike(b, loc, dy));
})
ORTC_UNARY_GRAD(AbsOp, {
  // PyTorch: sign(x) * dy, with sign(0) = 0.
  auto boolType = tensorTypeOf(x).clone(b.getI1Type());
  Value zero = zerosLike(b, loc, x);
  Value pos = GreaterOp::create(b, loc, boolType, x, zero);
  Value neg = LessOp::create(b, loc, boolType, x, zero);
  Value negOrZero =
      SelectOp::create(b, loc, neg, NegOp::create(b, loc, dy), zerosLike(b, loc, dy));
  return SelectOp::create(b, loc, pos, dy, negOrZero);
})
ORTC_UNARY_GRAD(NotOp, return Value();)
ORTC_UNARY_GRAD(ScaleOp, return scale(b, loc, dy, getFactor().convertToDouble());)
ORTC_UNARY_GRAD(GeluOp, return GeluGradOp::create(b, loc, x, dy, getTanh());)
ORTC_UNARY_GRAD(ClipOp, {
  // PyTorch's clamp passes the gradient where min <= x <= max.
  auto boolType = tensorTypeOf(x).clone(b.getI1Type());
  Value grad = dy;
  if (auto lo = getMin()) {
    Value below = LessOp::create(b, loc, boolType, x, splatLike(b, loc, x, lo->convertToDouble()));
    grad = SelectOp::create(b, loc, below, zerosLike(b, loc, dy), grad);
  }
  if (auto hi = getMax()) {
    Value above = GreaterOp::create(b, loc, boolType, x, splatLike(b, loc, x, hi->convertToDouble()));
    grad = SelectOp::create(b, loc, above, zerosLike(b, loc, dy), grad);
  }
  return grad;
})
#undef ORTC_UNARY_GRAD

// Piecewise-constant ops pass no gradient (PyTorch's floor/ceil/round give zeros).
#define ORTC_NO_GRAD(OP)                                                       \
  LogicalResult OP::buildGradient(OpBuilder &, ArrayRef<Value>,                \
                                  SmallVectorImpl<Value> &operandGrads) {      \
    operandGrads.assign(1, Value());                                           \
    return success();                                                          \
  }
ORTC_NO_GRAD(FloorOp)
ORTC_NO_GRAD(CeilOp)
ORTC_NO_GRAD(RoundOp)
#undef ORTC_NO_GRAD

LogicalResult CastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(1, Value());
  if (resultGrads[0] && isFloat(getX()) && isFloat(getResult()))
    operandGrads[0] = CastOp::create(b, getLoc(), getX().getType(), resultGrads[0]);
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getX().getType() == getType())
    return getX();
  return {};
}

#define ORTC_BINARY_GRAD(OP, DA, DB)                                           \
  LogicalResult OP::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,   \
                                  SmallVectorImpl<Value> &operandGrads) {      \
    Location loc = getLoc();                                                   \
    Value a = getLhs(), c = getRhs(), y = getResult(), dy = resultGrads[0];    \
    (void)a;                                                                   \
    (void)c;                                                                   \
    (void)y;                                                                   \
    operandGrads.assign(2, Value());                                           \
    if (!dy || !isFloat(y))                                                    \
      return success();                                                        \
    operandGrads[0] = [&]() -> Value { DA }();                                 \
    operandGrads[1] = [&]() -> Value { DB }();                                 \
    return success();                                                          \
  }

ORTC_BINARY_GRAD(AddOp, return dy;, return dy;)
ORTC_BINARY_GRAD(SubOp, return dy;, return NegOp::create(b, loc, dy);)
ORTC_BINARY_GRAD(MulOp, return MulOp::create(b, loc, dy, c);,
                 return MulOp::create(b, loc, dy, a);)
ORTC_BINARY_GRAD(DivOp, return DivOp::create(b, loc, dy, c);, {
  // d(a/c)/dc = -a / c^2
  Value q = DivOp::create(b, loc, a, MulOp::create(b, loc, c, c));
  return NegOp::create(b, loc, MulOp::create(b, loc, dy, q));
})
ORTC_BINARY_GRAD(PowOp, {
  // c * a^(c-1)
  Value cm1 = SubOp::create(b, loc, c, splatLike(b, loc, c, 1.0));
  Value d = MulOp::create(b, loc, c, PowOp::create(b, loc, a, cm1));
  return MulOp::create(b, loc, dy, d);
}, {
  // a^c * log(a), taken as 0 where a <= 0 (PyTorch masks a == 0).
  auto boolType = tensorTypeOf(a).clone(b.getI1Type());
  Value zero = splatLike(b, loc, a, 0.0);
  Value pos = GreaterOp::create(b, loc, boolType, a, zero);
  Value safeA = SelectOp::create(b, loc, pos, a, splatLike(b, loc, a, 1.0));
  Value d = MulOp::create(b, loc, y, LogOp::create(b, loc, safeA));
  return MulOp::create(b, loc, dy, d);
})

namespace {
/// PyTorch's maximum/minimum: the winner takes dy, ties split it in half.
void minMaxGrad(OpBuilder &b, Location loc, Value a, Value c, Value dy,
                bool isMax, SmallVectorImpl<Value> &out) {
  auto boolType = tensorTypeOf(a).clone(b.getI1Type());
  Value aWins = isMax ? Value(GreaterOp::create(b, loc, boolType, a, c))
                      : Value(LessOp::create(b, loc, boolType, a, c));
  Value cWins = isMax ? Value(GreaterOp::create(b, loc, boolType, c, a))
                      : Value(LessOp::create(b, loc, boolType, c, a));
  Value zero = splatLike(b, loc, dy, 0.0);
  Value half = scale(b, loc, dy, 0.5);
  Value tieOrZeroA = SelectOp::create(b, loc, cWins, zero, half);
  out[0] = SelectOp::create(b, loc, aWins, dy, tieOrZeroA);
  Value tieOrZeroC = SelectOp::create(b, loc, aWins, zero, half);
  out[1] = SelectOp::create(b, loc, cWins, dy, tieOrZeroC);
}
} // namespace

LogicalResult MinOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(2, Value());
  if (resultGrads[0] && isFloat(getResult()))
    minMaxGrad(b, getLoc(), getLhs(), getRhs(), resultGrads[0], false, operandGrads);
  return success();
}

LogicalResult MaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(2, Value());
  if (resultGrads[0] && isFloat(getResult()))
    minMaxGrad(b, getLoc(), getLhs(), getRhs(), resultGrads[0], true, operandGrads);
  return success();
}

LogicalResult SelectOp::verify() {
  if (getCond().getType().getShape() != getType().getShape())
    return emitOpError("condition shape differs from the result shape");
  return success();
}

LogicalResult SelectOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(3, Value());
  Value dy = resultGrads[0];
  if (!dy || !isFloat(getResult()))
    return success();
  Value zero = splatLike(b, getLoc(), dy, 0.0);
  operandGrads[1] = SelectOp::create(b, getLoc(), getCond(), dy, zero);
  operandGrads[2] = SelectOp::create(b, getLoc(), getCond(), zero, dy);
  return success();
}

} // namespace ortc
