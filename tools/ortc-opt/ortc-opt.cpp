//===- ortc-opt.cpp - mlir-opt for the ortc dialects and passes ----------===//
//
// Parses any dump the compiler writes and runs any registered ortc pass on it, so each
// pass can be tested (lit) and replayed in isolation.
//
//===----------------------------------------------------------------------===//
#include "compiler/Pipeline/Registration.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  ortc::registerAllDialects(registry);
  ortc::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ortc optimizer driver\n", registry));
}
