//===- Runtime.cpp - Artifact loading, sessions and the step executor ----===//
//
// Why: everything that can be wrong with an artifact (manifest, version, target,
// CPU level, hashes, params.bin ranges, kernel symbols) is checked once, in
// ortc_artifact_load, so that running a step is only a walk over a list of
// function pointers. A session owns one 64-byte aligned block holding every
// persistent tensor plus one arena; sessions share the loaded artifact through a
// shared_ptr, so freeing the artifact before its sessions is safe. Every entry
// point catches exceptions and turns them into a status and a message.
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"

#include "Communicator.h"
#include "GpuBackend.h"
#include "Manifest.h"
#include "Npz.h"
#include "ortc/cpu_features.h"
#include "ortc/kernel_abi.h"
#include "ortc/digest.h"
#include "ortc_scalar.h"

#include <cmath>
#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>

namespace fs = std::filesystem;
using ortc::Manifest;
using ortc::LaunchDesc;
using ortc::TensorDesc;

namespace {

thread_local std::string lastError;

ortc_status fail(ortc_status status, std::string message) {
  lastError = std::move(message);
  return status;
}


struct ArtifactData {
  std::string dir; ///< as the caller spelled it, for messages
  Manifest manifest;
  std::string params; ///< params.bin
  void *handle = nullptr;
  /// Per function, the symbol of each launch: ortc_cpu_kernel_fn or ortc_gpu_launcher_fn.
  std::map<std::string, std::vector<void *>> kernels;
  /// GPU artifacts: the checking device's operand hook, if kernels.so has one (kernel_abi.h).
  ortc_launch_operands_fn launchOperands = nullptr;
  bool gpu = false;
  /// CPU artifacts: the pool size, applied by every run on the calling thread (OpenMP's
  /// thread count is a per-thread setting; a step may run on another thread than the load).
  std::atomic<int> threads{0};
  void (*setOmpThreads)(int) = nullptr; ///< omp_set_num_threads of the kernels' libgomp
  ortc::GpuApi api;        ///< GPU artifacts: the device API of kernels.so
  std::string device = "cpu"; ///< the GPU's arch, for GPU artifacts
  int rank = 0, world = 1;    ///< data-parallel artifacts: this process among the run's
};

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
using Block = std::unique_ptr<char, FreeDeleter>;

/// 64-byte aligned, zeroed; at least 64 bytes so every pointer is distinct and valid.
/// A block of 2 MiB or more is 2 MiB aligned and asks the kernel for transparent huge
/// pages (madvise; a no-op where THP is off): the arena and the parameters are walked by
/// every kernel of the step, and with 4 KiB pages a GEMM's packing of a 1024-wide
/// operand touches a page per row.
Block allocate(uint64_t bytes) {
  constexpr uint64_t huge = uint64_t(1) << 21;
  const uint64_t align = bytes >= huge ? huge : 64;
  uint64_t rounded = (std::max<uint64_t>(bytes, 64) + align - 1) / align * align;
  if (rounded < bytes || rounded > (uint64_t(1) << 48))
    throw std::bad_alloc();
  char *p = static_cast<char *>(std::aligned_alloc(size_t(align), size_t(rounded)));
  if (!p)
    throw std::bad_alloc();
  if (align == huge)
    (void)madvise(p, size_t(rounded), MADV_HUGEPAGE);
  std::memset(p, 0, size_t(rounded));
  return Block(p);
}

unsigned roleBit(const std::string &role) {
  static const char *roles[] = {"input", "scalar",   "parameter", "buffer",
                                "state", "constant", "output"};
  for (unsigned i = 0; i < 7; ++i)
    if (role == roles[i])
      return 1u << i;
  return 0;
}

std::string join(const std::string &dir, const std::string &file) {
  return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
}

/// Reads a whole file; the error names it.
ortc_status readFile(const std::string &path, std::string &out) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return fail(ORTC_ERR_IO, path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad())
    return fail(ORTC_ERR_IO, path + ": read error");
  out = ss.str();
  return ORTC_OK;
}

struct Loader {
  ArtifactData &a;
  std::string manifestPath() const { return join(a.dir, "manifest.json"); }

  ortc_status run() {
    std::error_code ec;
    if (!fs::is_directory(a.dir, ec))
      return fail(ORTC_ERR_IO, a.dir + ": not an ortc artifact (no such directory)");
    if (!fs::exists(manifestPath(), ec))
      return fail(ORTC_ERR_IO, a.dir + ": not an ortc artifact (no manifest.json)");
    std::string text;
    if (ortc_status s = readFile(manifestPath(), text))
      return s;
    std::string error;
    switch (ortc::parseManifest(text, a.manifest, error)) {
    case ortc::ManifestError::None:
      break;
    case ortc::ManifestError::Version:
      return fail(ORTC_ERR_VERSION, manifestPath() + ": " + error);
    case ortc::ManifestError::Target:
      return fail(ORTC_ERR_TARGET, manifestPath() + ": " + error);
    default:
      return fail(ORTC_ERR_BAD_ARTIFACT, manifestPath() + ": " + error);
    }
    a.gpu = a.manifest.target != "cpu";
    if (!a.gpu)
      for (const std::string &arch : a.manifest.arch)
        if (std::string why = ortc::cpuMismatch(arch, a.manifest.cpuFeatures); !why.empty())
          return fail(ORTC_ERR_TARGET, manifestPath() + ": " + why);
    if (ortc_status s = checkFiles())
      return s;
    if (ortc_status s = loadKernels(); s || (s = a.gpu ? initGpu() : setDefaultThreads()))
      return s;
    return connect(); // after the device: NCCL starts on the rank's GPU
  }

