//===- Inspect.cpp - `ortc inspect`: what ortc sees in a model -----------===//
//
// Besides the inputs, outputs and ops, inspect says what training will do with each
// weight (the rule of passes/autodiff/WeightRules.h) and warns about export forms
// that silently change training: initializers merged by constant folding and ops
// exported in inference form.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Import/OnnxImporter.h"
#include "compiler/Pipeline/Registration.h"
#include "passes/autodiff/WeightRules.h"
#include "tools/ortc/Commands.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>

using namespace mlir;

namespace ortc {

namespace {

/// The ops that read `v`, looking through ops that only move or broadcast data.
void computeUsers(Value v, SmallVectorImpl<Operation *> &out) {
  for (Operation *user : v.getUsers()) {
    if (isa<BroadcastToOp, ReshapeOp, TransposeOp, CastOp>(user))
      computeUsers(user->getResult(0), out);
    else
      out.push_back(user);
  }
}

/// True when every element of a float weight has the same value.
bool isUniform(const WeightData &w) {
  size_t size = static_cast<size_t>(dtypeSize(w.dtype));
  for (size_t off = size; off + size <= w.bytes.size(); off += size)
    if (std::memcmp(w.bytes.data(), w.bytes.data() + off, size) != 0)
      return false;
  return w.bytes.size() > size;
}

int printWeightClasses(ModuleOp module, func::FuncOp fn, const WeightStore &weights,
                       const BuildOptions &options) {
  WeightRule rule;
  std::string error;
  if (!rule.init(options.trainable, options.freeze, error)) {
    llvm::errs() << "ortc: error: " << error << "\n";
    return 1;
  }
  std::vector<std::string> names;
  for (auto &[n, w] : weights)
    names.push_back(n);
  if (auto bad = rule.unmatched(names); !bad.empty()) {
    llvm::errs() << "ortc: error: no weight matches";
    for (const std::string &b : bad)
      llvm::errs() << " " << b;
    llvm::errs() << "\n";
    return 1;
  }
  auto torchKindOf = [&](const std::string &name) -> std::string {
    auto g = module.lookupSymbol<GlobalOp>(name);
    auto k = g ? g->getAttrOfType<StringAttr>("torch_kind") : StringAttr();
    return k ? k.str() : "";
  };
  // BatchNorm statistics are buffers whatever their names.
  std::map<std::string, std::string> statOf;
  std::map<std::string, SmallVector<Operation *>> usersOf;
  std::vector<std::string> inferenceForm;
  fn.walk([&](Operation *op) {
    if (auto w = dyn_cast<WeightOp>(op))
      computeUsers(w.getResult(), usersOf[w.getName().str()]);
    Value stats[2];
    if (auto bn = dyn_cast<BatchNormTrainOp>(op)) {
      stats[0] = bn.getRunningMean();
      stats[1] = bn.getRunningVar();
    } else if (auto bn = dyn_cast<BatchNormInferOp>(op)) {
      stats[0] = bn.getMean();
      stats[1] = bn.getVar();
      auto name = dyn_cast<NameLoc>(op->getLoc());
      inferenceForm.push_back(name ? "node '" + name.getName().str() + "'" : "an unnamed node");
    }
    for (Value v : stats)
      if (auto w = v ? v.getDefiningOp<WeightOp>() : WeightOp())
        statOf[w.getName().str()] = isa<BatchNormTrainOp>(op) ? "buffer" : "frozen buffer";
  });

  struct Entry {
    std::string name, why;
    int64_t numel;
  };
  std::map<std::string, std::vector<Entry>> classes;
  for (auto &[name, w] : weights) {
    int64_t numel = numElements(w.shape);
    bool isFloat = w.dtype[0] == 'f' || w.dtype == "bf16";
    std::string cls, why;
    if (!isFloat) {
      cls = "constant";
      why = "not a float tensor";
    } else if (rule.frozen(name)) {
      cls = "frozen";
      why = "--freeze";
    } else if (statOf.count(name)) {
      cls = statOf[name];
      why = cls == "buffer" ? "BatchNorm running statistic"
                            : "statistic of a BatchNorm in inference form";
    } else if (rule.forcedTrainable(name)) {
      cls = "parameter";
      why = "--trainable";
    } else if (std::string r = exporterConstantReason(name, numel, torchKindOf(name));
               !r.empty()) {
      cls = "constant";
      why = r;
    } else {
      cls = "parameter";
    }
    classes[cls].push_back({name, why, numel});
  }
  for (const char *cls : {"parameter", "buffer", "frozen buffer", "frozen", "constant"}) {
    auto it = classes.find(cls);
    if (it == classes.end())
      continue;
    int64_t total = 0;
    for (const Entry &e : it->second)
      total += e.numel;
    llvm::outs() << (llvm::StringRef(cls) == "frozen" ? "frozen" : std::string(cls) + "s") << ": "
                 << it->second.size() << " tensors, " << total << " elements"
                 << (llvm::StringRef(cls) == "parameter" ? " (trained when the loss reaches them)"
                                                          : "")
                 << "\n";
    for (const Entry &e : it->second)
      llvm::outs() << "  " << e.name << " [" << e.numel << "]"
                   << (e.why.empty() ? "" : "  (" + e.why + ")") << "\n";
  }

  // Warnings about export forms that change what trains.
  std::vector<std::string> notes;
  for (const Entry &e : classes["parameter"]) {
    SmallVector<Operation *> &users = usersOf[e.name];
    std::map<std::string, int> perOp;
    for (Operation *u : users)
      ++perOp[u->getName().getStringRef().str()];
    for (auto &[opName, count] : perOp)
      if (count >= 2 && isUniform(weights.at(e.name)))
        notes.push_back("'" + e.name + "' (all elements equal) is read by " +
                        std::to_string(count) + " " + opName +
                        " ops: it looks like separate parameters merged by constant folding; "
                        "they will train as one tensor. Export with "
                        "do_constant_folding=False (legacy exporter) to keep them apart.");
  }
  for (const std::string &loc : inferenceForm)
    notes.push_back("BatchNormalization " + loc +
                    " is in inference form (running statistics): it trains with its "
                    "statistics frozen, as a PyTorch module in eval mode. Export with "
                    "training=torch.onnx.TrainingMode.TRAINING (legacy) or model.train() "
                    "and optimize=False (dynamo) to train on batch statistics.");
  bool hasDropout = false;
  fn.walk([&](DropoutOp) { hasDropout = true; });
  if (!hasDropout && !inferenceForm.empty())
    notes.push_back("no Dropout in the graph: an eval-mode export drops it; export in "
                    "training mode to keep it.");
  for (const std::string &n : notes)
    llvm::outs() << "warning: " << n << "\n";
  return 0;
}

} // namespace

int runInspect(const BuildOptions &options) {
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry);
  WeightStore weights;
  std::string error;
  auto module = importOnnxModel(ctx, options.model, {options.dims, options.shapes},
                                weights, error);
  if (!module) {
    llvm::errs() << "ortc: error: " << error << "\n";
    return 1;
  }
  auto fn = module->lookupSymbol<func::FuncOp>("forward");
  llvm::outs() << "model: " << options.model << "\n";
  auto name = [&](DictionaryAttr attrs) {
    auto n = attrs ? attrs.getAs<StringAttr>("ortc.name") : StringAttr();
    return n ? n.str() : std::string("?");
  };
  llvm::outs() << "inputs:\n";
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    llvm::outs() << "  " << name(fn.getArgAttrDict(i)) << ": " << fn.getArgument(i).getType()
                 << "\n";
  llvm::outs() << "outputs:\n";
  for (unsigned i = 0; i < fn.getNumResults(); ++i)
    llvm::outs() << "  " << name(fn.getResultAttrDict(i)) << ": "
                 << fn.getFunctionType().getResult(i) << "\n";
  int64_t params = 0;
  for (auto &[n, w] : weights)
    params += numElements(w.shape);
  llvm::outs() << "weights: " << weights.size() << " tensors, " << params << " elements\n";
  std::map<std::string, int> ops;
  fn.walk([&](Operation *op) {
    if (op != fn.getOperation())
      ++ops[op->getName().getStringRef().str()];
  });
  llvm::outs() << "ops:";
  for (auto &[n, c] : ops)
    llvm::outs() << " " << n << "=" << c;
  llvm::outs() << "\n";
  return printWeightClasses(*module, fn, weights, options);
}

} // namespace ortc
