//===- MpiCommunicator.cpp - ortc's collectives over MPI -----------------===//
//
// Why: data-parallel CPU training stands on MPI (Open MPI from Debian), as the
// field's scale-out does; this plugin is the only code of ortc that links MPI, so the
// runtime itself loads and runs without it (comm_plugin.h). MPI is initialised once,
// on the thread that runs the steps (MPI_THREAD_FUNNELED), and finalised at exit.
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

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

int allReduce(void *, void *buf, long long count, int dtype, int op, void *) {
  if (op != ORTC_COMM_SUM || (dtype != ORTC_COMM_F32 && dtype != ORTC_COMM_F64)) {
    lastError = "unsupported all-reduce (dtype " + std::to_string(dtype) + ", op " +
                std::to_string(op) + ")";
    return 1;
  }
  MPI_Datatype type = dtype == ORTC_COMM_F32 ? MPI_FLOAT : MPI_DOUBLE;
  // MPI counts are int: large buffers go in pieces.
  const long long chunk = 1 << 30;
  char *p = static_cast<char *>(buf);
  size_t size = dtype == ORTC_COMM_F32 ? 4 : 8;
  for (long long done = 0; done < count; done += chunk) {
    int n = int(count - done < chunk ? count - done : chunk);
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * size, n, type, MPI_SUM, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      lastError = std::string("MPI_Allreduce: ") + std::string(text, size_t(len));
      return 1;
    }
  }
  return 0;
}

const char *errorText(void *) { return lastError.c_str(); }

} // namespace

extern "C" __attribute__((visibility("default"))) int
ortc_comm_open(ortc_communicator *out, char *error, size_t errorBytes) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      std::snprintf(error, errorBytes, "MPI_Init_thread failed");
      return 1;
    }
    std::atexit(finalize);
  }
  out->ctx = nullptr;
  MPI_Comm_rank(MPI_COMM_WORLD, &out->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &out->world);
  out->all_reduce = allReduce;
  out->error = errorText;
  return 0;
}