  /// Resolves the device API, finds a GPU and checks its arch against the manifest.
  ortc_status initGpu() {
    std::string missing;
    std::string object = join(a.dir, a.manifest.kernelsObject);
    if (!a.api.resolve(a.handle, missing))
      return fail(ORTC_ERR_KERNEL, object + ": missing GPU runtime symbol '" + missing + "'");
    char arch[64] = {0};
    if (a.api.init(arch, sizeof arch) != 0)
      return fail(ORTC_ERR_TARGET, a.dir + ": a " + a.manifest.target + " artifact needs " +
                                       ortc::gpuKind(a.manifest.target) + ", and there is none: " +
                                       a.api.lastError());
    a.device = arch;
    std::string built;
    for (const std::string &b : a.manifest.arch) {
      if (ortc::gpuArchRuns(a.manifest.target, b, a.device))
        return ORTC_OK;
      built += (built.empty() ? "" : ", ") + b;
    }
    return fail(ORTC_ERR_TARGET, a.dir + ": built for " + built + ", but this GPU is " +
                                     a.device + ": rebuild with `ortc build --target " +
                                     a.manifest.target + " --arch " + a.device + "`");
  }

  ortc_status checkFiles() {
    for (const auto &[name, expected] : a.manifest.files) {
      std::string path = join(a.dir, name), bytes;
      if (ortc_status s = readFile(path, bytes))
        return s;
      std::string actual = ortc::digestLike(expected, bytes.data(), bytes.size());
      if (actual != expected)
        return fail(ORTC_ERR_INTEGRITY,
                    path + ": " + ortc::digestName(expected) +
                        " does not match the manifest (the file was modified or is "
                        "corrupt): expected " +
                        expected + ", got " + actual);
      if (name == "params.bin")
        a.params = std::move(bytes);
    }
    uint64_t size = a.params.size();
    for (const TensorDesc &t : a.manifest.tensors)
      if (t.hasInit &&
          (uint64_t(t.initOffset) > size || uint64_t(t.initBytes) > size - t.initOffset))
        return fail(ORTC_ERR_INTEGRITY, join(a.dir, "params.bin") + ": tensor '" + t.name +
                                            "' has init bytes [" + std::to_string(t.initOffset) +
                                            ", " + std::to_string(t.initOffset + t.initBytes) +
                                            "), outside the file (" + std::to_string(size) +
                                            " bytes)");
    return ORTC_OK;
  }

  /// The pool's size until ortc_artifact_set_threads: ORTC_THREADS, else
  /// OMP_NUM_THREADS (OpenMP reads it itself), else one thread per physical core
  /// (OpenMP's default of one per logical CPU puts two busy threads on a core).
  ortc_status setDefaultThreads() {
    // dlsym on the handle also searches the kernels' dependencies (libgomp).
    a.setOmpThreads = reinterpret_cast<void (*)(int)>(dlsym(a.handle, "omp_set_num_threads"));
    int n = 0;
    if (const char *env = std::getenv("ORTC_THREADS"); env && *env) {
      char *end = nullptr;
      long v = std::strtol(env, &end, 10);
      if (*end || v <= 0 || v > 4096)
        return fail(ORTC_ERR_INVALID_ARGUMENT,
                    std::string("ORTC_THREADS must be a positive thread count, got '") + env +
                        "'");
      n = int(v);
    } else if (const char *omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) {
      return ORTC_OK;
    } else {
      // Ranks of a data-parallel run on one node share its cores.
      n = std::max(1, ortc::hostPhysicalCores() / ortc::launchRanks().localWorld);
    }
    a.threads = n;
    return ORTC_OK;
  }

  /// Data-parallel artifacts: hands kernels.so the process's communicator (none when
  /// the process runs alone: its all-reduces are then copies).
  ortc_status connect() {
    if (a.manifest.communicator.empty())
      return ORTC_OK;
    auto set = reinterpret_cast<ortc_set_communicator_fn>(dlsym(a.handle, "ortc_set_communicator"));
    if (!set)
      return fail(ORTC_ERR_KERNEL, join(a.dir, a.manifest.kernelsObject) +
                                       ": a data-parallel artifact whose kernels have no "
                                       "ortc_set_communicator (rebuild it with this ortc)");
    std::string error;
    const ortc_communicator *comm = ortc::openCommunicator(a.manifest.communicator, error);
    if (!comm && !error.empty())
      return fail(ORTC_ERR_KERNEL, a.dir + ": " + error);
    a.rank = comm ? comm->rank : 0;
    a.world = comm ? comm->world : 1;
    if (a.manifest.ranks && a.manifest.ranks != a.world)
      return fail(ORTC_ERR_MISMATCH,
                  a.dir + ": built with --zero 1 for " + std::to_string(a.manifest.ranks) +
                      " ranks (its optimizer state is sharded that many ways), but this run has " +
                      std::to_string(a.world) +
                      (a.world == 1 ? " (start it with mpirun -np " + std::to_string(a.manifest.ranks) + ")"
                                    : "; rebuild it with --ranks " + std::to_string(a.world)));
    set(comm);
    return ORTC_OK;
  }

