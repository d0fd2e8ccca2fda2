//===- DataParallel.h - Averaging a step's gradients over ranks -*- C++ -*-===//
//
// Why: a data-parallel step (ortc build --data-parallel) runs on every rank with its
// own slice of the batch; the update must see the mean gradient of the global batch,
// as PyTorch DDP's does. The optimizer pass calls this once the gradients are final
// (after accumulation), so the finite check and clipping see global values.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_PASSES_AUTODIFF_DATAPARALLEL_H
#define ORTC_PASSES_AUTODIFF_DATAPARALLEL_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cstdint>

namespace ortc {

/// Replaces every value of `values` (a step's loss and gradients) by its mean over the
/// ranks, built at `b`'s insertion point. Values of one element type are packed, in
/// the order the step computes `producedAs` (one per value: the gradient before
/// accumulation; block arguments first), into buckets of at most
/// `bucketBytes` (a value larger than that is a bucket of its own): each bucket is
/// flattened and concatenated, averaged by one ortc.all_reduce, and sliced back, so
/// that a bucket can be reduced as soon as its last gradient exists. Returns the
/// number of buckets.
int64_t averageOverRanks(mlir::OpBuilder &b, mlir::Location loc,
                         llvm::MutableArrayRef<mlir::Value> values,
                         llvm::ArrayRef<mlir::Value> producedAs, int64_t bucketBytes);

/// `values` flattened and concatenated into one 1-D tensor, padded with zeros to `size`
/// elements when that is larger (a single unpadded value is only reshaped).
mlir::Value flatten(mlir::OpBuilder &b, mlir::Location loc, llvm::ArrayRef<mlir::Value> values,
                    int64_t size);
/// The inverse: consecutive pieces of the 1-D `flat`, reshaped to `types` (padding after
/// them is left out).
llvm::SmallVector<mlir::Value> unflatten(mlir::OpBuilder &b, mlir::Location loc, mlir::Value flat,
                                         llvm::ArrayRef<mlir::RankedTensorType> types);

/// What ZeRO-1's update starts from on each rank.
struct ZeroExchange {
  mlir::Value loss;      ///< the mean loss over the ranks
  mlir::Value finite;    ///< i1: loss and gradients finite on every rank
  mlir::Value each;      ///< i1 [1 + gradients]: the same per checked value
  mlir::Value gradShard; ///< [shard]: this rank's share of the mean flattened gradients
  int64_t shard = 0;     ///< elements per rank: ceil(gradient elements / ranks)
};
/// The collectives before a ZeRO-1 update over `ranks` ranks (see the top of the .cpp).
ZeroExchange exchangeForZero(mlir::OpBuilder &b, mlir::Location loc, mlir::Value loss,
                             llvm::ArrayRef<mlir::Value> gradients, int64_t ranks);

} // namespace ortc

#endif // ORTC_PASSES_AUTODIFF_DATAPARALLEL_H
