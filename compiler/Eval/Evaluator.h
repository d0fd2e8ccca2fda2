//===- Evaluator.h - Reference interpreter of the ortc IR ------*- C++ -*-===//
//
// The oracle of the test suite: runs a tensor-level ortc function op by op in
// float64 (or float32) with the shared kernel library, so gradient rules can be
// checked by finite differences and passes can be checked not to change results.
// Not a product feature: simple, obviously correct, slow is fine.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_EVAL_EVALUATOR_H
#define ORTC_EVAL_EVALUATOR_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ortc {

/// A host tensor. Float tensors use `f`, integer and boolean tensors use `i`.
template <typename T> struct EvalTensor {
  std::vector<int64_t> shape;
  bool isFloat = true;
  std::vector<T> f;
  std::vector<int64_t> i;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// Evaluates `fn` on `args` (one per argument), reading `ortc.weight`s from
/// `weights` by name. Returns false and sets `error` (naming the op) on failure.
template <typename T>
bool evaluate(mlir::func::FuncOp fn, const std::vector<EvalTensor<T>> &args,
              const std::map<std::string, EvalTensor<T>> &weights,
              std::vector<EvalTensor<T>> &results, std::string &error);

/// When set, `ortc.dropout` and `ortc.dropout_grad` act as the identity
/// (for comparisons with frameworks whose dropout RNG differs).
void setEvalDropoutDisabled(bool disabled);

} // namespace ortc

#endif // ORTC_EVAL_EVALUATOR_H
