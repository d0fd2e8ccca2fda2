/*===- comm_plugin.h - The contract of a communicator plugin ---------------===*
 *
 * Why: the runtime opens a collective engine (MPI, NCCL, RCCL) only for a
 * data-parallel artifact started by a launcher, through dlopen, so that it builds
 * and runs where the engine is not installed. A plugin (runtime/comm) exports one
 * function of this type, named `ortc_comm_open`. NCCL and RCCL cannot find their
 * peers on their own: the runtime hands them a bootstrap (the launcher's MPI, or a
 * TCP rendezvous at torchrun's MASTER_ADDR:MASTER_PORT) that tells each process its
 * rank and carries rank 0's unique id to the others.
 *
 *===----------------------------------------------------------------------===*/
#ifndef ORTC_COMM_PLUGIN_H
#define ORTC_COMM_PLUGIN_H

#include "ortc/kernel_abi.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the ranks found each other, for engines that need to be told (NCCL, RCCL). */
typedef struct ortc_comm_bootstrap {
  int rank, world, local_rank;
  void *ctx;
  /* Copies rank 0's data[0..bytes) to every other rank's; 0 on success, else a message
   * in `error`. Every rank calls it once (the TCP rendezvous then watches the peers). */
  int (*broadcast)(void *ctx, void *data, size_t bytes, char *error, size_t error_bytes);
  /* Ends every rank's process with `status`. Does not return. */
  void (*abort)(void *ctx, int status);
} ortc_comm_bootstrap;

/* Starts the engine (once per process; it stays up until exit) and fills `out`.
 * `boot` is NULL for MPI (which knows its ranks). 0: success; otherwise a message of
 * at most `error_bytes` bytes in `error`. */
typedef int (*ortc_comm_open_fn)(ortc_communicator *out, const ortc_comm_bootstrap *boot,
                                 char *error, size_t error_bytes);

#ifdef __cplusplus
}
#endif

#endif /* ORTC_COMM_PLUGIN_H */
