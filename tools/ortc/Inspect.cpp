//===- Inspect.cpp - `ortc inspect`: what ortc sees in a model -----------===//
#include "compiler/Dialect/Ortc/Builders.h"
#include "compiler/Import/OnnxImporter.h"
#include "compiler/Pipeline/Registration.h"
#include "tools/ortc/Commands.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;

namespace ortc {

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
  return 0;
}

} // namespace ortc
