//===- Autodiff.cpp - Reverse-mode autodiff over the ortc dialect --------===//
//
// Algorithm:
//  1. Clone @forward (which returns the scalar loss, then any "metric" results) into
//     @eval_step, with inference semantics (BatchNorm on running statistics, Dropout
//     off; metrics become outputs), and into @train_step (loss only).
//  2. In @train_step, every float weight that the rule of WeightRules.h leaves
//     trainable (not frozen, not an exporter-made constant) becomes a candidate
//     argument. Values reachable from candidates are "varied".
//  3. Walk the ops backwards from d(loss) = 1. For each op with an incoming gradient
//     call its GradientOpInterface and add the operand gradients into a map (values
//     used several times, e.g. tied weights and residuals, get their gradients
//     summed). Integer tensors carry no gradient. Ops without a rule are collected and
//     reported together, each with a parameter that needs it.
//  4. Candidates that received a gradient are parameters; BatchNorm running
//     statistics become buffers (updated with PyTorch's unbiased batch variance);
//     everything else goes back to being a constant weight.
//  5. @train_step returns the loss, one gradient per parameter (named after it) and
//     the new buffers (tied to their arguments).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "passes/autodiff/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "passes/autodiff/WeightRules.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/GlobPattern.h"

#include <map>
#include <set>

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/autodiff/Passes.h.inc"

namespace {

bool isFloatValue(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// @eval_step: BatchNorm reads its running statistics, Dropout is the identity.
void toInference(func::FuncOp fn) {
  SmallVector<Operation *> ops;
  fn.walk([&](Operation *op) {
    if (isa<BatchNormTrainOp, DropoutOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    OpBuilder b(op);
    if (auto bn = dyn_cast<BatchNormTrainOp>(op)) {
      Value y = BatchNormInferOp::create(b, bn.getLoc(), bn.getY().getType(), bn.getX(),
                                         bn.getScale(), bn.getBias(), bn.getRunningMean(),
                                         bn.getRunningVar(), bn.getEpsilonAttr());
      bn.getY().replaceAllUsesWith(y);
    } else {
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
    }
    if (op->use_empty())
      op->erase();
  }
  // The dropout seed is no longer read.
  if (auto seed = findArgument(fn, "seed"))
    if (fn.getArgument(*seed).use_empty())
      (void)fn.eraseArgument(*seed);
}

struct AutodiffPass : impl::AutodiffBase<AutodiffPass> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override;
};

void AutodiffPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  bool metricsOnly = true;
  for (unsigned i = 1; forward && i < forward.getNumResults(); ++i)
    metricsOnly &= resultRole(forward, i) == "metric";
  if (!forward || forward.getNumResults() < 1 || resultRole(forward, 0) != "loss" ||
      !metricsOnly) {
    module.emitError("ortc-autodiff: needs @forward returning the loss "
                     "(run ortc-attach-loss first)");
    return signalPassFailure();
  }
  WeightRule rule;
  std::string error;
  if (!rule.init(trainable, freeze, error)) {
    module.emitError() << error;
    return signalPassFailure();
  }
  std::vector<std::string> weightNames;
  module.walk([&](GlobalOp g) { weightNames.push_back(g.getSymName().str()); });
  if (auto bad = rule.unmatched(weightNames); !bad.empty()) {
    auto diag = module.emitError() << "no weight matches ";
    llvm::interleaveComma(bad, diag);
    return signalPassFailure();
  }

  OpBuilder mb(module.getContext());
  mb.setInsertionPointAfter(forward);
  auto evalFn = cast<func::FuncOp>(mb.clone(*forward));
  evalFn.setSymName("eval_step");
  toInference(evalFn);
  for (unsigned i = 1; i < evalFn.getNumResults(); ++i)
    evalFn.setResultAttr(i, "ortc.role", mb.getStringAttr("output"));
  auto fn = cast<func::FuncOp>(mb.clone(*forward));
  fn.setSymName("train_step");
  forward.erase();
  // --sync-batchnorm: the training step's BatchNorm statistics are every rank's (the
  // op and its gradient communicate; eval_step reads the running statistics).
  if (syncBatchnorm)
    fn.walk([&](BatchNormTrainOp bn) { bn.setSync(true); });
  if (fn.getNumResults() > 1) { // metrics are eval_step's; what computed them goes too
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    setResults(fn, {StepResult{ret.getOperand(0), "loss", "loss", std::nullopt}});
    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().front().without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops))
      if (isOpTriviallyDead(op))
        op->erase();
  }

