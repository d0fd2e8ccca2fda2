//===- Recompute.cpp - Forward values recomputed in the backward ----------===//
//
// Why: every forward value the backward reads lives in the arena from the forward to
// its last backward reader, so the train step's arena grows with depth x batch x
// sequence. Values that can be computed again from values the backward keeps anyway
// need not live that long: a clone of their producer, run just before their first
// backward reader, frees their bytes for the whole middle of the step.
//
// Algorithm (per step function with a backward):
//  1. The forward region is the ops of stage "forward".
//  2. A forward value is saved when an op outside the forward reads it. A value is
//     available in the backward without recompute when it is a step input, a weight
//     or constant, a saved value, or a function result.
//  3. Candidates, in groups taken or left together:
//     - selective, fused and budget: a value is recomputable when its producer is a forward
//       op with RecomputeOpInterface that the policy admits (selective, fused: at most
//       `cheap-flops` operations per result element, and its chain at most that many
//       per element of the value; budget: every op with the
//       interface), it is not a function result, and each operand is available or
//       itself recomputable (a chain of forward values, none of which the backward
//       reads, that ends at available values). Each saved recomputable value is a
//       group, most bytes freed per operation added first (the value's bytes over its
//       chain's operations);
//     - layers: each repeated block (findRepeatedBlocks: transformer layers, residual
//       blocks, by node name scope or repeats in the graph) is a group of the saved
//       values its RecomputeOpInterface ops compute that no forward op outside it
//       reads: in the backward the block runs again from what crosses its boundary, as
//       per-module checkpointing does.
//     Each group is kept only if the arena of a trial copy of the step, with kernels
//     formed and memory planned as the build will, gets smaller (the planned arena is
//     not monotone in the set: no prefix or binary search), through all groups, or for
//     a budget until it fits (an arena out of reach is an error that names the
//     smallest one reached). plan=false takes every group untried. fused keeps a
//     group only if the trial also launches no more kernels than the step without
//     recompute: its clones join kernels that run anyway (FormKernels step 1c); it
//     tries the groups one by one only if taking all of them lowers the arena.
//  4. Walk the backward ops in order; at the first reader of a chosen value, clone
//     its producer chain just before that reader (stage "forward", marked
//     ortc.recompute; or the ops an op builds through buildCheaperRecompute, such as a
//     LayerNorm's output from its saved statistics) and point every backward reader at
//     the clone. Forward readers
//     keep the original, which now dies in the forward. A forward op left without
//     readers (its value was read by the backward only) is erased: it runs once, in
//     the backward.
//  5. Record on the function how many values were chosen, the operations the clones
//     add (net of erased originals), the forward's operations, the arena planned, for a
//     budget the budget and for layers the blocks found and recomputed, for the build's
//     report.
//
//===----------------------------------------------------------------------===//
#include "passes/checkpointing/Passes.h"

#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "passes/fusion/Passes.h"
#include "passes/memory_planning/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <cstdlib>

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_RECOMPUTE
#include "passes/checkpointing/Passes.h.inc"

