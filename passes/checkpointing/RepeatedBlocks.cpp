//===- RepeatedBlocks.cpp - Repeated structure of a step's forward -------===//
//
// Why: `--recompute layers` keeps only what crosses the boundaries of each repeated
// block (a transformer layer, a residual block) and recomputes the block in the
// backward, as PyTorch's per-module checkpointing does by hand. ortc has no modules,
// only ONNX nodes, so the blocks are found from what the export left:
//
//  1. Node name scopes. PyTorch's TorchScript exporter names nodes by module path
//     ("/m/bert/encoder/layer.3/attention/self/MatMul", torchvision's ViT
//     ".../encoder_layer_3/..."): a path segment (not the node's own name, the last)
//     ending in ".<index>" or "_<index>" names a block, and a family of them (the same
//     path with another index) is a repeated structure when it has two members or more
//     and each holds a heavy op (a Sequential of single layers, Linear then GELU, is
//     not); the outermost such family wins. The op order does not matter (layers are not
//     always exported in the same order, and CSE leaves layer-invariant ops in the first).
//  2. Otherwise the graph (PyTorch 2's exporter names nodes "node_MatMul_12"). The
//     forward's activation ops (those reading a step input, directly or through other
//     forward ops; weight-only and constant-only ops such as a bias broadcast or a shared
//     scale are left out, as CSE keeps them in the first layer only) in execution order;
//     of them, the heavy ones (not cheap to recompute: GEMMs, convolutions, ops without
//     RecomputeOpInterface) form a sequence of signatures (op name, operand and result
//     counts, result ranks): cheap ops are left out of it because exporters order them
//     differently from layer to layer. For every period P >= 1 (in heavy ops), where
//     sig[j] == sig[j + P] holds over a run of length L starting at i, heavy ops
//     [i, i + L + P) repeat with period P, floor((L + P) / P) copies. The run covering the
//     most heavy ops wins (ties: the shorter period, finer blocks). Block boundaries fall
//     in the gaps between the last heavy op of one copy and the first of the next, each
//     where the fewest activation bytes cross (after a residual add, not inside an
//     attention), at the offset into the run (among those that keep every copy) with the
//     fewest bytes in all; blocks of fewer than kMinOps ops are dropped. The heavy ops
//     before and after the run are searched the same way (an encoder's blocks, then a
//     decoder's).
//
//===----------------------------------------------------------------------===//
#include "passes/checkpointing/Passes.h"

#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "passes/memory_planning/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

#include "llvm/ADT/StringExtras.h"

#include <map>

using namespace mlir;

namespace ortc {
namespace {

/// The fewest ops a block found in the graph has.
constexpr int64_t kMinOps = 4;

/// Not cheap to recompute: a GEMM, a convolution, or an op that cannot be recomputed.
bool isHeavy(Operation *op, int64_t cheapFlops) { return !isCheapToRecompute(op, cheapFlops); }

/// Step 1: blocks by module path. Returns no blocks when no family qualifies.
std::vector<std::vector<Operation *>> blocksByNameScope(ArrayRef<Operation *> forward,
                                                       int64_t cheapFlops) {
  // Every path segment "<name>.<index>" or "<name>_<index>" but the last (the node's own
  // name) makes the op a member of a family: family "/m/encoder/layer." -> member
  // "/m/encoder/layer.3" -> ops, outer segments first.
  struct Family {
    llvm::MapVector<StringRef, std::vector<Operation *>> members;
    unsigned depth = 0;
  };
  llvm::MapVector<StringRef, Family> families;
  for (Operation *op : forward) {
    StringRef name = onnxNodeName(op);
    SmallVector<StringRef> parts;
    name.split(parts, '/');
    unsigned depth = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      StringRef part = parts[k];
      size_t sep = part.find_last_of("._");
      if (sep == StringRef::npos || sep == 0 || sep + 1 == part.size() ||
          !llvm::all_of(part.drop_front(sep + 1), llvm::isDigit))
        continue;
      size_t offset = part.data() - name.data();
      Family &f = families[name.take_front(offset + sep + 1)];
      f.depth = depth++;
      f.members[name.take_front(offset + part.size())].push_back(op);
    }
  }
  // A family is a repeated structure when it has two members or more and each holds an
  // op that is not cheap (a Sequential of single layers, Linear then GELU, is not); the
  // outermost one wins, its members' inner families are not looked at.
  SmallVector<std::pair<unsigned, StringRef>> order;
  for (auto &[key, f] : families)
    order.push_back({f.depth, key});
  llvm::stable_sort(order, [](auto a, auto b) { return a.first < b.first; });
  std::vector<StringRef> taken; // members of accepted families
  std::vector<std::vector<Operation *>> blocks;
  for (auto [depth, key] : order) {
    Family &f = families[key];
    if (f.members.size() < 2 ||
        llvm::any_of(taken, [&](StringRef m) { return key.starts_with(m.str() + "/"); }) ||
        !llvm::all_of(f.members, [&](auto &m) {
          return llvm::any_of(m.second, [&](Operation *op) { return isHeavy(op, cheapFlops); });
        }))
      continue;
    for (auto &[member, ops] : f.members) {
      taken.push_back(member);
      blocks.push_back(ops);
    }
  }
  return blocks;
}

/// Step 2: blocks by repeats of the heavy ops' sequence, cut in the gaps between them.
struct RepeatSearch {
  SmallVector<Operation *> ops;   ///< the activation ops in order
  SmallVector<int64_t> heavy;     ///< positions in `ops` of the ops not cheap to recompute
  SmallVector<unsigned> sig;      ///< [h]: signature of heavy op h
  SmallVector<int64_t> liveBytes; ///< [b]: activation bytes live across the boundary before op b
  std::vector<std::vector<Operation *>> blocks;

