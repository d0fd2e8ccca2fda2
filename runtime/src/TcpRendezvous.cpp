//===- TcpRendezvous.cpp - Ranks that find each other over TCP -----------===//
//
// Why: see TcpRendezvous.h. Protocol: each non-zero rank sends "ortc" + its rank and
// the world size (int32, host order: one machine type per run) after connecting; rank 0
// checks them (no stranger, no duplicate, one world size). A broadcast is rank 0
// writing the bytes to each connection in rank order. At exit each rank writes the
// goodbye byte; the watch thread reads each connection and ends the process when one
// closes without it.
//
//===----------------------------------------------------------------------===//
#include "TcpRendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ortc {
namespace {

using Clock = std::chrono::steady_clock;
const char kHello[4] = {'o', 'r', 't', 'c'};
const char kGoodbye = 'B';

int msLeft(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : int(ms);
}

/// Reads or writes all of buf before the deadline; false on an error, a closed peer or time.
bool transfer(int fd, void *buf, size_t bytes, bool write, Clock::time_point deadline) {
  char *p = static_cast<char *>(buf);
  while (bytes) {
    pollfd pfd{fd, short(write ? POLLOUT : POLLIN), 0};
    int ready = poll(&pfd, 1, msLeft(deadline));
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready <= 0)
      return false;
    ssize_t n = write ? ::send(fd, p, bytes, MSG_NOSIGNAL) : ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    bytes -= size_t(n);
  }
  return true;
}

} // namespace

struct TcpRendezvous::State {
  int rank = 0, world = 1;
  std::string where;      ///< host:port, for messages
  std::vector<int> peers; ///< rank 0: the fd of rank r at r; others: rank 0's at 0
  std::mutex mu;
  bool leaving = false;   ///< this process is exiting normally
  int timeoutSeconds = 300;

  void watch() {
    std::vector<pollfd> fds;
    for (int fd : peers)
      if (fd >= 0)
        fds.push_back({fd, POLLIN, 0});
    while (!fds.empty()) {
      if (poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR)
          continue;
        return;
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!fds[i].revents)
          continue;
        char byte = 0;
        ssize_t n = ::recv(fds[i].fd, &byte, 1, 0);
        if (n == 1 && byte == kGoodbye) {
          fds.erase(fds.begin() + long(i));
          break;
        }
        std::lock_guard<std::mutex> lock(mu);
        if (leaving)
          return;
        std::fprintf(stderr,
                     "%s: error: rank %d: a peer of the data-parallel run (through %s) ended "
                     "without finishing; stopping this rank too\n",
                     program_invocation_short_name, rank, where.c_str());
        std::_Exit(1);
      }
    }
  }

  void sayGoodbye() {
    std::lock_guard<std::mutex> lock(mu);
    leaving = true;
    for (int fd : peers)
      if (fd >= 0)
        (void)::send(fd, &kGoodbye, 1, MSG_NOSIGNAL);
  }
};

namespace {
TcpRendezvous::State *theState = nullptr; // for the exit handler (never freed)
} // namespace

