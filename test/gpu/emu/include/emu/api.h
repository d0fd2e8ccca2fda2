//===- api.h - The CUDA and HIP runtime API of the emulated device -*- C++ -*-===//
//
// Why: the generated file's host glue (ortc_gpu_init, uploads, streams, graph
// capture) calls the vendor runtime; under the emulator those calls land in
// runtime.cpp. Only the subset ortc's code uses is declared, with the vendors'
// names, types and argument orders, so the generated text compiles unchanged.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_EMU_API_H
#define ORTC_EMU_API_H

#include <cstddef>

namespace emu {
struct Stream;
struct Graph;
} // namespace emu

//===--------------------------------- CUDA ---------------------------------===//
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureInvalidated = 901,
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
typedef emu::Stream *cudaStream_t;
typedef emu::Graph *cudaGraph_t;
typedef emu::Graph *cudaGraphExec_t;
typedef struct EmuEvent *cudaEvent_t;
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin;
  int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  int major, minor, multiProcessorCount;
};

extern "C" {
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *dst, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *dst, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGetSymbolAddress(void **p, const void *symbol);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
}

/// cuda_runtime.h's typed overload.
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void **>(p), bytes);
}

//===---------------------------------- HIP ---------------------------------===//
enum hipError_t {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorInvalidConfiguration = 9,
  hipErrorNoDevice = 100,
  hipErrorIllegalAddress = 700,
  hipErrorLaunchFailure = 719,
};
enum hipMemcpyKind {
  hipMemcpyHostToHost = 0,
  hipMemcpyHostToDevice = 1,
  hipMemcpyDeviceToHost = 2,
  hipMemcpyDeviceToDevice = 3,
  hipMemcpyDefault = 4
};
enum hipStreamCaptureMode {
  hipStreamCaptureModeGlobal = 0,
  hipStreamCaptureModeThreadLocal = 1,
  hipStreamCaptureModeRelaxed = 2
};
#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01
typedef emu::Stream *hipStream_t;
typedef emu::Graph *hipGraph_t;
typedef emu::Graph *hipGraphExec_t;
struct hipDeviceProp_t {
  char name[256];
  char gcnArchName[256];
  size_t totalGlobalMem, sharedMemPerBlock;
  int warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  int major, minor, multiProcessorCount;
};
#define HIP_SYMBOL(x) ((const void *)&(x))

extern "C" {
hipError_t hipGetDeviceCount(int *count);
hipError_t hipSetDevice(int device);
hipError_t hipGetDeviceProperties(hipDeviceProp_t *prop, int device);
hipError_t hipMalloc(void **p, size_t bytes);
hipError_t hipFree(void *p);
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t bytes, hipMemcpyKind kind, hipStream_t s);
hipError_t hipMemsetAsync(void *dst, int v, size_t bytes, hipStream_t s);
hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags);
hipError_t hipStreamDestroy(hipStream_t s);
hipError_t hipStreamSynchronize(hipStream_t s);
hipError_t hipDeviceSynchronize(void);
hipError_t hipGetLastError(void);
const char *hipGetErrorString(hipError_t e);
hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *graph);
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *exec, hipGraph_t graph, unsigned long long flags);
hipError_t hipGraphDestroy(hipGraph_t graph);
hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t s);
hipError_t hipGraphExecDestroy(hipGraphExec_t exec);
hipError_t hipGetSymbolAddress(void **p, const void *symbol);
}

namespace emu {
/// Runs `fn` on the host in stream order (the vendor-BLAS shims' work).
extern "C" void emu_enqueue_host(Stream *s, void (*fn)(void *), void *ctx, void (*done)(void *));
/// Reports (as the stream's error) a device range that is not inside one allocation.
extern "C" bool emu_check_range(const void *p, size_t bytes, const char *what);
/// Makes `message` the sticky error of the device (the shims' failures).
extern "C" void emu_fail(const char *message);
} // namespace emu

#endif // ORTC_EMU_API_H
