//===- Artifact.cpp - Persistent tensors and the model.ortc folder -------===//
//
// Algorithm of writeArtifact:
//  1. make `<output>.tmp.<pid>/`; write the kernel source units and the headers
//     they include, the kernel library and the kernel ABI (so the folder is
//     self-contained and rebuildable);
//  2. compile them with the target's KernelBuild through the kernel cache
//     ($ORTC_KERNEL_CACHE): a whole cached artifact is copied; else each unit's
//     cached object is reused and the rest compiled in parallel (CPU: the system
//     C++ compiler at the --cpu instruction-set level, -march=native only when
//     asked, linked to oneDNN; CUDA/HIP: nvcc/hipcc on the one unit), see
//     compileUnits;
//  3. meanwhile, on a thread of its own, stream params.bin (initial values of
//     parameters, buffers and constants) tensor by tensor, hashing it on the way;
//  4. write manifest.json (tensors, each function's launches: a kernel and the
//     addresses bound to its arguments) with the SHA-256 of every file;
//  5. rename the folder into place, so a failed build never leaves half an artifact.
//
//===----------------------------------------------------------------------===//
#include "codegen/Artifact.h"
#include "codegen/PrebuiltKernels.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "ortc/digest.h"
#include "ortc/sha256.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <signal.h>
#include <unistd.h>

using namespace mlir;
namespace fs = std::filesystem;

extern const char *const ortcKernelLibrarySource; // generated from ortc_kernels.h
extern const char *const ortcKernelAbiSource;     // generated from ortc/kernel_abi.h

namespace ortc {

std::string dtypeOf(Type elt) {
  if (elt.isF32()) return "f32";
  if (elt.isF64()) return "f64";
  if (elt.isF16()) return "f16";
  if (elt.isBF16()) return "bf16";
  if (elt.isInteger(64)) return "i64";
  if (elt.isInteger(32)) return "i32";
  if (elt.isInteger(1)) return "bool";
  return "";
}

FailureOr<TensorTable> TensorTable::build(ModuleOp module, const WeightStore &weights,
                                          std::string &error) {
  TensorTable t;
  auto add = [&](const std::string &name, const std::string &role, Type type,
                 std::optional<double> defaultValue = std::nullopt) {
    auto rt = cast<RankedTensorType>(type);
    std::vector<int64_t> shape(rt.getShape().begin(), rt.getShape().end());
    auto it = t.byName.find(name);
    if (it != t.byName.end()) {
      if (t.list[it->second].shape != shape) {
        error = "tensor '" + name + "' is used with two different shapes";
        return false;
      }
      return true;
    }
    TensorInfo info{name, role, dtypeOf(rt.getElementType()), shape, nullptr, defaultValue};
    if (auto w = weights.find(name); w != weights.end() && role != "input")
      info.init = &w->second;
    t.byName[name] = t.list.size();
    t.list.push_back(info);
    return true;
  };
  for (const std::string &fnName : stepFunctionNames(module)) {
    auto fn = module.lookupSymbol<func::FuncOp>(fnName);
    if (!fn) {
      error = "the module has no @" + fnName;
      return failure();
    }
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      std::optional<double> defaultValue;
      if (auto d = fn.getArgAttrOfType<FloatAttr>(i, "ortc.default"))
        defaultValue = d.getValueAsDouble();
      if (!add(argName(fn, i), argRole(fn, i), fn.getArgument(i).getType(), defaultValue))
        return failure();
    }
    for (unsigned i = 0; i < fn.getNumResults(); ++i)
      if (!resultTied(fn, i) &&
          !add(resultName(fn, i), "output", fn.getFunctionType().getResult(i)))
        return failure();
    bool ok = true;
    fn.walk([&](WeightOp w) {
      auto g = module.lookupSymbol<GlobalOp>(w.getNameAttr());
      std::string kind = g.getKind().str();
      ok &= add(w.getName().str(), kind == "frozen" ? "constant" : kind, w.getType());
    });
    if (!ok)
      return failure();
  }
  return t;
}

std::vector<std::string> stepFunctionNames(ModuleOp module) {
  std::vector<std::string> names{"train_step", "eval_step"};
  if (module.lookupSymbol<func::FuncOp>("accumulate_step"))
    names.push_back("accumulate_step");
  return names;
}

namespace {

bool writeFile(const fs::path &path, const std::string &data, std::string &error) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), data.size());
  if (!f) {
    error = "cannot write " + path.string();
    return false;
  }
  return true;
}