  // 2. Candidate arguments: one per trainable-looking float weight.
  std::map<std::string, SmallVector<WeightOp>> reads;
  fn.walk([&](WeightOp w) { reads[w.getName().str()].push_back(w); });
  std::map<std::string, unsigned> candidateArg;
  // BatchNorm running statistics are torch buffers, yet this pass updates them.
  std::set<std::string> runningStats;
  fn.walk([&](BatchNormTrainOp bn) {
    for (Value v : {bn.getRunningMean(), bn.getRunningVar()})
      if (auto w = v.getDefiningOp<WeightOp>())
        runningStats.insert(w.getName().str());
  });
  for (auto &[name, ws] : reads) {
    auto global = module.lookupSymbol<GlobalOp>(name);
    if (!isFloatValue(ws[0].getResult()))
      continue;
    if (rule.frozen(name)) {
      global.setKind("frozen");
      continue;
    }
    auto torchKind = global->getAttrOfType<StringAttr>("torch_kind");
    if (!rule.forcedTrainable(name) && !runningStats.count(name) &&
        !exporterConstantReason(name, numElements(ws[0].getType().getShape()),
                                torchKind ? torchKind.getValue() : "")
             .empty()) {
      global.setKind("constant");
      continue;
    }
    BlockArgument arg = addArgument(fn, ws[0].getType(), name, "parameter");
    candidateArg[name] = arg.getArgNumber();
    for (WeightOp w : ws) {
      w.getResult().replaceAllUsesWith(arg);
      w.erase();
    }
  }

  // Forward activity: which candidate reaches each value (for error messages).
  DenseMap<Value, unsigned> reachedFrom;
  for (auto &[name, idx] : candidateArg)
    reachedFrom[fn.getArgument(idx)] = idx;
  Block &body = fn.getBody().front();
  for (Operation &op : body.without_terminator())
    for (Value in : op.getOperands())
      if (auto it = reachedFrom.find(in); it != reachedFrom.end()) {
        for (Value r : op.getResults())
          if (isFloatValue(r))
            reachedFrom.try_emplace(r, it->second);
        break;
      }