  /// The boundary before heavy op `h` (`end`: after the last one) with the fewest
  /// bytes live across it, in [lo, hi]: somewhere after heavy op h - 1 and up to h.
  std::pair<int64_t, int64_t> cut(int64_t h, int64_t begin, int64_t end, int64_t lo, int64_t hi) {
    int64_t from = h > begin ? heavy[h - 1] + 1 : lo, to = h < end ? heavy[h] : hi;
    int64_t at = from;
    for (int64_t b = from; b <= to; ++b)
      if (liveBytes[b] < liveBytes[at])
        at = b;
    return {at, liveBytes[at]};
  }

  /// Blocks among heavy ops [begin, end), whose ops lie in [lo, hi).
  void find(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
    int64_t bestCover = 0, bestP = 0, bestStart = 0, bestLen = 0;
    for (int64_t p = 1; 2 * p <= end - begin; ++p) {
      int64_t run = 0;
      for (int64_t j = begin; j + p <= end; ++j) {
        if (j + p < end && sig[j] == sig[j + p]) {
          ++run;
          continue;
        }
        // The run [j - run, j) ends: heavy ops [j - run, j + p) have period p.
        int64_t len = run + p, cover = len / p * p;
        if (len / p >= 2 && cover > bestCover) {
          bestCover = cover;
          bestP = p;
          bestStart = j - run;
          bestLen = len;
        }
        run = 0;
      }
    }
    if (!bestCover)
      return;
    int64_t copies = bestLen / bestP, slack = bestLen - copies * bestP;
    SmallVector<int64_t> bounds;
    int64_t fewest = INT64_MAX, offset = 0;
    for (int64_t o = 0; o <= slack; ++o) {
      SmallVector<int64_t> at;
      int64_t bytes = 0;
      for (int64_t k = 0; k <= copies; ++k) {
        auto [b, live] = cut(bestStart + o + k * bestP, begin, end, lo, hi);
        at.push_back(b);
        bytes += live;
      }
      if (bytes < fewest) {
        fewest = bytes;
        bounds = at;
        offset = o;
      }
    }
    int64_t first = bestStart + offset, last = first + copies * bestP;
    find(begin, first, lo, bounds.front());
    for (int64_t k = 0; k < copies; ++k)
      if (bounds[k + 1] - bounds[k] >= kMinOps)
        blocks.emplace_back(ops.begin() + bounds[k], ops.begin() + bounds[k + 1]);
    find(last, end, bounds.back(), hi);
  }
};

std::vector<std::vector<Operation *>> blocksByRepeats(ArrayRef<Operation *> forward,
                                                     int64_t cheapFlops) {
  RepeatSearch s;
  DenseSet<Value> activation;
  for (Operation *op : forward) {
    bool reads = llvm::any_of(op->getOperands(), [&](Value v) {
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
        return fn && argRole(fn, arg.getArgNumber()) == "input";
      }
      return activation.count(v) > 0;
    });
    if (!reads)
      continue;
    activation.insert(op->getResults().begin(), op->getResults().end());
    s.ops.push_back(op);
  }
  int64_t n = s.ops.size();
  std::map<std::string, unsigned> ids;
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(s.ops)) {
    position[op] = i;
    if (!isHeavy(op, cheapFlops))
      continue;
    std::string key = (op->getName().getStringRef() + "/" + Twine(op->getNumOperands()) + "/" +
                       Twine(op->getNumResults()))
                          .str();
    for (Type t : op->getResultTypes())
      key += "/" + std::to_string(isa<RankedTensorType>(t) ? cast<RankedTensorType>(t).getRank() : -1);
    s.heavy.push_back(i);
    s.sig.push_back(ids.try_emplace(key, ids.size()).first->second);
  }
  // A value from op d read by a forward op at u > d is live across the boundaries
  // d+1..u (a difference array); a step input from the start to its last reader.
  SmallVector<int64_t> delta(n + 2, 0);
  auto live = [&](Value v, int64_t from) {
    int64_t last = -1;
    for (Operation *u : v.getUsers())
      if (auto it = position.find(u); it != position.end())
        last = std::max(last, it->second);
    if (last >= from) {
      delta[from] += byteSize(v.getType());
      delta[last + 1] -= byteSize(v.getType());
    }
  };
  for (auto [d, op] : llvm::enumerate(s.ops))
    for (Value r : op->getResults())
      live(r, d + 1);
  if (n)
    if (auto fn = s.ops.front()->getParentOfType<func::FuncOp>())
      for (BlockArgument arg : fn.getArguments())
        if (argRole(fn, arg.getArgNumber()) == "input")
          live(arg, 0);
  s.liveBytes.assign(n + 1, 0);
  for (int64_t b = 0, live = 0; b <= n; ++b)
    s.liveBytes[b] = live += delta[b];
  s.find(0, s.heavy.size(), 0, n);
  return s.blocks;
}

} // namespace

std::vector<std::vector<Operation *>> findRepeatedBlocks(ArrayRef<Operation *> forward,
                                                       int64_t cheapFlops) {
  std::vector<std::vector<Operation *>> blocks = blocksByNameScope(forward, cheapFlops);
  return blocks.empty() ? blocksByRepeats(forward, cheapFlops) : blocks;
}

} // namespace ortc
