/*===- runtime.h - C API of the ortc runtime ---------------------*- C -*-===//
 *
 * Why: a compiled `model.ortc/` folder must train anywhere, from any language,
 * without MLIR, LLVM, protobuf or Python. This C API is that seam: load and check
 * an artifact once, create sessions (each owns every persistent tensor and one
 * arena), bind inputs, run a step function, read outputs, and save/restore state
 * as numpy .npz files. Calls that can fail return an ortc_status and leave a
 * message naming the file, tensor or kernel in ortc_last_error(); nothing aborts.
 *
 *===----------------------------------------------------------------------===*/
#ifndef ORTC_RUNTIME_H
#define ORTC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Result of every fallible call. Details are in ortc_last_error().
typedef enum ortc_status {
  ORTC_OK = 0,
  ORTC_ERR_INVALID_ARGUMENT = 1, ///< null pointer, unknown function, bad role
  ORTC_ERR_IO = 2,               ///< a file cannot be opened, read, written or renamed
  ORTC_ERR_BAD_ARTIFACT = 3,     ///< manifest.json malformed or against the schema
  ORTC_ERR_VERSION = 4,          ///< format_version this runtime does not read
  ORTC_ERR_TARGET = 5,           ///< target this runtime has no backend for
  ORTC_ERR_INTEGRITY = 6,        ///< SHA-256 mismatch, params.bin range outside the file
  ORTC_ERR_KERNEL = 7,           ///< dlopen failure, missing kernel symbol, kernel threw
  ORTC_ERR_NOT_FOUND = 8,        ///< no tensor of that name
  ORTC_ERR_MISMATCH = 9,         ///< byte count, shape or dtype mismatch
  ORTC_ERR_BAD_FILE = 10,        ///< malformed or unsupported .npy/.npz
  ORTC_ERR_OUT_OF_MEMORY = 11,
  ORTC_ERR_INTERNAL = 12
} ortc_status;

/// Role bits for ortc_save_params_npz / ortc_load_params_npz.
enum {
  ORTC_ROLE_INPUT = 1 << 0,
  ORTC_ROLE_SCALAR = 1 << 1,
  ORTC_ROLE_PARAMETER = 1 << 2,
  ORTC_ROLE_BUFFER = 1 << 3,
  ORTC_ROLE_STATE = 1 << 4,
  ORTC_ROLE_CONSTANT = 1 << 5,
  ORTC_ROLE_OUTPUT = 1 << 6,
  /// What --save-params writes: trained parameters and buffers.
  ORTC_ROLES_PARAMS = ORTC_ROLE_PARAMETER | ORTC_ROLE_BUFFER,
  /// What a checkpoint holds: parameters, buffers and optimizer state.
  ORTC_ROLES_CHECKPOINT = ORTC_ROLE_PARAMETER | ORTC_ROLE_BUFFER | ORTC_ROLE_STATE
};

typedef struct ortc_artifact ortc_artifact;
typedef struct ortc_session ortc_session;

/// The message of the last failed call on this thread ("" if none). Valid until the
/// next failing call on this thread.
const char *ortc_last_error(void);
/// A short constant name for a status ("ORTC_ERR_IO"...).
const char *ortc_status_name(ortc_status status);
/// The manifest format_version this runtime reads.
int ortc_format_version(void);

/// Loads and checks the artifact folder `dir`: manifest.json parses and follows the
/// schema, format and format_version, target ("cpu": this CPU runs its ISA level;
/// "cuda"/"rocm": a GPU is visible and its arch is one the artifact was built for),
/// the SHA-256 of every listed file, init ranges inside params.bin; then dlopens the
/// kernels object and resolves every kernel of every function. On success `*out`
/// owns the artifact.
ortc_status ortc_artifact_load(const char *dir, ortc_artifact **out);
/// Releases the caller's reference; sessions keep the artifact alive. NULL is a no-op.
void ortc_artifact_free(ortc_artifact *artifact);
/// Sets the size of the kernels' thread pool (OpenMP's, which the generated loops and
/// oneDNN's GEMM and convolution share; nothing else spawns threads), for every later
/// ortc_run on whichever thread calls it. n <= 0 keeps the size chosen at load:
/// ORTC_THREADS, else OMP_NUM_THREADS, else one thread per physical core.
ortc_status ortc_artifact_set_threads(ortc_artifact *artifact, int n);

/// This process's rank and the number of ranks of its run: a data-parallel artifact
/// (ortc build --data-parallel) started by mpirun is one of `world` ranks whose steps
/// average their gradients; any other artifact, or one started alone, is rank 0 of 1.
ortc_status ortc_artifact_ranks(const ortc_artifact *artifact, int *rank, int *world);
/// ZeRO artifacts (ortc build --zero 1 --ranks N): N, the ranks their optimizer state is
/// sharded over (each rank's checkpoint holds its own shard); 0 for every other artifact.
int64_t ortc_artifact_shard_ranks(const ortc_artifact *artifact);
/// Ends every process of this process's data-parallel run with `status`, for a failure
/// of this rank alone (the others would wait for it in a collective forever); returns
/// at once when the process has no other ranks.
void ortc_abort_ranks(int status);

