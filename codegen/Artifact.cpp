//===- Artifact.cpp - Persistent tensors and the model.ortc folder -------===//
//
// Algorithm of writeArtifact:
//  1. make `<output>.tmp.<pid>/`; write the kernel source and the kernel library
//     header it includes (so the folder is self-contained and rebuildable);
//  2. compile the source with the target's KernelBuild (CPU: the system C++
//     compiler at the --cpu instruction-set level, -march=native only when asked,
//     linked to oneDNN; CUDA/HIP:
//     nvcc/hipcc), reusing $ORTC_KERNEL_CACHE when set (keyed by the SHA-256 of
//     source, kernel library and compiler flags);
//  3. write params.bin (initial values of parameters, buffers and constants);
//  4. write manifest.json with the SHA-256 of every file;
//  5. rename the folder into place, so a failed build never leaves half an artifact.
//
//===----------------------------------------------------------------------===//
#include "codegen/Artifact.h"

#include "compiler/Dialect/Ortc/OrtcDialect.h"
#include "compiler/Dialect/Ortc/StepFunction.h"
#include "ortc/sha256.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace mlir;
namespace fs = std::filesystem;

extern const char *const ortcKernelLibrarySource; // generated from ortc_kernels.h

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
  auto add = [&](const std::string &name, const std::string &role, Type type) {
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
    TensorInfo info{name, role, dtypeOf(rt.getElementType()), shape, nullptr};
    if (auto w = weights.find(name); w != weights.end() && role != "input")
      info.init = &w->second;
    t.byName[name] = t.list.size();
    t.list.push_back(info);
    return true;
  };
  for (const char *fnName : {"train_step", "eval_step"}) {
    auto fn = module.lookupSymbol<func::FuncOp>(fnName);
    if (!fn) {
      error = std::string("the module has no @") + fnName;
      return failure();
    }
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (!add(argName(fn, i), argRole(fn, i), fn.getArgument(i).getType()))
        return failure();
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

/// Compiles through the kernel cache: a hit copies the products, a miss compiles
/// and stores them under <cache>/<key>/ (written to a temporary name, renamed).
bool compileCached(const fs::path &dir, const std::string &source, const KernelBuild &build,
                   std::string &error) {
  std::string key =
      sha256Hex(source + "\n" + build.librarySource + "\n" + build.compilerId);
  const char *cacheDir = std::getenv("ORTC_KERNEL_CACHE");
  fs::path cached = cacheDir && *cacheDir ? fs::path(cacheDir) / key : fs::path();
  if (!cached.empty() && copyProducts(cached, dir, build.products))
    return true;
  if (!build.compile(dir.string(), error))
    return false;
  for (const std::string &p : build.products)
    if (!fs::exists(dir / p)) {
      error = "the compile did not produce " + p;
      return false;
    }
  if (!cached.empty()) {
    std::error_code ec;
    fs::path tmp = cached.string() + ".tmp." + std::to_string(getpid());
    fs::create_directories(tmp, ec);
    if (!ec && copyProducts(dir, tmp, build.products))
      fs::rename(tmp, cached, ec);
    fs::remove_all(tmp, ec);
  }
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
                        const std::string &what, std::string &error) {
  std::string log = (fs::path(dir) / "compile.log").string();
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

KernelBuild cpuKernelBuild(const std::string &level,
                           const std::vector<std::string> &nativeFeatures) {
  const char *cxx = std::getenv("CXX");
  std::string compiler = cxx && *cxx ? cxx : "c++";
  const char *opt = std::getenv("ORTC_CXX_OPT");
  std::string flags = std::string("-std=c++17 ") + (opt && *opt ? opt : "-O2") +
                      " -march=" + level +
                      " -fno-math-errno -fno-trapping-math -fPIC -shared -fopenmp -DORTC_KERN_DNNL";
  KernelBuild b;
  b.sourceName = "kernels.cpp";
  b.libraryName = "ortc_kernels.h";
  b.librarySource = ortcKernelLibrarySource;
  b.products = {"kernels.so"};
  b.compilerId = compiler + " " + flags;
  for (const std::string &f : nativeFeatures) // -march=native differs by machine
    b.compilerId += " +" + f;
  b.compile = [compiler, flags](const std::string &dir, std::string &error) {
    return runCompileCommands({"cd " + shellQuote(dir) + " && " + compiler + " " + flags +
                               " kernels.cpp -o kernels.so -ldnnl -lmvec"},
                              dir, "compiling the kernels (" + compiler + ")", error);
  };
  return b;
}

bool writeArtifact(const ArtifactOptions &options, const TensorTable &table,
                   const std::vector<FunctionKernels> &functions,
                   const std::string &kernelSource, const KernelBuild &build,
                   std::string &error) {
  fs::path out(options.output);
  if (fs::exists(out) && !fs::exists(out / "manifest.json")) {
    error = out.string() + " exists and is not an ortc artifact: not replacing it";
    return false;
  }
  fs::path tmp = out.string() + ".tmp." + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec) {
    error = "cannot create " + tmp.string() + (ec ? ": " + ec.message() : "");
    return false;
  }
  auto cleanup = [&]() { fs::remove_all(tmp, ec); };

  if (!writeFile(tmp / build.sourceName, kernelSource, error) ||
      !writeFile(tmp / build.libraryName, build.librarySource, error) ||
      !compileCached(tmp, kernelSource, build, error)) {
    cleanup();
    return false;
  }

  nlohmann::json manifest;
  manifest["format"] = "ortc-artifact";
  manifest["format_version"] = 1;
  manifest["target"] = options.target;
  manifest["arch"] = options.arch;
  if (!options.cpuFeatures.empty())
    manifest["cpu_features"] = options.cpuFeatures;
  manifest["kernels_object"] = build.products.front();
  int64_t arena = 0;
  for (const FunctionKernels &f : functions)
    arena = std::max(arena, f.arenaBytes);
  manifest["arena_bytes"] = arena;

  std::string params;
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorInfo &t : table.tensors()) {
    nlohmann::json j{{"name", t.name}, {"role", t.role}, {"dtype", t.dtype}, {"shape", t.shape}};
    if (t.init) {
      j["init"] = {{"offset", params.size()}, {"bytes", t.init->bytes.size()}};
      params.append(t.init->bytes.begin(), t.init->bytes.end());
    }
    tensors.push_back(j);
  }
  manifest["tensors"] = tensors;
  nlohmann::json fns = nlohmann::json::object();
  for (const FunctionKernels &f : functions)
    fns[f.name] = {{"kernels", f.kernels},
                   {"inputs", f.inputs},
                   {"outputs", f.outputs},
                   {"arena_bytes", f.arenaBytes},
                   {"arena_lower_bound", f.arenaLowerBound}};
  manifest["functions"] = fns;
  if (!writeFile(tmp / "params.bin", params, error)) {
    cleanup();
    return false;
  }
  nlohmann::json files = nlohmann::json::object();
  std::vector<std::string> hashed = build.products;
  for (const std::string &f : {build.sourceName, build.libraryName, std::string("params.bin")})
    hashed.push_back(f);
  for (const std::string &f : hashed)
    files[f] = sha256Hex(readFile(tmp / f));
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

} // namespace ortc