std::string readFile(const fs::path &path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}


/// The artifact's copy of runtime/include/ortc/kernel_abi.h, which the source includes.
constexpr const char *kKernelAbiName = "ortc_kernel_abi.h";

/// The source of a build's library object (KernelBuild::libraryObject): the library
/// header, instantiated.
constexpr const char *kLibraryUnitName = "ortc_kernels_lib.cpp";
constexpr const char *kLibraryUnitSource =
    "// The float instantiations of the kernel library that every unit links\n"
    "// (compiled with -DORTC_KERN_INSTANTIATE; see the end of ortc_kernels.h).\n"
    "#include \"ortc_kernels.h\"\n";

/// A function's step program:
/// [{"kernel": name, "args": [{"tensor": i} | {"arena": offset, "bytes": n} | {"value": v}]}].
nlohmann::json launches(const FunctionKernels &f) {
  nlohmann::json list = nlohmann::json::array();
  for (const Launch &l : f.launches) {
    nlohmann::json args = nlohmann::json::array();
    for (const LaunchArg &a : l.args) {
      args.push_back({{a.kind == LaunchArg::Arena   ? "arena"
                       : a.kind == LaunchArg::Value ? "value"
                                                    : "tensor",
                       a.value}});
      if (a.kind == LaunchArg::Arena && a.bytes > 0)
        args.back()["bytes"] = a.bytes;
    }
    nlohmann::json launch = {{"kernel", l.kernel}, {"args", std::move(args)}};
    if (!l.node.empty())
      launch["node"] = l.node;
    if (!l.op.empty())
      launch["op"] = l.op;
    list.push_back(std::move(launch));
  }
  return list;
}

/// Copies `products` from `from` into `to`; false if any is missing.
bool copyProducts(const fs::path &from, const fs::path &to,
                  const std::vector<std::string> &products) {
  std::error_code ec;
  for (const std::string &p : products) {
    fs::copy_file(from / p, to / p, fs::copy_options::overwrite_existing, ec);
    if (ec)
      return false;
  }
  return true;
}

/// The kernel cache ($ORTC_KERNEL_CACHE, else $XDG_CACHE_HOME/ortc/kernels or
/// ~/.cache/ortc/kernels; "off" disables it), shared by builds and the test suite:
/// `<key>/` folders hold a whole artifact's products, `units/<key>.o` one unit's
/// object. Entries are written under a temporary name and renamed into place, so
/// concurrent builds never see half an entry; a hit refreshes the entry's time,
/// and storing evicts the least recently used entries beyond
/// $ORTC_KERNEL_CACHE_MAX_MB (default 2048).
class KernelCache {
public:
  KernelCache() {
    if (const char *dir = std::getenv("ORTC_KERNEL_CACHE")) {
      if (*dir && std::string(dir) != "off")
        root = dir;
    } else if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
      root = fs::path(xdg) / "ortc" / "kernels";
    } else if (const char *home = std::getenv("HOME"); home && *home) {
      root = fs::path(home) / ".cache" / "ortc" / "kernels";
    }
  }
  bool enabled() const { return !root.empty(); }

  bool fetchProducts(const std::string &key, const fs::path &dir,
                     const std::vector<std::string> &products) {
    if (!enabled() || !copyProducts(root / key, dir, products))
      return false;
    touch(root / key);
    return true;
  }
  void storeProducts(const std::string &key, const fs::path &dir,
                     const std::vector<std::string> &products) {
    if (!enabled())
      return;
    std::error_code ec;
    fs::path tmp = temporary(root / key);
    fs::create_directories(tmp, ec);
    if (!ec && copyProducts(dir, tmp, products))
      fs::rename(tmp, root / key, ec); // fails harmlessly when a peer stored it first
    fs::remove_all(tmp, ec);
  }
  /// A single-file entry `units/<key><ext>` (unit objects, precompiled headers).
  bool fetchObject(const std::string &key, const fs::path &obj, const std::string &ext = ".o") {
    std::error_code ec;
    fs::path entry = root / "units" / (key + ext);
    if (!enabled() || !fs::copy_file(entry, obj, fs::copy_options::overwrite_existing, ec))
      return false;
    touch(entry);
    return true;
  }
  void storeObject(const std::string &key, const fs::path &obj, const std::string &ext = ".o") {
    if (!enabled())
      return;
    std::error_code ec;
    fs::create_directories(root / "units", ec);
    fs::path entry = root / "units" / (key + ext), tmp = temporary(entry);
    if (fs::copy_file(obj, tmp, fs::copy_options::overwrite_existing, ec))
      fs::rename(tmp, entry, ec);
    fs::remove(tmp, ec);
  }

  /// Removes least recently used entries until the cache fits its bound.
  void evict() {
    if (!enabled())
      return;
    double mb = 2048; // also for a value that is not a number of MB
    if (const char *v = std::getenv("ORTC_KERNEL_CACHE_MAX_MB"); v && *v) {
      char *end = nullptr;
      double parsed = std::strtod(v, &end);
      if (*end == '\0' && parsed >= 0)
        mb = parsed;
    }
    auto limit = uint64_t(std::max(0.0, mb) * 1048576.0);
    struct Entry {
      fs::file_time_type time;
      uint64_t bytes;
      fs::path path;
    };
    std::vector<Entry> entries;
    uint64_t total = 0;
    std::error_code ec;
    auto add = [&](const fs::path &p) {
      if (p.filename().string().find(".tmp.") != std::string::npos)
        return; // a peer's entry being written
      uint64_t bytes = 0;
      if (fs::is_directory(p, ec)) {
        for (const auto &f : fs::recursive_directory_iterator(p, ec))
          if (f.is_regular_file(ec))
            bytes += f.file_size(ec);
      } else {
        bytes = fs::file_size(p, ec);
      }
      entries.push_back({fs::last_write_time(p, ec), bytes, p});
      total += bytes;
    };
    for (const auto &e : fs::directory_iterator(root, ec))
      if (e.path().filename() != "units")
        add(e.path());
    for (const auto &e : fs::directory_iterator(root / "units", ec))
      add(e.path());
    if (total <= limit)
      return;
    std::sort(entries.begin(), entries.end(),
              [](const Entry &a, const Entry &b) { return a.time < b.time; });
    for (const Entry &e : entries) {
      if (total <= limit)
        break;
      fs::remove_all(e.path, ec);
      total -= e.bytes;
    }
  }

