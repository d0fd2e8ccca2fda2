//===- Builders.h - Helpers that build small ortc op patterns ---*- C++ -*-===//
//
// The importer, the gradient rules and the training passes all need the same small
// patterns (splat constants, explicit broadcasts, "sum a gradient back to a shape").
// They live here once.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_DIALECT_ORTC_BUILDERS_H
#define ORTC_DIALECT_ORTC_BUILDERS_H

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/IR/Builders.h"

namespace ortc {

/// The ranked tensor type of `v` (every ortc value has one).
inline mlir::RankedTensorType tensorTypeOf(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType());
}

/// Number of elements of a static shape.
int64_t numElements(llvm::ArrayRef<int64_t> shape);

/// A constant of `type` whose every element is `value` (converted to the element type).
mlir::Value splat(mlir::OpBuilder &b, mlir::Location loc, mlir::RankedTensorType type,
                  double value);
/// A splat shaped like `like`.
mlir::Value splatLike(mlir::OpBuilder &b, mlir::Location loc, mlir::Value like,
                      double value);

/// Numpy-style broadcast of two shapes; failure if incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// `v` broadcast to `shape` (no op when it already has that shape).
mlir::Value broadcastTo(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                        llvm::ArrayRef<int64_t> shape);
/// `v` reshaped to `shape` (no op when it already has that shape).
mlir::Value reshapeTo(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                      llvm::ArrayRef<int64_t> shape);
/// The adjoint of a broadcast: sums `grad` over the dims that broadcasting added or
/// stretched so that the result has `shape`.
mlir::Value sumToShape(mlir::OpBuilder &b, mlir::Location loc, mlir::Value grad,
                       llvm::ArrayRef<int64_t> shape);
/// `x * s` for a compile-time scalar `s`, kept in f64 (`ortc.scale`).
mlir::Value scale(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x, double s);
/// `a + b` where either may be null (null means zero).
mlir::Value addOrNull(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                      mlir::Value y);

} // namespace ortc

#endif // ORTC_DIALECT_ORTC_BUILDERS_H
