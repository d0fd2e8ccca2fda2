//===- Communicator.cpp - The ranks of a data-parallel run ---------------===//
//
// Why: see Communicator.h. The plugin is looked for beside the runtime (the
// executable or shared object this code is linked into), in ../lib, ../lib/ortc and
// where `cmake --install` puts it from there, and in the build tree it was built in;
// $ORTC_COMM_MPI (_NCCL, _RCCL) names it instead.
//
//===----------------------------------------------------------------------===//
#include "Communicator.h"

#include "ortc/comm_plugin.h"

#include <dlfcn.h>

#include <cctype>
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

} // namespace

LaunchRanks launchRanks() {
  LaunchRanks r;
  int world = envInt({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"});
  int rank = envInt({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  if (world < 1 || rank < 0 || rank >= world)
    return r;
  r.launched = true;
  r.world = world;
  r.rank = rank;
  int local = envInt({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"});
  r.localWorld = local >= 1 ? local : world;
  return r;
}

namespace {
std::mutex mu;
ortc_communicator comm;
bool opened = false;
std::string openError;
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
  if (!launchRanks().launched) {
    opened = true; // alone: a world of one, no engine needed
    return nullptr;
  }
  if (!openError.empty()) {
    error = openError;
    return nullptr;
  }
  std::string file = "libortc_comm_" + kind + ".so";
  std::string looked, why;
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
      break;
    }
    auto open = reinterpret_cast<ortc_comm_open_fn>(dlsym(handle, "ortc_comm_open"));
    char text[512] = "";
    if (!open) {
      openError = path + ": not an ortc communicator (no ortc_comm_open)";
    } else if (open(&comm, text, sizeof text) != 0) {
      openError = path + ": " + text;
      comm = ortc_communicator{};
    } else {
      opened = true;
      return &comm;
    }
    break;
  }
  if (openError.empty())
    openError = "this process was started by an MPI launcher, but the " + kind +
                " communicator " + file + " is not installed (looked in " + looked +
                "; build ortc where Open MPI is installed, libopenmpi-dev, or set " + envOf(kind) +
                " to the plugin)";
  error = openError;
  return nullptr;
}

} // namespace ortc
