//===- MemoryPlan.cpp - Op order, liveness and arena offsets -------------===//
//
// Algorithm (per step function):
//  1. Decide which returned values are written straight into the persistent tensor
//     of their function result. A result tied to an argument A may be written in
//     place only by an op that runs after every other reader of A, and, if that op
//     reads A itself, only by an elementwise (in-place safe) op.
//  2. Schedule: repeatedly pick, among the ops whose operands are ready, the one
//     that frees the most bytes minus what it allocates (ties: original order). A
//     recomputed clone (ortc.recompute) waits for the op before it in the original
//     order: run as soon as its operands are ready, it would be back in the forward.
//     An op with one reader whose results are larger than what it reads from the
//     arena (a 16-bit activation widened for a GEMM, passes/mixed_precision; a weight
//     broadcast) waits, while other ops are ready, for that reader's other operands:
//     run early, it would only hold its bytes for nothing.
//  3. Liveness: a tensor lives from its producer to its last reader; reshape and
//     strided_view results are views that extend the life of the tensor they alias.
//  4. Allocate in schedule order with best fit over a coalescing free list. An
//     elementwise op reuses the slot of an operand that dies at it (in place), as a
//     RowInPlace op (cross-entropy's gradient) reuses its first operand's and a
//     matmul_into its dest's.
//  5. Re-pack the same lifetimes "greedy by size" and keep the smaller plan.
//  6. Report the arena size and the lower bound: the most bytes live at once.
//
//===----------------------------------------------------------------------===//
#include "passes/memory_planning/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/StepFunction.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <map>
#include <numeric>

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_MEMORYPLAN
#include "passes/memory_planning/Passes.h.inc"

static constexpr int64_t kAlign = 64;

int64_t byteSize(Type type) {
  auto t = cast<RankedTensorType>(type);
  int64_t bits = t.getElementType().getIntOrFloatBitWidth();
  int64_t bytes = bits == 1 ? 1 : bits / 8;
  int64_t n = 1;
  for (int64_t d : t.getShape())
    n *= d;
  return n * bytes;
}

namespace {

/// The arena slot of a value: its bytes (at least one) rounded up to the alignment.
int64_t slotSize(Type type) {
  return llvm::alignTo(std::max<int64_t>(byteSize(type), 1), kAlign);
}

/// A reshape or a strided view: no kernel, its result aliases its operand's buffer.
bool isView(Operation *op) { return isa_and_nonnull<ReshapeOp, StridedViewOp>(op); }

Value rootOf(Value v) {
  while (isView(v.getDefiningOp()))
    v = v.getDefiningOp()->getOperand(0);
  return v;
}

/// True when `op` may write a result over the buffer of its operand `in`: it reads
/// each element of `in` only to compute the element at the same index, or (RowInPlace)
/// `in` is its first operand, read row by row before the row is written.
bool inPlaceSafe(Operation *op, Value in) {
  if (auto fused = dyn_cast<FusedOp>(op))
    return llvm::all_of(fused->getOpOperands(), [&](OpOperand &o) {
      return rootOf(o.get()) != rootOf(in) || fused.readsAtOwnIndex(o.getOperandNumber());
    });
  if (op->hasTrait<ortc::trait::RowInPlace>())
    return llvm::all_of(op->getOpOperands(), [&](OpOperand &o) {
      return rootOf(o.get()) != rootOf(in) || o.getOperandNumber() == 0;
    });
  // A GEMM writing into its dest's buffer, where its operands are not in it.
  if (auto into = dyn_cast<MatMulIntoOp>(op))
    return rootOf(in) == rootOf(into.getDest()) && rootOf(into.getA()) != rootOf(in) &&
           rootOf(into.getB()) != rootOf(in);
  return op->hasTrait<OpTrait::Elementwise>() || isa<SgdUpdateOp, AdamWUpdateOp>(op);
}

/// Best-fit allocator over a coalescing free list.
class Arena {
public:
  int64_t alloc(int64_t size) {
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it)
      if (it->second >= size && (best == free.end() || it->second < best->second))
        best = it;
    if (best != free.end()) {
      int64_t off = best->first, left = best->second - size;
      free.erase(best);
      if (left)
        free[off + size] = left;
      return off;
    }
    // Grow, reusing a free block that ends at the current end.
    if (!free.empty()) {
      auto last = std::prev(free.end());
      if (last->first + last->second == end) {
        int64_t off = last->first;
        free.erase(last);
        end = off + size;
        return off;
      }
    }
    int64_t off = end;
    end += size;
    return off;
  }
  void release(int64_t off, int64_t size) {
    auto it = free.emplace(off, size).first;
    auto next = std::next(it);
    if (next != free.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free.erase(next);
    }
    if (it != free.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free.erase(it);
      }
    }
  }
  int64_t size() const { return end; }