private:
  static void touch(const fs::path &p) {
    std::error_code ec;
    fs::last_write_time(p, fs::file_time_type::clock::now(), ec);
  }
  static fs::path temporary(const fs::path &p) {
    static std::atomic<int> counter{0};
    return p.string() + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  }
  fs::path root;
};

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// What every compile of `build` depends on besides its source: the headers,
/// the compiler, its version and flags (part of every cache key).
std::string headersAndCompiler(const KernelBuild &build) {
  return build.librarySource + "\n" + ortcKernelAbiSource + "\n" + build.compilerId;
}

/// The cache key of `build`'s precompiled header.
std::string precompiledHeaderKey(const KernelBuild &build) {
  return sha256Hex(headersAndCompiler(build) + "\nprecompiled header");
}

/// The cache key of `build`'s library object.
std::string libraryObjectKey(const KernelBuild &build) {
  return sha256Hex(headersAndCompiler(build) + "\nlibrary object");
}

/// Puts `build`'s library object at `dir`/libraryObject: from the cache, else the copy
/// ortc carries prebuilt, else compiled (from kLibraryUnitName, already there) and
/// cached. `how` says which; false (and `error`) if it fails to compile.
bool provideLibraryObject(const KernelBuild &build, KernelCache &cache, const fs::path &dir,
                          PackageStats::Unit &how, std::string &error) {
  auto t0 = std::chrono::steady_clock::now();
  std::string key = libraryObjectKey(build);
  how = {build.libraryObject, true, 0};
  if (cache.fetchObject(key, dir / build.libraryObject))
    return true;
  how.cached = false;
  if (build.prebuiltLibraryObject) {
    how.prebuilt = true;
    return writeFile(dir / build.libraryObject,
                     std::string(reinterpret_cast<const char *>(build.prebuiltLibraryObject),
                                 build.prebuiltLibraryObjectSize),
                     error);
  }
  if (!runCompileCommands({build.compileLibraryObject(dir.string())}, dir.string(),
                          "compiling the kernel library", error, "library.log"))
    return false;
  how.compileMs = msSince(t0);
  cache.storeObject(key, dir / build.libraryObject);
  return true;
}

/// `source` without its whole-line `//` comments. A unit's object depends on its
/// code only, and a kernel's opening comment lists every node that launches it:
/// a model whose one layer changed takes launches away from kernels whose code
/// is unchanged, and those units must stay cache hits.
std::string withoutLineComments(const std::string &source) {
  std::string out;
  out.reserve(source.size());
  size_t at = 0;
  while (at < source.size()) {
    size_t end = source.find('\n', at);
    end = end == std::string::npos ? source.size() : end + 1;
    size_t first = source.find_first_not_of(" \t", at);
    if (first >= end || source.compare(first, 2, "//") != 0)
      out.append(source, at, end - at);
    at = end;
  }
  return out;
}

