//===- FormKernels.cpp - Partition step functions into ortc.fused kernels -===//
//
// Algorithm (per function, over its one block):
//  0a. A cheap pointwise op read only through broadcasts moves into them
//     (sinkIntoBroadcasts): its readers recompute it per element.
//  0b. A float32 matmul operand made by slices, reshapes and transposes of one tensor
//     is read through an ortc.strided_view of it where a GEMM can take that layout
//     (readMatmulOperandsThroughViews): attention's heads are not copied out.
//  0c. A concat or transpose of GEMM products is written by the GEMMs in place
//     (ortc.matmul_into, writeMatmulProductsInPlace): the heads are merged, and the
//     q, k, v gradients concatenated, as they are computed.
//  1. Walk the ops in order. A pointwise op (FusionOpInterface) starts a group of
//     its own, then merges with the group of every pointwise producer of the same
//     iteration shape, when legal: the merged kernel runs where its last op stands,
//     so every user of a value defined in it that is not itself in it must come
//     after that op. (Users are checked over the whole function, so a later merge
//     can never move a kernel past a reader of its values.) This is the
//     producer/consumer rule of IREE's dispatch formation and Inductor's scheduler,
//     without recompute of pointwise ops: an op with several users is computed once
//     and yielded to the users outside.
//  1b. A sum over the leading dims (FusionRole::Reduction) of a value a group
//     computes joins that group under the same rule, when every input the group
//     reads through a broadcast is broadcast along all or none of the kept dims
//     (codegen then runs the kept dims as one contiguous inner loop and sums the
//     leading ones into per-column accumulators: a bias gradient is accumulated as
//     the gradient it sums is computed).
//  1c. A group of recompute clones joins the first later group of its shape that reads
//     a value it reads, a row kernel too (mergeRecomputeSiblings), its readers in
//     between moved after; else the last earlier group of its shape that runs after
//     what it reads, the clones moved up into it: either way the clones launch no
//     kernel of their own.
//  1a. A row op (FusionRole::Row: softmax, log-softmax and their gradients along the
//     last axis) joins groups as a pointwise op does, at most one per group, never
//     with a sum: its pointwise producers of its shape become the kernel's prologue
//     (computed per row as the row op reads it), its pointwise consumers the
//     epilogue (computed as it writes each element): attention's scale and mask, the
//     dropout after the softmax and the scale after its gradient never reach memory.
//  1d. A float32 GEMM whose product only one group (of the product's shape; sums of
//     yielded values over all but the last dim) reads joins it: a "gemm" kernel
//     computes the product in panels and runs the group on each panel as its
//     epilogue; a "rows" kernel runs its row op on each row of the product, which
//     is then never stored (attachGemms).
//  2. Operands defined by an index map (broadcast_to) of the group's shape are read
//     through it: the map is cloned into every kernel that reads it, its source
//     becomes the kernel's input, and it disappears once no one else reads it. Splat
//     constants are cloned too (codegen prints them as literals).
//  3. Each group with two or more ops, or one op reading through an index map,
//     becomes an ortc.fused "pointwise" ("rows" with a row op, "gemm" with a GEMM) op
//     placed before its last op: inputs in order of first use, results = the members'
//     values used outside, location = the fused locations of the members (their ONNX
//     nodes).
//  4. Multi-tensor ops (the optimizer's updates) with equal names, attributes and
//     scalar (rank-0) operands join one ortc.fused "multi_tensor" kernel, under the
//     same rule as step 1 (every outside user of a member runs after the last one).
//
//===----------------------------------------------------------------------===//
#include "passes/fusion/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace ortc {
#define GEN_PASS_DEF_FORMKERNELS
#include "passes/fusion/Passes.h.inc"

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

bool hasRole(Operation *op, FusionRole role) {
  auto f = dyn_cast_or_null<FusionOpInterface>(op);
  // A sum in 16-bit chunks (ortc.accum) runs its library kernel, which emulates it.
  return f && f.getFusionRole() == role && !accumulationOf(op);
}

/// A pointwise op codegen can put in a kernel: one result.
bool isPointwise(Operation *op) {
  return hasRole(op, FusionRole::Pointwise) && op->getNumResults() == 1;
}

/// A row op (a softmax along the last axis): joins the pointwise ops of its shape that
/// compute its operands and read its result, one row op per kernel.
bool isRowOp(Operation *op) { return hasRole(op, FusionRole::Row); }

bool isSplatConstant(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  return dense && dense.isSplat();
}

/// An operand the kernel of `user` reads through an index map.
bool readThroughMap(Value v) {
  Operation *p = v.getDefiningOp();
  return hasRole(p, FusionRole::IndexMap) &&
         cast<FusionOpInterface>(p).isCheapToRecompute();
}