private:
  std::map<int64_t, int64_t> free;
  int64_t end = 0;
};

struct Slot {
  int64_t offset, size, start, end;
  bool released = false;
};

} // namespace

LogicalResult planMemory(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  DenseMap<Operation *, unsigned> original;
  for (auto [i, op] : llvm::enumerate(ops))
    original[op] = i;

  // Users of a root, through reshape views.
  DenseMap<Value, SmallVector<Operation *>> usersOf;
  std::function<void(Value, Value)> collect = [&](Value root, Value v) {
    for (Operation *u : v.getUsers()) {
      usersOf[root].push_back(u);
      if (isView(u))
        collect(root, u->getResult(0));
    }
  };
  for (BlockArgument a : fn.getArguments())
    collect(a, a);
  for (Operation *op : ops)
    if (!isView(op))
      for (Value r : op->getResults())
        collect(r, r);

  // 1. Direct writes into function results.
  DenseSet<Value> direct;
  DenseMap<Operation *, SmallVector<Operation *>> extraDeps;
  for (OpOperand &use : ret->getOpOperands()) {
    Value v = use.get();
    Operation *p = v.getDefiningOp();
    if (!p || isView(p) || isa<ConstantOp, WeightOp>(p) || !v.hasOneUse())
      continue;
    auto tied = resultTied(fn, use.getOperandNumber());
    if (tied) {
      Value arg = fn.getArgument(*tied);
      bool readsArg = llvm::any_of(p->getOperands(),
                                   [&](Value o) { return rootOf(o) == arg; });
      if (readsArg && !inPlaceSafe(p, arg))
        continue;
      for (Operation *reader : usersOf[arg])
        if (reader != p && reader != ret.getOperation())
          extraDeps[p].push_back(reader);
    }
    direct.insert(v);
  }
  auto arenaResult = [&](Value v) {
    Operation *p = v.getDefiningOp();
    return p && !isView(p) && !isa<ConstantOp, WeightOp>(p) && !direct.count(v);
  };

  // 2. Greedy schedule.
  // Ops that only add bytes (results larger than what they read from the arena) and
  // feed one op wait for that op's other operands.
  auto onlyReader = [](Operation *op) -> Operation * {
    Operation *reader = nullptr;
    for (Operation *u : op->getUsers())
      if (reader && u != reader)
        return nullptr;
      else
        reader = u;
    return reader;
  };
  auto onlyGrows = [&](Operation *op) {
    int64_t out = 0, in = 0;
    for (Value r : op->getResults())
      if (arenaResult(r))
        out += byteSize(r.getType());
    SmallPtrSet<Value, 4> seen;
    for (Value v : op->getOperands())
      if (Value root = rootOf(v); arenaResult(root) && seen.insert(root).second)
        in += byteSize(root.getType());
    return out > in;
  };
  DenseSet<Operation *> lazy;
  for (Operation *op : ops)
    if (Operation *reader = onlyReader(op);
        reader && reader->getBlock() == &body && !isa<func::ReturnOp>(reader) && onlyGrows(op))
      lazy.insert(op);
  // What each waits for (a preference, not a dependency: when every ready op waits,
  // the best of them runs, so no constraint can deadlock). Readers first, so that a
  // chain of such ops (a weight's 16-bit copy, widened) waits for what its last reader
  // waits for.
  DenseMap<Operation *, SmallVector<Operation *>> waitsFor;
  for (Operation *op : llvm::reverse(ops)) {
    if (!lazy.count(op))
      continue;
    Operation *reader = onlyReader(op);
    SmallVector<Operation *> &w = waitsFor[op];
    for (Value in : reader->getOperands()) {
      Operation *d = in.getDefiningOp();
      if (!d || d == op || d->getBlock() != &body)
        continue;
      // Another lazy producer of the same reader: wait for what it reads instead.
      if (lazy.count(d)) {
        for (Value x : d->getOperands())
          if (Operation *dd = x.getDefiningOp(); dd && dd->getBlock() == &body && dd != op)
            w.push_back(dd);
        continue;
      }
      w.push_back(d);
    }
    for (Operation *d : extraDeps[reader])
      if (d != op)
        w.push_back(d);
    if (auto it = waitsFor.find(reader); it != waitsFor.end())
      for (Operation *d : it->second)
        if (d != op)
          w.push_back(d);
  }
  for (auto [i, op] : llvm::enumerate(ops))
    if (isRecompute(op))
      for (size_t j = i; j-- > 0;)
        if (!isRecompute(ops[j])) {
          extraDeps[op].push_back(ops[j]);
          break;
        }
  DenseMap<Operation *, unsigned> pendingDeps;
  DenseMap<Operation *, SmallVector<Operation *>> dependents;
  for (Operation *op : ops) {
    SetVector<Operation *> deps;
    for (Value in : op->getOperands())
      if (Operation *d = in.getDefiningOp(); d && d->getBlock() == &body)
        deps.insert(d);
    for (Operation *d : extraDeps[op])
      if (d->getBlock() == &body && d != op)
        deps.insert(d);
    pendingDeps[op] = deps.size();
    for (Operation *d : deps)
      dependents[d].push_back(op);
  }
  DenseMap<Value, unsigned> remaining;
  for (auto &[root, users] : usersOf) {
    SmallPtrSet<Operation *, 8> distinct(users.begin(), users.end());
    remaining[root] = distinct.size();
  }
  SmallVector<Operation *> ready, order;
  DenseSet<Operation *> scheduled;
  for (Operation *op : ops)
    if (!pendingDeps[op])
      ready.push_back(op);
  while (!ready.empty()) {
    auto score = [&](Operation *op) {
      int64_t s = 0;
      for (Value r : op->getResults())
        if (arenaResult(r))
          s -= byteSize(r.getType());
      SmallPtrSet<Value, 4> seen;
      for (Value in : op->getOperands()) {
        Value root = rootOf(in);
        if (arenaResult(root) && seen.insert(root).second && remaining[root] == 1)
          s += byteSize(root.getType());
      }
      return s;
    };
    auto waiting = [&](Operation *op) {
      auto it = waitsFor.find(op);
      return it != waitsFor.end() &&
             llvm::any_of(it->second, [&](Operation *d) { return !scheduled.count(d); });
    };
    auto best = ready.begin();
    bool bestWaits = waiting(*best);
    int64_t bestScore = score(*best);
    for (auto it = std::next(ready.begin()); it != ready.end(); ++it) {
      bool w = waiting(*it);
      int64_t s = score(*it);
      if ((bestWaits && !w) ||
          (w == bestWaits &&
           (s > bestScore || (s == bestScore && original[*it] < original[*best])))) {
        best = it;
        bestScore = s;
        bestWaits = w;
      }
    }
    Operation *op = *best;
    scheduled.insert(op);
    ready.erase(best);
    order.push_back(op);
    SmallPtrSet<Value, 4> rootsSeen;
    for (Value in : op->getOperands()) {
      Value root = rootOf(in);
      if (rootsSeen.insert(root).second && remaining.count(root))
        --remaining[root];
    }
    for (Operation *d : dependents[op])
      if (--pendingDeps[d] == 0)
        ready.push_back(d);
  }
  if (order.size() != ops.size()) {
    return fn.emitError("ortc-memory-plan: could not schedule every op (cyclic constraints)");
  }
  for (Operation *op : order)
    op->moveBefore(ret);

  // 3. Liveness by schedule position; the return is position n.
  DenseMap<Operation *, int64_t> pos;
  for (auto [i, op] : llvm::enumerate(order))
    pos[op] = i;
  pos[ret] = order.size();
  DenseMap<Value, int64_t> lastUse;
  for (auto &[root, users] : usersOf) {
    int64_t last = -1;
    for (Operation *u : users)
      last = std::max(last, pos.lookup(u));
    lastUse[root] = last;
  }

  // 4. Allocation.
  Arena arena;
  std::vector<Slot> slots;
  DenseMap<Value, unsigned> slotOf;
  std::multimap<int64_t, unsigned> endsAt;
  for (auto [i, op] : llvm::enumerate(order)) {
    llvm::SmallDenseSet<unsigned, 2> reused;
    for (Value r : op->getResults()) {
      if (!arenaResult(r))
        continue;
      int64_t size = slotSize(r.getType());
      int64_t end = std::max<int64_t>(lastUse.lookup(r), i);
      std::optional<unsigned> slot;
      if (op->hasTrait<OpTrait::Elementwise>() || op->hasTrait<ortc::trait::RowInPlace>() ||
          isa<FusedOp, MatMulIntoOp>(op))
        for (Value in : op->getOperands()) {
          Value root = rootOf(in);
          auto it = slotOf.find(root);
          // Same bytes, not only the same aligned slot size: an f32 result written over an
          // i64 operand would overwrite element j's bytes before thread j reads them.
          if (it != slotOf.end() && inPlaceSafe(op, in) && lastUse.lookup(root) == (int64_t)i &&
              byteSize(in.getType()) == byteSize(r.getType()) &&
              slots[it->second].size == size && slots[it->second].end == (int64_t)i &&
              !reused.count(it->second)) {
            slot = it->second;
            break;
          }
        }
      if (slot) {
        reused.insert(*slot);
        if (end != slots[*slot].end) {
          slots[*slot].end = end;
          endsAt.emplace(end, *slot);
        }
      } else {
        slot = slots.size();
        slots.push_back({arena.alloc(size), size, (int64_t)i, end, false});
        endsAt.emplace(end, *slot);
      }
      slotOf[r] = *slot;
    }
    // Release the slots whose tensors die here (skipping ones extended in place).
    auto range = endsAt.equal_range(i);
    for (auto it = range.first; it != range.second; ++it) {
      Slot &s = slots[it->second];
      if (s.end == (int64_t)i && !s.released) {
        s.released = true;
        arena.release(s.offset, s.size);
      }
    }
    endsAt.erase(range.first, range.second);
  }

  // 5. The sweep's best fit is online; with every lifetime known, "greedy by size"
  // (largest slot first, at the lowest offset free for its whole lifetime) often
  // packs tighter. Keep whichever plan is smaller.
  int64_t arenaBytes = arena.size();
  {
    std::vector<unsigned> bySize(slots.size());
    std::iota(bySize.begin(), bySize.end(), 0);
    llvm::stable_sort(bySize, [&](unsigned a, unsigned b) {
      return slots[a].size != slots[b].size ? slots[a].size > slots[b].size
                                            : slots[a].start < slots[b].start;
    });
    std::vector<int64_t> offset(slots.size(), -1);
    std::vector<unsigned> placed;
    int64_t top = 0;
    for (unsigned s : bySize) {
      std::vector<std::pair<int64_t, int64_t>> busy;
      for (unsigned p : placed)
        if (slots[p].start <= slots[s].end && slots[s].start <= slots[p].end)
          busy.push_back({offset[p], offset[p] + slots[p].size});
      llvm::sort(busy);
      int64_t at = 0;
      for (auto [b, e] : busy) {
        if (at + slots[s].size <= b)
          break;
        at = std::max(at, e);
      }
      offset[s] = at;
      top = std::max(top, at + slots[s].size);
      placed.push_back(s);
    }
    if (top < arenaBytes) {
      for (unsigned s = 0; s < slots.size(); ++s)
        slots[s].offset = offset[s];
      arenaBytes = top;
    }
  }
  for (Operation *op : order) {
    if (!op->getNumResults())
      continue;
    SmallVector<int64_t> offsets;
    for (Value r : op->getResults()) {
      auto it = slotOf.find(r);
      offsets.push_back(it == slotOf.end() ? -1 : slots[it->second].offset);
    }
    setArenaOffsets(op, offsets);
  }

  // 6. Lower bound: most bytes live at once.
  int64_t lower = 0;
  for (int64_t t = 0; t <= (int64_t)order.size(); ++t) {
    int64_t live = 0;
    for (const Slot &s : slots)
      if (s.start <= t && t <= s.end)
        live += s.size;
    lower = std::max(lower, live);
  }
  Builder b(fn.getContext());
  fn->setAttr("ortc.arena_bytes", b.getI64IntegerAttr(arenaBytes));
  fn->setAttr("ortc.arena_lower_bound", b.getI64IntegerAttr(lower));
  return success();
}

