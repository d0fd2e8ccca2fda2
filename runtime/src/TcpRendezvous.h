//===- TcpRendezvous.h - Ranks that find each other over TCP ----*- C++ -*-===//
//
// Why: torchrun (and Slurm scripts written for it) start GPU ranks with RANK,
// WORLD_SIZE and MASTER_ADDR:MASTER_PORT and no MPI. NCCL then needs one thing from
// outside: rank 0's unique id on every rank. This is the smallest rendezvous that
// carries it, like PyTorch's TCPStore: rank 0 listens on MASTER_PORT, the others
// connect to MASTER_ADDR (retrying while rank 0 starts), and rank 0 sends each of them
// the bytes. The connections then stay open as a liveness watch: a rank whose peer
// vanishes without saying goodbye (a crash, a kill, an abort) ends itself, so no rank
// waits forever in a collective; a normal exit says goodbye first.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_TCPRENDEZVOUS_H
#define ORTC_RUNTIME_TCPRENDEZVOUS_H

#include <cstddef>
#include <string>

namespace ortc {

class TcpRendezvous {
public:
  /// Joins the `world` ranks through `host`:`port` within `timeoutSeconds`; nullptr with
  /// `error` set (naming the address and what failed) otherwise. One per process; it
  /// lives until exit.
  static TcpRendezvous *join(const std::string &host, int port, int rank, int world,
                             int timeoutSeconds, std::string &error);

  /// Rank 0's data[0..bytes) onto every rank's; false with `error` set.
  bool broadcast(void *data, size_t bytes, std::string &error);

  /// From now on (after the broadcast: the watch reads the same connections), a peer that closes its connection without
  /// the goodbye of a normal exit ends this process with status 1 and a message.
  void watchPeers();

  struct State; ///< the connections and the watch (TcpRendezvous.cpp)

private:
  TcpRendezvous() = default;
  State *state = nullptr;
};

} // namespace ortc

#endif // ORTC_RUNTIME_TCPRENDEZVOUS_H
