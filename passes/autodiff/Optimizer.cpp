//===- Optimizer.cpp - Gated SGD / AdamW updates in @train_step ----------===//
//
// Algorithm:
//  1. Add the run-time scalar `lr` and the state `step` (number of applied steps);
//     a dropout `seed` is mixed with the step so each step draws new masks.
//  2. finite = all_finite(loss, gradients...): every update below is gated by it, so
//     a step with a NaN/Inf changes nothing (parameters, state, buffers, step).
//  3. Optionally scale every gradient by min(1, max_norm / (global_norm + 1e-6)),
//     like torch.nn.utils.clip_grad_norm_.
//  4. One sgd_update / adamw_update per parameter; its state (momentum buffer, Adam
//     moments) becomes `ortc.global`s of kind "state" and arguments tied to results.
//  With data-parallel, before 2: the loss and the gradients (after accumulation, so
//  ranks only communicate once per optimizer step) become their mean over the ranks
//  (DataParallel.h); the finite flag, the clipping norm and the updates are then the
//  same on every rank. @accumulate_step averages only its loss, for the log. With
//  zero=1, the gradients are reduce-scattered instead and step 4 is one update of this
//  rank's shard of the flattened parameters, followed by an all-gather (DataParallel.h).
//  With grad-accum, first a copy of the differentiated step becomes @accumulate_step:
//  its gradients are added into per-parameter state `<name>.grad_accum` (nothing else
//  changes but BatchNorm running statistics); @train_step's gradients become
//  (own + accumulated) * grad_scale (the loop binds 1/N: PyTorch's mean over N
//  micro-batches) and the accumulators return to zero, whether or not the step applies.
//  With loss scaling (loss-scale-init > 0, what `--precision fp16` builds), first the
//  backward's seed (ortc.loss_seed) becomes the scale init * 2^exponent, so @accumulate_step
//  is scaled too; the gradients are divided by it (after accumulation) before the finite
//  check; at the end the exponent goes down by one after a step that is not finite and
//  up by one after `loss-scale-interval` finite steps in a row (PyTorch's GradScaler with
//  its growth 2 and backoff 0.5).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "passes/autodiff/DataParallel.h"
#include "passes/autodiff/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_OPTIMIZER
#include "passes/autodiff/Passes.h.inc"

namespace {

struct OptimizerPass : impl::OptimizerBase<OptimizerPass> {
  using OptimizerBase::OptimizerBase;

  void runOnOperation() override;

  /// A new optimizer-state global and the train_step argument that reads it.
  FailureOr<BlockArgument> addState(func::FuncOp fn, StringRef name,
                                    RankedTensorType type) {
    ModuleOp module = getOperation();
    if (module.lookupSymbol(name)) {
      fn.emitError() << "optimizer state '" << name << "' clashes with a weight name";
      return failure();
    }
    OpBuilder b(module.getBody(), module.getBody()->begin());
    GlobalOp::create(b, fn.getLoc(), name, type, "state", "");
    return addArgument(fn, type, name, "state");
  }

  /// Dropout masks are keyed by (seed, step, op, element): every step draws a new mask,
  /// and a resumed run (step is saved state) draws the same masks as an unbroken one.
  static void mixSeedWithStep(func::FuncOp fn, Value step, Location loc) {
    auto seedIdx = findArgument(fn, "seed");
    if (!seedIdx)
      return;
    Value seed = fn.getArgument(*seedIdx);
    auto scalarI64 = RankedTensorType::get({}, IntegerType::get(fn.getContext(), 64));
    OpBuilder top(&fn.getBody().front(), fn.getBody().front().begin());
    Value step1 = AddOp::create(top, loc, step, splat(top, loc, scalarI64, 1.0));
    Value mixed = AddOp::create(
        top, loc, MulOp::create(top, loc, seed, splat(top, loc, scalarI64, 1000003.0)), step1);
    seed.replaceAllUsesExcept(mixed, mixed.getDefiningOp()->getOperand(0).getDefiningOp());
  }

  /// @accumulate_step from a copy of the differentiated @train_step (see the top).
  LogicalResult buildAccumulateStep(func::FuncOp train);