  ortc_status loadKernels() {
    std::string path = fs::absolute(join(a.dir, a.manifest.kernelsObject)).lexically_normal();
    dlerror();
    // RTLD_NODELETE: OpenMP worker threads may outlive the artifact; the code stays.
    a.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!a.handle) {
      const char *why = dlerror();
      std::string hint = a.manifest.target == "rocm"
                             ? " (a rocm artifact needs the HIP runtime, libamdhip64)"
                             : "";
      return fail(ORTC_ERR_KERNEL,
                  path + ": cannot load the kernels: " + (why ? why : "?") + hint);
    }
    auto *abi = static_cast<const int *>(dlsym(a.handle, "ortc_kernel_abi_version"));
    if (!abi || *abi != ORTC_KERNEL_ABI_VERSION)
      return fail(ORTC_ERR_KERNEL,
                  join(a.dir, a.manifest.kernelsObject) + ": kernel ABI version " +
                      (abi ? std::to_string(*abi) : std::string("missing")) +
                      ", this runtime calls version " + std::to_string(ORTC_KERNEL_ABI_VERSION) +
                      " (rebuild the artifact with a matching ortc)");
    if (a.gpu)
      a.launchOperands = reinterpret_cast<ortc_launch_operands_fn>(dlsym(a.handle, "ortc_launch_operands"));
    std::map<std::string, void *> symbols; // each distinct kernel looked up once
    for (const auto &[fn, desc] : a.manifest.functions) {
      std::vector<void *> &list = a.kernels[fn];
      for (const LaunchDesc &l : desc.launches) {
        void *&sym = symbols[l.kernel];
        if (!sym) {
          dlerror();
          sym = dlsym(a.handle, l.kernel.c_str());
        }
        if (!sym)
          return fail(ORTC_ERR_KERNEL, join(a.dir, a.manifest.kernelsObject) +
                                           ": missing kernel symbol '" + l.kernel +
                                           "' (needed by function '" + fn + "')");
        list.push_back(sym);
      }
    }
    return ORTC_OK;
  }
};