/// Whether `m`, an op of a kernel that sums `shape` over its first `k` dims, reads every
/// input it reads through a broadcast alike along the kept dims (all broadcast or none):
/// codegen runs the kept dims as one contiguous inner loop.
bool readsKeptDimsAlike(Operation *m, ArrayRef<int64_t> shape, size_t k) {
  return llvm::all_of(m->getOperands(), [&](Value v) {
    if (!readThroughMap(v))
      return true;
    ArrayRef<int64_t> src = shapeOf(v.getDefiningOp()->getOperand(0));
    SmallVector<int64_t> padded(shape.size() - src.size(), 1);
    padded.append(src.begin(), src.end());
    bool allKept = true, allOne = true;
    for (size_t d = k; d < shape.size(); ++d) {
      allKept &= padded[d] == shape[d];
      allOne &= padded[d] == 1;
    }
    return allKept || allOne;
  });
}

/// A strided layout of some tensor's elements: element `idx` of a value at
/// offset + sum(idx[d] * strides[d]) of its root's buffer.
struct Layout {
  int64_t offset = 0;
  SmallVector<int64_t> shape, strides;
};

/// A row-major tensor of `shape` at offset 0 of its own buffer.
Layout contiguousLayout(ArrayRef<int64_t> shape) {
  Layout l{0, llvm::to_vector(shape), {}};
  l.strides.assign(l.shape.size(), 1);
  for (size_t d = l.shape.size(); d-- > 1;)
    l.strides[d - 1] = l.strides[d] * l.shape[d];
  return l;
}

/// A float32 GEMM without emulated accumulation: its library path takes layouts.
bool isPlainF32Gemm(MatMulOp mm) {
  return !accumulationOf(mm) &&
         cast<RankedTensorType>(mm.getA().getType()).getElementType().isF32();
}

/// The strides of `ns` over the same elements as (os, ot), if a reshape keeps them
/// one strided layout: each group of dims it merges or splits must be contiguous.
std::optional<SmallVector<int64_t>> reshapeStrides(ArrayRef<int64_t> os, ArrayRef<int64_t> ot,
                                                   ArrayRef<int64_t> ns) {
  SmallVector<int64_t> nt(ns.size(), 0);
  size_t i = 0, j = 0;
  while (true) {
    while (i < os.size() && os[i] == 1)
      ++i;
    while (j < ns.size() && ns[j] == 1)
      ++j;
    if (i == os.size() || j == ns.size())
      return i == os.size() && j == ns.size() ? std::optional(nt) : std::nullopt;
    size_t i0 = i, j0 = j;
    int64_t po = os[i++], pn = ns[j++];
    while (po != pn) {
      if (po < pn && i < os.size())
        po *= os[i++];
      else if (pn < po && j < ns.size())
        pn *= ns[j++];
      else
        return std::nullopt;
    }
    int64_t inner = -1, expect = -1;
    for (size_t k = i; k-- > i0;) {
      if (os[k] == 1)
        continue;
      if (inner < 0)
        inner = ot[k];
      else if (ot[k] != expect)
        return std::nullopt;
      expect = ot[k] * os[k];
    }
    for (size_t k = j; k-- > j0;) {
      nt[k] = ns[k] == 1 ? 0 : inner;
      inner *= ns[k];
    }
  }
}

/// The layout of `v` over the buffer of `root`, following reshapes, transposes and
/// unit-or-larger-step slices up from v (a strided view is a root's layout already);
/// `moved` is set where the chain holds more than reshapes.
std::optional<Layout> layoutOf(Value v, Value &root, bool &moved) {
  Operation *p = v.getDefiningOp();
  if (auto view = dyn_cast_or_null<StridedViewOp>(p)) {
    root = view.getX();
    moved = true;
    return Layout{static_cast<int64_t>(view.getOffset()), llvm::to_vector(shapeOf(v)),
                  llvm::to_vector(view.getStrides())};
  }
  if (!isa_and_nonnull<ReshapeOp, TransposeOp, SliceOp>(p)) {
    root = v;
    return contiguousLayout(shapeOf(v));
  }
  std::optional<Layout> in = layoutOf(p->getOperand(0), root, moved);
  if (!in)
    return std::nullopt;
  Layout out{in->offset, llvm::to_vector(shapeOf(v)), {}};
  if (isa<ReshapeOp>(p)) {
    std::optional<SmallVector<int64_t>> st = reshapeStrides(in->shape, in->strides, out.shape);
    if (!st)
      return std::nullopt;
    out.strides = std::move(*st);
  } else if (auto t = dyn_cast<TransposeOp>(p)) {
    moved = true;
    for (int64_t d : t.getPerm())
      out.strides.push_back(in->strides[d]);
  } else {
    auto slice = cast<SliceOp>(p);
    moved = true;
    for (auto [start, step, stride] : llvm::zip(slice.getStarts(), slice.getSteps(), in->strides)) {
      if (step < 0)
        return std::nullopt;
      out.offset += start * stride;
      out.strides.push_back(stride * step);
    }
  }
  return out;
}