TcpRendezvous *TcpRendezvous::join(const std::string &host, int port, int rank, int world,
                                   int timeoutSeconds, std::string &error) {
  auto *s = new State;
  s->rank = rank;
  s->world = world;
  s->where = host + ":" + std::to_string(port);
  s->timeoutSeconds = timeoutSeconds;
  s->peers.assign(rank == 0 ? size_t(world) : 1, -1);
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(timeoutSeconds);
  std::string timeText = " within " + std::to_string(timeoutSeconds) + " s";
  auto fail = [&](const std::string &why) {
    error = "rendezvous at " + s->where + " (MASTER_ADDR:MASTER_PORT), rank " +
            std::to_string(rank) + " of " + std::to_string(world) + ": " + why;
    for (int fd : s->peers)
      if (fd >= 0)
        ::close(fd);
    delete s;
    return nullptr;
  };

  if (rank == 0) {
    int lfd = ::socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = lfd >= 0;
    if (!v6)
      lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0)
      return fail(std::string("socket: ") + std::strerror(errno));
    int one = 1, zero = 0;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (v6) { // both families, like a store listening on every interface
      setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(uint16_t(port));
      rc = ::bind(lfd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(uint16_t(port));
      rc = ::bind(lfd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(lfd, world) != 0) {
      std::string why = std::string("cannot listen on port ") + std::to_string(port) + ": " +
                        std::strerror(errno);
      ::close(lfd);
      return fail(why);
    }
    for (int joined = 1; joined < world;) {
      pollfd pfd{lfd, POLLIN, 0};
      int ready = poll(&pfd, 1, msLeft(deadline));
      if (ready < 0 && errno == EINTR)
        continue;
      if (ready <= 0) {
        ::close(lfd);
        return fail(std::to_string(world - joined) + " of the other ranks did not connect" +
                    timeText);
      }
      int fd = ::accept(lfd, nullptr, nullptr);
      if (fd < 0)
        continue;
      char hello[4];
      int32_t who[2];
      if (!transfer(fd, hello, sizeof hello, false, deadline) ||
          !transfer(fd, who, sizeof who, false, deadline) ||
          std::memcmp(hello, kHello, sizeof hello) != 0) {
        ::close(fd); // not one of ours: keep waiting for the ranks
        continue;
      }
      if (who[1] != world || who[0] <= 0 || who[0] >= world || s->peers[size_t(who[0])] >= 0) {
        ::close(fd);
        ::close(lfd);
        return fail("a process connected as rank " + std::to_string(who[0]) + " of " +
                    std::to_string(who[1]) +
                    (who[1] != world ? " (WORLD_SIZE differs between the ranks)"
                                     : " (RANK is out of range or taken twice)"));
      }
      int nodelay = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
      s->peers[size_t(who[0])] = fd;
      ++joined;
    }
    ::close(lfd);
  } else {
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    std::string service = std::to_string(port);
    if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
      return fail(std::string("cannot resolve MASTER_ADDR: ") + gai_strerror(rc));
    int fd = -1;
    while (fd < 0) { // rank 0 may not listen yet
      for (addrinfo *ai = found; ai && fd < 0; ai = ai->ai_next) {
        fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          ::close(fd);
          fd = -1;
        }
      }
      if (fd < 0) {
        if (msLeft(deadline) == 0) {
          freeaddrinfo(found);
          return fail("rank 0 did not answer" + timeText);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    freeaddrinfo(found);
    int nodelay = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
    int32_t who[2] = {rank, world};
    s->peers[0] = fd;
    if (!transfer(fd, const_cast<char *>(kHello), sizeof kHello, true, deadline) ||
        !transfer(fd, who, sizeof who, true, deadline))
      return fail("rank 0 closed the connection");
  }

  auto *r = new TcpRendezvous;
  r->state = s;
  theState = s;
  std::atexit([] { theState->sayGoodbye(); });
  return r;
}

bool TcpRendezvous::broadcast(void *data, size_t bytes, std::string &error) {
  State &s = *state;
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(s.timeoutSeconds);
  if (s.rank == 0) {
    for (int r = 1; r < s.world; ++r)
      if (!transfer(s.peers[size_t(r)], data, bytes, true, deadline))
        return error = "rendezvous at " + s.where + ": rank " + std::to_string(r) +
                       " stopped listening",
               false;
    return true;
  }
  if (!transfer(s.peers[0], data, bytes, false, deadline))
    return error = "rendezvous at " + s.where + ": rank 0 ended or sent nothing within " +
                   std::to_string(s.timeoutSeconds) + " s",
           false;
  return true;
}

void TcpRendezvous::watchPeers() {
  State *s = state;
  std::thread([s] { s->watch(); }).detach();
}

} // namespace ortc