template <typename F> ortc_status guarded(F &&f) {
  try {
    return f();
  } catch (const std::bad_alloc &) {
    return fail(ORTC_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return fail(ORTC_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(ORTC_ERR_INTERNAL, "internal error: unknown exception");
  }
}

/// " (ONNX node 'n')" for a launch that records its node, else "".
std::string nodeOf(const LaunchDesc &l) {
  return l.node.empty() ? "" : " (ONNX node '" + l.node + "')";
}

std::string describeTensor(const TensorDesc &t) {
  return t.role + " " + t.dtype + " " + ortc::npz::shapeString(t.shape);
}

} // namespace

struct ortc_artifact {
  std::shared_ptr<ArtifactData> data;
};

struct ortc_session {
  std::shared_ptr<ArtifactData> art;
  Block block, arena;
  std::vector<void *> bufs; ///< host tensors (on a GPU: the host mirror)
  std::vector<char> bound;
  const Manifest &m() const { return art->manifest; }
  const TensorDesc *tensor(int64_t i) const {
    return i >= 0 && uint64_t(i) < m().tensors.size() ? &m().tensors[size_t(i)] : nullptr;
  }

  // GPU sessions: every tensor and the arena in device memory. hostDirty: the host
  // copy was (or may have been) written and must be uploaded before the next run;
  // deviceNewer: a run may have changed the device copy since it was last read.
  std::vector<void *> dbufs;
  void *darena = nullptr, *stream = nullptr;
  std::vector<char> hostDirty, deviceNewer;
  std::map<std::string, void *> graphs; ///< captured step graphs, per function
  /// Per function and launch, the addresses bound to the kernel's arguments (device
  /// addresses on a GPU). Built once: the tensors and the arena never move, and a
  /// captured graph (or the mock device's record) may keep pointing at them.
  std::map<std::string, std::vector<std::vector<void *>>> launchArgs;
  /// Per function and launch, each argument's bytes (for the operand hook; 0: a value).
  std::map<std::string, std::vector<std::vector<unsigned long long>>> launchBytes;
  /// The launches' {"value": v} arguments (host memory, also on GPUs: launchers
  /// read them on the host); a deque, so their addresses never move.
  std::deque<int64_t> launchValues;

  void bindLaunches(const std::vector<void *> &tensors, char *arenaBase) {
    for (const auto &[fn, desc] : m().functions) {
      auto &list = launchArgs[fn];
      auto &sizes = launchBytes[fn];
      for (const LaunchDesc &l : desc.launches) {
        std::vector<void *> ptrs;
        std::vector<unsigned long long> bytes;
        for (const LaunchDesc::Arg &a : l.args) {
          bytes.push_back(a.kind == LaunchDesc::Arg::Arena    ? a.bytes
                          : a.kind == LaunchDesc::Arg::Tensor ? m().tensors[size_t(a.value)].bytes
                                                              : 0);
          if (a.kind == LaunchDesc::Arg::Value) {
            launchValues.push_back(a.value);
            ptrs.push_back(&launchValues.back());
          } else {
            ptrs.push_back(a.kind == LaunchDesc::Arg::Arena
                               ? static_cast<void *>(arenaBase + a.value)
                               : tensors[size_t(a.value)]);
          }
        }
        list.push_back(std::move(ptrs));
        sizes.push_back(std::move(bytes));
      }
    }
  }
  std::map<std::string, int> runs;
  bool useGraphs = true;

  /// $ORTC_PROFILE (CPU artifacts): calls and milliseconds per launch, written as
  /// JSON to that path when the session ends. A function's first run is timed apart
  /// (`warmup_ms`): it carries one-time work (oneDNN's JIT kernels and plans, the first
  /// touch of the arena) that made a small kernel's mean over 300 steps several times
  /// its steady time.
  struct LaunchTimes {
    int64_t calls = 0;
    double ms = 0, warmupMs = 0;
  };
  std::string profilePath;
  std::map<std::string, std::vector<LaunchTimes>> profile;

  void writeProfile() const {
    struct Row {
      std::string function;
      size_t index;
      LaunchTimes t;
    };
    std::vector<Row> rows;
    std::map<std::string, double> byOp;
    double total = 0, warmup = 0;
    for (const auto &[fn, list] : profile)
      for (size_t k = 0; k < list.size(); ++k) {
        rows.push_back({fn, k, list[k]});
        const LaunchDesc &l = m().functions.at(fn).launches[k];
        byOp[l.op.empty() ? l.kernel : l.op] += list[k].ms;
        total += list[k].ms;
        warmup += list[k].warmupMs;
      }
    std::sort(rows.begin(), rows.end(), [](const Row &a, const Row &b) {
      return a.t.ms != b.t.ms ? a.t.ms > b.t.ms : a.t.warmupMs > b.t.warmupMs;
    });
    nlohmann::json launches = nlohmann::json::array();
    for (const Row &r : rows) {
      const LaunchDesc &l = m().functions.at(r.function).launches[r.index];
      nlohmann::json mean = nullptr;
      if (r.t.calls)
        mean = r.t.ms / double(r.t.calls);
      launches.push_back({{"function", r.function}, {"launch", r.index}, {"kernel", l.kernel},
                          {"node", l.node}, {"op", l.op}, {"calls", r.t.calls},
                          {"total_ms", r.t.ms}, {"mean_ms", mean}, {"warmup_ms", r.t.warmupMs}});
    }
    nlohmann::json ops = nlohmann::json::object();
    for (const auto &[op, ms] : byOp)
      ops[op] = ms;
    std::ofstream f(profilePath);
    f << nlohmann::json{{"total_ms", total}, {"warmup_ms", warmup}, {"by_op_ms", ops},
                        {"launches", launches}}
             .dump(2)
      << "\n";
  }

  ~ortc_session() {
    if (!profilePath.empty() && !profile.empty())
      writeProfile();
    if (!art || !art->gpu)
      return;
    const ortc::GpuApi &api = art->api;
    if (stream)
      api.sync(stream);
    for (auto &[fn, exec] : graphs)
      api.graphDestroy(exec);
    for (void *p : dbufs)
      api.free(p);
    if (darena)
      api.free(darena);
    if (stream)
      api.streamDestroy(stream);
  }
  /// Makes the host copy of tensor i current.
  ortc_status pull(size_t i) {
    if (!art->gpu || !deviceNewer[i])
      return ORTC_OK;
    if (art->api.download(bufs[i], dbufs[i], size_t(m().tensors[i].bytes), stream) != 0)
      return fail(ORTC_ERR_KERNEL, "reading tensor '" + m().tensors[i].name +
                                       "' from the GPU: " + art->api.lastError());
    deviceNewer[i] = 0;
    return ORTC_OK;
  }
  /// Marks the host copy of tensor i as written.
  void touch(size_t i) {
    if (art->gpu) {
      hostDirty[i] = 1;
      deviceNewer[i] = 0;
    }
  }
  ortc_status pullAll(unsigned roles);
  /// The kernels of `function`, in order (ortc_run after its checks).
  ortc_status runKernels(const ortc::FunctionDesc &f, const char *function);
  /// Whether the run just made was refused on the device: its boolean "finite" output
  /// false, or (a function without one, such as eval_step) a loss output not finite.
  ortc_status refusedOnDevice(const ortc::FunctionDesc &f, bool &refused) {
    refused = false;
    std::optional<size_t> flag, loss;
    for (const std::string &out : f.outputs) {
      size_t i = m().byName.at(out);
      const TensorDesc &t = m().tensors[i];
      if (t.numel != 1)
        continue;
      if (out == "finite" && t.dtype == "bool")
        flag = i;
      else if (t.role == "loss" && (t.dtype == "f32" || t.dtype == "f64"))
        loss = i;
    }
    std::optional<size_t> which = flag ? flag : loss;
    if (!which)
      return ORTC_OK;
    if (ortc_status st = pull(*which))
      return st;
    const void *p = bufs[*which];
    if (flag)
      refused = *static_cast<const uint8_t *>(p) == 0;
    else
      refused = !std::isfinite(m().tensors[*which].dtype == "f32"
                                   ? double(*static_cast<const float *>(p))
                                   : *static_cast<const double *>(p));
    return ORTC_OK;
  }
  /// Every element of the function's index inputs (manifest "index_inputs": class
  /// labels, token ids) within its range, else an error naming the input, the
  /// element, its value and the valid range (after the device refused a step).
  ortc_status checkIndexInputs(const ortc::FunctionDesc &f, const std::string &function) const {
    for (const ortc::IndexInputDesc &r : f.indexInputs) {
      size_t i = m().byName.at(r.input);
      const TensorDesc &t = m().tensors[i];
      size_t width = t.dtype == "i64" ? 8 : t.dtype == "i32" ? 4 : 0;
      if (!width || !bufs[i])
        continue;
      const char *p = static_cast<const char *>(bufs[i]);
      for (int64_t k = 0; k < t.numel; ++k) {
        int64_t v = 0;
        if (width == 8) {
          std::memcpy(&v, p + k * 8, 8);
        } else {
          int32_t w;
          std::memcpy(&w, p + k * 4, 4);
          v = w;
        }
        if ((v >= r.low && v < r.high) || (r.hasIgnore && v == r.ignore))
          continue;
        std::string at;
        for (int64_t d = int64_t(t.shape.size()) - 1, rest = k; d >= 0; --d) {
          at = std::to_string(rest % t.shape[size_t(d)]) + (at.empty() ? "" : ", ") + at;
          rest /= t.shape[size_t(d)];
        }
        return fail(ORTC_ERR_INVALID_ARGUMENT,
                    function + ": input '" + r.input + "'[" + at + "] = " + std::to_string(v) +
                        " is out of range: " + (r.node.empty() ? "" : "node '" + r.node + "' takes ") + r.what +
                        " in [" + std::to_string(r.low) + ", " + std::to_string(r.high) + ")" +
                        (r.hasIgnore ? " or " + std::to_string(r.ignore) + " (ignored)" : ""));
      }
    }
    return ORTC_OK;
  }
  ortc_status runGpu(const std::string &function, const std::vector<void *> &kernels);
};

ortc_status ortc_session::pullAll(unsigned roles) {
  for (size_t i = 0; i < m().tensors.size(); ++i)
    if (roleBit(m().tensors[i].role) & roles)
      if (ortc_status st = pull(i))
        return st;
  return ORTC_OK;
}

/// Uploads what the host changed, then runs the kernels on the session's stream:
/// eagerly on a function's first run (lazy initialisation in the kernels, such as
/// loading cuBLASLt, happens outside any capture), captured into a graph on its
/// second and replayed from then on (unless graphs are off).
ortc_status ortc_session::runGpu(const std::string &function, const std::vector<void *> &kernels) {
  const ortc::GpuApi &api = art->api;
  for (size_t i = 0; i < m().tensors.size(); ++i)
    if (hostDirty[i]) { // (touch() cleared deviceNewer: the host copy is the current one)
      if (api.upload(dbufs[i], bufs[i], size_t(m().tensors[i].bytes), stream) != 0)
        return fail(ORTC_ERR_KERNEL, "copying tensor '" + m().tensors[i].name +
                                         "' to the GPU: " + api.lastError());
      hostDirty[i] = 0;
    }
  auto gpuFail = [&](const std::string &what) {
    return fail(ORTC_ERR_KERNEL, function + ": " + what + ": " + api.lastError());
  };
  auto it = graphs.find(function);
  bool replay = useGraphs && it != graphs.end();
  if (!replay) {
    bool capture = useGraphs && runs[function]++ >= 1;
    if (capture && api.captureBegin(stream) != 0)
      return gpuFail("graph capture");
    const auto &args = launchArgs.at(function);
    const auto &bytes = launchBytes.at(function);
    const auto &launches = m().functions.at(function).launches;
    for (size_t k = 0; k < kernels.size(); ++k) {
      if (art->launchOperands)
        art->launchOperands(launches[k].kernel.c_str(), launches[k].node.c_str(), int(args[k].size()),
                            args[k].data(), bytes[k].data());
      reinterpret_cast<ortc_gpu_launcher_fn>(kernels[k])(args[k].data(), stream);
      if (art->launchOperands)
        art->launchOperands(launches[k].kernel.c_str(), launches[k].node.c_str(), 0, nullptr, nullptr);
    }
    if (capture) {
      void *exec = nullptr;
      if (api.captureEnd(stream, &exec) != 0)
        return gpuFail("graph capture");
      it = graphs.emplace(function, exec).first;
      replay = true;
    }
  }
  if (replay && api.graphLaunch(it->second, stream) != 0)
    return gpuFail("graph launch");
  if (api.sync(stream) != 0)
    return gpuFail("the step failed on the GPU");
  std::fill(deviceNewer.begin(), deviceNewer.end(), 1);
  return ORTC_OK;
}

namespace {

ortc_status saveNpz(const ortc_session *cs, const char *path, unsigned roles) {
  if (!cs || !path)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "null session or path");
  auto *s = const_cast<ortc_session *>(cs); // pulling device data into the host mirror
  if (ortc_status st = s->pullAll(roles))
    return st;
  std::vector<ortc::npz::ArrayRef> arrays;
  for (size_t i = 0; i < s->m().tensors.size(); ++i) {
    const TensorDesc &t = s->m().tensors[i];
    ortc::npz::DType d;
    if ((roleBit(t.role) & roles) && ortc::npz::fromManifestDtype(t.dtype, d))
      arrays.push_back({t.name, d, t.shape, s->bufs[i]});
  }
  std::string error;
  if (!ortc::npz::writeNpz(path, arrays, error))
    return fail(ORTC_ERR_IO, error);
  return ORTC_OK;
}

ortc_status loadNpz(ortc_session *s, const char *path, unsigned roles) {
  if (!s || !path)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "null session or path");
  if (!std::ifstream(path))
    return fail(ORTC_ERR_IO, std::string(path) + ": cannot open: " + std::strerror(errno));
  std::vector<ortc::npz::Array> arrays;
  std::string error;
  if (!ortc::npz::readNpz(path, arrays, error))
    return fail(ORTC_ERR_BAD_FILE, error);
  std::map<std::string, const ortc::npz::Array *> byName;
  for (const auto &a : arrays)
    if (!byName.emplace(a.name, &a).second)
      return fail(ORTC_ERR_BAD_FILE, std::string(path) + ": array '" + a.name + "' appears twice");
  std::string p(path);
  std::vector<std::pair<size_t, const ortc::npz::Array *>> plan;
  for (size_t i = 0; i < s->m().tensors.size(); ++i) {
    const TensorDesc &t = s->m().tensors[i];
    if (!(roleBit(t.role) & roles))
      continue;
    auto it = byName.find(t.name);
    if (it == byName.end())
      return fail(ORTC_ERR_MISMATCH, p + ": no array '" + t.name + "' (" + describeTensor(t) + ")");
    ortc::npz::DType want;
    ortc::npz::fromManifestDtype(t.dtype, want);
    if (it->second->dtype != want)
      return fail(ORTC_ERR_MISMATCH, p + ": '" + t.name + "' is " +
                                         ortc::npz::describe(it->second->dtype) +
                                         ", the artifact's " + t.role + " is " + t.dtype + " (" +
                                         ortc::npz::descr(want) + ")");
    if (it->second->shape != t.shape)
      return fail(ORTC_ERR_MISMATCH, p + ": '" + t.name + "' has shape " +
                                         ortc::npz::shapeString(it->second->shape) +
                                         ", the artifact's " + t.role + " has shape " +
                                         ortc::npz::shapeString(t.shape));
    plan.push_back({i, it->second});
    byName.erase(it);
  }
  if (!byName.empty())
    return fail(ORTC_ERR_MISMATCH, p + ": array '" + byName.begin()->first +
                                       "' is not a tensor of this artifact that can be loaded");
  for (const auto &[i, a] : plan) {
    std::memcpy(s->bufs[i], a->data.data(), a->data.size());
    s->touch(i);
  }
  return ORTC_OK;
}

} // namespace