/// 0b. A float32 matmul operand computed by slices and transposes of a tensor
/// (attention's heads: slice -> reshape -> transpose of the QKV projection) is read
/// through a strided view of that tensor, where the GEMM can read the view as its
/// operand's layout (StridedViewOp::getMatrixLayout): the copies are never made. The
/// chain's ops left without readers are erased. 16-bit and emulated-accumulation GEMMs
/// keep their copies (their library paths take contiguous operands).
void readMatmulOperandsThroughViews(Block &body) {
  llvm::SetVector<Operation *> dead;
  for (Operation &op : body.without_terminator()) {
    auto mm = dyn_cast<MatMulOp>(&op);
    if (!mm || !isPlainF32Gemm(mm))
      continue;
    for (OpOperand &use : mm->getOpOperands()) {
      Value v = use.get(), root;
      bool moved = false;
      Operation *p = v.getDefiningOp();
      if (!isa_and_nonnull<ReshapeOp, TransposeOp, SliceOp>(p) ||
          llvm::is_contained(shapeOf(v), 0))
        continue;
      std::optional<Layout> l = layoutOf(v, root, moved);
      if (!l || !moved)
        continue;
      OpBuilder b(mm);
      auto view = StridedViewOp::create(b, p->getLoc(), v.getType(), root,
                                        b.getI64IntegerAttr(l->offset),
                                        b.getDenseI64ArrayAttr(l->strides));
      if (!view.getMatrixLayout()) {
        view.erase();
        continue;
      }
      use.set(view);
      dead.insert(p);
    }
  }
  while (!dead.empty()) {
    Operation *p = dead.pop_back_val();
    if (!p->use_empty() || !isa<ReshapeOp, TransposeOp, SliceOp>(p))
      continue;
    Operation *in = p->getOperand(0).getDefiningOp();
    p->erase();
    if (in)
      dead.insert(in);
  }
}

/// Follows `v`, laid out as `l` in a destination buffer, down through reshapes,
/// transposes and concats whose results have no other reader to the GEMMs that
/// compute its elements: each GEMM's product with its layout in the destination.
bool productsOf(Value v, const Layout &l, SmallVectorImpl<std::pair<MatMulOp, Layout>> &out,
                SmallVectorImpl<Operation *> &chain) {
  Operation *p = v.getDefiningOp();
  if (auto mm = dyn_cast_or_null<MatMulOp>(p)) {
    if (!isPlainF32Gemm(mm))
      return false;
    out.push_back({mm, l});
    return true;
  }
  if (!isa_and_nonnull<ReshapeOp, TransposeOp, ConcatOp>(p) ||
      llvm::any_of(p->getOperands(), [](Value in) { return !in.hasOneUse(); }))
    return false;
  chain.push_back(p);
  if (auto concat = dyn_cast<ConcatOp>(p)) {
    int64_t at = l.offset, axis = concat.getAxis();
    for (Value in : concat.getInputs()) {
      Layout li{at, llvm::to_vector(shapeOf(in)), l.strides};
      if (!productsOf(in, li, out, chain))
        return false;
      at += shapeOf(in)[axis] * l.strides[axis];
    }
    return true;
  }
  Value in = p->getOperand(0);
  Layout li{l.offset, llvm::to_vector(shapeOf(in)), {}};
  if (auto t = dyn_cast<TransposeOp>(p)) {
    li.strides.assign(li.shape.size(), 0);
    for (auto [d, from] : llvm::enumerate(t.getPerm()))
      li.strides[from] = l.strides[d];
  } else {
    std::optional<SmallVector<int64_t>> st = reshapeStrides(l.shape, l.strides, li.shape);
    if (!st)
      return false;
    li.strides = std::move(*st);
  }
  return productsOf(in, li, out, chain);
}

/// 0c. A concat or transpose whose elements all come from float32 GEMMs through
/// reshapes, transposes and concats (the merge of attention's heads; the q, k, v
/// gradients concatenated into the QKV projection's) is not launched: each GEMM writes
/// its product into its slot of one buffer (ortc.empty, chained through
/// ortc.matmul_into in program order). A product whose slot has unit-stride rows
/// rather than columns is computed transposed (C^T = op(B)^T op(A)^T).
void writeMatmulProductsInPlace(Block &body) {
  SmallVector<Operation *> candidates;
  for (Operation &op : body.without_terminator())
    if (isa<ConcatOp, TransposeOp>(op))
      candidates.push_back(&op);
  DenseSet<Operation *> erased;
  for (Operation *d : llvm::reverse(candidates)) {
    if (erased.count(d))
      continue;
    Value dest = d->getResult(0);
    Layout l = contiguousLayout(shapeOf(dest));
    SmallVector<std::pair<MatMulOp, Layout>> products;
    SmallVector<Operation *> chain;
    if (llvm::is_contained(l.shape, 0) || !productsOf(dest, l, products, chain))
      continue;
    struct Write {
      MatMulOp mm;
      Value a, b;
      bool ta, tb;
      Layout slot;
    };
    SmallVector<Write> writes;
    for (auto &[mm, slot] : products) {
      Write w{mm, mm.getA(), mm.getB(), mm.getTransA(), mm.getTransB(), slot};
      std::optional<MatrixLayout> ml = matrixLayout(slot.shape, slot.strides);
      if (ml && ml->transposed) {
        size_t r = slot.shape.size();
        std::swap(slot.shape[r - 2], slot.shape[r - 1]);
        std::swap(slot.strides[r - 2], slot.strides[r - 1]);
        w = Write{mm, mm.getB(), mm.getA(), !mm.getTransB(), !mm.getTransA(), slot};
        ml = matrixLayout(slot.shape, slot.strides);
      }
      if (!ml || ml->transposed)
        break;
      writes.push_back(w);
    }
    if (writes.size() != products.size())
      continue;
    llvm::sort(writes, [](const Write &x, const Write &y) { return x.mm->isBeforeInBlock(y.mm); });
    OpBuilder b(writes.front().mm);
    Value into = EmptyOp::create(b, d->getLoc(), dest.getType());
    for (Write &w : writes) {
      b.setInsertionPoint(w.mm);
      into = MatMulIntoOp::create(b, w.mm.getLoc(), dest.getType(), w.a, w.b, into, w.ta, w.tb,
                                  w.slot.offset, w.slot.strides);
    }
    dest.replaceAllUsesWith(into);
    for (Operation *op : chain) { // producers after their readers: top down
      erased.insert(op);
      op->erase();
    }
    for (Write &w : writes)
      w.mm.erase();
  }
}

