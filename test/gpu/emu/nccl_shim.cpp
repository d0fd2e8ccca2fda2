//===- nccl_shim.cpp - NCCL's C API over loopback TCP, for the emulated device ===//
//
// Why: the NCCL/RCCL communicator (runtime/comm/NcclCommunicator.cpp) must run in CI,
// where there is neither a GPU nor NCCL. This stand-in is found exactly as the real
// library is (dlopen of libnccl.so.2 / librccl.so.1 on the loader's path) and
// implements the calls ortc makes on the emulated device's memory (host memory). Like
// NCCL it needs nothing but the unique id from outside (whichever bootstrap carried it:
// mpirun's MPI or the torchrun-style rendezvous): rank 0's ncclGetUniqueId listens on a
// loopback port and writes it into the id; the ranks connect there, and each collective
// is a star through rank 0 (reduced in rank order), enqueued on the emulated stream so
// that it runs in stream order and a captured graph replays it, as NCCL's kernels
// would. One machine only; test-only.
//
//===----------------------------------------------------------------------===//
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace emu {
struct Stream;
extern "C" void emu_enqueue_host(Stream *s, void (*fn)(void *), void *ctx, void (*done)(void *));
extern "C" bool emu_check_range(const void *p, size_t bytes, const char *what);
} // namespace emu

namespace {
typedef struct {
  char internal[128];
} ncclUniqueId;
enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4 };
enum { ncclUint8 = 1, ncclFloat32 = 7, ncclFloat64 = 8 };
enum { ncclSum = 0, ncclMin = 3 };
const char kIdTag[] = "ortc-emu-nccl";

int listener = -1; // rank 0: from ncclGetUniqueId until ncclCommInitRank

struct Comm {
  int rank, world;
  std::vector<int> fds; // rank 0: peer r's at r; others: rank 0's at 0
};

bool io(int fd, void *buf, size_t bytes, bool write) {
  char *p = static_cast<char *>(buf);
  while (bytes) {
    ssize_t n = write ? ::send(fd, p, bytes, MSG_NOSIGNAL) : ::recv(fd, p, bytes, MSG_WAITALL);
    if (n <= 0)
      return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

size_t sizeOf(int type) { return type == ncclUint8 ? 1 : type == ncclFloat32 ? 4 : type == ncclFloat64 ? 8 : 0; }

template <typename T> void combine(T *acc, const T *in, size_t n, int op) {
  for (size_t i = 0; i < n; ++i)
    acc[i] = op == ncclSum ? T(acc[i] + in[i]) : std::min(acc[i], in[i]);
}
void combine(void *acc, const void *in, size_t n, int type, int op) {
  if (type == ncclFloat32)
    combine(static_cast<float *>(acc), static_cast<const float *>(in), n, op);
  else if (type == ncclFloat64)
    combine(static_cast<double *>(acc), static_cast<const double *>(in), n, op);
  else
    combine(static_cast<uint8_t *>(acc), static_cast<const uint8_t *>(in), n, op);
}

struct Call {
  enum Kind { AllReduce, ReduceScatter, AllGather } kind;
  const void *send;
  void *recv;
  size_t count;
  int type, op;
  Comm *comm;
};

void fatal(const char *what) {
  std::fprintf(stderr, "nccl shim: %s: a peer closed the connection\n", what);
  std::_Exit(1);
}

void runCall(void *p) {
  auto *c = static_cast<Call *>(p);
  Comm &m = *c->comm;
  size_t size = sizeOf(c->type), world = size_t(m.world);
  size_t sendN = c->kind == Call::ReduceScatter ? c->count * world : c->count;
  size_t sendBytes = sendN * size, chunk = c->count * size;
  if (m.rank != 0) {
    if (!io(m.fds[0], const_cast<void *>(c->send), sendBytes, true))
      fatal("send");
    size_t back = c->kind == Call::AllGather ? chunk * world : chunk;
    if (!io(m.fds[0], c->recv, back, false))
      fatal("receive");
    return;
  }
  std::vector<char> acc(c->kind == Call::AllGather ? chunk * world : sendBytes), in(sendBytes);
  std::memcpy(acc.data(), c->send, sendBytes);
  for (size_t r = 1; r < world; ++r) {
    char *into = c->kind == Call::AllGather ? acc.data() + r * chunk : in.data();
    if (!io(m.fds[r], into, sendBytes, false))
      fatal("gather");
    if (c->kind != Call::AllGather)
      combine(acc.data(), in.data(), sendN, c->type, c->op);
  }
  for (size_t r = 1; r < world; ++r) {
    bool ok = c->kind == Call::ReduceScatter ? io(m.fds[r], acc.data() + r * chunk, chunk, true)
                                             : io(m.fds[r], acc.data(), acc.size(), true);
    if (!ok)
      fatal("scatter");
  }
  std::memcpy(c->recv, acc.data(), c->kind == Call::ReduceScatter ? chunk : acc.size());
}

int enqueue(Call::Kind kind, const void *send, void *recv, size_t count, int type, int op,
            void *comm, void *stream) {
  Comm *c = static_cast<Comm *>(comm);
  size_t size = sizeOf(type);
  if (!c || !size || (op != ncclSum && op != ncclMin))
    return ncclInvalidArgument;
  size_t sendN = kind == Call::ReduceScatter ? count * size_t(c->world) : count;
  size_t recvN = kind == Call::AllGather ? count * size_t(c->world) : count;
  if (!emu::emu_check_range(send, sendN * size, "ncclShim send") ||
      !emu::emu_check_range(recv, recvN * size, "ncclShim recv"))
    return ncclInvalidArgument;
  auto *call = new Call{kind, send, recv, count, type, op, c};
  emu::emu_enqueue_host(static_cast<emu::Stream *>(stream), runCall, call,
                        [](void *p) { delete static_cast<Call *>(p); });
  return ncclSuccess;
}
} // namespace

extern "C" {
int ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id, 0, sizeof *id);
  listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
      ::listen(listener, 64) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr *>(&a), &len) != 0)
    return ncclSystemError;
  std::snprintf(id->internal, sizeof id->internal, "%s %d", kIdTag, int(ntohs(a.sin_port)));
  return ncclSuccess;
}
int ncclCommInitRank(void **comm, int world, ncclUniqueId id, int rank) {
  int port = 0;
  // The id must have come from rank 0's ncclGetUniqueId.
  if (std::strncmp(id.internal, kIdTag, sizeof kIdTag - 1) != 0 ||
      std::sscanf(id.internal + sizeof kIdTag - 1, " %d", &port) != 1 || world < 1 || rank < 0 ||
      rank >= world)
    return ncclInvalidArgument;
  auto *c = new Comm{rank, world, std::vector<int>(size_t(rank == 0 ? world : 1), -1)};
  if (rank == 0) {
    for (int joined = 1; joined < world; ++joined) {
      int fd = ::accept(listener, nullptr, nullptr);
      int32_t who = -1;
      if (fd < 0 || !io(fd, &who, sizeof who, false) || who <= 0 || who >= world)
        return ncclSystemError;
      c->fds[size_t(who)] = fd;
    }
    ::close(listener);
    listener = -1;
  } else {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    int32_t who = rank;
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
        !io(fd, &who, sizeof who, true))
      return ncclSystemError;
    c->fds[0] = fd;
  }
  *comm = c;
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