  /// Dynamic loss scaling's state and the scale this step uses.
  struct LossScale {
    Value exponent, growth, scale;
  };
  /// Adds the state, computes the scale and makes it the backward's seed.
  std::optional<LossScale> scaleTheSeed(func::FuncOp fn) {
    Operation *seed = nullptr;
    fn.walk([&](Operation *op) {
      if (op->hasAttr(kLossSeedAttr))
        seed = op;
    });
    if (!seed) {
      fn.emitError("loss scaling: no backward seed (ortc.loss_seed) in @train_step");
      return std::nullopt;
    }
    OpBuilder b(seed);
    auto scalarF32 = RankedTensorType::get({}, b.getF32Type());
    auto k = addState(fn, "loss_scale.exponent", scalarF32);
    auto n = addState(fn, "loss_scale.growth", RankedTensorType::get({}, b.getI64Type()));
    if (failed(k) || failed(n))
      return std::nullopt;
    Location loc = NameLoc::get(b.getStringAttr("loss_scale"), fn.getLoc());
    bool atStart = Block::iterator(seed) == seed->getBlock()->begin();
    Block::iterator first = atStart ? seed->getBlock()->end() : std::prev(Block::iterator(seed));
    Value scale = MulOp::create(b, loc, splat(b, loc, scalarF32, lossScaleInit),
                                PowOp::create(b, loc, splat(b, loc, scalarF32, 2.0), *k));
    Value seedValue = scale;
    auto seedType = tensorTypeOf(seed->getResult(0));
    if (seedType.getElementType() != b.getF32Type())
      seedValue = CastOp::create(b, loc, RankedTensorType::get({}, seedType.getElementType()), scale);
    if (seedType.getRank() > 0)
      seedValue = broadcastTo(b, loc, seedValue, seedType.getShape());
    for (Operation &op : llvm::make_range(atStart ? seed->getBlock()->begin() : std::next(first),
                                          Block::iterator(seed)))
      if (!isa<ConstantOp>(op))
        setStage(&op, "backward");
    seed->getResult(0).replaceAllUsesWith(seedValue);
    seed->erase();
    return LossScale{*k, *n, scale};
  }
};

LogicalResult OptimizerPass::buildAccumulateStep(func::FuncOp train) {
  ModuleOp module = getOperation();
  OpBuilder mb(module.getContext());
  mb.setInsertionPointAfter(train);
  auto fn = cast<func::FuncOp>(mb.clone(*train));
  fn.setSymName("accumulate_step");
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  OpBuilder b(ret);
  Location loc = NameLoc::get(b.getStringAttr("grad_accum"), fn.getLoc());
  SmallVector<StepResult> results;
  for (unsigned i = 0; i < fn.getNumResults(); ++i) {
    std::string role = resultRole(fn, i), name = resultName(fn, i);
    Value v = ret.getOperand(i);
    if (role == "gradient") {
      auto type = tensorTypeOf(v);
      if (module.lookupSymbol(name + ".grad_accum")) {
        fn.emitError() << "gradient accumulator '" << name << ".grad_accum' clashes with a weight name";
        return failure();
      }
      OpBuilder gb(module.getBody(), module.getBody()->begin());
      GlobalOp::create(gb, fn.getLoc(), name + ".grad_accum", type, "state", "");
      BlockArgument acc = addArgument(fn, type, name + ".grad_accum", "state");
      results.push_back({AddOp::create(b, loc, acc, v), name + ".grad_accum", "state",
                         acc.getArgNumber()});
    } else {
      if (role == "loss" && dataParallel)
        v = AllReduceOp::create(b, loc, v.getType(), v, b.getStringAttr("mean"));
      results.push_back({v, name, role, resultTied(fn, i)});
    }
  }
  setResults(fn, results);
  mixSeedWithStep(fn, addArgument(fn, RankedTensorType::get({}, b.getI64Type()), "step", "state"),
                  loc);
  for (Operation &op : fn.getBody().front().without_terminator())
    if (stageOf(&op).empty() && !isa<WeightOp, ConstantOp>(op))
      setStage(&op, "backward");
  return success();
}

void OptimizerPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto fn = module.lookupSymbol<func::FuncOp>("train_step");
  if (!fn) {
    module.emitError("ortc-optimizer: no @train_step (run ortc-autodiff first)");
    return signalPassFailure();
  }
  if (optimizer != "sgd" && optimizer != "adamw") {
    fn.emitError() << "unknown optimizer '" << optimizer << "' (sgd, adamw)";
    return signalPassFailure();
  }
  if (zero && (zero != 1 || !dataParallel || ranks < 1)) {
    fn.emitError() << "zero=" << int64_t(zero) << " needs data-parallel, zero=1 and ranks >= 1 (ranks="
                   << int64_t(ranks) << ")";
    return signalPassFailure();
  }
  if (dataParallel && bucketBytes <= 0) {
    fn.emitError() << "bucket-bytes must be positive, got " << int64_t(bucketBytes);
    return signalPassFailure();
  }
  double wd = weightDecay >= 0 ? weightDecay : (optimizer == "adamw" ? 0.01 : 0.0);
  if (lossScaleInit < 0 || (lossScaleInit > 0 && lossScaleInterval < 1)) {
    fn.emitError() << "loss-scale-init must be >= 0 and loss-scale-interval >= 1";
    return signalPassFailure();
  }
  // Loss scaling: the backward starts from the scale (before @accumulate_step is copied).
  std::optional<LossScale> scaling;
  if (lossScaleInit > 0) {
    scaling = scaleTheSeed(fn);
    if (!scaling)
      return signalPassFailure();
  }
  fn.walk([](Operation *op) { op->removeAttr(kLossSeedAttr); });
  if (gradAccum && failed(buildAccumulateStep(fn)))
    return signalPassFailure();
  // Every op this pass adds is of the optimizer stage (OpAnnotations.h).
  DenseSet<Operation *> before;
  fn.walk([&](Operation *op) { before.insert(op); });

  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  OpBuilder b(ret);
  Location loc = NameLoc::get(b.getStringAttr("optimizer"), fn.getLoc());
  Value loss;
  SmallVector<std::pair<std::string, Value>> gradients;
  SmallVector<StepResult> buffers;
  for (unsigned i = 0; i < fn.getNumResults(); ++i) {
    std::string role = resultRole(fn, i);
    Value v = ret.getOperand(i);
    if (role == "loss")
      loss = v;
    else if (role == "gradient")
      gradients.push_back({resultName(fn, i), v});
    else if (role == "buffer")
      buffers.push_back({v, resultName(fn, i), role, resultTied(fn, i)});
  }

