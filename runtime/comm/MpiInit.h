//===- MpiInit.h - Starting MPI once per process, for the plugins -*- C++ -*-===//
//
// Why: the MPI communicator uses MPI for its collectives and the NCCL/RCCL one to
// agree on the ranks and the unique id before NCCL takes over; both start MPI the
// same way (once, on the thread that runs the steps, finalised at exit).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_COMM_MPIINIT_H
#define ORTC_RUNTIME_COMM_MPIINIT_H

// The C API only: MPI's deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace ortc::comm {

inline void finalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

/// MPI_Init_thread (FUNNELED) unless MPI runs already; false with a message if it fails.
inline bool initMpi(char *error, size_t errorBytes) {
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

} // namespace ortc::comm

#endif // ORTC_RUNTIME_COMM_MPIINIT_H
