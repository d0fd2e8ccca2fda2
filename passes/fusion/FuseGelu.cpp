//===- FuseGelu.cpp - x * 0.5 * (1 + erf(x / sqrt 2)) -> ortc.gelu -------===//
//
// Algorithm: for every ortc.erf, walk up to its argument (x / c or x * c with c a
// splat equal to sqrt(2) or 1/sqrt(2) within float32 rounding), then down through
// `+ 1`, `* x` and `* 0.5` (in any operand order, the 0.5 either last or applied to x
// first); if the whole chain matches, replace its last op by ortc.gelu(x).
//
//===----------------------------------------------------------------------===//
#include "passes/fusion/Passes.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_FUSEGELU
#include "passes/fusion/Passes.h.inc"

namespace {

/// The value of a splat float constant, if `v` is one.
std::optional<double> splatValue(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool near(std::optional<double> v, double want) {
  return v && std::abs(*v - want) <= 1e-6 * std::abs(want);
}

/// The other operand of a binary op when one operand satisfies `pred`.
template <typename OpT>
Value otherOperand(OpT op, function_ref<bool(Value)> pred) {
  if (pred(op.getRhs()))
    return op.getLhs();
  if (pred(op.getLhs()))
    return op.getRhs();
  return nullptr;
}

/// The single user of `v` of type OpT, or null.
template <typename OpT> OpT onlyUser(Value v) {
  if (!v.hasOneUse())
    return nullptr;
  return dyn_cast<OpT>(*v.getUsers().begin());
}

struct FuseGeluPass : impl::FuseGeluBase<FuseGeluPass> {
  void runOnOperation() override {
    SmallVector<ErfOp> erfs;
    getOperation().walk([&](ErfOp e) { erfs.push_back(e); });
    for (ErfOp erf : erfs)
      tryFuse(erf);
  }

  void tryFuse(ErfOp erf) {
    // erf's argument: x / sqrt(2) or x * (1/sqrt(2)).
    Value x;
    Operation *scaleOp = erf.getX().getDefiningOp();
    if (auto div = dyn_cast_or_null<DivOp>(scaleOp)) {
      if (near(splatValue(div.getRhs()), std::sqrt(2.0)))
        x = div.getLhs();
    } else if (auto mul = dyn_cast_or_null<MulOp>(scaleOp)) {
      x = otherOperand(mul, [](Value v) { return near(splatValue(v), std::sqrt(0.5)); });
    }
    if (!x || !scaleOp->getResult(0).hasOneUse())
      return;
    auto add = onlyUser<AddOp>(erf.getResult());
    if (!add || !otherOperand(add, [](Value v) { return near(splatValue(v), 1.0); }))
      return;
    auto isHalf = [](Value v) { return near(splatValue(v), 0.5); };
    auto mulX = onlyUser<MulOp>(add.getResult());
    if (!mulX)
      return;
    Value other = otherOperand(mulX, [&](Value v) { return v == add.getResult(); });
    Operation *last = nullptr;
    if (other == x) {
      // (x * (1 + erf)) * 0.5
      auto half = onlyUser<MulOp>(mulX.getResult());
      if (!half || !otherOperand(half, isHalf))
        return;
      last = half;
    } else if (auto halfX = other ? other.getDefiningOp<MulOp>() : MulOp()) {
      // (x * 0.5) * (1 + erf)
      if (otherOperand(halfX, isHalf) != x)
        return;
      last = mulX;
    } else {
      return;
    }
    OpBuilder b(last);
    Value gelu = GeluOp::create(b, last->getLoc(), x, false);
    last->getResult(0).replaceAllUsesWith(gelu);
    // The now-dead chain is removed by the canonicalizer that follows.
  }
};

} // namespace
} // namespace ortc
