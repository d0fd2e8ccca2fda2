//===- OrtcDialect.cpp - Dialect registration and generated op code ------===//
//
// Instantiates the ODS-generated op classes once; the op families' hand-written
// behaviour (shape rules, verifiers, folders, gradient rules) lives in their own files.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace ortc;

#include "compiler/Dialect/Ortc/OrtcDialect.cpp.inc"
#include "compiler/Dialect/Ortc/OrtcInterfaces.cpp.inc"

void OrtcDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/Dialect/Ortc/OrtcOps.cpp.inc"
      >();
}

Operation *OrtcDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                            Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

#define GET_OP_CLASSES
#include "compiler/Dialect/Ortc/OrtcOps.cpp.inc"
