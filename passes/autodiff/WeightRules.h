//===- WeightRules.h - Which weights train, by a rule a user can read -*- C++ -*-===//
//
// ONNX has no notion of "parameter": every initializer looks alike. Exporters also
// store their own literals as initializers (PyTorch 2.x lifts `0.5 * h` into a scalar
// `val_3`; the legacy exporter names folded constants `onnx::...` or
// `.../Constant_output_0`). Training those would silently change the model, so the
// autodiff pass and `ortc inspect` share this one rule:
//   1. --freeze GLOB: frozen; --trainable GLOB: a training candidate (freeze wins);
//   2. otherwise an exporter-made constant (see exporterConstantReason) stays constant;
//   3. every other float weight is a candidate, and trains when the loss reaches it.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_PASSES_AUTODIFF_WEIGHTRULES_H
#define ORTC_PASSES_AUTODIFF_WEIGHTRULES_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/GlobPattern.h"

#include <string>
#include <vector>

namespace ortc {

/// Why a float weight of `numel` elements named `name` is an exporter-made constant
/// rather than a model parameter, or "" when nothing says so. `torchKind` is what the
/// PyTorch 2.x exporter recorded for it (PARAMETER, BUFFER, CONSTANT_TENSOR...; empty
/// when absent): where present it decides, else the name and size do.
std::string exporterConstantReason(llvm::StringRef name, int64_t numel,
                                   llvm::StringRef torchKind = "");

/// The --trainable / --freeze globs.
class WeightRule {
public:
  /// Compiles the globs; on a malformed one returns false and sets `error`.
  bool init(const std::vector<std::string> &trainable, const std::vector<std::string> &freeze,
            std::string &error);
  bool frozen(llvm::StringRef name) const { return matches(freeze, name); }
  bool forcedTrainable(llvm::StringRef name) const { return matches(trainable, name); }
  /// The globs (as given, with their flag) that match none of `names`.
  std::vector<std::string> unmatched(const std::vector<std::string> &names) const;

private:
  struct Glob {
    std::string text, flag;
    llvm::GlobPattern pattern;
  };
  std::vector<Glob> trainable, freeze;
  static bool matches(const std::vector<Glob> &globs, llvm::StringRef name);
};

} // namespace ortc

#endif // ORTC_PASSES_AUTODIFF_WEIGHTRULES_H