  // 3. The backward walk.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret.getOperand(0);
  OpBuilder b(ret);
  DenseMap<Value, Value> grads;
  grads[loss] = splat(b, NameLoc::get(b.getStringAttr("loss_grad"), fn.getLoc()),
                      tensorTypeOf(loss), 1.0);
  // Loss scaling (Optimizer.cpp) starts the backward from its scale instead.
  grads[loss].getDefiningOp()->setAttr(kLossSeedAttr, b.getUnitAttr());
  std::vector<std::string> missing;
  // Values whose gradient could not be built (downstream of an op without a rule):
  // the walk goes on through them so that every missing rule is found in one run.
  DenseSet<Value> blocked;
  SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator()) {
    forwardOps.push_back(&op);
    if (!isa<WeightOp, ConstantOp>(op))
      setStage(&op, "forward");
  }
  for (Operation *op : llvm::reverse(forwardOps)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    bool isBlocked = false;
    for (Value r : op->getResults()) {
      Value g = grads.lookup(r);
      resultGrads.push_back(g);
      any |= static_cast<bool>(g);
      isBlocked |= blocked.contains(r);
    }
    if (!any && !isBlocked)
      continue;
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (!rule || isBlocked) {
      for (Value in : op->getOperands())
        if (reachedFrom.count(in) && isFloatValue(in))
          blocked.insert(in);
    }
    if (isBlocked && rule)
      continue;
    if (!rule) {
      std::string s;
      llvm::raw_string_ostream os(s);
      os << op->getName() << " at " << op->getLoc();
      for (Value r : op->getResults())
        if (auto it = reachedFrom.find(r); it != reachedFrom.end()) {
          os << " (needed by parameter '" << argName(fn, it->second) << "')";
          break;
        }
      missing.push_back(s);
      continue;
    }
    b.setInsertionPoint(ret);
    SmallVector<Value> operandGrads;
    if (failed(rule.buildGradient(b, resultGrads, operandGrads))) {
      op->emitError("gradient rule failed");
      return signalPassFailure();
    }
    for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
      if (g && reachedFrom.count(operand) && isFloatValue(operand))
        grads[operand] = addOrNull(b, op->getLoc(), grads.lookup(operand), g);
  }
  if (!missing.empty()) {
    auto diag = fn.emitError() << missing.size()
                               << " op(s) on the path to a parameter have no gradient rule:";
    for (const std::string &m : missing)
      diag << "\n  - " << m;
    return signalPassFailure();
  }

  // 4. Classify the candidates.
  std::map<unsigned, BatchNormTrainOp> runningStatOf;
  fn.walk([&](BatchNormTrainOp bn) {
    for (Value v : {bn.getRunningMean(), bn.getRunningVar()})
      if (auto arg = dyn_cast<BlockArgument>(v))
        runningStatOf[arg.getArgNumber()] = bn;
  });
  SmallVector<StepResult> results{{loss, "loss", "loss", std::nullopt}};
  SmallVector<StepResult> bufferResults;
  SmallVector<unsigned> toErase;
  b.setInsertionPoint(ret);
  for (auto &[name, idx] : candidateArg) {
    BlockArgument arg = fn.getArgument(idx);
    auto global = module.lookupSymbol<GlobalOp>(name);
    if (Value g = grads.lookup(arg)) {
      global.setKind("parameter");
      results.push_back({g, name, "gradient", std::nullopt});
      continue;
    }
    if (auto it = runningStatOf.find(idx); it != runningStatOf.end()) {
      // ONNX: new = running * momentum + batch * (1 - momentum); the variance uses
      // PyTorch's unbiased batch variance.
      BatchNormTrainOp bn = it->second;
      double m = bn.getMomentum().convertToDouble();
      Location loc = bn.getLoc();
      bool isMean = bn.getRunningMean() == arg;
      Value batch = isMean ? bn.getMean() : bn.getVar();
      if (!isMean) {
        int64_t n = numElements(bn.getX().getType().getShape()) /
                    bn.getX().getType().getDimSize(1);
        if (bn.getSync()) {
          // Over all ranks the count is n * ranks: factor n R / (n R - 1), R counted by an
          // all-reduce of 1 (the build does not know the run's ranks).
          auto one = splat(b, loc, RankedTensorType::get({}, b.getF32Type()), 1.0);
          Value ranks = AllReduceOp::create(b, loc, one.getType(), one, b.getStringAttr("sum"));
          Value count = scale(b, loc, ranks, double(n));
          Value factor = DivOp::create(b, loc, count,
                                       SubOp::create(b, loc, count, splatLike(b, loc, count, 1.0)));
          Type e = tensorTypeOf(batch).getElementType();
          if (e != b.getF32Type())
            factor = CastOp::create(b, loc, RankedTensorType::get({}, e), factor);
          batch = MulOp::create(b, loc, batch, broadcastTo(b, loc, factor, tensorTypeOf(batch).getShape()));
        } else {
          batch = scale(b, loc, batch, n > 1 ? double(n) / double(n - 1) : 1.0);
        }
      }
      Value updated = AddOp::create(b, loc, scale(b, loc, arg, m),
                                    scale(b, loc, batch, 1.0 - m));
      global.setKind("buffer");
      fn.setArgAttr(idx, "ortc.role", b.getStringAttr("buffer"));
      bufferResults.push_back({updated, name, "buffer", idx});
      continue;
    }
    global.setKind("constant");
    OpBuilder eb(&body, body.begin());
    Value w = WeightOp::create(eb, global.getLoc(), arg.getType(), name);
    arg.replaceAllUsesWith(w);
    toErase.push_back(idx);
  }
  results.append(bufferResults.begin(), bufferResults.end());
  setResults(fn, results);
  // Erase reverted arguments (highest index first keeps the others' indices).
  llvm::sort(toErase, std::greater<unsigned>());
  for (unsigned idx : toErase) {
    (void)fn.eraseArgument(idx);
    for (unsigned r = 0; r < fn.getNumResults(); ++r)
      if (auto t = resultTied(fn, r); t && *t > idx)
        fn.setResultAttr(r, "ortc.tied", b.getI64IntegerAttr(*t - 1));
  }
  // Weights nobody trains or updates are constants.
  module.walk([&](GlobalOp g) {
    if (g.getKind() == "weight")
      g.setKind("constant");
  });
  // Stages (OpAnnotations.h): @eval_step is all forward; in @train_step, what the
  // backward walk and the buffer updates added (unmarked so far) is backward.
  // Weights and constants are data, of no stage.
  for (Operation &op : evalFn.getBody().front().without_terminator())
    if (!isa<WeightOp, ConstantOp>(op))
      setStage(&op, "forward");
  for (Operation &op : body.without_terminator())
    if (stageOf(&op).empty() && !isa<WeightOp, ConstantOp>(op))
      setStage(&op, "backward");
}

} // namespace
} // namespace ortc
