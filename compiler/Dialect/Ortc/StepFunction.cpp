//===- StepFunction.cpp - The step-function contract ---------------------===//
#include "compiler/Dialect/Ortc/StepFunction.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace ortc {

static std::string strAttr(DictionaryAttr dict, StringRef key) {
  if (!dict)
    return "";
  auto s = dict.getAs<StringAttr>(key);
  return s ? s.str() : "";
}

std::string argName(func::FuncOp fn, unsigned i) {
  return strAttr(fn.getArgAttrDict(i), "ortc.name");
}
std::string argRole(func::FuncOp fn, unsigned i) {
  std::string r = strAttr(fn.getArgAttrDict(i), "ortc.role");
  return r.empty() ? "input" : r;
}
std::string resultName(func::FuncOp fn, unsigned i) {
  return strAttr(fn.getResultAttrDict(i), "ortc.name");
}
std::string resultRole(func::FuncOp fn, unsigned i) {
  std::string r = strAttr(fn.getResultAttrDict(i), "ortc.role");
  return r.empty() ? "output" : r;
}
std::optional<unsigned> resultTied(func::FuncOp fn, unsigned i) {
  if (auto dict = fn.getResultAttrDict(i))
    if (auto t = dict.getAs<IntegerAttr>("ortc.tied"))
      return t.getInt();
  return std::nullopt;
}

BlockArgument addArgument(func::FuncOp fn, Type type, StringRef name, StringRef role) {
  unsigned idx = fn.getNumArguments();
  Builder b(fn.getContext());
  SmallVector<NamedAttribute> attrs{b.getNamedAttr("ortc.name", b.getStringAttr(name))};
  if (role != "input")
    attrs.push_back(b.getNamedAttr("ortc.role", b.getStringAttr(role)));
  (void)fn.insertArgument(idx, type, b.getDictionaryAttr(attrs), fn.getLoc());
  return fn.getArgument(idx);
}

void setResults(func::FuncOp fn, ArrayRef<StepResult> results) {
  Block &body = fn.getBody().back();
  Operation *term = body.getTerminator();
  OpBuilder b(term);
  SmallVector<Value> values;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  for (const StepResult &r : results) {
    values.push_back(r.value);
    types.push_back(r.value.getType());
    SmallVector<NamedAttribute> a{b.getNamedAttr("ortc.name", b.getStringAttr(r.name)),
                                  b.getNamedAttr("ortc.role", b.getStringAttr(r.role))};
    if (r.tied)
      a.push_back(b.getNamedAttr("ortc.tied", b.getI64IntegerAttr(*r.tied)));
    attrs.push_back(b.getDictionaryAttr(a));
  }
  func::ReturnOp::create(b, term->getLoc(), values);
  term->erase();
  fn.setType(b.getFunctionType(fn.getArgumentTypes(), types));
  fn.setAllResultAttrs(attrs);
}

std::optional<unsigned> findArgument(func::FuncOp fn, StringRef name) {
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (argName(fn, i) == name)
      return i;
  return std::nullopt;
}

} // namespace ortc
