//===- Registration.h - Registers every ortc dialect and pass ---*- C++ -*-===//
//
// The one place that knows the full set of dialects and passes, shared by `ortc` and
// `ortc-opt` so both accept exactly the same IR and pass names.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_PIPELINE_REGISTRATION_H
#define ORTC_PIPELINE_REGISTRATION_H

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace ortc {
/// Adds the ortc dialect and the upstream dialects its IR uses.
void registerAllDialects(mlir::DialectRegistry &registry);
/// Registers every ortc pass and pipeline (and the upstream passes we rely on).
void registerAllPasses();
/// `ortc-test-internal-error` (TestPasses.cpp): breaks the IR or aborts, on purpose.
std::unique_ptr<mlir::Pass> createTestInternalErrorPass(llvm::StringRef kind);
void registerTestPasses();
} // namespace ortc

#endif // ORTC_PIPELINE_REGISTRATION_H