namespace {

/// What a policy asks for: which ops it admits, and for a budget its size.
struct Policy {
  enum Kind { None, Selective, Fused, Layers, Budget } kind = None;
  int64_t bytes = -1;   ///< budget in bytes, or
  double percent = -1;  ///< budget as a percentage of the arena without recompute
};

/// Parses none | selective | layers | budget=BYTES | budget=PCT%.
std::optional<Policy> parsePolicy(StringRef text) {
  Policy p;
  if (text == "none")
    return p;
  if (text == "selective" || text == "fused" || text == "layers") {
    p.kind = text == "layers" ? Policy::Layers
             : text == "fused" ? Policy::Fused
                               : Policy::Selective;
    return p;
  }
  if (!text.consume_front("budget=") || text.empty())
    return std::nullopt;
  p.kind = Policy::Budget;
  if (text.consume_back("%")) {
    double pct;
    if (text.getAsDouble(pct) || !(pct > 0 && pct <= 100))
      return std::nullopt;
    p.percent = pct;
    return p;
  }
  if (text.getAsInteger(10, p.bytes) || p.bytes <= 0)
    return std::nullopt;
  return p;
}

/// The forward region (step 1): ops of stage "forward" that are not recompute clones.
bool isForwardOp(Operation *op) { return stageOf(op) == "forward" && !isRecompute(op); }

/// Steps 1-3 over one function: the forward, its saved values and what may be
/// recomputed under an admission rule.
class StepAnalysis {
public:
  StepAnalysis(func::FuncOp fn, std::function<bool(Operation *)> admits)
      : admits(std::move(admits)) {
    Block &body = fn.getBody().front();
    for (Operation &op : body.without_terminator()) {
      hasBackward |= stageOf(&op) == "backward";
      if (isForwardOp(&op)) {
        forward.insert(&op);
        forwardOrder.push_back(&op);
      }
    }
    for (Value v : body.getTerminator()->getOperands())
      returned.insert(v);
    for (Operation &op : body.without_terminator())
      if (forward.count(&op))
        for (Value r : op.getResults())
          if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !forward.count(u); }))
            saved.insert(r);
  }

  bool hasBackward = false;
  DenseSet<Operation *> forward;
  SmallVector<Operation *> forwardOrder;
  SetVector<Value> saved; ///< in forward order

  bool isReturned(Value v) const { return returned.count(v); }

  bool isAvailable(Value v) const {
    Operation *p = v.getDefiningOp();
    return !p || isa<WeightOp, ConstantOp>(p) || !forward.count(p) || returned.count(v) ||
           saved.count(v);
  }

  bool recomputable(Value v) {
    if (auto it = memo.find(v); it != memo.end())
      return it->second;
    Operation *p = v.getDefiningOp();
    bool ok = p && forward.count(p) && !returned.count(v) && isa<RecomputeOpInterface>(p) &&
              admits(p) && llvm::all_of(p->getOperands(), [&](Value o) {
                return isAvailable(o) || recomputable(o);
              });
    memo[v] = ok;
    return ok;
  }

  /// The operations recomputing `v` costs: its producer and the chain values it needs.
  int64_t chainFlops(Value v) {
    DenseSet<Operation *> seen;
    int64_t flops = 0;
    std::function<void(Value)> visit = [&](Value x) {
      Operation *p = x.getDefiningOp();
      if (!seen.insert(p).second)
        return;
      flops += cast<RecomputeOpInterface>(p).getRecomputeFlops();
      for (Value o : p->getOperands())
        if (!isAvailable(o))
          visit(o);
    };
    visit(v);
    return flops;
  }

private:
  std::function<bool(Operation *)> admits;
  DenseSet<Value> returned;
  DenseMap<Value, bool> memo;
};

/// Step 4: clones the producers of `chosen` (and of the values in `chain` they need)
/// before their first backward readers in `fn` (or builds an op's cheaper recompute, if
/// kernels will be `fusion`-formed); returns the operations added.
int64_t applyRecompute(func::FuncOp fn, const SetVector<Value> &chosen,
                       const DenseSet<Value> &chain, bool fusion) {
  Block &body = fn.getBody().front();
  DenseSet<Operation *> forward;
  for (Operation &op : body.without_terminator())
    if (isForwardOp(&op))
      forward.insert(&op);
  IRMapping cloneOf;
  int64_t added = 0;
  // A forward value the backward reads as it is: not recomputed, read after the forward.
  auto kept = [&](Value v) {
    Operation *p = v.getDefiningOp();
    return !chosen.count(v) && !chain.count(v) &&
           (!p || !forward.count(p) ||
            llvm::any_of(v.getUsers(), [&](Operation *u) { return !forward.count(u); }));
  };
  std::function<Value(Value, Operation *)> ensureClone = [&](Value v, Operation *before) {
    if (Value c = cloneOf.lookupOrNull(v))
      return c;
    Operation *p = v.getDefiningOp();
    IRMapping map;
    for (Value o : p->getOperands())
      if (chosen.count(o) || chain.count(o))
        map.map(o, ensureClone(o, before));
    OpBuilder b(before);
    // The op's own cheaper way (LayerNorm from its saved statistics), marked as a clone;
    // only where kernels are formed: unfused, its steps would each write a tensor.
    Operation *prev = before->getPrevNode();
    int64_t flops = 0;
    if (Value cheap = fusion ? cast<RecomputeOpInterface>(p).buildCheaperRecompute(
                                   b, cast<OpResult>(v).getResultNumber(), map, kept, flops)
                             : Value()) {
      for (Operation *op = prev ? prev->getNextNode() : &before->getBlock()->front();
           op != before; op = op->getNextNode()) {
        setStage(op, "forward");
        setRecompute(op);
      }
      added += flops;
      cloneOf.map(v, cheap);
      return cheap;
    }
    Operation *clone = b.clone(*p, map);
    setStage(clone, "forward");
    setRecompute(clone);
    added += cast<RecomputeOpInterface>(clone).getRecomputeFlops();
    for (auto [orig, copy] : llvm::zip(p->getResults(), clone->getResults()))
      cloneOf.map(orig, copy);
    return cloneOf.lookup(v);
  };
  SmallVector<Operation *> later, earlier;
  for (Operation &op : body.without_terminator())
    (forward.count(&op) ? earlier : later).push_back(&op);
  for (Operation *op : later)
    for (OpOperand &use : op->getOpOperands())
      if (chosen.count(use.get()))
        use.set(ensureClone(use.get(), op));
  for (Operation *op : llvm::reverse(earlier))
    if (op->use_empty() &&
        llvm::any_of(op->getResults(), [&](Value r) { return cloneOf.contains(r); })) {
      added -= cast<RecomputeOpInterface>(op).getRecomputeFlops();
      op->erase();
    }
  return added;
}