struct KernelFormer {
  void formKernels(func::FuncOp fn) {
    Block &body = fn.getBody().front();
    sinkIntoBroadcasts(body);
    readMatmulOperandsThroughViews(body);
    writeMatmulProductsInPlace(body);
    DenseMap<Operation *, unsigned> pos;
    for (auto [i, op] : llvm::enumerate(body.getOperations()))
      pos[&op] = i;

    // 1. Groups.
    llvm::EquivalenceClasses<Operation *> groups;
    auto members = [&](Operation *op) {
      auto range = groups.members(op);
      return SmallVector<Operation *>(range.begin(), range.end());
    };
    auto canMerge = [&](ArrayRef<Operation *> merged, Operation *last) {
      SmallPtrSet<Operation *, 16> in(merged.begin(), merged.end());
      for (Operation *m : merged)
        for (Operation *u : m->getUsers())
          if (!in.count(u) && pos.lookup(u) <= pos.lookup(last))
            return false;
      return true;
    };
    auto rowOps = [](ArrayRef<Operation *> ms) { return llvm::count_if(ms, isRowOp); };
    for (Operation &opRef : body.without_terminator()) {
      Operation *op = &opRef;
      if (!isPointwise(op) && !isRowOp(op))
        continue;
      groups.insert(op);
      ArrayRef<int64_t> shape = shapeOf(op->getResult(0));
      for (Value in : op->getOperands()) {
        Operation *p = in.getDefiningOp();
        if (!p || !groups.contains(p) || groups.isEquivalent(p, op) ||
            shapeOf(p->getResult(0)) != shape)
          continue;
        SmallVector<Operation *> merged = members(p);
        llvm::append_range(merged, members(op));
        if (rowOps(merged) > 1 || !canMerge(merged, op))
          continue;
        groups.unionSets(p, op);
      }
    }

    // 1b. Reductions over leading dims join the group computing their input.
    for (Operation &opRef : body.without_terminator()) {
      auto red = dyn_cast<ReduceSumOp>(&opRef);
      Operation *p = red ? red.getX().getDefiningOp() : nullptr;
      if (!red || !hasRole(red, FusionRole::Reduction) || !p || !groups.contains(p) ||
          !isPointwise(p) || llvm::any_of(members(p), isRowOp))
        continue;
      ArrayRef<int64_t> shape = shapeOf(red.getX());
      ArrayRef<int64_t> axes = red.getAxes();
      size_t k = axes.size();
      bool leading = k >= 1 && k < shape.size();
      for (size_t i = 0; leading && i < k; ++i)
        leading = axes[i] == static_cast<int64_t>(i);
      auto product = [&](size_t from, size_t to) {
        int64_t n = 1;
        for (size_t d = from; d < to; ++d)
          n *= shape[d];
        return n;
      };
      if (!leading || product(0, k) < 2 || product(k, shape.size()) < 2)
        continue;
      SmallVector<Operation *> merged = members(p);
      // Every member computes over the same shape; inputs read through broadcasts
      // must treat the kept dims alike; sums already in the kernel keep the same dims
      // (codegen has one row/column split per kernel).
      bool uniform = llvm::all_of(merged, [&](Operation *m) {
        if (auto other = dyn_cast<ReduceSumOp>(m))
          return other.getAxes() == axes;
        return shapeOf(m->getResult(0)) == shape && readsKeptDimsAlike(m, shape, k);
      });
      merged.push_back(red);
      if (uniform && canMerge(merged, red))
        groups.unionSets(p, red.getOperation());
    }

    // 1c. Recompute clones join a later sibling.
    mergeRecomputeSiblings(fn, groups, pos);

    // 1d. A GEMM joins the group that alone reads its product, as its epilogue.
    DenseMap<Operation *, SmallVector<Operation *, 2>> gemmOf = attachGemms(groups, pos);

    // 2-3. One ortc.fused per group worth a kernel of its own.
    SmallVector<SmallVector<Operation *>> kernels;
    for (auto it = groups.begin(); it != groups.end(); ++it) {
      if (!(*it)->isLeader())
        continue;
      SmallVector<Operation *> ms(groups.member_begin(**it), groups.member_end());
      llvm::append_range(ms, gemmOf.lookup((*it)->getData()));
      llvm::sort(ms, [&](Operation *a, Operation *b) { return pos[a] < pos[b]; });
      bool readsMap = llvm::any_of(ms, [](Operation *m) {
        return llvm::any_of(m->getOperands(), readThroughMap);
      });
      if (ms.size() >= 2 || readsMap)
        kernels.push_back(std::move(ms));
    }
    llvm::sort(kernels, [&](auto &a, auto &b) { return pos[a.back()] < pos[b.back()]; });
    for (auto &ms : kernels)
      buildKernel(ms, llvm::any_of(ms, isRowOp)                 ? "rows"
                      : llvm::any_of(ms, llvm::IsaPred<MatMulOp>) ? "gemm"
                                                                  : "pointwise");

    // 4. Multi-tensor kernels: ops alike up to their per-tensor operands.
    pos.clear();
    for (auto [i, op] : llvm::enumerate(body.getOperations()))
      pos[&op] = i;
    SmallVector<SmallVector<Operation *>> multi;
    for (Operation &opRef : body.without_terminator()) {
      Operation *op = &opRef;
      if (!hasRole(op, FusionRole::MultiTensor))
        continue;
      auto alike = [&](Operation *o) {
        if (o->getName() != op->getName() || o->getAttrDictionary() != op->getAttrDictionary() ||
            o->getNumOperands() != op->getNumOperands())
          return false;
        for (auto [a, b] : llvm::zip(o->getOperands(), op->getOperands()))
          if (cast<RankedTensorType>(a.getType()).getElementType() !=
                  cast<RankedTensorType>(b.getType()).getElementType() ||
              (shapeOf(a).empty() && a != b))
            return false;
        return true;
      };
      auto group = llvm::find_if(multi, [&](auto &g) {
        if (!alike(g.front()))
          return false;
        SmallVector<Operation *> merged(g.begin(), g.end());
        merged.push_back(op);
        return canMerge(merged, op);
      });
      if (group == multi.end())
        multi.push_back({op});
      else
        group->push_back(op);
    }
    for (auto &ms : multi)
      if (ms.size() >= 2)
        buildKernel(ms, "multi_tensor");
  }

