//===- TestPasses.cpp - passes that break on purpose, for tests -----------===//
//
// Why: the crash-reproducer path of `ortc build` (an internal error writes a folder that
// `ortc-opt --run-reproducer` replays) must be tested, and ortc's own passes do not
// fail on purpose. `ortc-test-internal-error` does: `kind=verifier` leaves IR that no
// longer verifies (the first function's result list no longer matches its return),
// `kind=crash` aborts. `ortc build` runs it after the training passes when the
// environment sets ORTC_TEST_INTERNAL_ERROR to a kind; ortc-opt knows it by name so that
// a reproducer replays.
//
//===----------------------------------------------------------------------===//
#include "compiler/Pipeline/Registration.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

#include <cstdlib>

namespace ortc {
namespace {

struct TestInternalErrorPass
    : public mlir::PassWrapper<TestInternalErrorPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestInternalErrorPass)
  TestInternalErrorPass() = default;
  TestInternalErrorPass(const TestInternalErrorPass &other) : PassWrapper(other) {}

  llvm::StringRef getArgument() const override { return "ortc-test-internal-error"; }
  llvm::StringRef getDescription() const override {
    return "Test only: break the IR (kind=verifier) or abort (kind=crash)";
  }

  Option<std::string> kind{*this, "kind", llvm::cl::desc("verifier or crash"),
                           llvm::cl::init("verifier")};

  void runOnOperation() override {
    if (kind == "crash")
      std::abort();
    for (auto fn : getOperation().getOps<mlir::func::FuncOp>()) {
      mlir::FunctionType t = fn.getFunctionType();
      fn.setType(mlir::FunctionType::get(&getContext(), t.getInputs(), {}));
      if (t.getNumResults() == 0)
        fn.setType(mlir::FunctionType::get(&getContext(), t.getInputs(),
                                           {mlir::Float32Type::get(&getContext())}));
      return;
    }
  }
};

} // namespace

std::unique_ptr<mlir::Pass> createTestInternalErrorPass(llvm::StringRef kind) {
  auto pass = std::make_unique<TestInternalErrorPass>();
  pass->kind = kind.str();
  return pass;
}

void registerTestPasses() { mlir::PassRegistration<TestInternalErrorPass>(); }

} // namespace ortc
