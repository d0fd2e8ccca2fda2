//===- Communicator.cpp - The ranks of a data-parallel run ---------------===//
//
// Why: see Communicator.h. The plugin is looked for beside the runtime (the
// executable or shared object this code is linked into), in ../lib, ../lib/ortc and
// where `cmake --install` puts it from there, and in the build tree it was built in;
// $ORTC_COMM_MPI (_NCCL, _RCCL) names it instead. Under mpirun the NCCL/RCCL plugin
// bootstraps through the MPI plugin; under torchrun-style variables through a
// TcpRendezvous (waiting $ORTC_RENDEZVOUS_TIMEOUT seconds, 300 by default).
//
//===----------------------------------------------------------------------===//
#include "Communicator.h"

#include "TcpRendezvous.h"
#include "ortc/comm_plugin.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace fs = std::filesystem;

namespace ortc {
namespace {

/// The first of `names` set to a non-negative integer, else -1.
int envInt(std::initializer_list<const char *> names) {
  for (const char *n : names)
    if (const char *v = std::getenv(n); v && *v) {
      char *end = nullptr;
      long x = std::strtol(v, &end, 10);
      if (!*end && x >= 0 && x < (1 << 24))
        return int(x);
    }
  return -1;
}

/// ORTC_COMM_MPI, ORTC_COMM_NCCL, ORTC_COMM_RCCL: a plugin the user names.
std::string envOf(const std::string &kind) {
  std::string name = "ORTC_COMM_";
  for (char ch : kind)
    name += char(std::toupper(static_cast<unsigned char>(ch)));
  return name;
}

std::vector<std::string> pluginCandidates(const std::string &kind, const std::string &file) {
  std::vector<std::string> out;
  if (const char *env = std::getenv(envOf(kind).c_str()); env && *env)
    return {env}; // the user's choice, alone
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&launchRanks), &info) && info.dli_fname) {
    std::error_code ec;
    fs::path self = fs::canonical(fs::path(info.dli_fname), ec);
    if (!ec) {
      fs::path dir = self.parent_path();
      std::vector<fs::path> near{dir / file, dir / ".." / "lib" / file,
                                 dir / ".." / "lib" / "ortc" / file};
#ifdef ORTC_COMM_INSTALL_DIR
      near.push_back(dir / ".." / ORTC_COMM_INSTALL_DIR / file); // cmake --install
#endif
      for (const fs::path &p : near)
        out.push_back(p.lexically_normal().string());
    }
  }
#ifdef ORTC_COMM_BUILD_DIR
  out.push_back(std::string(ORTC_COMM_BUILD_DIR) + "/" + file);
#endif
  return out;
}

/// The launcher's ranks; the ones on this node (-1: not given) default to the whole run.
void setRanks(LaunchRanks &r, int world, int rank, int localWorld, int localRank) {
  r.world = world;
  r.rank = rank;
  r.localWorld = localWorld >= 1 ? localWorld : world;
  r.localRank = localRank >= 0 ? localRank : rank % r.localWorld;
}

} // namespace