  /// Step 0: a cheap pointwise op (isCheapToRecompute: a comparison) whose value is
  /// only read through broadcasts is computed where it is read: each broadcast of its
  /// result becomes the op over broadcasts of its operands (splats widened), so the
  /// kernels reading the broadcast compute it per element and it launches no kernel of
  /// its own (the attention mask `mask == 0` of every layer). Each reader of a
  /// broadcast gets its own copy, placed before it with the broadcast's stage.
  void sinkIntoBroadcasts(Block &body) {
    SmallVector<Operation *> cheap;
    for (Operation &opRef : body.without_terminator()) {
      Operation *op = &opRef;
      auto f = dyn_cast<FusionOpInterface>(op);
      if (!isPointwise(op) || !f.isCheapToRecompute() || op->use_empty() ||
          !llvm::all_of(op->getUsers(), [](Operation *u) { return isa<BroadcastToOp>(u); }))
        continue;
      ArrayRef<int64_t> shape = shapeOf(op->getResult(0));
      if (llvm::all_of(op->getOperands(),
                       [&](Value v) { return isSplatConstant(v) || shapeOf(v) == shape; }))
        cheap.push_back(op);
    }
    for (Operation *op : cheap) {
      for (Operation *user : llvm::make_early_inc_range(op->getUsers())) {
        auto bc = cast<BroadcastToOp>(user);
        ArrayRef<int64_t> target = shapeOf(bc.getResult());
        // One copy per reader: each kernel computes its own (none yields it to another).
        for (OpOperand &use : llvm::make_early_inc_range(bc.getResult().getUses())) {
          OpBuilder b(use.getOwner());
          IRMapping map;
          for (Value v : op->getOperands()) {
            auto type = cast<RankedTensorType>(v.getType()).clone(target);
            Operation *wide;
            if (isSplatConstant(v)) {
              auto splat = cast<DenseElementsAttr>(v.getDefiningOp<ConstantOp>().getValue());
              wide = ConstantOp::create(b, v.getLoc(), splat.resizeSplat(type));
            } else {
              wide = BroadcastToOp::create(b, bc.getLoc(), type, v);
            }
            wide->setDiscardableAttrs(bc->getDiscardableAttrDictionary());
            map.map(v, wide->getResult(0));
          }
          // The broadcast's stage and recompute marks: the copy runs where it ran.
          Operation *clone = b.clone(*op, map);
          clone->getResult(0).setType(bc.getType());
          clone->setDiscardableAttrs(bc->getDiscardableAttrDictionary());
          use.set(clone->getResult(0));
        }
        bc.erase();
      }
      op->erase();
    }
  }