std::vector<int64_t> arenaBytesOverSchedule(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  DenseMap<Operation *, int64_t> pos;
  for (auto [i, op] : llvm::enumerate(body.getOperations()))
    pos[&op] = i;
  const int64_t n = body.getOperations().size();
  // Each arena value's slot and the span from its producer to its last reader (reshape
  // views read it too).
  struct Span {
    int64_t offset, size, start, end;
  };
  std::vector<Span> spans;
  std::function<int64_t(Value)> lastUse = [&](Value v) {
    int64_t last = -1;
    for (Operation *u : v.getUsers()) {
      last = std::max(last, pos.lookup(u));
      if (isView(u))
        last = std::max(last, lastUse(u->getResult(0)));
    }
    return last;
  };
  for (Operation &op : body.without_terminator()) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(kArenaOffsetsAttr);
    if (!offsets)
      continue;
    for (auto [r, off] : llvm::zip(op.getResults(), offsets.asArrayRef()))
      if (off >= 0 && !isView(&op))
        spans.push_back({off, slotSize(r.getType()), pos[&op], std::max(pos[&op], lastUse(r))});
  }
  std::vector<int64_t> bytes(n, 0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<std::pair<int64_t, int64_t>> live;
    for (const Span &s : spans)
      if (s.start <= t && t <= s.end)
        live.push_back({s.offset, s.offset + s.size});
    llvm::sort(live);
    int64_t end = 0;
    for (auto [b, e] : live) { // union: an in-place result shares its operand's slot
      bytes[t] += std::max<int64_t>(0, e - std::max(b, end));
      end = std::max(end, e);
    }
  }
  return bytes;
}

namespace {
struct MemoryPlanPass : impl::MemoryPlanBase<MemoryPlanPass> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>())
      if (failed(planMemory(fn)))
        return signalPassFailure();
  }
};
} // namespace
} // namespace ortc