extern "C" {

const char *ortc_last_error(void) { return lastError.c_str(); }

const char *ortc_status_name(ortc_status s) {
  static const char *names[] = {"ORTC_OK",
                                "ORTC_ERR_INVALID_ARGUMENT",
                                "ORTC_ERR_IO",
                                "ORTC_ERR_BAD_ARTIFACT",
                                "ORTC_ERR_VERSION",
                                "ORTC_ERR_TARGET",
                                "ORTC_ERR_INTEGRITY",
                                "ORTC_ERR_KERNEL",
                                "ORTC_ERR_NOT_FOUND",
                                "ORTC_ERR_MISMATCH",
                                "ORTC_ERR_BAD_FILE",
                                "ORTC_ERR_OUT_OF_MEMORY",
                                "ORTC_ERR_INTERNAL"};
  return unsigned(s) < sizeof(names) / sizeof(*names) ? names[s] : "ORTC_ERR_UNKNOWN";
}

int ortc_format_version(void) { return int(ortc::manifest::kFormatVersion); }

ortc_status ortc_artifact_load(const char *dir, ortc_artifact **out) {
  if (!dir || !out)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_artifact_load: null argument");
  *out = nullptr;
  return guarded([&] {
    auto data = std::make_shared<ArtifactData>();
    data->dir = dir;
    if (ortc_status s = Loader{*data}.run())
      return s;
    *out = new ortc_artifact{std::move(data)};
    return ORTC_OK;
  });
}

void ortc_artifact_free(ortc_artifact *artifact) { delete artifact; }

const char *ortc_artifact_device(const ortc_artifact *artifact) {
  return artifact ? artifact->data->device.c_str() : "";
}

ortc_status ortc_artifact_ranks(const ortc_artifact *artifact, int *rank, int *world) {
  if (!artifact || !rank || !world)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_artifact_ranks: null argument");
  *rank = artifact->data->rank;
  *world = artifact->data->world;
  return ORTC_OK;
}

void ortc_abort_ranks(int status) { ortc::abortRanks(status); }

int64_t ortc_artifact_shard_ranks(const ortc_artifact *artifact) {
  return artifact ? artifact->data->manifest.ranks : 0;
}

ortc_status ortc_artifact_set_threads(ortc_artifact *artifact, int n) {
  if (!artifact)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_artifact_set_threads: null artifact");
  if (n <= 0)
    return ORTC_OK;
  // One pool: the kernels' OpenMP, which oneDNN's GEMM and convolution share; every
  // run sets its size on the thread that runs it.
  artifact->data->threads = n;
  return ORTC_OK;
}

/// Allocates the device tensors and arena; every tensor is uploaded before the first
/// run (hostDirty), the arena starts zeroed like the CPU's.
static ortc_status createDevice(ortc_session &s) {
  const ortc::GpuApi &api = s.art->api;
  const char *graphs = std::getenv("ORTC_GPU_GRAPHS");
  s.useGraphs = !(graphs && std::string(graphs) == "0");
  if (api.streamCreate(&s.stream) != 0)
    return fail(ORTC_ERR_KERNEL, s.art->dir + ": " + api.lastError());
  for (const TensorDesc &t : s.m().tensors) {
    void *p = nullptr;
    if (api.malloc(&p, size_t(std::max<int64_t>(t.bytes, 1))) != 0)
      return fail(ORTC_ERR_OUT_OF_MEMORY, "GPU memory for tensor '" + t.name + "' (" +
                                              std::to_string(t.bytes) +
                                              " bytes): " + api.lastError());
    s.dbufs.push_back(p);
  }
  size_t arena = size_t(std::max<int64_t>(s.m().arenaBytes, 1));
  if (api.malloc(&s.darena, arena) != 0 || api.memset(s.darena, 0, arena, s.stream) != 0)
    return fail(ORTC_ERR_OUT_OF_MEMORY, "GPU memory for the arena (" + std::to_string(arena) +
                                            " bytes): " + api.lastError());
  s.hostDirty.assign(s.m().tensors.size(), 1);
  s.deviceNewer.assign(s.m().tensors.size(), 0);
  return ORTC_OK;
}

ortc_status ortc_session_create(ortc_artifact *artifact, ortc_session **out) {
  if (!artifact || !out)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_session_create: null argument");
  *out = nullptr;
  return guarded([&] {
    auto s = std::make_unique<ortc_session>();
    s->art = artifact->data;
    const Manifest &m = s->m();
    std::vector<uint64_t> offsets;
    uint64_t total = 0;
    for (const TensorDesc &t : m.tensors) {
      offsets.push_back(total);
      total += (std::max<uint64_t>(t.bytes, 1) + 63) / 64 * 64;
      if (total > (uint64_t(1) << 48))
        return fail(ORTC_ERR_OUT_OF_MEMORY,
                    "the tensors of " + s->art->dir + " need more than 256 TiB");
    }
    try {
      s->block = allocate(total);
      s->arena = allocate(uint64_t(m.arenaBytes));
    } catch (const std::bad_alloc &) {
      return fail(ORTC_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(total) +
                                              " bytes of tensors and an arena of " +
                                              std::to_string(m.arenaBytes) + " bytes");
    }
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      char *p = s->block.get() + offsets[i];
      const TensorDesc &t = m.tensors[i];
      if (t.hasInit)
        std::memcpy(p, s->art->params.data() + t.initOffset, size_t(t.initBytes));
      s->bufs.push_back(p);
    }
    s->bound.assign(m.tensors.size(), 0);
    for (size_t i = 0; i < m.tensors.size(); ++i) // scalars with a default start bound
      if (const TensorDesc &t = m.tensors[i]; t.defaultValue) {
        if (t.dtype == "f32") {
          float f = float(*t.defaultValue);
          std::memcpy(s->bufs[i], &f, 4);
        } else {
          std::memcpy(s->bufs[i], &*t.defaultValue, 8);
        }
        s->bound[i] = 1;
      }
    if (s->art->gpu) {
      if (ortc_status st = createDevice(*s))
        return st;
      s->bindLaunches(s->dbufs, static_cast<char *>(s->darena));
    } else {
      s->bindLaunches(s->bufs, s->arena.get());
      if (const char *p = std::getenv("ORTC_PROFILE"); p && *p)
        s->profilePath = p;
    }
    *out = s.release();
    return ORTC_OK;
  });
}