  /// Step 1c: a group of recompute clones only (placed before its first backward reader)
  /// joins another group of its shape, so that it launches no kernel of its own:
  ///  - the first later group that reads a value it reads: the clone of a GELU and the
  ///    kernel of its gradient both read the GELU's input, and together they read it
  ///    once, launch once and share the erf; the clone of a dropout and the dropout_grad
  ///    of the same mask draw it once (sharesWorkWith), also in a row kernel (the clone
  ///    is computed as the row's elements are stored). The kernel runs where the later
  ///    group ends, so the clones' readers before that point, with what depends on them
  ///    there, move after it; not when one of them feeds the later group or is itself in
  ///    a group;
  ///  - else the last earlier group whose kernel runs after every value the clones read
  ///    is computed (a LayerNorm's output from its saved statistics, whose backward
  ///    readers are a GEMM and a library kernel): the clones move up into it (before its
  ///    last op, where the kernel stands), and their values live from there to their
  ///    readers, still not from the forward.
  /// Into a kernel with a sum, only clones reading their broadcasts alike along the kept
  /// dims (readsKeptDimsAlike).
  void mergeRecomputeSiblings(func::FuncOp fn, llvm::EquivalenceClasses<Operation *> &groups,
                              DenseMap<Operation *, unsigned> &pos) {
    Block &body = fn.getBody().front();
    auto renumber = [&] {
      pos.clear();
      for (auto [i, op] : llvm::enumerate(body.getOperations()))
        pos[&op] = i;
    };
    auto membersOf = [&](Operation *op) {
      auto r = groups.members(op);
      SmallVector<Operation *> ms(r.begin(), r.end());
      llvm::sort(ms, [&](Operation *a, Operation *b) { return pos[a] < pos[b]; });
      return ms;
    };
    SmallVector<Operation *> leaders;
    for (auto it = groups.begin(); it != groups.end(); ++it)
      if ((*it)->isLeader() && llvm::all_of(groups.members((*it)->getData()), [](Operation *m) {
            return isRecompute(m) && isPointwise(m);
          }))
        leaders.push_back((*it)->getData());
    for (Operation *leader : leaders) {
      SmallVector<Operation *> g1 = membersOf(leader);
      SmallPtrSet<Operation *, 8> in1(g1.begin(), g1.end());
      ArrayRef<int64_t> shape = shapeOf(g1.back()->getResult(0));
      // A kernel with a sum runs its kept dims as the inner loop.
      auto fits = [&](ArrayRef<Operation *> g2) {
        for (Operation *m : g2)
          if (auto sum = dyn_cast<ReduceSumOp>(m))
            if (!llvm::all_of(g1, [&](Operation *c) {
                  return readsKeptDimsAlike(c, shape, sum.getAxes().size());
                }))
              return false;
        return true;
      };
      if (Operation *sibling = laterSibling(g1, shape, groups, pos)) {
        SmallVector<Operation *> g2 = membersOf(sibling);
        if (fits(g2) && moveReadersAfter(g1, g2, groups, pos, body)) {
          renumber();
          groups.unionSets(leader, sibling);
          continue;
        }
      }
      // The last earlier group: after what the clones read (a value read through an
      // index map is its source's: the map is cloned into the kernel; splats are literals).
      unsigned ready = 0;
      std::function<void(Value)> needs = [&](Value v) {
        Operation *p = v.getDefiningOp();
        if (!p || in1.count(p) || isSplatConstant(v))
          return;
        if (readThroughMap(v))
          return needs(p->getOperand(0));
        ready = std::max(ready, pos[p]);
      };
      for (Operation *m : g1)
        for (Value v : m->getOperands())
          needs(v);
      Operation *sibling = nullptr, *siblingLast = nullptr;
      for (auto it = groups.begin(); it != groups.end(); ++it) {
        if (!(*it)->isLeader() || (*it)->getData() == leader)
          continue;
        SmallVector<Operation *> g2 = membersOf((*it)->getData());
        Operation *last = g2.back(), *shaped = nullptr;
        for (Operation *m : g2)
          if (!isa<ReduceSumOp>(m))
            shaped = m;
        if (!shaped || shapeOf(shaped->getResult(0)) != shape || pos[last] >= pos[g1.front()] ||
            pos[last] <= ready || (siblingLast && pos[last] <= pos[siblingLast]) || !fits(g2))
          continue;
        sibling = (*it)->getData();
        siblingLast = last;
      }
      if (!sibling)
        continue;
      // Before the group's last op: the kernel stands there, with its stage.
      for (Operation *m : g1)
        m->moveBefore(siblingLast);
      renumber();
      groups.unionSets(leader, sibling);
    }
  }

