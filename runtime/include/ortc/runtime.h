/*===- runtime.h - C API of the ortc runtime ---------------------*- C -*-===//
 *
 * Loads a compiled `model.ortc/` artifact and runs its training step. No MLIR, LLVM,
 * protobuf or Python: a precompiled artifact trains on any machine with this library.
 * Every call that can fail returns ORTC_ERROR and leaves a message naming the file,
 * tensor or kernel in ortc_last_error().
 *
 *===----------------------------------------------------------------------===*/
#ifndef ORTC_RUNTIME_H
#define ORTC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ortc_artifact ortc_artifact;
typedef struct ortc_session ortc_session;
typedef enum { ORTC_OK = 0, ORTC_ERROR = 1 } ortc_status;

/// The message of the last failed call on this thread.
const char *ortc_last_error(void);

/// Loads and checks an artifact folder (manifest, format version, target, file hashes,
/// kernel symbols).
ortc_status ortc_artifact_load(const char *dir, ortc_artifact **out);
void ortc_artifact_free(ortc_artifact *artifact);

/// A session owns every persistent tensor (initialised from params.bin) and one arena.
ortc_status ortc_session_create(const ortc_artifact *artifact, ortc_session **out);
void ortc_session_free(ortc_session *session);

/// Persistent tensors, in manifest order.
int ortc_tensor_count(const ortc_session *session);
/// Index of the tensor called `name`, or -1.
int ortc_tensor_find(const ortc_session *session, const char *name);
ortc_status ortc_tensor_info(const ortc_session *session, int index, const char **name,
                             const char **role, const char **dtype, int *rank,
                             const int64_t **dims);
void *ortc_tensor_data(ortc_session *session, int index);
size_t ortc_tensor_bytes(const ortc_session *session, int index);

/// Copies `bytes` bytes into the input (or scalar) tensor `name`; sizes must match.
ortc_status ortc_bind_input(ortc_session *session, const char *name, const void *data,
                            size_t bytes);
/// Runs "train_step" or "eval_step".
ortc_status ortc_run(ortc_session *session, const char *function);
/// Copies an output (or any tensor) out; sizes must match.
ortc_status ortc_read_output(const ortc_session *session, const char *name, void *dst,
                             size_t bytes);

/// Parameters, buffers and optimizer state as .npz (written atomically).
ortc_status ortc_checkpoint_save(const ortc_session *session, const char *path);
ortc_status ortc_checkpoint_load(ortc_session *session, const char *path);
/// Parameters and buffers only, by their ONNX initializer names.
ortc_status ortc_params_save(const ortc_session *session, const char *path);
ortc_status ortc_params_load(ortc_session *session, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* ORTC_RUNTIME_H */
