//===- Registration.cpp - Registers every ortc dialect and pass ----------===//
#include "compiler/Pipeline/Registration.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"
#include "passes/autodiff/Passes.h"
#include "passes/checkpointing/Passes.h"
#include "passes/fusion/Passes.h"
#include "passes/memory_planning/Passes.h"
#include "passes/mixed_precision/Passes.h"

namespace ortc {

void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<OrtcDialect, mlir::func::FuncDialect>();
}

void registerAllPasses() {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  registerAutodiffPasses();
  registerMixedPrecisionPasses();
  registerCheckpointingPasses();
  registerFusionPasses();
  registerMemoryPlanningPasses();
  registerTestPasses();
}

} // namespace ortc
