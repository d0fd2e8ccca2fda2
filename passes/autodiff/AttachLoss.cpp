//===- AttachLoss.cpp - @forward returns the scalar training loss --------===//
//
// The loss is ordinary ortc ops appended to @forward, so autodiff treats it like any
// other part of the graph. A classification loss also returns two "metric" results,
// `correct` (rows whose arg-max class is the label) and `counted` (rows whose label
// is not ignore_index), which @eval_step keeps for accuracy and @train_step drops.
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

  /// PyTorch's label smoothing: (1 - e) * CE + e * mean over kept rows of the mean
  /// over classes of -log_softmax, with rows whose label is ignore_index left out.
  Value smoothed(OpBuilder &b, Location loc, Value ce, Value logits, Value labels) {
    auto lt = tensorTypeOf(logits);
    int64_t rows = lt.getDimSize(0);
    Value logp = LogSoftmaxOp::create(b, loc, logits, 1);
    Value rowMean = ReduceMeanOp::create(b, loc, logp, ArrayRef<int64_t>{1}, false);
    auto boolType = RankedTensorType::get({rows}, b.getI1Type());
    Value ignored = EqualOp::create(b, loc, boolType, labels, splatLike(b, loc, labels,
                                                                         double(ignoreIndex)));
    Value kept = SelectOp::create(b, loc, ignored, splatLike(b, loc, rowMean, 0.0),
                                  splatLike(b, loc, rowMean, 1.0));
    Value count = ReduceSumOp::create(b, loc, kept, ArrayRef<int64_t>{0}, false);
    Value total = ReduceSumOp::create(b, loc, MulOp::create(b, loc, rowMean, kept),
                                      ArrayRef<int64_t>{0}, false);
    Value smooth = NegOp::create(b, loc, DivOp::create(b, loc, total, count));
    return AddOp::create(b, loc, scale(b, loc, ce, 1.0 - labelSmoothing),
                         scale(b, loc, smooth, labelSmoothing));
  }

  /// `correct` and `counted` of [rows, C] logits against [rows] labels, as f32
  /// scalars (exact up to 2^24 rows): argmax ties go to the first class, as torch's.
  SmallVector<StepResult> accuracyCounts(OpBuilder &b, Location loc, Value logits,
                                         Value labels) {
    int64_t rows = tensorTypeOf(labels).getDimSize(0);
    auto boolType = RankedTensorType::get({rows}, b.getI1Type());
    auto countType = RankedTensorType::get({rows}, b.getF32Type());
    Value predicted = ArgMaxOp::create(b, loc, logits, 1, false, false);
    Value hit = EqualOp::create(b, loc, boolType, predicted, labels);
    Value ignored =
        EqualOp::create(b, loc, boolType, labels, splatLike(b, loc, labels, double(ignoreIndex)));
    Value one = splat(b, loc, countType, 1.0), zero = splat(b, loc, countType, 0.0);
    Value kept = SelectOp::create(b, loc, ignored, zero, one);
    Value hits = SelectOp::create(b, loc, hit, kept, zero);
    auto sum = [&](Value v) -> Value {
      return ReduceSumOp::create(b, loc, v, ArrayRef<int64_t>{0}, false);
    };
    return {{sum(hits), "correct", "metric", std::nullopt},
            {sum(kept), "counted", "metric", std::nullopt}};
  }

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
    SmallVector<StepResult> metrics;
    if (loss == "cross_entropy") {
      if (outType.getRank() < 2) {
        fn.emitError() << "cross_entropy needs logits of rank >= 2, got " << outType;
        return signalPassFailure();
      }
      int64_t rank = outType.getRank();
      int64_t axis = classAxis != INT64_MIN ? classAxis : (rank == 3 ? 2 : 1);
      if (axis < -rank || axis >= rank) {
        fn.emitError() << "--class-axis " << static_cast<int64_t>(classAxis) << " is out of range for logits "
                       << outType;
        return signalPassFailure();
      }
      axis = axis < 0 ? axis + rank : axis;
      if (labelSmoothing < 0 || labelSmoothing > 1) {
        fn.emitError() << "--label-smoothing must be in [0, 1], got " << static_cast<double>(labelSmoothing);
        return signalPassFailure();
      }
      // Labels: the logits' shape without the class axis.
      SmallVector<int64_t> labelShape(outType.getShape());
      labelShape.erase(labelShape.begin() + axis);
      int64_t classes = outType.getDimSize(axis);
      int64_t rows = numElements(labelShape);
      Value lab = addArgument(fn, RankedTensorType::get(labelShape, b.getI64Type()), labels,
                              "input");
      // Move the class axis last, then [rows, C] against [rows].
      Value logitsLast = out;
      if (axis != rank - 1) {
        SmallVector<int64_t> perm;
        for (int64_t d = 0; d < rank; ++d)
          if (d != axis)
            perm.push_back(d);
        perm.push_back(axis);
        logitsLast = TransposeOp::create(b, loc, out, perm);
      }
      Value flatLogits = reshapeTo(b, loc, logitsLast, {rows, classes});
      Value flatLabels = reshapeTo(b, loc, lab, {rows});
      value = SoftmaxCrossEntropyOp::create(b, loc, flatLogits, flatLabels,
                                            b.getI64IntegerAttr(ignoreIndex),
                                            b.getStringAttr("mean"));
      if (labelSmoothing > 0)
        value = smoothed(b, loc, value, flatLogits, flatLabels);
      metrics = accuracyCounts(b, NameLoc::get(b.getStringAttr("accuracy"), fn.getLoc()),
                               flatLogits, flatLabels);
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
    SmallVector<StepResult> results{{value, "loss", "loss", std::nullopt}};
    results.append(metrics.begin(), metrics.end());
    setResults(fn, results);
  }
};

} // namespace
} // namespace ortc
