//===- NcclCommunicator.cpp - ortc's collectives over NCCL / RCCL --------===//
//
// Why: data-parallel GPU training stands on the vendors' collective libraries, NCCL
// (from the CUDA toolkit) and RCCL (ROCm), which share one C API. Like cuBLASLt they
// are loaded at run time (dlopen of ORTC_NCCL_LIBRARY: libnccl.so.2, or librccl.so.1
// for the rccl build of this file), so nothing links them, MPI included: the runtime's
// bootstrap (the launcher's MPI, or a TCP rendezvous for torchrun-style starts) tells
// each rank who it is and carries rank 0's ncclUniqueId to the others; then every
// collective is NCCL's, enqueued on the step's stream (so graph capture records it).
// Errors: a failed call's message is kept for error(); abort ends the NCCL
// communicator, then every rank through the bootstrap.
//
//===----------------------------------------------------------------------===//
#include "ortc/comm_plugin.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// The part of NCCL's C API (nccl.h, the same in RCCL) that ortc calls.
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t; // ncclSuccess = 0
enum { ncclUint8 = 1, ncclFloat32 = 7, ncclFloat64 = 8 };
enum { ncclSum = 0, ncclMin = 3 };

struct Nccl {
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*allReduce)(const void *, void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, void *);
  ncclResult_t (*allGather)(const void *, void *, size_t, int, ncclComm_t, void *);
  ncclResult_t (*commAbort)(ncclComm_t);
  const char *(*getErrorString)(ncclResult_t);
} nccl;
ncclComm_t comm = nullptr;
ortc_comm_bootstrap boot;
std::string lastError;

bool failed(ncclResult_t rc, const char *call) {
  if (rc == 0)
    return false;
  lastError = std::string(call) + ": " + (nccl.getErrorString ? nccl.getErrorString(rc) : "error") +
              " (" + std::to_string(rc) + ")";
  return true;
}

bool typeOf(int dtype, int &type) {
  switch (dtype) {
  case ORTC_COMM_F32:
    return type = ncclFloat32, true;
  case ORTC_COMM_F64:
    return type = ncclFloat64, true;
  case ORTC_COMM_U8:
    return type = ncclUint8, true;
  }
  lastError = "unsupported dtype " + std::to_string(dtype);
  return false;
}

bool opOf(int op, int &out) {
  if (op == ORTC_COMM_SUM)
    return out = ncclSum, true;
  if (op == ORTC_COMM_MIN)
    return out = ncclMin, true;
  lastError = "unsupported reduction " + std::to_string(op);
  return false;
}

int allReduce(void *, void *buf, long long count, int dtype, int op, void *stream) {
  int type, nop;
  if (!typeOf(dtype, type) || !opOf(op, nop))
    return 1;
  return failed(nccl.allReduce(buf, buf, size_t(count), type, nop, comm, stream), "ncclAllReduce");
}

int reduceScatter(void *, const void *send, void *recv, long long count, int dtype, int op,
                  void *stream) {
  int type, nop;
  if (!typeOf(dtype, type) || !opOf(op, nop))
    return 1;
  return failed(nccl.reduceScatter(send, recv, size_t(count), type, nop, comm, stream),
                "ncclReduceScatter");
}

int allGather(void *, const void *send, void *recv, long long count, int dtype, void *stream) {
  int type;
  if (!typeOf(dtype, type))
    return 1;
  return failed(nccl.allGather(send, recv, size_t(count), type, comm, stream), "ncclAllGather");
}

const char *errorText(void *) { return lastError.c_str(); }

void abortRun(void *, int status) {
  if (comm && nccl.commAbort)
    nccl.commAbort(comm);
  boot.abort(boot.ctx, status);
  std::_Exit(status); // the bootstrap's abort should not return
}

template <typename F> bool load(void *lib, const char *name, F &fn, char *error, size_t n) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn)
    std::snprintf(error, n, "%s has no %s", ORTC_NCCL_LIBRARY, name);
  return fn != nullptr;
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
ortc_comm_open(ortc_communicator *out, const ortc_comm_bootstrap *bootstrap, char *error,
               size_t errorBytes) {
  if (!bootstrap) {
    std::snprintf(error, errorBytes, "the %s communicator needs a bootstrap", ORTC_NCCL_LIBRARY);
    return 1;
  }
  boot = *bootstrap;
  void *lib = dlopen(ORTC_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char *why = dlerror();
    std::snprintf(error, errorBytes, "cannot load %s: %s", ORTC_NCCL_LIBRARY, why ? why : "?");
    return 1;
  }
  if (!load(lib, "ncclGetUniqueId", nccl.getUniqueId, error, errorBytes) ||
      !load(lib, "ncclCommInitRank", nccl.commInitRank, error, errorBytes) ||
      !load(lib, "ncclAllReduce", nccl.allReduce, error, errorBytes) ||
      !load(lib, "ncclReduceScatter", nccl.reduceScatter, error, errorBytes) ||
      !load(lib, "ncclAllGather", nccl.allGather, error, errorBytes) ||
      !load(lib, "ncclCommAbort", nccl.commAbort, error, errorBytes) ||
      !load(lib, "ncclGetErrorString", nccl.getErrorString, error, errorBytes))
    return 1;
  out->rank = boot.rank;
  out->world = boot.world;
  ncclUniqueId id{};
  if (out->rank == 0 && failed(nccl.getUniqueId(&id), "ncclGetUniqueId")) {
    std::fprintf(stderr, "ortc: error: %s\n", lastError.c_str());
    boot.abort(boot.ctx, 1); // the other ranks wait for the id
  }
  if (boot.broadcast(boot.ctx, &id, sizeof id, error, errorBytes) != 0)
    return 1;
  if (failed(nccl.commInitRank(&comm, out->world, id, out->rank), "ncclCommInitRank")) {
    std::snprintf(error, errorBytes, "%s", lastError.c_str());
    return 1;
  }
  out->ctx = nullptr;
  out->all_reduce = allReduce;
  out->reduce_scatter = reduceScatter;
  out->all_gather = allGather;
  out->error = errorText;
  out->abort = abortRun;
  return 0;
}
