//===- OrtcDialect.h - The ortc dialect ------------------------*- C++ -*-===//
//
// Entry point for users of the ortc dialect: the dialect, its interfaces and ops.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_DIALECT_ORTC_ORTCDIALECT_H
#define ORTC_DIALECT_ORTC_ORTCDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

namespace ortc {
/// How an op joins a generated kernel (FusionOpInterface).
enum class FusionRole {
  Pointwise, ///< each result element from the operands' elements at its index
  IndexMap,  ///< reads its operand at a computed index, no arithmetic (broadcast)
  /// a sum over leading dims of a value computed in the kernel (a bias gradient):
  /// the kernel accumulates it as it computes the value
  Reduction,
  /// one op of many alike over different tensors with shared scalars (optimizer
  /// updates): one kernel runs them all over their elements as one index space
  MultiTensor,
  /// a reduction along the last axis that maps each row of its operands to a row of
  /// its result (the softmax family): the kernel runs row by row, computing an
  /// operand's row from the pointwise ops before it (prologue) and passing each
  /// result element to the pointwise ops after it (epilogue)
  Row,
  /// computed by a library in panels of its result (a float32 GEMM): the pointwise
  /// ops of its result's shape that read it at their own index become its epilogue,
  /// run on each panel while it is in cache, so the product is not read back
  Epilogue,
  /// a kernel of its own, as for an op without the interface (a softmax along an
  /// axis that is not the last)
  Opaque,
};

/// How an op takes part in 16-bit training (PrecisionOpInterface).
enum class PrecisionRule {
  Follow, ///< 16-bit results when every float operand is 16-bit
  Low,    ///< operands and results rounded to 16 bits (GEMMs, convolutions)
};

/// The values an index operand may hold (IndexOperandOpInterface): [low, high), and
/// `ignore` where the op skips that one value (a loss's ignore_index).
struct IndexRange {
  mlir::Value operand;
  int64_t low = 0, high = 0;
  std::optional<int64_t> ignore;
  const char *what = "indices"; ///< "class labels", "indices"
};
/// How a GEMM reads a batch of matrices from a buffer (StridedViewOp::getMatrixLayout;
/// the kernel libraries' MatLayout): matrix b of the batch starts at
/// (b / inner) * outerStride + (b % inner) * innerStride; its rows are `ld` apart with
/// unit-stride columns, or, when `transposed`, its columns are `ld` apart with
/// unit-stride rows (the GEMM then reads the stored transpose).
struct MatrixLayout {
  int64_t ld = 0, inner = 1, outerStride = 0, innerStride = 0;
  bool transposed = false;
};
/// The layout of a strided tensor of `shape` as a batch of matrices (its last two
/// dims), or nullopt where a GEMM cannot read or write it so.
std::optional<MatrixLayout> matrixLayout(llvm::ArrayRef<int64_t> shape,
                                         llvm::ArrayRef<int64_t> strides);
/// The elements of all results of `op` together (RecomputeOpInterface's default cost).
int64_t resultElements(mlir::Operation *op);
/// Whether codegen prints `op`, an op of a step function's body, as a kernel the step
/// launches: not a constant, weight, view, empty tensor or the return.
bool launchesKernel(mlir::Operation *op);
} // namespace ortc

namespace ortc::trait {
/// Ortc_RowInPlace (OrtcBase.td): the result may take the first operand's buffer.
template <typename ConcreteType>
class RowInPlace : public mlir::OpTrait::TraitBase<ConcreteType, RowInPlace> {};
/// Ortc_ReadsStoredFloats (OrtcBase.td): reads 16-bit operands and writes 16-bit results
/// itself, computing in float64.
template <typename ConcreteType>
class ReadsStoredFloats : public mlir::OpTrait::TraitBase<ConcreteType, ReadsStoredFloats> {};
} // namespace ortc::trait

#include "compiler/Dialect/Ortc/OrtcDialect.h.inc"
#include "compiler/Dialect/Ortc/OrtcInterfaces.h.inc"

#define GET_OP_CLASSES
#include "compiler/Dialect/Ortc/OrtcOps.h.inc"

#endif // ORTC_DIALECT_ORTC_ORTCDIALECT_H
