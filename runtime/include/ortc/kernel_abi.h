/*===- kernel_abi.h - The contract between generated kernels and the runtime -===*
 *
 * Why: the compiler prints kernels and the runtime calls them, and neither may
 * guess the other's conventions. This header is the one place both include: the
 * runtime directly, the generated source as `ortc_kernel_abi.h`, a copy the
 * compiler writes into every artifact.
 *
 * A kernel is a function of its operands: it receives the addresses of the
 * buffers it reads and writes as `ptrs[0..n)`, in the order of the "args" of the
 * launch in manifest.json (a persistent tensor, an offset into the arena, or an
 * int64 the runtime holds in host memory for that launch: a per-op constant such
 * as dropout's random-stream key, or a size a library routine takes at run time
 * anyway: a GEMM's, a convolution's geometry, a norm's rows).
 * The sizes of generated loops stay compile-time constants in the body. So every
 * launch with the same printed body (each layer of a transformer; on the CPU also
 * the GEMMs of every width) shares one compiled kernel.
 *
 *===----------------------------------------------------------------------===*/
#ifndef ORTC_KERNEL_ABI_H
#define ORTC_KERNEL_ABI_H

/* Bumped when the calling convention changes; kernels.so exports it as
 * `ortc_kernel_abi_version` and the runtime refuses another. */
#define ORTC_KERNEL_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU target: runs the kernel on the calling thread (OpenMP inside). */
typedef void (*ortc_cpu_kernel_fn)(void *const *ptrs);

/* The GPU targets: a host launcher that only enqueues work on `stream`
 * (a cudaStream_t / hipStream_t); `ptrs` are device addresses. */
typedef void (*ortc_gpu_launcher_fn)(void *const *ptrs, void *stream);

/* Optional, for checking devices: when a GPU kernels object exports
 * `ortc_launch_operands` (ortc's generated code never does; the emulated
 * device of test/gpu/emu does), the runtime calls it before each launcher with
 * the launch's operands, ptrs[k] spanning bytes[k] (0: a host value, or a size
 * the manifest does not give), and after the launcher returns with n = 0, so
 * that the device can check every access of the work enqueued in between
 * against the operand it belongs to. `kernel` and `node` name the launch. */
typedef void (*ortc_launch_operands_fn)(const char *kernel, const char *node, int n,
                                         void *const *ptrs, const unsigned long long *bytes);

/* Data-parallel artifacts: the processes of a run ("ranks") and the collectives that
 * join them. The runtime opens the communicator (MPI on the CPU target; runtime/comm)
 * and hands it to kernels.so through its exported `ortc_set_communicator` before the
 * first step; the generated all_reduce kernels call it. A process that runs alone gets
 * none (NULL) and its all_reduce is the identity. */
enum { ORTC_COMM_F32 = 0, ORTC_COMM_F64 = 1, ORTC_COMM_U8 = 2 /* i1 flags */ };
enum { ORTC_COMM_SUM = 0, ORTC_COMM_MIN = 1 };
typedef struct ortc_communicator {
  int rank, world;
  void *ctx;
  /* Every call returns 0 on success, else the message is in error(ctx). `stream` is the
   * GPU stream, NULL on the CPU. Every rank gets the same result. */
  /* buf[0..count) of every rank becomes their element-wise reduction, in place. */
  int (*all_reduce)(void *ctx, void *buf, long long count, int dtype, int op, void *stream);
  /* recv[0..count) = elements [rank * count, (rank + 1) * count) of the element-wise
   * reduction of every rank's send[0..world * count) (ZeRO's gradient exchange). */
  int (*reduce_scatter)(void *ctx, const void *send, void *recv, long long count, int dtype,
                        int op, void *stream);
  /* recv[r * count + i] = send[i] of rank r (ZeRO's parameter exchange). */
  int (*all_gather)(void *ctx, const void *send, void *recv, long long count, int dtype,
                    void *stream);
  const char *(*error)(void *ctx);
  /* Ends every rank's process with `status` (a rank that fails alone must not leave the
   * others waiting in a collective). Does not return. */
  void (*abort)(void *ctx, int status);
} ortc_communicator;
typedef void (*ortc_set_communicator_fn)(const ortc_communicator *comm);

#ifdef __cplusplus
}
#endif

#endif /* ORTC_KERNEL_ABI_H */
