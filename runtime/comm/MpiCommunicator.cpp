//===- MpiCommunicator.cpp - ortc's collectives over MPI -----------------===//
//
// Why: data-parallel CPU training stands on MPI (Open MPI from Debian), as the
// field's scale-out does; this plugin is the only code of ortc that links MPI, so the
// runtime itself loads and runs without it (comm_plugin.h). MPI is initialised once,
// on the thread that runs the steps, and finalised at exit; under mpirun it is also the
// bootstrap of the NCCL/RCCL communicators (the runtime opens it first).
// Its errors are fatal (MPI's default handler aborts every rank with a message):
// a rank that fails mid-step cannot leave the others waiting in an all-reduce.
//
//===----------------------------------------------------------------------===//
#include "ortc/comm_plugin.h"

// The C API only: MPI's deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string lastError;

void finalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

/// MPI_Init_thread (FUNNELED) unless MPI runs already; false with a message if it fails.
bool initMpi(char *error, size_t errorBytes) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return true;
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::snprintf(error, errorBytes, "MPI_Init_thread failed");
    return false;
  }
  std::atexit(finalizeMpi);
  return true;
}

bool failed(int rc, const char *call) {
  if (rc == MPI_SUCCESS)
    return false;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  lastError = std::string(call) + ": " + std::string(text, size_t(len));
  return true;
}

/// MPI's type and size of an ortc dtype, or false (with the message) for none.
bool typeOf(int dtype, MPI_Datatype &type, size_t &size) {
  switch (dtype) {
  case ORTC_COMM_F32:
    type = MPI_FLOAT, size = 4;
    return true;
  case ORTC_COMM_F64:
    type = MPI_DOUBLE, size = 8;
    return true;
  case ORTC_COMM_U8:
    type = MPI_UNSIGNED_CHAR, size = 1;
    return true;
  }
  lastError = "unsupported dtype " + std::to_string(dtype);
  return false;
}

bool opOf(int op, int dtype, MPI_Op &out) {
  if (op == ORTC_COMM_SUM && dtype != ORTC_COMM_U8)
    return out = MPI_SUM, true;
  if (op == ORTC_COMM_MIN)
    return out = MPI_MIN, true;
  lastError = "unsupported reduction " + std::to_string(op) + " of dtype " + std::to_string(dtype);
  return false;
}

/// MPI counts are int: larger buffers go in pieces (the collectives below that cannot be
/// split simply refuse them).
const long long kChunk = 1 << 30;

int allReduce(void *, void *buf, long long count, int dtype, int op, void *) {
  MPI_Datatype type;
  MPI_Op mop;
  size_t size;
  if (!typeOf(dtype, type, size) || !opOf(op, dtype, mop))
    return 1;
  char *p = static_cast<char *>(buf);
  for (long long done = 0; done < count; done += kChunk) {
    int n = int(count - done < kChunk ? count - done : kChunk);
    if (failed(MPI_Allreduce(MPI_IN_PLACE, p + done * size, n, type, mop, MPI_COMM_WORLD),
               "MPI_Allreduce"))
      return 1;
  }
  return 0;
}

int reduceScatter(void *, const void *send, void *recv, long long count, int dtype, int op,
                  void *) {
  MPI_Datatype type;
  MPI_Op mop;
  size_t size;
  if (!typeOf(dtype, type, size) || !opOf(op, dtype, mop))
    return 1;
  if (count > kChunk)
    return lastError = "reduce-scatter of more than 2^30 elements per rank", 1;
  return failed(MPI_Reduce_scatter_block(send, recv, int(count), type, mop, MPI_COMM_WORLD),
                "MPI_Reduce_scatter_block")
             ? 1
             : 0;
}

int allGather(void *, const void *send, void *recv, long long count, int dtype, void *) {
  MPI_Datatype type;
  size_t size;
  if (!typeOf(dtype, type, size))
    return 1;
  if (count > kChunk)
    return lastError = "all-gather of more than 2^30 elements per rank", 1;
  return failed(MPI_Allgather(send, int(count), type, recv, int(count), type, MPI_COMM_WORLD),
                "MPI_Allgather")
             ? 1
             : 0;
}

const char *errorText(void *) { return lastError.c_str(); }

void abortRun(void *, int status) {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status); // MPI_Abort should not return
}

} // namespace

extern "C" __attribute__((visibility("default"))) int
ortc_comm_open(ortc_communicator *out, const ortc_comm_bootstrap *, char *error,
               size_t errorBytes) {
  if (!initMpi(error, errorBytes))
    return 1;
  out->ctx = nullptr;
  MPI_Comm_rank(MPI_COMM_WORLD, &out->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &out->world);
  out->all_reduce = allReduce;
  out->reduce_scatter = reduceScatter;
  out->all_gather = allGather;
  out->error = errorText;
  out->abort = abortRun;
  return 0;
}
