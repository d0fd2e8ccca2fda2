//===- DataParallel.cpp - Averaging a step's gradients over ranks --------===//
//
// Algorithm (averageOverRanks):
//  1. Order the values as the step computes them: block arguments first, then by
//     their defining op's place in the block (the backward emits the last layer's
//     gradients first, as PyTorch DDP's buckets do).
//  2. Walk that order, starting a new bucket when the element type changes or the
//     bucket would pass the byte limit.
//  3. Per bucket: one value goes to ortc.all_reduce as it is; several are flattened,
//     concatenated, reduced once and sliced back into their shapes. Fusion later
//     writes the concatenation where the gradients are computed when it can.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/DataParallel.h"

#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include <numeric>

using namespace mlir;

namespace ortc {

int64_t averageOverRanks(OpBuilder &b, Location loc, MutableArrayRef<Value> values,
                         ArrayRef<Value> producedAs, int64_t bucketBytes) {
  auto position = [](Value v) -> std::pair<int, Operation *> {
    if (Operation *op = v.getDefiningOp())
      return {1, op};
    return {0, nullptr};
  };
  SmallVector<unsigned> order(values.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](unsigned x, unsigned y) {
    auto [kx, ox] = position(producedAs[x]);
    auto [ky, oy] = position(producedAs[y]);
    if (kx != ky)
      return kx < ky;
    return ox && oy && ox != oy && ox->isBeforeInBlock(oy);
  });

  auto bytesOf = [](Value v) {
    RankedTensorType t = tensorTypeOf(v);
    return numElements(t.getShape()) * int64_t(t.getElementTypeBitWidth() / 8);
  };
  SmallVector<SmallVector<unsigned>> buckets;
  int64_t filled = 0;
  for (unsigned i : order) {
    int64_t bytes = bytesOf(values[i]);
    bool fits = !buckets.empty() &&
                tensorTypeOf(values[buckets.back().front()]).getElementType() ==
                    tensorTypeOf(values[i]).getElementType() &&
                filled + bytes <= bucketBytes;
    if (!fits) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }

  for (auto [k, bucket] : llvm::enumerate(buckets)) {
    Location bloc = NameLoc::get(b.getStringAttr("all_reduce_bucket" + std::to_string(k)), loc);
    if (bucket.size() == 1) {
      Value &v = values[bucket.front()];
      v = AllReduceOp::create(b, bloc, v.getType(), v, b.getStringAttr("mean"));
      continue;
    }
    SmallVector<Value> flat;
    for (unsigned i : bucket) {
      int64_t n = numElements(tensorTypeOf(values[i]).getShape());
      flat.push_back(reshapeTo(b, bloc, values[i], {n}));
    }
    Value packed = ConcatOp::create(b, bloc, flat, 0);
    Value reduced = AllReduceOp::create(b, bloc, packed.getType(), packed, b.getStringAttr("mean"));
    int64_t offset = 0;
    for (unsigned i : bucket) {
      RankedTensorType type = tensorTypeOf(values[i]);
      int64_t n = numElements(type.getShape());
      Value part = SliceOp::create(b, bloc, reduced, ArrayRef<int64_t>{offset},
                                   ArrayRef<int64_t>{n}, ArrayRef<int64_t>{1});
      values[i] = reshapeTo(b, bloc, part, type.getShape());
      offset += n;
    }
  }
  return int64_t(buckets.size());
}

} // namespace ortc