/// "cpu", or the arch of the GPU a cuda/rocm artifact runs on ("sm_90", "gfx90a").
const char *ortc_artifact_device(const ortc_artifact *artifact);

/// Creates a session: every persistent tensor allocated (64-byte aligned),
/// initialised from params.bin or zero, and one arena of arena_bytes. On a GPU the
/// tensors and the arena live in device memory, mirrored on the host for the calls
/// below (copied lazily in each direction).
/// GPU sessions capture each function's kernels into a graph (CUDA/HIP graphs) at
/// its second run and replay it from then on; `enabled` = 0 launches every kernel
/// every step instead. No effect on the CPU. Default: enabled unless the
/// environment sets ORTC_GPU_GRAPHS=0.
ortc_status ortc_session_set_graphs(ortc_session *session, int enabled);
ortc_status ortc_session_create(ortc_artifact *artifact, ortc_session **out);
/// The number of tensors whose initial value the artifact leaves out (`ortc build
/// --no-params`); a session starts them zero-filled until they are loaded or drawn.
int64_t ortc_artifact_omitted_inits(const ortc_artifact *artifact);
/// Draws every tensor whose initial value the artifact leaves out: floating-point
/// ones from N(0, 0.02^2) (GPT-2's initialisation), integer and bool ones zero, from a
/// counter-based generator keyed by (seed, tensor index, element), so every target
/// draws the same values. For benchmarks of artifacts that travel without weights.
ortc_status ortc_session_init_omitted(ortc_session *session, uint64_t seed);
/// NULL is a no-op.
void ortc_session_free(ortc_session *session);

/// Number of persistent tensors (manifest order; a launch argument {"tensor": i} is the i-th).
int64_t ortc_tensor_count(const ortc_session *session);
/// Describes tensor `index`; any out-pointer may be NULL. Strings and dims stay valid
/// while the session lives.
ortc_status ortc_tensor_info(const ortc_session *session, int64_t index, const char **name,
                             const char **role, const char **dtype, int64_t *rank,
                             const int64_t **dims);
/// 1 and `*value` if tensor `index` is a scalar with a default (a value it holds from
/// session creation until bound: AdamW's betas, eps and weight decay), else 0.
int ortc_tensor_default(const ortc_session *session, int64_t index, double *value);
/// Index of the tensor called `name`, or -1.
int64_t ortc_tensor_find(const ortc_session *session, const char *name);
/// The storage of tensor `index` (NULL if out of range). Writing through it counts
/// as binding the tensor.
void *ortc_tensor_data(ortc_session *session, int64_t index);
/// Size in bytes of tensor `index` (0 if out of range).
size_t ortc_tensor_bytes(const ortc_session *session, int64_t index);

/// Number of tensors the caller binds for `function` (its "inputs"), or -1 if the
/// artifact has no such function.
int64_t ortc_function_input_count(const ortc_session *session, const char *function);
/// Name of input `index` of `function`, or NULL.
const char *ortc_function_input(const ortc_session *session, const char *function, int64_t index);
/// Number of outputs of `function`, or -1 if the artifact has no such function.
int64_t ortc_function_output_count(const ortc_session *session, const char *function);
/// Name of output `index` of `function`, or NULL.
const char *ortc_function_output(const ortc_session *session, const char *function, int64_t index);

/// What element `index` of `function`'s "finite_each" output checked: "loss", or the
/// parameter whose gradient it checked; NULL if none (out of range, older artifacts).
const char *ortc_function_finite_check(const ortc_session *session, const char *function,
                                       int64_t index);

/// Copies `bytes` bytes into the tensor `name`, which must have role "input" or
/// "scalar"; `bytes` must equal its size.
ortc_status ortc_bind_input(ortc_session *session, const char *name, const void *data,
                            size_t bytes);
/// Runs the kernels of `function` ("train_step", "eval_step") in order. Fails if one
/// of its inputs was never bound, and with ORTC_ERR_INVALID_ARGUMENT naming the element
/// when the kernels refused the step over an index input out of its range (a class
/// label, a token id: the step changed nothing).
ortc_status ortc_run(ortc_session *session, const char *function);
/// Copies tensor `name` (usually an output) to `dst`; `bytes` must equal its size.
ortc_status ortc_read_output(const ortc_session *session, const char *name, void *dst,
                             size_t bytes);

/// Writes every parameter, buffer and state tensor, by name, as .npz to
/// `path`.tmp and renames it to `path`.
ortc_status ortc_checkpoint_save(const ortc_session *session, const char *path);
/// Restores a checkpoint. Every parameter, buffer and state tensor must be present
/// with its shape and dtype, and nothing else; the first mismatch is reported by
/// name and nothing is changed.
ortc_status ortc_checkpoint_load(ortc_session *session, const char *path);
/// Writes the tensors whose role is in `roles` (ORTC_ROLE_* bits), by name, as .npz
/// (atomically, like ortc_checkpoint_save).
ortc_status ortc_save_params_npz(const ortc_session *session, const char *path, unsigned roles);
/// Loads the tensors whose role is in `roles` from an .npz, with the checks of
/// ortc_checkpoint_load; all or nothing.
ortc_status ortc_load_params_npz(ortc_session *session, const char *path, unsigned roles);

#ifdef __cplusplus
}
#endif

#endif /* ORTC_RUNTIME_H */