  /// Step 1c's later sibling of the clones `g1` (of `shape`): the earliest later pointwise
  /// op of the same shape reading an input of that shape (not a scalar such as a dropout
  /// seed: nothing is read once then), or sharing other work with a clone (a
  /// dropout_grad drawing the clone's mask).
  Operation *laterSibling(ArrayRef<Operation *> g1, ArrayRef<int64_t> shape,
                          llvm::EquivalenceClasses<Operation *> &groups,
                          DenseMap<Operation *, unsigned> &pos) {
    SmallPtrSet<Operation *, 8> in1(g1.begin(), g1.end());
    Operation *sibling = nullptr;
    auto shares = [&](Operation *m, Value v, Operation *u) {
      auto f = dyn_cast<FusionOpInterface>(m);
      return shapeOf(v) == shape || (f && f.sharesWorkWith(u));
    };
    for (Operation *m : g1)
      for (Value v : m->getOperands())
        for (Operation *u : v.getUsers())
          if (shares(m, v, u) && !in1.count(u) && isPointwise(u) && groups.contains(u) &&
              pos[u] > pos[g1.back()] && shapeOf(u->getResult(0)) == shape &&
              (!sibling || pos[u] < pos[sibling]))
            sibling = u;
    return sibling;
  }

  /// Moves the readers of the clones `g1` outside it that run before the last op of the
  /// later group `g2`, with what depends on them there, after that op; false (nothing
  /// moved) where one of them is in a group or has regions.
  bool moveReadersAfter(ArrayRef<Operation *> g1, ArrayRef<Operation *> g2,
                        llvm::EquivalenceClasses<Operation *> &groups,
                        DenseMap<Operation *, unsigned> &pos, Block &body) {
    SmallPtrSet<Operation *, 8> in1(g1.begin(), g1.end()), in2(g2.begin(), g2.end());
    Operation *last = g2.back();
    SetVector<Operation *> moving;
    for (Operation *m : g1)
      for (Operation *u : m->getUsers())
        if (!in1.count(u) && pos.lookup(u) <= pos[last])
          moving.insert(u);
    for (size_t i = 0; i < moving.size(); ++i) {
      Operation *op = moving[i];
      if (op->getBlock() != &body || in2.count(op) || groups.contains(op) ||
          op->getNumRegions() != 0)
        return false;
      for (Operation *u : op->getUsers())
        if (pos.lookup(u) <= pos[last])
          moving.insert(u);
    }
    SmallVector<Operation *> order(moving.begin(), moving.end());
    llvm::sort(order, [&](Operation *a, Operation *b) { return pos[a] < pos[b]; });
    Operation *after = last;
    for (Operation *op : order) {
      op->moveAfter(after);
      after = op;
    }
    return true;
  }

  /// Step 1d: a float32 GEMM (FusionRole::Epilogue) whose product only one group of
  /// pointwise ops of the product's shape reads joins it, the group as its epilogue: codegen
  /// computes the product in panels and runs the group on each panel while it is in
  /// cache (the bias, GELU, residual add after a projection; the GELU gradient's
  /// product with dy · W^T), so the product never goes to memory and back; a reshape
  /// between them that keeps the last dim joins too (its rows are the product's). A
  /// sum over all but the last dim (the bias gradient beside GELU's gradient) stays in
  /// the kernel where the value it adds up is also yielded and the GEMM is one matrix.
  /// A group with a row op takes a GEMM whose product its rows read (attention's scores
  /// QK^T before the softmax, dP = dO V^T before softmax_grad): a row is the product's
  /// row, whole in every panel. Not where an operand of the GEMM is computed by the
  /// group or read through an index map (the GEMM reads buffers). Returns group leader
  /// -> GEMM (and reshape).
  DenseMap<Operation *, SmallVector<Operation *, 2>>
  attachGemms(llvm::EquivalenceClasses<Operation *> &groups, DenseMap<Operation *, unsigned> &pos) {
    DenseMap<Operation *, SmallVector<Operation *, 2>> gemmOf;
    for (auto it = groups.begin(); it != groups.end(); ++it) {
      if (!(*it)->isLeader())
        continue;
      SmallVector<Operation *> ms(groups.member_begin(**it), groups.member_end());
      auto pointwise = llvm::find_if(ms, [](Operation *m) { return isPointwise(m) || isRowOp(m); });
      if (pointwise == ms.end())
        continue;
      SmallPtrSet<Operation *, 16> in(ms.begin(), ms.end());
      ArrayRef<int64_t> shape = shapeOf((*pointwise)->getResult(0));
      // A sum (a bias gradient) keeps the last dim only and adds up a value the kernel
      // also yields (a GPU sums that result after the GEMM, the CPU as it goes).
      auto keepsRows = [&](Operation *m) {
        auto sum = dyn_cast<ReduceSumOp>(m);
        if (!sum)
          return isPointwise(m) || isRowOp(m);
        int64_t kept = 1;
        for (size_t d = sum.getAxes().size(); d < shape.size(); ++d)
          kept *= shape[d];
        return kept == shape.back() &&
               llvm::any_of(sum.getX().getUsers(), [&](Operation *u) { return !in.count(u); });
      };
      if (!llvm::all_of(ms, keepsRows))
        continue;
      bool sums = llvm::any_of(ms, llvm::IsaPred<ReduceSumOp>);
      // The product as the group reads it: the GEMM's result, or a reshape of it that
      // keeps the last dim (a linear layer's [B*T, N] product read as [B, T, N]).
      auto product = [&](Value v) -> SmallVector<Operation *, 2> {
        Operation *def = v.getDefiningOp();
        auto reshape = dyn_cast_or_null<ReshapeOp>(def);
        auto mm = dyn_cast_or_null<MatMulOp>(reshape ? reshape.getX().getDefiningOp() : def);
        if (!mm || !hasRole(mm, FusionRole::Epilogue) || shapeOf(v) != shape ||
            shapeOf(mm.getResult()).back() != shape.back())
          return {};
        ArrayRef<int64_t> ps = shapeOf(mm.getResult());
        if (sums && llvm::any_of(ps.drop_back(2), [](int64_t d) { return d != 1; }))
          return {}; // sums' row blocks would straddle the matrices of a batch
        if (reshape && !mm->hasOneUse())
          return {};
        for (Value x : {mm.getA(), mm.getB()})
          if (in.count(x.getDefiningOp()) || readThroughMap(x) || isSplatConstant(x))
            return {};
        if (!llvm::all_of(v.getUsers(), [&](Operation *u) { return in.count(u) != 0; }))
          return {};
        if (reshape)
          return {mm, reshape};
        return {mm};
      };
      SmallVector<Operation *, 2> best;
      for (Operation *m : ms)
        for (Value v : m->getOperands())
          if (SmallVector<Operation *, 2> p = product(v);
              !p.empty() && (best.empty() || pos[p.front()] < pos[best.front()]))
            best = p;
      if (!best.empty())
        gemmOf[(*it)->getData()] = best;
    }
    return gemmOf;
  }