/// The candidates of a policy in `step` and the chain values they may read.
void candidatesOf(StepAnalysis &step, SmallVectorImpl<Value> &candidates, DenseSet<Value> &chain) {
  for (Value v : step.saved)
    if (step.recomputable(v))
      candidates.push_back(v);
  for (Operation *op : step.forward)
    for (Value r : op->getResults())
      if (!step.isAvailable(r) && step.recomputable(r))
        chain.insert(r);
}

/// The candidates of `layers` in `step`, one group per repeated block, and the chain
/// values they read; returns how many ops each block has. A value is recomputed when a block's
/// op with RecomputeOpInterface computes it, it is not a result and no forward op outside
/// its block reads it; the candidates are those the backward reads. What a clone reads
/// from its block that is not recomputed (an op without the interface) the backward keeps.
SmallVector<int64_t> layerCandidates(StepAnalysis &step, SmallVectorImpl<SmallVector<Value>> &groups,
                                     DenseSet<Value> &chain, int64_t cheapFlops) {
  std::vector<std::vector<Operation *>> blocks = findRepeatedBlocks(step.forwardOrder, cheapFlops);
  DenseMap<Operation *, unsigned> blockOf;
  SmallVector<int64_t> sizes;
  for (auto [i, ops] : llvm::enumerate(blocks)) {
    sizes.push_back(ops.size());
    for (Operation *op : ops)
      blockOf[op] = i;
  }
  groups.resize(blocks.size());
  for (Operation *op : step.forwardOrder) {
    auto home = blockOf.find(op);
    if (home == blockOf.end() || !isa<RecomputeOpInterface>(op))
      continue;
    for (Value r : op->getResults()) {
      bool leaves = llvm::any_of(r.getUsers(), [&](Operation *u) {
        auto b = blockOf.find(u);
        return step.forward.count(u) && (b == blockOf.end() || b->second != home->second);
      });
      if (step.isReturned(r) || leaves)
        continue;
      if (step.saved.count(r))
        groups[home->second].push_back(r);
      else
        chain.insert(r);
    }
  }
  return sizes;
}

/// A budget's order: most bytes freed per operation added first (ties: forward order).
void orderByDensity(StepAnalysis &step, SmallVectorImpl<Value> &candidates) {
  DenseMap<Value, double> density;
  for (Value v : candidates)
    density[v] = double(byteSize(v.getType())) / double(std::max<int64_t>(1, step.chainFlops(v)));
  llvm::stable_sort(candidates, [&](Value a, Value c) { return density[a] > density[c]; });
}

/// What a trial planned: the arena, the operations the clones add and the kernels the
/// step launches.
struct Trial {
  int64_t arena = INT64_MAX, added = 0, launches = 0;
};

