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
// exchangeForZero: the loss is averaged as above; the finite flags of every rank's own
// loss and gradients are and-ed over the ranks (all_reduce "min" of i1), which is the
// flag of the mean gradient (a sum is finite iff its terms are, short of overflow);
// the gradients, flattened and padded with zeros to ranks * S, are reduce-scattered.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/DataParallel.h"

#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include <numeric>

using namespace mlir;

namespace ortc {

Value flatten(OpBuilder &b, Location loc, ArrayRef<Value> values, int64_t size) {
  SmallVector<Value> flat;
  int64_t total = 0;
  for (Value v : values) {
    int64_t n = numElements(tensorTypeOf(v).getShape());
    flat.push_back(reshapeTo(b, loc, v, {n}));
    total += n;
  }
  if (size > total)
    flat.push_back(splat(b, loc,
                         RankedTensorType::get({size - total}, tensorTypeOf(values[0]).getElementType()),
                         0.0));
  return flat.size() == 1 ? flat[0] : Value(ConcatOp::create(b, loc, flat, 0));
}

SmallVector<Value> unflatten(OpBuilder &b, Location loc, Value flat,
                             ArrayRef<RankedTensorType> types) {
  SmallVector<Value> out;
  int64_t offset = 0, whole = tensorTypeOf(flat).getDimSize(0);
  for (RankedTensorType type : types) {
    int64_t n = numElements(type.getShape());
    Value part = n == whole ? flat
                            : Value(SliceOp::create(b, loc, flat, ArrayRef<int64_t>{offset},
                                                    ArrayRef<int64_t>{n}, ArrayRef<int64_t>{1}));
    out.push_back(reshapeTo(b, loc, part, type.getShape()));
    offset += n;
  }
  return out;
}

ZeroExchange exchangeForZero(OpBuilder &b, Location loc, Value loss, ArrayRef<Value> gradients,
                             int64_t ranks) {
  ZeroExchange z;
  MLIRContext *ctx = b.getContext();
  Location zloc = NameLoc::get(b.getStringAttr("zero1"), loc);
  // The loss, averaged like plain data parallel.
  z.loss = AllReduceOp::create(b, zloc, loss.getType(), loss, b.getStringAttr("mean"));
  // The finite flags of every rank's own loss and gradients, and-ed over the ranks.
  SmallVector<Value> checked{loss};
  checked.append(gradients.begin(), gradients.end());
  auto i1 = IntegerType::get(ctx, 1);
  int64_t n = int64_t(checked.size());
  auto local = AllFiniteOp::create(b, zloc, RankedTensorType::get({}, i1),
                                   RankedTensorType::get({n}, i1), checked);
  Value flags = ConcatOp::create(
      b, zloc, ValueRange{reshapeTo(b, zloc, local.getResult(), {1}), local.getEach()}, 0);
  flags = AllReduceOp::create(b, zloc, flags.getType(), flags, b.getStringAttr("min"));
  SmallVector<Value> split = unflatten(
      b, zloc, flags, {RankedTensorType::get({}, i1), RankedTensorType::get({n}, i1)});
  z.finite = split[0];
  z.each = split[1];
  // Each rank's share of the mean gradient.
  int64_t total = 0;
  for (Value g : gradients)
    total += numElements(tensorTypeOf(g).getShape());
  z.shard = (total + ranks - 1) / ranks;
  Value flat = flatten(b, zloc, gradients, z.shard * ranks);
  Type e = tensorTypeOf(flat).getElementType();
  z.gradShard = ReduceScatterOp::create(b, zloc, RankedTensorType::get({z.shard}, e), flat,
                                        b.getI64IntegerAttr(ranks), b.getStringAttr("mean"));
  return z;
}

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
    SmallVector<Value> members;
    SmallVector<RankedTensorType> types;
    for (unsigned i : bucket) {
      members.push_back(values[i]);
      types.push_back(tensorTypeOf(values[i]));
    }
    Value packed = flatten(b, bloc, members, 0);
    Value reduced = AllReduceOp::create(b, bloc, packed.getType(), packed, b.getStringAttr("mean"));
    for (auto [i, v] : llvm::zip(bucket, unflatten(b, bloc, reduced, types)))
      values[i] = v;
  }
  return int64_t(buckets.size());
}

} // namespace ortc