  auto scalarF32 = RankedTensorType::get({}, b.getF32Type());
  auto scalarI64 = RankedTensorType::get({}, b.getI64Type());
  auto scalarI1 = RankedTensorType::get({}, b.getI1Type());
  Value lr = addArgument(fn, scalarF32, "lr", "scalar");
  // AdamW's hyperparameters: run-time scalars whose defaults are the build's values.
  SmallVector<Value, 4> adamw;
  if (optimizer == "adamw")
    for (auto [name, value] : {std::pair<const char *, double>{"beta1", beta1},
                               {"beta2", beta2}, {"eps", eps}, {"weight_decay", wd}}) {
      BlockArgument a = addArgument(fn, scalarF32, name, "scalar");
      fn.setArgAttr(a.getArgNumber(), "ortc.default", b.getF64FloatAttr(value));
      adamw.push_back(a);
    }
  auto stepArg = addState(fn, "step", scalarI64);
  if (failed(stepArg))
    return signalPassFailure();
  Value t = AddOp::create(b, loc, *stepArg, splat(b, loc, scalarI64, 1.0));

  mixSeedWithStep(fn, *stepArg, loc);

  // Accumulated gradients join this step's, scaled; the accumulators start over.
  SmallVector<Value> produced{loss};
  for (auto &[name, g] : gradients)
    produced.push_back(g);
  SmallVector<StepResult> cleared;
  if (gradAccum) {
    Value gradScale = addArgument(fn, scalarF32, "grad_scale", "scalar");
    for (auto &[name, g] : gradients) {
      auto type = tensorTypeOf(g);
      BlockArgument acc = addArgument(fn, type, name + ".grad_accum", "state");
      Value scale = broadcastTo(b, loc, gradScale, type.getShape());
      if (type.getElementType() != b.getF32Type())
        scale = CastOp::create(b, loc, type, scale);
      g = MulOp::create(b, loc, AddOp::create(b, loc, g, acc), scale);
      cleared.push_back({splat(b, loc, type, 0.0), name + ".grad_accum", "state",
                         acc.getArgNumber()});
    }
  }

  if (scaling) {
    // Gradients of the scaled loss, back to the loss's (inf stays inf for the check).
    Value inv = DivOp::create(b, loc, splatLike(b, loc, scaling->scale, 1.0), scaling->scale);
    for (auto &[name, g] : gradients) {
      auto type = tensorTypeOf(g);
      Value f = broadcastTo(b, loc, inv, type.getShape());
      if (type.getElementType() != b.getF32Type())
        f = CastOp::create(b, loc, type, f);
      g = MulOp::create(b, loc, g, f);
    }
  }

