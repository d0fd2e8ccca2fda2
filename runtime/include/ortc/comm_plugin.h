/*===- comm_plugin.h - The contract of a communicator plugin ---------------===*
 *
 * Why: the runtime opens a collective engine (MPI; later NCCL/RCCL) only for a
 * data-parallel artifact started by a launcher, through dlopen, so that it builds
 * and runs where the engine is not installed. A plugin (runtime/comm) exports one
 * function of this type, named `ortc_comm_open`.
 *
 *===----------------------------------------------------------------------===*/
#ifndef ORTC_COMM_PLUGIN_H
#define ORTC_COMM_PLUGIN_H

#include "ortc/kernel_abi.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the engine (once per process; it stays up until exit) and fills `out`.
 * 0: success; otherwise a message of at most `error_bytes` bytes in `error`. */
typedef int (*ortc_comm_open_fn)(ortc_communicator *out, char *error, size_t error_bytes);

#ifdef __cplusplus
}
#endif

#endif /* ORTC_COMM_PLUGIN_H */
