//===- CppEmitter.h - Planned ortc IR -> C++ kernels for the CPU -*- C++ -*-===//
#ifndef ORTC_CODEGEN_CPU_CPPEMITTER_H
#define ORTC_CODEGEN_CPU_CPPEMITTER_H

#include "codegen/Artifact.h"

namespace ortc {

/// Emits one `extern "C" void ortc_<op>_<hash>(void *const *ptrs)` per distinct op
/// body of @train_step and @eval_step (planned by ortc-memory-plan), each opening
/// with a comment naming every ONNX node that launches it, cut into independently
/// compiled units (KernelPrinter::kernelUnits). Fills `functions` with the launches.
mlir::LogicalResult emitCpuKernels(mlir::ModuleOp module, const TensorTable &table,
                                   std::vector<FunctionKernels> &functions,
                                   std::vector<std::string> &units, std::string &error);

} // namespace ortc

#endif // ORTC_CODEGEN_CPU_CPPEMITTER_H