/// The arena of `fn` with `chosen` recomputed (and the operations added), planned on a
/// copy as the build will: kernels formed (if `fusion`), then memory planned.
Trial trial(func::FuncOp fn, ArrayRef<Value> chosen, const DenseSet<Value> &chain, bool fusion) {
  IRMapping map;
  auto copy = cast<func::FuncOp>(fn->clone(map));
  SetVector<Value> chosenCopy;
  DenseSet<Value> chainCopy;
  for (Value v : chosen)
    chosenCopy.insert(map.lookup(v));
  for (Value v : chain)
    chainCopy.insert(map.lookup(v));
  int64_t added = applyRecompute(copy, chosenCopy, chainCopy, fusion);
  if (fusion)
    formKernels(copy);
  Trial t;
  t.added = added;
  if (succeeded(planMemory(copy)))
    t.arena = copy->getAttrOfType<IntegerAttr>("ortc.arena_bytes").getInt();
  for (Operation &op : copy.getBody().front())
    t.launches += launchesKernel(&op);
  copy->erase();
  return t;
}

bool admitsAll(Operation *) { return true; }

struct RecomputePass : impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    std::optional<Policy> p = parsePolicy(policy);
    if (!p) {
      getOperation().emitError("ortc-recompute: unknown policy '")
          << policy << "' (none, selective, layers, budget=BYTES or budget=PCT%)";
      return signalPassFailure();
    }
    if (p->kind == Policy::None)
      return;
    for (auto fn : getOperation().getOps<func::FuncOp>())
      if (!fn.isExternal() && failed(recompute(fn, *p)))
        return signalPassFailure();
  }

  LogicalResult recompute(func::FuncOp fn, const Policy &p);
};

