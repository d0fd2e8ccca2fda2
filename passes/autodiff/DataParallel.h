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

} // namespace ortc

#endif // ORTC_PASSES_AUTODIFF_DATAPARALLEL_H
