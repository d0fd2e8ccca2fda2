//===- AttachLoss.cpp - @forward returns the scalar training loss --------===//
//
// The loss is ordinary ortc ops appended to @forward, so autodiff treats it like any
// other part of the graph.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "passes/autodiff/Passes.h"

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_ATTACHLOSS
#include "passes/autodiff/Passes.h.inc"

namespace {

struct AttachLossPass : impl::AttachLossBase<AttachLossPass> {
  using AttachLossBase::AttachLossBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>("forward");
    if (!fn) {
      module.emitError("ortc-attach-loss: no @forward function");
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(fn.getBody().back().getTerminator());
    OpBuilder b(ret);
    Location loc = NameLoc::get(b.getStringAttr("loss"), fn.getLoc());

    std::string wanted = loss == "none" ? lossOutput : logits;
    std::string names;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      names += (names.empty() ? "'" : ", '") + resultName(fn, i) + "'";
    std::optional<unsigned> picked;
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      if (wanted.empty() ? fn.getNumResults() == 1 : resultName(fn, i) == wanted)
        picked = i;
    if (!picked) {
      fn.emitError() << (wanted.empty()
                             ? "the model has several outputs (" + names +
                                   "): pick the one the loss reads with --logits"
                             : "the model has no output '" + wanted + "' (outputs: " +
                                   names + ")");
      return signalPassFailure();
    }
    Value out = ret.getOperand(*picked);
    auto outType = tensorTypeOf(out);
    if (!isa<FloatType>(outType.getElementType())) {
      fn.emitError() << "output '" << resultName(fn, *picked) << "' is not a float tensor";
      return signalPassFailure();
    }
    if (loss != "none" && findArgument(fn, labels)) {
      fn.emitError() << "the model already has an input named '" << labels
                     << "': choose another name with --labels";
      return signalPassFailure();
    }

    Value value;
    if (loss == "cross_entropy") {
      if (outType.getRank() < 2) {
        fn.emitError() << "cross_entropy needs logits of rank >= 2, got " << outType;
        return signalPassFailure();
      }
      int64_t classes = outType.getShape().back();
      int64_t rows = numElements(outType.getShape()) / std::max<int64_t>(classes, 1);
      auto labelType = RankedTensorType::get(outType.getShape().drop_back(), b.getI64Type());
      Value lab = addArgument(fn, labelType, labels, "input");
      Value flatLogits = reshapeTo(b, loc, out, {rows, classes});
      Value flatLabels = reshapeTo(b, loc, lab, {rows});
      IntegerAttr ignore =
          ignoreIndex == INT64_MIN ? IntegerAttr() : b.getI64IntegerAttr(ignoreIndex);
      value = SoftmaxCrossEntropyOp::create(b, loc, flatLogits, flatLabels, ignore,
                                            b.getStringAttr("mean"));
    } else if (loss == "mse") {
      Value target = addArgument(fn, outType, labels, "input");
      Value diff = SubOp::create(b, loc, out, target);
      SmallVector<int64_t> axes;
      for (int64_t d = 0; d < outType.getRank(); ++d)
        axes.push_back(d);
      value = ReduceMeanOp::create(b, loc, MulOp::create(b, loc, diff, diff), axes, false);
    } else if (loss == "none") {
      if (numElements(outType.getShape()) != 1) {
        fn.emitError() << "--loss-output '" << lossOutput << "' is not a scalar: " << outType;
        return signalPassFailure();
      }
      value = reshapeTo(b, loc, out, {});
    } else {
      fn.emitError() << "unknown loss '" << loss << "' (cross_entropy, mse, none)";
      return signalPassFailure();
    }
    setResults(fn, {StepResult{value, "loss", "loss", std::nullopt}});
  }
};

} // namespace
} // namespace ortc
