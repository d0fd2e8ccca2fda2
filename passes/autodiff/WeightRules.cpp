//===- WeightRules.cpp - Which weights train -----------------------------===//
//
// PyTorch 2.x's exporter records each input's kind (parameter, buffer, constant); where
// that record exists it decides. Otherwise the names below are what exporters write
// for their own constants; a model's
// parameters keep their module paths (`encoder.layer.0.attention.self.query.weight`)
// under both PyTorch exporters, so the patterns do not catch real parameters. A
// legacy export with constant folding renames folded parameter copies (a transposed
// Linear weight becomes `onnx::MatMul_123`); those still train, because they are not
// scalars: only single-element `onnx::` tensors are taken as literals. Single-element
// tensors named like a module's `.weight` / `.bias` (nn.PReLU()) are parameters.
//
//===----------------------------------------------------------------------===//
#include "passes/autodiff/WeightRules.h"

#include "llvm/ADT/StringExtras.h"

namespace ortc {

namespace {
/// `prefix` followed by one or more decimal digits and nothing else.
bool isNumbered(llvm::StringRef name, llvm::StringRef prefix) {
  if (!name.consume_front(prefix) || name.empty())
    return false;
  return llvm::all_of(name, llvm::isDigit);
}
} // namespace

std::string exporterConstantReason(llvm::StringRef name, int64_t numel,
                                   llvm::StringRef torchKind) {
  if (torchKind == "PARAMETER")
    return "";
  if (torchKind == "BUFFER")
    return "a buffer of the PyTorch module (the exporter says so), not a parameter";
  if (!torchKind.empty())
    return ("a " + torchKind.lower() + " of the PyTorch module (the exporter says so)");
  if (isNumbered(name, "val_") || isNumbered(name, "_val_"))
    return "a literal lifted by the PyTorch 2.x exporter (val_N)";
  if (name.contains("_tensor_constant") || name.contains("lifted_tensor"))
    return "a tensor constant lifted by torch.export";
  if (name.contains("Constant_output") || name.contains("/Constant") ||
      name.starts_with("onnx::Constant"))
    return "the output of a folded Constant node";
  // A single-element module parameter (nn.PReLU()'s `act.weight`) keeps its path.
  if (numel <= 1 && !name.ends_with(".weight") && !name.ends_with(".bias"))
    return name.starts_with("onnx::") ? "a scalar folded by the legacy exporter"
                                      : "a scalar (train it with --trainable)";
  return "";
}

bool WeightRule::init(const std::vector<std::string> &trainableGlobs,
                      const std::vector<std::string> &freezeGlobs, std::string &error) {
  auto add = [&](const std::vector<std::string> &globs, const char *flag,
                 std::vector<Glob> &out) {
    for (const std::string &g : globs) {
      auto pat = llvm::GlobPattern::create(g);
      if (!pat) {
        error = std::string(flag) + " '" + g + "' is not a valid glob";
        return false;
      }
      out.push_back({g, flag, std::move(*pat)});
    }
    return true;
  };
  return add(trainableGlobs, "--trainable", trainable) && add(freezeGlobs, "--freeze", freeze);
}

bool WeightRule::matches(const std::vector<Glob> &globs, llvm::StringRef name) {
  return llvm::any_of(globs, [&](const Glob &g) { return g.pattern.match(name); });
}

std::vector<std::string> WeightRule::unmatched(const std::vector<std::string> &names) const {
  std::vector<std::string> out;
  for (const auto *list : {&trainable, &freeze})
    for (const Glob &g : *list)
      if (llvm::none_of(names, [&](const std::string &n) { return g.pattern.match(n); }))
        out.push_back(g.flag + " '" + g.text + "'");
  return out;
}

} // namespace ortc