LaunchRanks launchRanks() {
  LaunchRanks r;
  int world = envInt({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"});
  int rank = envInt({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  if (world >= 1 && rank >= 0 && rank < world) {
    r.launcher = LaunchRanks::Mpi;
    setRanks(r, world, rank,
             envInt({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"}),
             envInt({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK"}));
    return r;
  }
  // torchrun (and scripts written for it): all four variables, or none.
  world = envInt({"WORLD_SIZE"});
  rank = envInt({"RANK"});
  const char *addr = std::getenv("MASTER_ADDR");
  int port = envInt({"MASTER_PORT"});
  bool any = world >= 0 || rank >= 0 || (addr && *addr) || std::getenv("MASTER_PORT");
  if (!any)
    return r;
  if (world < 1 || rank < 0 || rank >= world || !addr || !*addr || port <= 0 || port > 65535) {
    r.problem = "torchrun-style variables are set but incomplete or out of range (need RANK in "
                "[0, WORLD_SIZE), WORLD_SIZE >= 1, MASTER_ADDR and MASTER_PORT in 1..65535)";
    return r;
  }
  r.launcher = LaunchRanks::Torchrun;
  setRanks(r, world, rank, envInt({"LOCAL_WORLD_SIZE"}), envInt({"LOCAL_RANK"}));
  r.masterAddr = addr;
  r.masterPort = port;
  return r;
}

namespace {
std::mutex mu;
ortc_communicator comm;     ///< the engine the kernels use
ortc_communicator bootComm; ///< under mpirun, MPI: the NCCL/RCCL bootstrap
TcpRendezvous *rendezvous = nullptr;
bool opened = false;
std::string openError;

/// Loads libortc_comm_<kind>.so and opens it into `out`; false with `openError` set.
bool openPlugin(const std::string &kind, const ortc_comm_bootstrap *boot, ortc_communicator &out,
                const LaunchRanks &launch) {
  std::string file = "libortc_comm_" + kind + ".so";
  std::string looked;
  for (const std::string &path : pluginCandidates(kind, file)) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      looked += (looked.empty() ? "" : ", ") + path;
      continue;
    }
    dlerror();
    // RTLD_NODELETE: the engine finalises at exit, after everything else.
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle) {
      const char *e = dlerror();
      openError = path + ": cannot load the " + kind + " communicator: " + (e ? e : "?");
      return false;
    }
    auto open = reinterpret_cast<ortc_comm_open_fn>(dlsym(handle, "ortc_comm_open"));
    char text[512] = "";
    if (!open) {
      openError = path + ": not an ortc communicator (no ortc_comm_open)";
      return false;
    }
    if (open(&out, boot, text, sizeof text) != 0) {
      openError = path + ": " + text;
      out = ortc_communicator{};
      return false;
    }
    return true;
  }
  openError = std::string("this process was started by ") +
              (launch.launcher == LaunchRanks::Mpi ? "an MPI launcher" : "torchrun-style variables") +
              ", but the " + kind + " communicator " + file + " is not installed (looked in " +
              looked + "; " +
              (kind == "mpi" ? "build ortc where Open MPI is installed, libopenmpi-dev, or "
                             : "") +
              "set " + envOf(kind) + " to the plugin)";
  return false;
}

int mpiBroadcast(void *ctx, void *data, size_t bytes, char *error, size_t errorBytes) {
  auto *mpi = static_cast<ortc_communicator *>(ctx);
  std::vector<unsigned char> all(bytes * size_t(mpi->world));
  if (mpi->all_gather(mpi->ctx, data, all.data(), (long long)bytes, ORTC_COMM_U8, nullptr) != 0) {
    std::snprintf(error, errorBytes, "MPI bootstrap: %s", mpi->error(mpi->ctx));
    return 1;
  }
  std::memcpy(data, all.data(), bytes); // rank 0's
  return 0;
}
void mpiAbort(void *ctx, int status) {
  auto *mpi = static_cast<ortc_communicator *>(ctx);
  mpi->abort(mpi->ctx, status);
}
int tcpBroadcast(void *ctx, void *data, size_t bytes, char *error, size_t errorBytes) {
  std::string why;
  auto *r = static_cast<TcpRendezvous *>(ctx);
  if (r->broadcast(data, bytes, why)) {
    r->watchPeers(); // the engine's own start (ncclCommInitRank) would wait for a dead peer
    return 0;
  }
  std::snprintf(error, errorBytes, "%s", why.c_str());
  return 1;
}
void tcpAbort(void *, int status) {
  // No goodbye: the other ranks' watch sees the connection drop and stops them too.
  std::_Exit(status);
}

/// How long the ranks of a torchrun-style start wait for each other.
int rendezvousSeconds() {
  int s = envInt({"ORTC_RENDEZVOUS_TIMEOUT"});
  return s > 0 ? s : 300;
}

} // namespace

void abortRanks(int status) {
  std::lock_guard<std::mutex> lock(mu);
  if (opened && comm.abort && comm.world > 1)
    comm.abort(comm.ctx, status);
}

const ortc_communicator *openCommunicator(const std::string &kind, std::string &error) {
  std::lock_guard<std::mutex> lock(mu);
  if (opened)
    return comm.all_reduce ? &comm : nullptr;
  if (!openError.empty()) {
    error = openError;
    return nullptr;
  }
  LaunchRanks launch = launchRanks();
  if (!launch.problem.empty()) {
    error = openError = launch.problem;
    return nullptr;
  }
  if (!launch.launched()) {
    opened = true; // alone: a world of one, no engine needed
    return nullptr;
  }
  bool ok;
  if (kind == "mpi") {
    if (launch.launcher != LaunchRanks::Mpi) {
      error = openError = "the CPU target's collectives run on MPI: start its ranks with mpirun "
                          "-np N (torchrun-style RANK/WORLD_SIZE/MASTER_ADDR start GPU targets only)";
      return nullptr;
    }
    ok = openPlugin(kind, nullptr, comm, launch);
  } else {
    ortc_comm_bootstrap boot{launch.rank, launch.world, launch.localRank, nullptr, nullptr, nullptr};
    if (launch.launcher == LaunchRanks::Mpi) {
      if (!openPlugin("mpi", nullptr, bootComm, launch)) {
        error = openError = "the " + kind + " communicator's bootstrap: " + openError;
        return nullptr;
      }
      boot = {bootComm.rank, bootComm.world, launch.localRank, &bootComm, mpiBroadcast, mpiAbort};
    } else {
      std::string why;
      rendezvous = TcpRendezvous::join(launch.masterAddr, launch.masterPort, launch.rank,
                                       launch.world, rendezvousSeconds(), why);
      if (!rendezvous) {
        error = openError = why;
        return nullptr;
      }
      boot.ctx = rendezvous;
      boot.broadcast = tcpBroadcast;
      boot.abort = tcpAbort;
    }
    ok = openPlugin(kind, &boot, comm, launch);
  }
  if (!ok) {
    error = openError;
    return nullptr;
  }
  opened = true;
  return &comm;
}

} // namespace ortc
