//===- StepFunction.h - The step-function contract -------------*- C++ -*-===//
//
// Functions that later phases consume (@forward, @train_step, @eval_step) name each
// argument and result with `ortc.name` and classify it with `ortc.role`:
//   input, scalar, parameter, buffer, state, loss, gradient, output.
// A result that is the new value of an argument carries `ortc.tied = <arg index>`.
// These helpers read and write that contract in one place.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_DIALECT_ORTC_STEPFUNCTION_H
#define ORTC_DIALECT_ORTC_STEPFUNCTION_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>
#include <string>

namespace ortc {

std::string argName(mlir::func::FuncOp fn, unsigned i);
std::string argRole(mlir::func::FuncOp fn, unsigned i);
std::string resultName(mlir::func::FuncOp fn, unsigned i);
std::string resultRole(mlir::func::FuncOp fn, unsigned i);
std::optional<unsigned> resultTied(mlir::func::FuncOp fn, unsigned i);

/// Appends an argument named `name` with `role`; returns it.
mlir::BlockArgument addArgument(mlir::func::FuncOp fn, mlir::Type type,
                                llvm::StringRef name, llvm::StringRef role);

/// A result of a step function under construction.
struct StepResult {
  mlir::Value value;
  std::string name, role;
  std::optional<unsigned> tied;
};

/// Replaces the function's terminator and result list by `results`.
void setResults(mlir::func::FuncOp fn, llvm::ArrayRef<StepResult> results);

/// Index of the argument named `name`, if any.
std::optional<unsigned> findArgument(mlir::func::FuncOp fn, llvm::StringRef name);

} // namespace ortc

#endif // ORTC_DIALECT_ORTC_STEPFUNCTION_H
