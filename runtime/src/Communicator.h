//===- Communicator.h - The ranks of a data-parallel run --------*- C++ -*-===//
//
// Why: a data-parallel artifact's all-reduce kernels need the processes of the run to
// talk, over an engine that exists (MPI on the CPU, NCCL/RCCL on GPUs), never a
// transport of ortc's own. The runtime must still load with none of them on the
// machine, so the engine sits in a plugin (runtime/comm: libortc_comm_mpi.so, linked
// with the system's MPI; libortc_comm_nccl.so / _rccl.so, which load NCCL / RCCL at run
// time) opened with dlopen only when a launcher started this process: mpirun (any
// target), or torchrun-style variables (GPU targets; TcpRendezvous.h carries NCCL's
// unique id). One communicator per process, opened once and kept until exit (MPI
// cannot be initialised twice).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_COMMUNICATOR_H
#define ORTC_RUNTIME_COMMUNICATOR_H

#include "ortc/kernel_abi.h"

#include <string>

namespace ortc {

/// The ranks a launcher says this process has among the processes of its node and
/// of the run (Open MPI's OMPI_COMM_WORLD_*, MPICH/Hydra's PMI_*, PMIx's PMIX_*;
/// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE with MASTER_ADDR and
/// MASTER_PORT); {0, 1, 1} for a process started alone.
struct LaunchRanks {
  enum Launcher { None, Mpi, Torchrun } launcher = None;
  int rank = 0, world = 1, localRank = 0, localWorld = 1;
  std::string masterAddr; ///< torchrun: where rank 0 listens
  int masterPort = 0;
  std::string problem; ///< variables that are set but unusable (the message)
  bool launched() const { return launcher != None; }
};
LaunchRanks launchRanks();

/// The process's communicator of `kind` ("mpi", "nccl", "rccl": the plugin
/// libortc_comm_<kind>.so): nullptr with no error when the
/// process runs alone (no launcher), else the opened plugin's communicator. nullptr
/// with `error` set when the launcher is there but the plugin cannot be found or
/// fails to start (the message says where it looked and why).
const ortc_communicator *openCommunicator(const std::string &kind, std::string &error);

/// Ends every rank of a data-parallel run with `status` (the communicator's abort); returns
/// when this process has no communicator with other ranks.
void abortRanks(int status);

} // namespace ortc

#endif // ORTC_RUNTIME_COMMUNICATOR_H