LogicalResult RecomputePass::recompute(func::FuncOp fn, const Policy &p) {
  auto admits = [&](Operation *op) {
    return p.kind == Policy::Budget || isCheapToRecompute(op, cheapFlops);
  };
  StepAnalysis step(fn, admits);
  if (!step.hasBackward)
    return success(); // no backward (an eval step)
  int64_t forwardFlops = 0;
  for (Operation *op : step.forward)
    if (auto r = dyn_cast<RecomputeOpInterface>(op))
      forwardFlops += r.getRecomputeFlops();

  // Candidates in groups taken or left together: a value each, or (layers) a block's.
  SmallVector<SmallVector<Value>> groups;
  DenseSet<Value> chain; // values the chains read that the backward does not keep
  Builder b(fn.getContext());
  if (p.kind == Policy::Layers) {
    SmallVector<int64_t> blocks = layerCandidates(step, groups, chain, cheapFlops);
    fn->setAttr("ortc.recompute_blocks", b.getDenseI64ArrayAttr(blocks));
    if (blocks.empty())
      fn.emitWarning("ortc-recompute: layers: no repeated blocks in the forward of @")
          << fn.getSymName() << "; nothing recomputed";
  } else {
    SmallVector<Value> candidates;
    candidatesOf(step, candidates, chain);
    // Selective frees only values cheap for their own size: not a LayerNorm's statistics
    // (a few bytes that would take the whole normalisation again).
    if (p.kind == Policy::Selective || p.kind == Policy::Fused)
      llvm::erase_if(candidates, [&](Value v) {
        return step.chainFlops(v) >
               cheapFlops * std::max<int64_t>(1, numElements(tensorTypeOf(v).getShape()));
      });
    orderByDensity(step, candidates);
    for (Value v : candidates)
      groups.push_back({v});
  }

  // In order (a budget's: most bytes per operation first; layers: block by block), each
  // group stays only if the planned arena is smaller with it (it is not monotone in the
  // set: a clone placed at its first reader can extend what it reads, and the greedy
  // schedule shifts), until `budget` holds.
  // fused: a clone must join kernels the step launches anyway (no launch added), so
  // every candidate is tried on kernels formed.
  const bool fused = p.kind == Policy::Fused;
  if (fused && !fusion)
    return fn.emitError("ortc-recompute: policy 'fused' needs kernels formed (fusion=true)");
  const bool planned = p.kind == Policy::Budget || plan || fused;
  Trial plainTrial = planned ? trial(fn, {}, chain, fusion) : Trial{0, 0, 0};
  int64_t plain = plainTrial.arena;
  int64_t budget = p.kind != Policy::Budget ? 0
                   : p.bytes > 0            ? p.bytes
                                            : int64_t(double(plain) * p.percent / 100.0);
  int64_t best = plain, blocksTaken = 0;
  SmallVector<Value> chosen;
  // fused runs by default, so it first tries every candidate at once: where even that
  // leaves the arena as it is, the peak is where no candidate lives (the gradients of a
  // large model's weights at the end of its backward), and one trial replaces one per
  // candidate (GPT-2-124M at batch 1: 0.46 s of its rebuild).
  bool worthTrying = true;
  if (fused && groups.size() > 1) {
    SmallVector<Value> all;
    for (auto &g : groups)
      all.append(g);
    worthTrying = trial(fn, all, chain, fusion).arena < plain;
  }
  for (size_t i = 0; worthTrying && i < groups.size() && (!planned || best > budget); ++i) {
    if (groups[i].empty()) // (a block the backward reads nothing of)
      continue;
    chosen.append(groups[i]);
    Trial t = planned ? trial(fn, chosen, chain, fusion) : Trial{0, 0, 0};
    int64_t a = t.arena;
    if (!planned || (a < best && (!fused || t.launches <= plainTrial.launches))) {
      // (plan=false: every candidate)
      best = a;
      ++blocksTaken;
    } else {
      chosen.resize(chosen.size() - groups[i].size());
    }
  }
  if (p.kind == Policy::Layers)
    fn->setAttr("ortc.recomputed_blocks", b.getI64IntegerAttr(blocksTaken));
  if (p.kind == Policy::Budget) {
    if (best > budget)
      return fn.emitError("ortc-recompute: the arena of @")
             << fn.getSymName() << " cannot fit the budget of " << budget
             << " bytes: the smallest one recompute reaches is " << best << " bytes ("
             << plain << " without recompute)";
    fn->setAttr("ortc.recompute_budget", b.getI64IntegerAttr(budget));
  }
  if (planned) {
    fn->setAttr("ortc.recompute_planned", b.getI64IntegerAttr(best));
    fn->setAttr("ortc.recompute_without", b.getI64IntegerAttr(plain));
  }
  // What was chosen, by ONNX node and op (the build prints it under --timing).
  SmallVector<Attribute> names;
  for (Value v : chosen) {
    // A reshape is a view: name what computes the bytes it shows.
    Operation *op = v.getDefiningOp();
    std::string what;
    while (isa<ReshapeOp>(op) && op->getOperand(0).getDefiningOp()) {
      what += "reshape of ";
      op = op->getOperand(0).getDefiningOp();
    }
    StringRef node = onnxNodeName(op);
    names.push_back(b.getStringAttr((node.empty() ? "?" : node.str()) + " (" + what +
                                    op->getName().stripDialect().str() + ")"));
  }
  fn->setAttr("ortc.recomputed_nodes", b.getArrayAttr(names));
  // (applyRecompute clones only the chain values that the chosen ones read.)
  SetVector<Value> chosenSet(chosen.begin(), chosen.end());
  int64_t added = applyRecompute(fn, chosenSet, chain, fusion);
  fn->setAttr("ortc.recomputed", b.getI64IntegerAttr(chosen.size()));
  fn->setAttr("ortc.recompute_flops", b.getI64IntegerAttr(added));
  fn->setAttr("ortc.forward_flops", b.getI64IntegerAttr(forwardFlops));
  return success();
}

} // namespace

bool isCheapToRecompute(Operation *op, int64_t cheapFlops) {
  auto r = dyn_cast<RecomputeOpInterface>(op);
  return r && r.getRecomputeFlops() <= cheapFlops * std::max<int64_t>(1, resultElements(op));
}

std::vector<Value> budgetCandidates(func::FuncOp fn) {
  StepAnalysis step(fn, admitsAll);
  SmallVector<Value> candidates;
  DenseSet<Value> chain;
  candidatesOf(step, candidates, chain);
  orderByDensity(step, candidates);
  return {candidates.begin(), candidates.end()};
}

std::pair<int64_t, int64_t> plannedWith(func::FuncOp fn, ArrayRef<Value> chosen, bool fusion) {
  StepAnalysis step(fn, admitsAll);
  SmallVector<Value> candidates;
  DenseSet<Value> chain;
  candidatesOf(step, candidates, chain);
  Trial t = trial(fn, chosen, chain, fusion);
  return {t.arena, t.added};
}

} // namespace ortc