/// Compiles units `names` (already written in `dir`) into `build.products`.
///
/// Algorithm: the key of the whole build is the hash of every unit's key; a
/// cached artifact with that key is copied and nothing runs. Otherwise each unit
/// whose object is cached (its key: the hash of its source, the headers, the
/// compiler version and flags) is copied, the others are compiled by up to
/// `jobs` workers at once, and the objects are linked in unit order. Objects
/// depend only on their source, and the link only on the objects and their
/// order, so the artifact is byte-identical whatever `jobs` and the cache hold.
bool compileUnits(const fs::path &dir, const std::vector<std::string> &names,
                  const std::vector<std::string> &units, const KernelBuild &build,
                  const ArtifactOptions &options, PackageStats &stats, std::string &error) {
  KernelCache cache;
  std::string headers = headersAndCompiler(build);
  std::vector<std::string> keys;
  std::string all;
  for (const std::string &u : units) {
    keys.push_back(sha256Hex(withoutLineComments(u) + "\n" + headers));
    all += keys.back();
  }
  std::string key = sha256Hex(all + "\n" + (build.compileUnit ? "units" : "whole"));
  for (const std::string &n : names)
    stats.units.push_back({n, true, 0});
  if (cache.fetchProducts(key, dir, build.products)) {
    stats.artifactCached = true;
    cache.evict();
    return true;
  }
  auto t0 = std::chrono::steady_clock::now();
  if (!build.compileUnit) { // one unit, compiled by the target's own commands
    stats.units[0].cached = false;
    if (!build.compile(dir.string(), error))
      return false;
    stats.units[0].compileMs = stats.compileWallMs = msSince(t0);
  } else {
    std::vector<std::string> objs;
    std::vector<size_t> todo;
    for (size_t i = 0; i < names.size(); ++i) {
      objs.push_back(fs::path(names[i]).stem().string() + ".o");
      if (!cache.fetchObject(keys[i], dir / objs[i])) {
        stats.units[i].cached = false;
        todo.push_back(i);
      }
    }
    // The kernel library's precompiled header, made once per library, compiler and
    // flags (cached like a unit): every unit includes it first.
    std::string pch = build.libraryName + ".gch";
    if (!todo.empty() && build.precompile) {
      std::string pchKey = precompiledHeaderKey(build);
      auto h0 = std::chrono::steady_clock::now();
      if (cache.fetchObject(pchKey, dir / pch, ".gch")) {
        bool early = options.headerCompiledEarlyMs > 0;
        stats.units.insert(stats.units.begin(),
                           {pch, !early, options.headerCompiledEarlyMs, early});
      } else {
        if (!runCompileCommands({build.precompile(dir.string())}, dir.string(),
                                "precompiling " + build.libraryName, error))
          return false;
        cache.storeObject(pchKey, dir / pch, ".gch");
        stats.units.insert(stats.units.begin(), {pch, false, msSince(h0)});
      }
    }
    size_t first = stats.units.size() - names.size(); // the units' entries in stats
    // The library object beside the units (a thread of its own: only another
    // compiler or other flags than ortc's prebuilt copies have to compile it).
    PackageStats::Unit libraryUnit;
    std::string libraryError;
    bool libraryOk = true;
    std::thread library;
    if (!build.libraryObject.empty())
      library = std::thread([&] {
        libraryOk = provideLibraryObject(build, cache, dir, libraryUnit, libraryError);
      });
    std::atomic<size_t> next{0}, done{0};
    std::mutex failMutex;
    std::string firstError;
    bool progress = !options.timing && isatty(2);
    auto worker = [&] {
      for (size_t t; (t = next++) < todo.size();) {
        size_t i = todo[t];
        auto u0 = std::chrono::steady_clock::now();
        std::string why;
        if (!runCompileCommands({build.compileUnit(dir.string(), names[i], objs[i])},
                                dir.string(), "compiling " + names[i], why,
                                names[i] + ".log")) {
          std::lock_guard<std::mutex> lock(failMutex);
          if (firstError.empty())
            firstError = why;
          next = todo.size(); // stop handing out work
          continue;
        }
        stats.units[first + i].compileMs = msSince(u0);
        cache.storeObject(keys[i], dir / objs[i]);
        size_t n = ++done;
        if (progress && msSince(t0) > 2000) {
          std::lock_guard<std::mutex> lock(failMutex);
          std::fprintf(stderr, "\rortc: compiled %zu of %zu kernel units", n, todo.size());
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned w = 1; w < std::min<size_t>(std::max(1u, options.jobs), todo.size()); ++w)
      pool.emplace_back(worker);
    worker();
    for (std::thread &t : pool)
      t.join();
    if (library.joinable()) {
      library.join();
      stats.units.push_back(libraryUnit);
      objs.push_back(build.libraryObject);
      if (!libraryOk && firstError.empty())
        firstError = libraryError;
    }
    if (progress && msSince(t0) > 2000)
      std::fprintf(stderr, "\n");
    if (!firstError.empty()) {
      error = firstError;
      return false;
    }
    stats.compileWallMs = msSince(t0);
    auto l0 = std::chrono::steady_clock::now();
    if (!runCompileCommands({build.link(dir.string(), objs)}, dir.string(),
                            "linking the kernels", error))
      return false;
    stats.linkMs = msSince(l0);
    std::error_code ec;
    for (const std::string &o : objs)
      fs::remove(dir / o, ec);
    fs::remove(dir / pch, ec);
  }
  for (const std::string &p : build.products)
    if (!fs::exists(dir / p)) {
      error = "the compile did not produce " + p;
      return false;
    }
  cache.storeProducts(key, dir, build.products);
  cache.evict();
  return true;
}

/// Writes params.bin (the initial values, in manifest order) a tensor at a time,
/// straight from where the importer left them (mostly views of the mapped model), and
/// digests the same bytes on a second thread meanwhile (XXH3-128, see
/// ortc/digest.h: SHA-256 was most of a rebuild's time); fills each tensor's "init"
/// range. With `omit` (--no-params) writes nothing and marks those tensors
/// "init_omitted".
bool streamParams(const fs::path &path, const TensorTable &table, nlohmann::json &tensors, bool omit,
                  std::string &digest, std::string &error) {
  if (omit) {
    for (size_t i = 0; i < table.tensors().size(); ++i)
      if (const auto &init = table.tensors()[i].init)
        tensors[i]["init_omitted"] = {{"bytes", init->bytes.size()}};
    return true;
  }
  std::vector<std::string_view> parts;
  uint64_t offset = 0;
  for (size_t i = 0; i < table.tensors().size(); ++i) {
    const TensorInfo &t = table.tensors()[i];
    if (!t.init)
      continue;
    parts.push_back(t.init->bytes.view());
    tensors[i]["init"] = {{"offset", offset}, {"bytes", parts.back().size()}};
    offset += parts.back().size();
  }
  ParamsDigest hash;
  std::thread hasher([&] {
    for (std::string_view v : parts)
      hash.update(v.data(), v.size());
  });
  std::ofstream f(path, std::ios::binary);
  for (std::string_view v : parts)
    f.write(v.data(), std::streamsize(v.size()));
  f.flush();
  hasher.join();
  if (!f) {
    error = "cannot write " + path.string();
    return false;
  }
  digest = hash.digest();
  return true;
}

} // namespace

std::string shellQuote(const std::string &s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool runCompileCommands(const std::vector<std::string> &commands, const std::string &dir,
                        const std::string &what, std::string &error, const std::string &logName) {
  std::string log = (fs::path(dir) / logName).string();
  for (const std::string &c : commands) {
    std::string cmd = "(" + c + ") >> " + shellQuote(log) + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      error = what + " failed:\n" + readFile(log).substr(0, 4000);
      return false;
    }
  }
  std::error_code ec;
  fs::remove(log, ec);
  return true;
}

std::string compilerVersion(const std::string &compiler) {
  std::string line;
  if (FILE *p = popen((compiler + " --version 2>/dev/null").c_str(), "r")) {
    char buf[512];
    if (std::fgets(buf, sizeof buf, p))
      line = buf;
    pclose(p);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.pop_back();
  return line;
}

KernelBuild cpuKernelBuild(const std::string &level,
                           const std::vector<std::string> &nativeFeatures) {
  const char *cxx = std::getenv("CXX");
  std::string compiler = cxx && *cxx ? cxx : "c++";
  const char *opt = std::getenv("ORTC_CXX_OPT");
  std::string flags = std::string(ORTC_KERNEL_FLAGS_PREFIX) + " " +
                      (opt && *opt ? opt : ORTC_KERNEL_OPT) + " -march=" + level + " " +
                      ORTC_KERNEL_FLAGS_SUFFIX;
  std::string linkFlags = "-shared -fopenmp";
  KernelBuild b;
  b.unitStem = "kernels";
  b.unitExt = ".cpp";
  b.libraryName = "ortc_kernels.h";
  b.librarySource = ortcKernelLibrarySource;
  b.products = {"kernels.so"};
  const std::string version = compilerVersion(compiler);
  b.compilerId = compiler + " (" + version + ") " + flags + " | " + linkFlags;
  for (const std::string &f : nativeFeatures) // -march=native differs by machine
    b.compilerId += " +" + f;
  b.compileUnit = [compiler, flags](const std::string &dir, const std::string &src,
                                    const std::string &obj) {
    return "cd " + shellQuote(dir) + " && " + compiler + " " + flags + " -c " + shellQuote(src) +
           " -o " + shellQuote(obj);
  };
  b.precompile = [compiler, flags](const std::string &dir) {
    return "cd " + shellQuote(dir) + " && " + compiler + " " + flags +
           " -x c++-header ortc_kernels.h -o ortc_kernels.h.gch";
  };
  b.libraryObject = "ortc_kernels_lib.o";
  b.compileLibraryObject = [compiler, flags](const std::string &dir) {
    return "cd " + shellQuote(dir) + " && " + compiler + " " + flags +
           " -DORTC_KERN_INSTANTIATE -c " + kLibraryUnitName + " -o ortc_kernels_lib.o";
  };
  if (compiler == "c++" && nativeFeatures.empty() && version == kPrebuiltKernelCompilerVersion)
    for (const PrebuiltKernelObject &p : prebuiltKernelObjects())
      if (flags == p.flags) {
        b.prebuiltLibraryObject = p.data;
        b.prebuiltLibraryObjectSize = p.size;
      }
  b.link = [compiler, linkFlags](const std::string &dir, const std::vector<std::string> &objs) {
    std::string cmd = "cd " + shellQuote(dir) + " && " + compiler + " " + linkFlags;
    for (const std::string &o : objs)
      cmd += " " + shellQuote(o);
    return cmd + " -o kernels.so -ldnnl -lmvec";
  };
  return b;
}

/// Removes `<out>.tmp.<pid>` and `<out>.old.<pid>` folders of processes that no
/// longer exist: what a build killed mid-way leaves next to its output. Folders of a
/// live process (a concurrent build) stay.
void sweepStaleBuilds(const fs::path &out) {
  std::error_code ec;
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const std::string base = out.filename().string();
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    for (const char *kind : {".tmp.", ".old."}) {
      const std::string prefix = base + kind;
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0)
        continue;
      const std::string pid = name.substr(prefix.size());
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9)
        continue;
      if (kill(pid_t(std::stol(pid)), 0) == -1 && errno == ESRCH)
        fs::remove_all(e.path(), ec);
    }
  }
}

