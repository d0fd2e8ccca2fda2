//===- CppEmitter.h - Planned ortc IR -> C++ kernels for the CPU -*- C++ -*-===//
#ifndef ORTC_CODEGEN_CPU_CPPEMITTER_H
#define ORTC_CODEGEN_CPU_CPPEMITTER_H

#include "codegen/Artifact.h"

namespace ortc {

/// Emits one `extern "C" void ortc_<fn>_k<N>(void *const *bufs, char *arena)` per
/// op of @train_step and @eval_step (planned by ortc-memory-plan), each opening with
/// a comment naming its ONNX node. Fills `functions` with the kernel order.
mlir::LogicalResult emitCpuKernels(mlir::ModuleOp module, const TensorTable &table,
                                   std::vector<FunctionKernels> &functions,
                                   std::string &source, std::string &error);

} // namespace ortc

#endif // ORTC_CODEGEN_CPU_CPPEMITTER_H
