//===- nccl_shim.cpp - NCCL's C API over MPI, for the emulated device ----===//
//
// Why: the NCCL/RCCL communicator (runtime/comm/NcclCommunicator.cpp) must run in CI,
// where there is neither a GPU nor NCCL. This stand-in is found exactly as the real
// library is (dlopen of libnccl.so.2 / librccl.so.1 on the loader's path) and
// implements the calls ortc makes with MPI on the emulated device's memory (host
// memory): each collective is enqueued on the emulated stream, so it runs in stream
// order and a captured graph replays it, as NCCL's kernels would. Test-only.
//
//===----------------------------------------------------------------------===//
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstring>
#include <string>

namespace emu {
struct Stream;
extern "C" void emu_enqueue_host(Stream *s, void (*fn)(void *), void *ctx, void (*done)(void *));
extern "C" bool emu_check_range(const void *p, size_t bytes, const char *what);
} // namespace emu

namespace {
typedef struct {
  char internal[128];
} ncclUniqueId;
enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclSystemError = 2 };
enum { ncclUint8 = 1, ncclFloat32 = 7, ncclFloat64 = 8 };
enum { ncclSum = 0, ncclMin = 3 };

struct Comm {
  int rank, world;
};

struct Call {
  enum Kind { AllReduce, ReduceScatter, AllGather } kind;
  const void *send;
  void *recv;
  size_t count;
  MPI_Datatype type;
  MPI_Op op;
};

bool mpiType(int t, MPI_Datatype &out, size_t &size) {
  switch (t) {
  case ncclUint8:
    return out = MPI_UNSIGNED_CHAR, size = 1, true;
  case ncclFloat32:
    return out = MPI_FLOAT, size = 4, true;
  case ncclFloat64:
    return out = MPI_DOUBLE, size = 8, true;
  }
  return false;
}

void runCall(void *p) {
  auto *c = static_cast<Call *>(p);
  int n = int(c->count);
  switch (c->kind) {
  case Call::AllReduce:
    MPI_Allreduce(c->send == c->recv ? MPI_IN_PLACE : c->send, c->recv, n, c->type, c->op, MPI_COMM_WORLD);
    break;
  case Call::ReduceScatter:
    MPI_Reduce_scatter_block(c->send, c->recv, n, c->type, c->op, MPI_COMM_WORLD);
    break;
  case Call::AllGather:
    MPI_Allgather(c->send, n, c->type, c->recv, n, c->type, MPI_COMM_WORLD);
    break;
  }
}

int enqueue(Call::Kind kind, const void *send, void *recv, size_t count, int type, int op,
            void *comm, void *stream) {
  Comm *c = static_cast<Comm *>(comm);
  MPI_Datatype t;
  size_t size;
  if (!c || !mpiType(type, t, size) || (op != ncclSum && op != ncclMin))
    return ncclInvalidArgument;
  size_t sendN = kind == Call::ReduceScatter ? count * size_t(c->world) : count;
  size_t recvN = kind == Call::AllGather ? count * size_t(c->world) : count;
  if (!emu::emu_check_range(send, sendN * size, "ncclShim send") ||
      !emu::emu_check_range(recv, recvN * size, "ncclShim recv"))
    return ncclInvalidArgument;
  auto *call = new Call{kind, send, recv, count, t, op == ncclSum ? MPI_SUM : MPI_MIN};
  emu::emu_enqueue_host(static_cast<emu::Stream *>(stream), runCall, call,
                        [](void *p) { delete static_cast<Call *>(p); });
  return ncclSuccess;
}
} // namespace

extern "C" {
int ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id, 0, sizeof *id);
  std::strcpy(id->internal, "ortc-emu-nccl");
  return ncclSuccess;
}
int ncclCommInitRank(void **comm, int world, ncclUniqueId id, int rank) {
  int mpiRank = -1, mpiWorld = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpiRank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpiWorld);
  // The id must have come from rank 0's ncclGetUniqueId.
  if (std::strcmp(id.internal, "ortc-emu-nccl") != 0 || rank != mpiRank || world != mpiWorld)
    return ncclInvalidArgument;
  *comm = new Comm{rank, world};
  return ncclSuccess;
}
int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, void *comm,
                  void *stream) {
  return enqueue(Call::AllReduce, send, recv, count, type, op, comm, stream);
}
int ncclReduceScatter(const void *send, void *recv, size_t count, int type, int op, void *comm,
                      void *stream) {
  return enqueue(Call::ReduceScatter, send, recv, count, type, op, comm, stream);
}
int ncclAllGather(const void *send, void *recv, size_t count, int type, void *comm, void *stream) {
  return enqueue(Call::AllGather, send, recv, count, type, ncclSum, comm, stream);
}
int ncclCommAbort(void *comm) {
  delete static_cast<Comm *>(comm);
  return ncclSuccess;
}
const char *ncclGetErrorString(int rc) {
  return rc == ncclSuccess ? "no error" : rc == ncclInvalidArgument ? "invalid argument" : "error";
}
} // extern "C"