bool writeArtifact(const ArtifactOptions &options, const TensorTable &table,
                   const std::vector<FunctionKernels> &functions,
                   const std::vector<std::string> &units, const KernelBuild &build,
                   PackageStats &stats, std::string &error) {
  fs::path out(options.output);
  if (fs::exists(out) && !fs::exists(out / "manifest.json")) {
    error = out.string() + " exists and is not an ortc artifact: not replacing it";
    return false;
  }
  sweepStaleBuilds(out);
  fs::path tmp = out.string() + ".tmp." + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec) {
    error = "cannot create " + tmp.string() + (ec ? ": " + ec.message() : "");
    return false;
  }
  auto cleanup = [&]() { fs::remove_all(tmp, ec); };

  std::vector<std::string> names;
  if (!build.compileUnit) {
    names = {build.sourceName};
  } else {
    for (size_t i = 0; i < units.size(); ++i) {
      char n[16];
      std::snprintf(n, sizeof n, "_%03zu", i);
      names.push_back(build.unitStem + n + build.unitExt);
    }
  }
  if (names.size() != units.size()) {
    error = "internal error: the " + build.sourceName + " target compiles one unit, not " +
            std::to_string(units.size());
    cleanup();
    return false;
  }
  bool wrote = writeFile(tmp / build.libraryName, build.librarySource, error) &&
               writeFile(tmp / kKernelAbiName, ortcKernelAbiSource, error) &&
               (build.libraryObject.empty() ||
                writeFile(tmp / kLibraryUnitName, kLibraryUnitSource, error));
  for (size_t i = 0; wrote && i < units.size(); ++i)
    wrote = writeFile(tmp / names[i], units[i], error);
  if (!wrote) {
    cleanup();
    return false;
  }
  // params.bin is streamed (and hashed) while the kernels compile.
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorInfo &t : table.tensors()) {
    tensors.push_back({{"name", t.name}, {"role", t.role}, {"dtype", t.dtype}, {"shape", t.shape}});
    if (t.defaultValue)
      tensors.back()["default"] = *t.defaultValue;
  }
  std::string paramsDigestText, paramsError;
  bool paramsOk = false;
  std::thread paramsWriter([&] {
    auto p0 = std::chrono::steady_clock::now();
    paramsOk = streamParams(tmp / "params.bin", table, tensors, options.noParams, paramsDigestText, paramsError);
    stats.paramsMs = msSince(p0);
  });
  bool compiled = compileUnits(tmp, names, units, build, options, stats, error);
  paramsWriter.join();
  if (!compiled || !paramsOk) {
    if (compiled)
      error = paramsError;
    cleanup();
    return false;
  }

  nlohmann::json manifest;
  manifest["format"] = "ortc-artifact";
  manifest["format_version"] = 2;
  manifest["target"] = options.target;
  manifest["arch"] = options.arch;
  if (!options.cpuFeatures.empty())
    manifest["cpu_features"] = options.cpuFeatures;
  manifest["precision"] = options.precision;
  manifest["kernels_object"] = build.products.front();
  int64_t arena = 0;
  for (const FunctionKernels &f : functions)
    arena = std::max(arena, f.arenaBytes);
  manifest["arena_bytes"] = arena;

  manifest["tensors"] = tensors;
  nlohmann::json fns = nlohmann::json::object();
  for (const FunctionKernels &f : functions) {
    fns[f.name] = {{"launches", launches(f)},
                   {"inputs", f.inputs},
                   {"outputs", f.outputs},
                   {"arena_bytes", f.arenaBytes},
                   {"arena_lower_bound", f.arenaLowerBound}};
    nlohmann::json ranges = nlohmann::json::array();
    for (const IndexInput &r : f.indexInputs) {
      ranges.push_back({{"input", r.input}, {"low", r.low}, {"high", r.high}, {"what", r.what}, {"node", r.node}});
      if (r.ignore)
        ranges.back()["ignore"] = *r.ignore;
    }
    if (!ranges.empty())
      fns[f.name]["index_inputs"] = std::move(ranges);
    if (!f.finiteChecks.empty())
      fns[f.name]["finite_checks"] = f.finiteChecks;
    if (f.collectives)
      fns[f.name]["collectives"] = {{"calls", f.collectives}, {"bytes", f.collectiveBytes}};
  }
  manifest["functions"] = fns;
  // The runtime opens a communicator for these (ranks of an mpirun; kernel_abi.h).
  if (std::any_of(functions.begin(), functions.end(),
                  [](const FunctionKernels &f) { return f.collectives > 0; }))
    manifest["data_parallel"] = {
        {"communicator", options.target == "cpu" ? "mpi" : options.target == "cuda" ? "nccl" : "rccl"}};
  for (const FunctionKernels &f : functions)
    if (f.shardRanks)
      manifest["data_parallel"]["ranks"] = f.shardRanks;
  nlohmann::json files = nlohmann::json::object();
  for (const auto &[name, content] : options.extraFiles) {
    if (!writeFile(tmp / name, content, error)) {
      cleanup();
      return false;
    }
    files[name] = sha256Hex(content);
  }
  std::vector<std::string> hashed = build.products;
  hashed.insert(hashed.end(), names.begin(), names.end());
  hashed.push_back(build.libraryName);
  hashed.push_back(kKernelAbiName);
  if (!build.libraryObject.empty())
    hashed.push_back(kLibraryUnitName);
  for (const std::string &f : hashed)
    files[f] = sha256Hex(readFile(tmp / f));
  if (!options.noParams)
    files["params.bin"] = paramsDigestText;
  manifest["files"] = files;
  if (!writeFile(tmp / "manifest.json", manifest.dump(2) + "\n", error)) {
    cleanup();
    return false;
  }

  // Swap the finished folder into place.
  fs::path old = out.string() + ".old." + std::to_string(getpid());
  bool hadOld = fs::exists(out);
  if (hadOld)
    fs::rename(out, old, ec);
  fs::rename(tmp, out, ec);
  if (ec) {
    error = "cannot move the artifact into " + out.string() + ": " + ec.message();
    if (hadOld)
      fs::rename(old, out, ec);
    cleanup();
    return false;
  }
  if (hadOld)
    fs::remove_all(old, ec);
  return true;
}

