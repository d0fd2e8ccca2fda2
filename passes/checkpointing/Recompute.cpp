//===- Recompute.cpp - Forward values recomputed in the backward ----------===//
//
// Why: every forward value the backward reads lives in the arena from the forward to
// its last backward reader, so the train step's arena grows with depth x batch x
// sequence. Values that are cheap to compute again from values the backward keeps
// anyway need not live that long: a clone of their producer, run just before their
// first backward reader, frees their bytes for the whole middle of the step.
//
// Algorithm (per step function with a backward):
//  1. The forward region is the ops of stage "forward" (in a function that has a
//     backward).
//  2. A forward value is saved when an op outside the forward reads it. A value is
//     available in the backward without recompute when it is a step input, a weight
//     or constant, a saved value, or a function result.
//  3. A value is recomputable when its producer is a forward op with
//     RecomputeOpInterface that the policy admits (selective: at most `cheap-flops`
//     operations per result element), it is not a function result, and each operand
//     is available or itself recomputable (a chain of cheap forward values, none of
//     which the backward reads, that ends at available values). The policy chooses
//     the saved values that are recomputable.
//  4. Walk the backward ops in order; at the first reader of a chosen value, clone
//     its producer chain just before that reader (stage "forward", marked
//     ortc.recompute) and point every backward reader at the clone. Forward readers
//     keep the original, which now dies in the forward.
//     A forward op left without readers (its value was read by the backward only)
//     is erased: it runs once, in the backward.
//  5. Record on the function how many values were chosen, the clones' operations and
//     the forward's (RecomputeOpInterface) operations, for the build's report.
//
//===----------------------------------------------------------------------===//
#include "passes/checkpointing/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_RECOMPUTE
#include "passes/checkpointing/Passes.h.inc"

namespace {

struct RecomputePass : impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    if (policy != "none" && policy != "selective") {
      getOperation().emitError("ortc-recompute: unknown policy '")
          << policy << "' (none, selective)";
      return signalPassFailure();
    }
    if (policy == "none")
      return;
    for (auto fn : getOperation().getOps<func::FuncOp>())
      recompute(fn);
  }

  void recompute(func::FuncOp fn);
};

void RecomputePass::recompute(func::FuncOp fn) {
  if (fn.isExternal())
    return;
  Block &body = fn.getBody().front();
  Operation *ret = body.getTerminator();
  // 1. The forward region: ops of stage "forward" (the optimizer's step counter may
  // come first in the block, so the stage decides, not the position).
  bool hasBackward = false;
  DenseSet<Operation *> forwardOps;
  for (Operation &op : body.without_terminator()) {
    StringRef stage = stageOf(&op);
    hasBackward |= stage == "backward";
    if (stage == "forward" && !isRecompute(&op))
      forwardOps.insert(&op);
  }
  if (!hasBackward)
    return; // no backward (an eval step)
  auto inForward = [&](Operation *op) { return op && forwardOps.count(op); };

  // 2. Saved and available values.
  DenseSet<Value> returned(ret->getOperands().begin(), ret->getOperands().end());
  // (Computed before any clone exists: the clones read saved values too.)
  DenseSet<Value> saved;
  for (Operation *op : forwardOps)
    for (Value r : op->getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !inForward(u); }))
        saved.insert(r);
  auto isAvailable = [&](Value v) {
    Operation *p = v.getDefiningOp();
    return !p || isa<WeightOp, ConstantOp>(p) || !inForward(p) || returned.count(v) ||
           saved.count(v);
  };

  // 3. What the policy admits, through chains of cheap forward values.
  auto admits = [&](Operation *p) {
    auto r = dyn_cast<RecomputeOpInterface>(p);
    return r && inForward(p) &&
           r.getRecomputeFlops() <= cheapFlops * std::max<int64_t>(1, resultElements(p));
  };
  DenseMap<Value, bool> memo;
  std::function<bool(Value)> recomputable = [&](Value v) -> bool {
    if (auto it = memo.find(v); it != memo.end())
      return it->second;
    Operation *p = v.getDefiningOp();
    bool ok = p && !returned.count(v) && admits(p) &&
              llvm::all_of(p->getOperands(), [&](Value o) {
                return isAvailable(o) || recomputable(o);
              });
    memo[v] = ok;
    return ok;
  };
  SetVector<Value> chosen;
  for (Operation &op : body.without_terminator())
    if (inForward(&op))
      for (Value r : op.getResults())
        if (saved.count(r) && recomputable(r))
          chosen.insert(r);

  int64_t forwardFlops = 0; // (before step 4 erases ops)
  for (Operation *op : forwardOps)
    if (auto r = dyn_cast<RecomputeOpInterface>(op))
      forwardFlops += r.getRecomputeFlops();

  // 4. Clones before the first backward reader.
  IRMapping cloneOf;
  int64_t addedFlops = 0;
  std::function<Value(Value, Operation *)> ensureClone = [&](Value v, Operation *before) {
    if (Value c = cloneOf.lookupOrNull(v))
      return c;
    Operation *p = v.getDefiningOp();
    IRMapping map;
    for (Value o : p->getOperands())
      if (chosen.count(o) || (!isAvailable(o) && recomputable(o)))
        map.map(o, ensureClone(o, before));
    OpBuilder b(before);
    Operation *clone = b.clone(*p, map);
    setStage(clone, "forward");
    setRecompute(clone);
    addedFlops += cast<RecomputeOpInterface>(clone).getRecomputeFlops();
    for (auto [orig, copy] : llvm::zip(p->getResults(), clone->getResults()))
      cloneOf.map(orig, copy);
    return cloneOf.lookup(v);
  };
  SmallVector<Operation *> backward;
  for (Operation &op : body.without_terminator())
    if (!inForward(&op))
      backward.push_back(&op);
  for (Operation *op : backward)
    for (OpOperand &use : op->getOpOperands())
      if (chosen.count(use.get()))
        use.set(ensureClone(use.get(), op));
  // A value only the backward read now has no reader in the forward: it runs once, in
  // the backward, and adds nothing.
  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    if (inForward(&op))
      forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward))
    if (op->use_empty() && llvm::any_of(op->getResults(), [&](Value r) {
          return cloneOf.contains(r);
        })) {
      addedFlops -= cast<RecomputeOpInterface>(op).getRecomputeFlops();
      op->erase();
    }

  // 5. The report.
  Builder b(fn.getContext());
  fn->setAttr("ortc.recomputed", b.getI64IntegerAttr(chosen.size()));
  fn->setAttr("ortc.recompute_flops", b.getI64IntegerAttr(addedFlops));
  fn->setAttr("ortc.forward_flops", b.getI64IntegerAttr(forwardFlops));
}

} // namespace
} // namespace ortc