void ortc_session_free(ortc_session *session) { delete session; }

const char *ortc_function_finite_check(const ortc_session *s, const char *function,
                                       int64_t index) {
  if (!s || !function)
    return nullptr;
  auto it = s->m().functions.find(function);
  if (it == s->m().functions.end() || index < 0 ||
      size_t(index) >= it->second.finiteChecks.size())
    return nullptr;
  return it->second.finiteChecks[size_t(index)].c_str();
}

int ortc_tensor_default(const ortc_session *s, int64_t index, double *value) {
  if (!s || index < 0 || size_t(index) >= s->m().tensors.size())
    return 0;
  const auto &d = s->m().tensors[size_t(index)].defaultValue;
  if (d && value)
    *value = *d;
  return d.has_value();
}

int64_t ortc_artifact_omitted_inits(const ortc_artifact *a) {
  if (!a)
    return 0;
  int64_t n = 0;
  for (const TensorDesc &t : a->data->manifest.tensors)
    n += t.initOmitted;
  return n;
}

ortc_status ortc_session_init_omitted(ortc_session *s, uint64_t seed) {
  return guarded([&] {
    if (!s)
      return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_session_init_omitted: null session");
    // splitmix64 of (seed, tensor, element): two uniforms, one Box-Muller normal.
    using ortc::scalar::mix64;
    for (size_t i = 0; i < s->m().tensors.size(); ++i) {
      const TensorDesc &t = s->m().tensors[i];
      if (!t.initOmitted)
        continue;
      const bool f32 = t.dtype == "f32", f64 = t.dtype == "f64";
      if (!f32 && !f64) {
        std::memset(s->bufs[i], 0, size_t(t.bytes));
      } else {
        const uint64_t key = mix64(seed * ortc::scalar::kGoldenGamma + i + 1);
        for (int64_t e = 0; e < t.numel; ++e) {
          const uint64_t a = mix64(key + 2 * uint64_t(e)), b = mix64(key + 2 * uint64_t(e) + 1);
          const double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53, u2 = double(b >> 11) * 0x1.0p-53;
          const double v = 0.02 * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
          if (f32)
            static_cast<float *>(s->bufs[i])[e] = float(v);
          else
            static_cast<double *>(s->bufs[i])[e] = v;
        }
      }
      s->touch(i);
    }
    return ORTC_OK;
  });
}