  SmallVector<Attribute> checkNames{b.getStringAttr("loss")};
  for (auto &[name, g] : gradients)
    checkNames.push_back(b.getStringAttr(name));
  // What each element of `finite_each` checked: the loss, then each parameter's gradient.
  fn->setAttr("ortc.finite_checks", b.getArrayAttr(checkNames));
  Value finite, finiteEach;
  ZeroExchange zx;
  if (zero) {
    SmallVector<Value> grads;
    for (auto &[name, g] : gradients) {
      if (tensorTypeOf(g).getElementType() != tensorTypeOf(gradients[0].second).getElementType()) {
        fn.emitError() << "--zero 1 shards one flat tensor of the gradients, but '" << name
                       << "' has another element type than '" << gradients[0].first << "'";
        return signalPassFailure();
      }
      grads.push_back(g);
    }
    zx = exchangeForZero(b, loc, loss, grads, ranks);
    loss = zx.loss;
    finite = zx.finite;
    finiteEach = zx.each;
    fn->setAttr("ortc.zero_ranks", b.getI64IntegerAttr(ranks));
  } else {
    if (dataParallel) {
      SmallVector<Value> averaged{loss};
      for (auto &[name, g] : gradients)
        averaged.push_back(g);
      int64_t buckets = averageOverRanks(b, loc, averaged, produced, bucketBytes);
      fn->setAttr("ortc.all_reduce_buckets", b.getI64IntegerAttr(buckets));
      loss = averaged[0];
      for (auto [k, entry] : llvm::enumerate(gradients))
        entry.second = averaged[k + 1];
    }
    SmallVector<Value> checked{loss};
    for (auto &[name, g] : gradients)
      checked.push_back(g);
    auto allFinite = AllFiniteOp::create(
        b, loc, scalarI1, RankedTensorType::get({int64_t(checked.size())}, b.getI1Type()), checked);
    finite = allFinite.getResult();
    finiteEach = allFinite.getEach();
  }

  if (clipGradNorm > 0) {
    // The global norm: of every gradient, or of the ranks' shards together.
    auto squares = [&](Value g) -> Value {
      SmallVector<int64_t> axes;
      for (int64_t d = 0; d < tensorTypeOf(g).getRank(); ++d)
        axes.push_back(d);
      Value sq = MulOp::create(b, loc, g, g);
      return axes.empty() ? sq : Value(ReduceSumOp::create(b, loc, sq, axes, false));
    };
    Value sumSq;
    if (zero) {
      sumSq = squares(zx.gradShard);
      sumSq = AllReduceOp::create(b, loc, sumSq.getType(), sumSq, b.getStringAttr("sum"));
    } else {
      for (auto &[name, g] : gradients)
        sumSq = addOrNull(b, loc, sumSq, squares(g));
    }
    Value norm = SqrtOp::create(b, loc, sumSq);
    Value denom = AddOp::create(b, loc, norm, splatLike(b, loc, norm, 1e-6));
    Value coef = DivOp::create(b, loc, splatLike(b, loc, norm, clipGradNorm), denom);
    coef = MinOp::create(b, loc, coef, splatLike(b, loc, coef, 1.0));
    auto clip = [&](Value &g) {
      g = MulOp::create(b, loc, g, broadcastTo(b, loc, coef, tensorTypeOf(g).getShape()));
    };
    if (zero)
      clip(zx.gradShard);
    else
      for (auto &[name, g] : gradients)
        clip(g);
  }

