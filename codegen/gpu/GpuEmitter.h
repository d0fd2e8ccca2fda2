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
/// `extern "C" void ortc_<op>_<hash>(void *const *ptrs, void *stream)` per distinct
/// op body of @train_step and @eval_step (planned by ortc-memory-plan), named and
/// shared as by the CPU emitter (both are KernelPrinters). `ptrs` is a host array of
/// the operands' device addresses and of host int64 launch values (sizes, random-stream
/// keys; each launch's "args" in the manifest), `stream`
/// a cudaStream_t / hipStream_t. Each launcher opens with a comment naming its ONNX
/// nodes and launch shape; elementwise ops get a generated __global__ kernel (vector
/// loads where aligned), everything else calls kernels/gpu/ortc_gpu_kernels.h. One unit:
/// the device compilers build every arch of it in parallel.
mlir::LogicalResult emitGpuKernels(mlir::ModuleOp module, const TensorTable &table,
                                   const TargetInfo &target,
                                   std::vector<FunctionKernels> &functions,
                                   std::vector<std::string> &units, std::string &error);

/// The text of kernels/gpu/ortc_gpu_kernels.h (embedded at build time, kernels/common pasted in).
const char *gpuKernelLibrarySource();

/// The artifact build of a GPU target for resolved `archs`: kernels<ext> and
/// ortc_gpu_kernels.h compiled by the target's device compiler (`compiler`, from
/// TargetInfo::findCompiler) into kernels.so (host launchers with the device code
/// embedded) and the device object (CUDA: kernels.fatbin with every arch and the
/// PTX; ROCm: kernels.hipfb, the offload bundle of one code object per arch).
KernelBuild gpuKernelBuild(const TargetInfo &target, const std::string &compiler,
                           const std::vector<std::string> &archs);

} // namespace ortc

#endif // ORTC_CODEGEN_GPU_GPUEMITTER_H
