//===- Core.cpp - Constants and named weights ----------------------------===//
//
// Weights are symbols so that no tensor data lives in the IR and no folder can rewrite
// a weight into a new constant (which would silently stop it from training).
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"

using namespace mlir;

namespace ortc {

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult ConstantOp::verify() {
  if (!getType().hasStaticShape())
    return emitOpError("needs a static shape");
  return success();
}

static bool isKnownKind(StringRef kind) {
  return llvm::is_contained({"weight", "parameter", "buffer", "frozen", "constant",
                             "state"},
                            kind);
}

LogicalResult GlobalOp::verify() {
  auto type = dyn_cast<RankedTensorType>(getType());
  if (!type || !type.hasStaticShape())
    return emitOpError("type must be a static ranked tensor, got ") << getType();
  if (!isKnownKind(getKind()))
    return emitOpError("unknown kind '") << getKind() << "'";
  return success();
}

LogicalResult WeightOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto global = symbolTable.lookupNearestSymbolFrom<GlobalOp>(*this, getNameAttr());
  if (!global)
    return emitOpError("refers to unknown weight @") << getName();
  if (global.getType() != getType())
    return emitOpError("type ") << getType() << " differs from the weight's "
                                << global.getType();
  return success();
}

} // namespace ortc