KernelCounts countKernels(const std::vector<FunctionKernels> &functions) {
  KernelCounts counts;
  std::set<std::string> distinct;
  for (const FunctionKernels &f : functions)
    for (const Launch &l : f.launches) {
      ++counts.launches;
      counts.bytes += l.bytes;
      distinct.insert(l.kernel);
    }
  counts.distinct = distinct.size();
  return counts;
}

bool writeBuildReport(const std::string &path, const ArtifactOptions &options,
                      const std::vector<FunctionKernels> &functions, const PackageStats &stats,
                      const std::vector<std::pair<std::string, double>> &phasesMs,
                      std::string &error) {
  nlohmann::json report;
  report["report_version"] = 1;
  report["target"] = options.target;
  report["arch"] = options.arch;
  nlohmann::json fns = nlohmann::json::object();
  for (const FunctionKernels &f : functions) {
    KernelCounts mine = countKernels({f});
    fns[f.name] = {{"launches", mine.launches},
                   {"distinct_kernels", mine.distinct},
                   {"bytes", mine.bytes}};
    fns[f.name]["arena_bytes"] = f.arenaBytes;
    fns[f.name]["arena_lower_bound"] = f.arenaLowerBound;
    if (const auto &r = f.recompute) {
      nlohmann::json &j = fns[f.name]["recompute"];
      j = {{"policy", r->policy},
           {"values", r->values},
           {"added_flops", r->addedFlops},
           {"forward_flops", r->forwardFlops},
           {"nodes", r->nodes}};
      if (r->arenaWithout >= 0)
        j["arena_bytes_without"] = r->arenaWithout;
      if (r->budget >= 0)
        j["budget_bytes"] = r->budget;
      if (r->blocks) {
        j["block_ops"] = *r->blocks;
        j["blocks_recomputed"] = r->blocksRecomputed;
      }
    }
  }
  KernelCounts all = countKernels(functions);
  report["kernels"] = {{"launches", all.launches},
                       {"distinct", all.distinct},
                       {"bytes", all.bytes},
                       {"functions", fns}};
  nlohmann::json units = nlohmann::json::array();
  for (const PackageStats::Unit &u : stats.units)
    units.push_back({{"source", u.source},
                     {"cached", u.cached},
                     {"compile_ms", u.compileMs},
                     {"while_loading", u.early},
                     {"prebuilt", u.prebuilt}});
  report["compile"] = {{"jobs", options.jobs},
                       {"units", units},
                       {"unit_cache_hits", stats.cacheHits()},
                       {"artifact_cached", stats.artifactCached},
                       {"compile_wall_ms", stats.compileWallMs},
                       {"link_ms", stats.linkMs}};
  nlohmann::json phases = nlohmann::json::object();
  for (const auto &[name, ms] : phasesMs)
    phases[name] = ms;
  phases["params"] = stats.paramsMs;
  report["phases_ms"] = phases;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << report.dump(2) << "\n";
  if (!f) {
    error = "cannot write the report " + path;
    return false;
  }
  return true;
}

std::thread precompileHeaderEarly(const KernelBuild &build, double *compiledMs) {
  KernelCache cache;
  *compiledMs = 0;
  if (!build.precompile || !cache.enabled())
    return std::thread();
  return std::thread([build, cache, compiledMs]() mutable {
    auto t0 = std::chrono::steady_clock::now();
    std::string key = precompiledHeaderKey(build);
    std::error_code ec;
    fs::path dir = fs::temp_directory_path(ec) /
                   ("ortc-pch." + std::to_string(getpid()) + "." + key.substr(0, 12));
    fs::create_directories(dir, ec);
    std::string pch = build.libraryName + ".gch", error;
    if (!cache.fetchObject(key, dir / pch, ".gch") &&
        writeFile(dir / build.libraryName, build.librarySource, error) &&
        writeFile(dir / kKernelAbiName, ortcKernelAbiSource, error) &&
        runCompileCommands({build.precompile(dir.string())}, dir.string(), "precompiling",
                           error)) {
      cache.storeObject(key, dir / pch, ".gch");
      *compiledMs = msSince(t0);
    }
    fs::remove_all(dir, ec); // a failure here is found again, and reported, by the build
  });
}

} // namespace ortc
