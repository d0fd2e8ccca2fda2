//===- GpuEmitter.h - Planned ortc IR -> CUDA/HIP kernels ---------*- C++ -*-===//
#ifndef ORTC_CODEGEN_GPU_GPUEMITTER_H
#define ORTC_CODEGEN_GPU_GPUEMITTER_H

#include "codegen/Artifact.h"
#include "codegen/gpu/TargetInfo.h"

namespace ortc {

//
// The shared CUDA/HIP emitter and the artifact build of a GPU target.
//
//===----------------------------------------------------------------------===//
/// Emits, for the given target, one host launcher
/// `extern "C" void ortc_<fn>_k<N>(void *const *bufs, char *arena, void *stream)`
/// per op of @train_step and @eval_step (planned by ortc-memory-plan), in the same
/// order and with the same names as the CPU emitter (both are KernelPrinters). `bufs` is a host array of
/// device pointers (manifest order), `arena` a device pointer, `stream` a
/// cudaStream_t / hipStream_t. Each launcher opens with a comment naming its ONNX
/// node and launch shape; elementwise ops get a generated __global__ kernel (vector
/// loads where aligned), everything else calls kernels/ortc_gpu_kernels.h.
mlir::LogicalResult emitGpuKernels(mlir::ModuleOp module, const TensorTable &table,
                                   const TargetInfo &target,
                                   std::vector<FunctionKernels> &functions,
                                   std::string &source, std::string &error);

/// The text of kernels/ortc_gpu_kernels.h (embedded at build time).
const char *gpuKernelLibrarySource();

/// The artifact build of a GPU target for resolved `archs`: kernels<ext> and
/// ortc_gpu_kernels.h compiled by the target's device compiler (`compiler`, from
/// TargetInfo::findCompiler) into kernels.so (host launchers with the device code
/// embedded) and the device object (CUDA: kernels.fatbin with every arch; ROCm:
/// kernels.hsaco).
KernelBuild gpuKernelBuild(const TargetInfo &target, const std::string &compiler,
                           const std::vector<std::string> &archs);

} // namespace ortc

#endif // ORTC_CODEGEN_GPU_GPUEMITTER_H