ortc_status ortc_session_set_graphs(ortc_session *session, int enabled) {
  if (!session)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_session_set_graphs: null session");
  session->useGraphs = enabled != 0;
  return ORTC_OK;
}

int64_t ortc_tensor_count(const ortc_session *s) { return s ? int64_t(s->m().tensors.size()) : 0; }

ortc_status ortc_tensor_info(const ortc_session *s, int64_t index, const char **name,
                             const char **role, const char **dtype, int64_t *rank,
                             const int64_t **dims) {
  const TensorDesc *t = s ? s->tensor(index) : nullptr;
  if (!t)
    return fail(ORTC_ERR_INVALID_ARGUMENT,
                "ortc_tensor_info: no tensor at index " + std::to_string(index));
  if (name)
    *name = t->name.c_str();
  if (role)
    *role = t->role.c_str();
  if (dtype)
    *dtype = t->dtype.c_str();
  if (rank)
    *rank = int64_t(t->shape.size());
  if (dims)
    *dims = t->shape.data();
  return ORTC_OK;
}

int64_t ortc_tensor_find(const ortc_session *s, const char *name) {
  if (!s || !name)
    return -1;
  auto it = s->m().byName.find(name);
  return it == s->m().byName.end() ? -1 : int64_t(it->second);
}

void *ortc_tensor_data(ortc_session *s, int64_t index) {
  if (!s || !s->tensor(index))
    return nullptr;
  s->bound[size_t(index)] = 1;
  if (s->pull(size_t(index)) != ORTC_OK)
    return nullptr;
  s->touch(size_t(index)); // the caller may write through the pointer
  return s->bufs[size_t(index)];
}

size_t ortc_tensor_bytes(const ortc_session *s, int64_t index) {
  const TensorDesc *t = s ? s->tensor(index) : nullptr;
  return t ? size_t(t->bytes) : 0;
}

namespace {
const std::vector<std::string> *functionList(const ortc_session *s, const char *function,
                                             bool inputs) {
  if (!s || !function)
    return nullptr;
  auto it = s->m().functions.find(function);
  if (it == s->m().functions.end())
    return nullptr;
  return inputs ? &it->second.inputs : &it->second.outputs;
}
const char *listItem(const std::vector<std::string> *list, int64_t i) {
  return list && i >= 0 && uint64_t(i) < list->size() ? (*list)[size_t(i)].c_str() : nullptr;
}
} // namespace

int64_t ortc_function_input_count(const ortc_session *s, const char *function) {
  auto *list = functionList(s, function, true);
  return list ? int64_t(list->size()) : -1;
}

const char *ortc_function_input(const ortc_session *s, const char *function, int64_t i) {
  return listItem(functionList(s, function, true), i);
}

