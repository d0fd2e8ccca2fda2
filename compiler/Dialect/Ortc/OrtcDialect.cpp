//===- OrtcDialect.cpp - Dialect registration and generated op code ------===//
//
// Instantiates the ODS-generated op classes once; the op families' hand-written
// behaviour (shape rules, verifiers, folders, gradient rules) lives in their own files.
//
//===----------------------------------------------------------------------===//
#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Dialect/Ortc/OpAnnotations.h"
#include "compiler/Dialect/Ortc/Builders.h"

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

LogicalResult OrtcDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() == kStageAttr) {
    auto s = dyn_cast<StringAttr>(attr.getValue());
    if (!s || !isStage(s.getValue()))
      return op->emitOpError("ortc.stage must be \"forward\", \"backward\" or \"optimizer\"");
    return success();
  }
  if (attr.getName() == kRecomputeAttr) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError("ortc.recompute is a unit attribute");
    if (stageOf(op) != "forward")
      return op->emitOpError("ortc.recompute marks a forward op (ortc.stage \"forward\")");
    return success();
  }
  if (attr.getName() == kArenaOffsetsAttr) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || offsets.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitOpError("ortc.arena_offsets needs one i64 per result");
    if (llvm::any_of(offsets.asArrayRef(), [](int64_t o) { return o < -1; }))
      return op->emitOpError("ortc.arena_offsets holds offsets >= 0, or -1 (not in the arena)");
    return success();
  }
  if (attr.getName() == kAccumAttr) {
    auto d = dyn_cast<DictionaryAttr>(attr.getValue());
    auto type = d ? d.getAs<TypeAttr>("type") : TypeAttr();
    auto chunk = d ? d.getAs<IntegerAttr>("chunk") : IntegerAttr();
    if (!d || d.size() != 2 || !type || !isa<BFloat16Type, Float16Type>(type.getValue()) ||
        !chunk || chunk.getInt() < 0)
      return op->emitOpError("ortc.accum must be {type = bf16 | f16, chunk = C : i64} with C >= 0");
    auto p = dyn_cast<PrecisionOpInterface>(op);
    if (!p || !p.sumsInLowPrecision())
      return op->emitOpError("ortc.accum on an op whose kernel has no sums to accumulate");
    return success();
  }
  return success(); // the other ortc.* attributes (names, roles, arena sizes) are free-form
}

int64_t ortc::resultElements(Operation *op) {
  int64_t n = 0;
  for (Type t : op->getResultTypes())
    n += numElements(cast<RankedTensorType>(t).getShape());
  return n;
}

bool ortc::launchesKernel(Operation *op) {
  return !isa<ConstantOp, WeightOp, ReshapeOp, StridedViewOp, EmptyOp>(op) &&
         !op->hasTrait<OpTrait::IsTerminator>();
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