  void buildKernel(ArrayRef<Operation *> ms, StringRef kind) {
    SmallPtrSet<Operation *, 16> in(ms.begin(), ms.end());
    // Inputs in order of first use; index maps read their source; splats are cloned.
    SetVector<Value> inputs;
    SetVector<Operation *> maps;
    for (Operation *m : ms)
      for (Value v : m->getOperands()) {
        Operation *p = v.getDefiningOp();
        if (p && in.count(p))
          continue;
        if (isSplatConstant(v))
          continue;
        if (readThroughMap(v)) {
          maps.insert(p);
          for (Value src : p->getOperands())
            if (!isSplatConstant(src))
              inputs.insert(src);
          continue;
        }
        inputs.insert(v);
      }
    SmallVector<Value> outputs;
    for (Operation *m : ms)
      for (Value r : m->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !in.count(u); }))
          outputs.push_back(r);
    if (outputs.empty())
      return; // dead code: left for the canonicalizer to remove

    Operation *last = ms.back();
    OpBuilder b(last);
    SmallVector<Location> locs;
    for (Operation *m : ms)
      locs.push_back(m->getLoc());
    SmallVector<Type> resultTypes;
    for (Value v : outputs)
      resultTypes.push_back(v.getType());
    auto fused = FusedOp::create(b, FusedLoc::get(b.getContext(), locs), resultTypes,
                                 inputs.getArrayRef(), b.getStringAttr(kind));
    if (StringRef stage = stageOf(last); !stage.empty())
      setStage(fused, stage); // a kernel runs where its last op ran
    if (llvm::all_of(ms, isRecompute))
      setRecompute(fused);
    Block *block = new Block();
    fused.getBody().push_back(block);
    IRMapping map;
    for (Value v : inputs)
      map.map(v, block->addArgument(v.getType(), v.getLoc()));
    OpBuilder inner = OpBuilder::atBlockEnd(block);
    // Clones `v`'s producer into the body when it is a splat or an index map.
    auto cloneLeaf = [&](Value v) {
      if (map.contains(v))
        return;
      Operation *p = v.getDefiningOp();
      for (Value src : p->getOperands())
        if (!map.contains(src))
          inner.clone(*src.getDefiningOp(), map); // a splat source of a map
      inner.clone(*p, map);
    };
    for (Operation *m : ms) {
      for (Value v : m->getOperands())
        if (!map.contains(v))
          cloneLeaf(v);
      inner.clone(*m, map);
    }
    SmallVector<Value> yielded;
    for (Value v : outputs)
      yielded.push_back(map.lookup(v));
    YieldOp::create(inner, fused.getLoc(), yielded);

    for (auto [v, r] : llvm::zip(outputs, fused.getResults()))
      v.replaceUsesWithIf(r, [&](OpOperand &use) { return !in.count(use.getOwner()); });
    for (Operation *m : llvm::reverse(ms))
      m->erase();
    for (Operation *p : maps)
      if (p->use_empty())
        p->erase();
  }
};

struct FormKernelsPass : impl::FormKernelsBase<FormKernelsPass> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>())
      formKernels(fn);
  }
};
} // namespace

void formKernels(func::FuncOp fn) { KernelFormer().formKernels(fn); }

} // namespace ortc