  SmallVector<StepResult> results{{loss, "loss", "loss", std::nullopt},
                                  {finite, "finite", "output", std::nullopt},
                                  {finiteEach, "finite_each", "output", std::nullopt}};
  SmallVector<StepResult> state;
  /// The update of parameter `p` (named `name`: its state is `<name>.<kind>`) by `g`;
  /// returns the new value, adds the state's results.
  auto update = [&](StringRef name, Value p, Value g) -> FailureOr<Value> {
    auto type = tensorTypeOf(p);
    Location ploc = NameLoc::get(b.getStringAttr(name + "/update"), fn.getLoc());
    if (optimizer == "sgd") {
      Value buf;
      if (momentum != 0) {
        auto arg = addState(fn, (name + ".momentum_buffer").str(), type);
        if (failed(arg))
          return failure();
        buf = *arg;
      }
      SmallVector<Type> types(buf ? 2 : 1, type);
      auto op = SgdUpdateOp::create(b, ploc, types, p, g, buf, lr, t, finite,
                                    b.getF64FloatAttr(momentum), b.getF64FloatAttr(dampening),
                                    b.getBoolAttr(nesterov), b.getF64FloatAttr(wd));
      if (buf)
        state.push_back({op.getResult(1), (name + ".momentum_buffer").str(), "state",
                         cast<BlockArgument>(buf).getArgNumber()});
      return op.getResult(0);
    }
    auto m = addState(fn, (name + ".exp_avg").str(), type);
    auto v = addState(fn, (name + ".exp_avg_sq").str(), type);
    if (failed(m) || failed(v))
      return failure();
    auto op = AdamWUpdateOp::create(b, ploc, type, type, type, p, g, *m, *v, lr, t, finite,
                                    adamw[0], adamw[1], adamw[2], adamw[3]);
    state.push_back({op.getNewM(), (name + ".exp_avg").str(), "state", m->getArgNumber()});
    state.push_back({op.getNewV(), (name + ".exp_avg_sq").str(), "state", v->getArgNumber()});
    return op.getNewParam();
  };
  if (zero) {
    // This rank updates its shard of the flattened parameters with its shard of the
    // state ("zero1.exp_avg" ...), then every rank gathers the shards.
    SmallVector<Value> params;
    SmallVector<RankedTensorType> types;
    for (auto &[name, g] : gradients) {
      params.push_back(fn.getArgument(*findArgument(fn, name)));
      types.push_back(tensorTypeOf(params.back()));
    }
    Location zloc = NameLoc::get(b.getStringAttr("zero1"), loc);
    Value flat = flatten(b, zloc, params, zx.shard * ranks);
    Value mine = RankShardOp::create(b, zloc, zx.gradShard.getType(), flat,
                                     b.getI64IntegerAttr(ranks));
    FailureOr<Value> updated = update("zero1", mine, zx.gradShard);
    if (failed(updated))
      return signalPassFailure();
    Value gathered = AllGatherOp::create(b, zloc, flat.getType(), *updated,
                                         b.getI64IntegerAttr(ranks));
    for (auto [k, v] : llvm::enumerate(unflatten(b, zloc, gathered, types)))
      results.push_back({v, gradients[k].first, "parameter", findArgument(fn, gradients[k].first)});
  } else {
    for (auto &[name, g] : gradients) {
      auto pIdx = findArgument(fn, name);
      FailureOr<Value> updated = update(name, fn.getArgument(*pIdx), g);
      if (failed(updated))
        return signalPassFailure();
      results.push_back({*updated, name, "parameter", *pIdx});
    }
  }
  // Buffers (BatchNorm running stats) and the step count move only on good steps.
  for (StepResult &r : buffers) {
    Value old = fn.getArgument(*r.tied);
    auto cond = broadcastTo(b, loc, finite, tensorTypeOf(old).getShape());
    r.value = SelectOp::create(b, loc, cond, r.value, old);
    results.push_back(r);
  }
  results.append(state.begin(), state.end());
  results.append(cleared.begin(), cleared.end());
  results.push_back({SelectOp::create(b, loc, finite, t, *stepArg), "step", "state",
                     stepArg->getArgNumber()});
  if (scaling) {
    // GradScaler's update: a step that is not finite halves the scale and restarts the
    // count; `interval` finite steps in a row double it.
    Value k = scaling->exponent, n = scaling->growth;
    Value n1 = AddOp::create(b, loc, n, splat(b, loc, scalarI64, 1.0));
    Value grow = EqualOp::create(b, loc, RankedTensorType::get({}, b.getI1Type()), n1,
                                 splat(b, loc, scalarI64, double(lossScaleInterval)));
    Value up = SelectOp::create(b, loc, grow, AddOp::create(b, loc, k, splat(b, loc, scalarF32, 1.0)), k);
    Value down = SubOp::create(b, loc, k, splat(b, loc, scalarF32, 1.0));
    Value zero = splat(b, loc, scalarI64, 0.0);
    results.push_back({SelectOp::create(b, loc, finite, up, down), "loss_scale.exponent", "state",
                       cast<BlockArgument>(k).getArgNumber()});
    results.push_back({SelectOp::create(b, loc, finite, SelectOp::create(b, loc, grow, zero, n1), zero),
                       "loss_scale.growth", "state", cast<BlockArgument>(n).getArgNumber()});
    results.push_back({scaling->scale, "loss_scale", "output", std::nullopt});
  }
  setResults(fn, results);
  for (Operation &op : fn.getBody().front().without_terminator())
    if (!before.count(&op) && !isa<WeightOp, ConstantOp>(op))
      setStage(&op, "optimizer");
}

} // namespace
} // namespace ortc