int64_t ortc_function_output_count(const ortc_session *s, const char *function) {
  auto *list = functionList(s, function, false);
  return list ? int64_t(list->size()) : -1;
}

const char *ortc_function_output(const ortc_session *s, const char *function, int64_t i) {
  return listItem(functionList(s, function, false), i);
}

ortc_status ortc_bind_input(ortc_session *s, const char *name, const void *data, size_t bytes) {
  if (!s || !name || (!data && bytes))
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_bind_input: null argument");
  int64_t i = ortc_tensor_find(s, name);
  if (i < 0)
    return fail(ORTC_ERR_NOT_FOUND, std::string("bind: the artifact has no tensor '") + name + "'");
  const TensorDesc &t = *s->tensor(i);
  if (t.role != "input" && t.role != "scalar")
    return fail(ORTC_ERR_INVALID_ARGUMENT,
                "bind: '" + t.name + "' is a " + t.role + ", not an input or scalar");
  if (uint64_t(t.bytes) != bytes)
    return fail(ORTC_ERR_MISMATCH, "bind: '" + t.name + "' (" + describeTensor(t) + ") takes " +
                                       std::to_string(t.bytes) + " bytes, got " +
                                       std::to_string(bytes));
  if (bytes)
    std::memcpy(s->bufs[size_t(i)], data, bytes);
  s->touch(size_t(i));
  s->bound[size_t(i)] = 1;
  return ORTC_OK;
}

ortc_status ortc_run(ortc_session *s, const char *function) {
  if (!s || !function)
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_run: null argument");
  auto fn = s->m().functions.find(function);
  if (fn == s->m().functions.end())
    return fail(ORTC_ERR_INVALID_ARGUMENT,
                s->art->dir + " has no function '" + std::string(function) + "'");
  for (const std::string &in : fn->second.inputs)
    if (!s->bound[s->m().byName.at(in)])
      return fail(ORTC_ERR_INVALID_ARGUMENT,
                  std::string(function) + ": input '" + in + "' was never bound (ortc_bind_input)");
  ortc_status st = s->runKernels(fn->second, function);
  if (st != ORTC_OK || fn->second.indexInputs.empty())
    return st;
  // The kernels check index inputs on the device: a bad one poisons what it feeds, so
  // the step's finite flag refuses it (nothing changes). Only then does the host look
  // for the element to name.
  bool refused = false;
  if (ortc_status r = s->refusedOnDevice(fn->second, refused); r != ORTC_OK || !refused)
    return r;
  return s->checkIndexInputs(fn->second, function);
}

ortc_status ortc_session::runKernels(const ortc::FunctionDesc &f, const char *function) {
  const std::vector<void *> &kernels = art->kernels.at(function);
  if (art->gpu)
    return guarded([&] { return runGpu(function, kernels); });
  if (int n = art->threads; n > 0 && art->setOmpThreads)
    art->setOmpThreads(n);
  const auto &args = launchArgs.at(function);
  std::vector<LaunchTimes> *profile = nullptr;
  bool warmup = false;
  if (!profilePath.empty()) {
    profile = &this->profile[function];
    warmup = profile->empty(); // the function's first run: its list is made now
    profile->resize(kernels.size());
  }
  for (size_t k = 0; k < kernels.size(); ++k) {
    try {
      auto t0 = std::chrono::steady_clock::now();
      reinterpret_cast<ortc_cpu_kernel_fn>(kernels[k])(args[k].data());
      if (profile) {
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
        LaunchTimes &t = (*profile)[k];
        if (warmup) {
          t.warmupMs = ms;
        } else {
          t.calls++;
          t.ms += ms;
        }
      }
    } catch (const std::exception &e) {
      return fail(ORTC_ERR_KERNEL, std::string(function) + ": kernel '" +
                                       f.launches[k].kernel + "'" +
                                       nodeOf(f.launches[k]) + " failed: " + e.what());
    } catch (...) {
      return fail(ORTC_ERR_KERNEL, std::string(function) + ": kernel '" +
                                       f.launches[k].kernel + "'" +
                                       nodeOf(f.launches[k]) + " failed");
    }
  }
  return ORTC_OK;
}

ortc_status ortc_read_output(const ortc_session *s, const char *name, void *dst, size_t bytes) {
  if (!s || !name || (!dst && bytes))
    return fail(ORTC_ERR_INVALID_ARGUMENT, "ortc_read_output: null argument");
  int64_t i = ortc_tensor_find(s, name);
  if (i < 0)
    return fail(ORTC_ERR_NOT_FOUND, std::string("read: the artifact has no tensor '") + name + "'");
  const TensorDesc &t = *s->tensor(i);
  if (uint64_t(t.bytes) != bytes)
    return fail(ORTC_ERR_MISMATCH, "read: '" + t.name + "' (" + describeTensor(t) + ") has " +
                                       std::to_string(t.bytes) + " bytes, asked for " +
                                       std::to_string(bytes));
  if (ortc_status st = const_cast<ortc_session *>(s)->pull(size_t(i)))
    return st;
  if (bytes)
    std::memcpy(dst, s->bufs[size_t(i)], bytes);
  return ORTC_OK;
}

ortc_status ortc_checkpoint_save(const ortc_session *s, const char *path) {
  return guarded([&] { return saveNpz(s, path, ORTC_ROLES_CHECKPOINT); });
}

ortc_status ortc_checkpoint_load(ortc_session *s, const char *path) {
  return guarded([&] { return loadNpz(s, path, ORTC_ROLES_CHECKPOINT); });
}

ortc_status ortc_save_params_npz(const ortc_session *s, const char *path, unsigned roles) {
  return guarded([&] { return saveNpz(s, path, roles); });
}

ortc_status ortc_load_params_npz(ortc_session *s, const char *path, unsigned roles) {
  return guarded([&] { return loadNpz(s, path, roles); });
}

} // extern "C"
