//===- Artifact.cpp - Persistent tensors and the model.ortc folder -------===//
//
// Algorithm of writeArtifact:
//  1. make `<output>.tmp.<pid>/`; write the kernel source and the kernel library
//     header it includes (so the folder is self-contained and rebuildable);
//  2. compile the source into kernels.so with the system C++ compiler (an explicit
//     instruction-set level, never -march=native), reusing $ORTC_KERNEL_CACHE when
//     set (keyed by the SHA-256 of source + flags);
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

std::string shellQuote(const std::string &s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Compiles kernels.cpp in `dir` into kernels.so.
bool compileKernels(const fs::path &dir, const std::string &source, std::string &error) {
  const char *cxx = std::getenv("CXX");
  std::string compiler = cxx && *cxx ? cxx : "c++";
  const char *opt = std::getenv("ORTC_CXX_OPT");
  std::string flags = std::string("-std=c++17 ") + (opt && *opt ? opt : "-O2") +
                      " -march=x86-64-v2 -fPIC -shared -fopenmp";
  std::string key = sha256Hex(source + "\n" + compiler + " " + flags);
  fs::path out = dir / "kernels.so";
  const char *cacheDir = std::getenv("ORTC_KERNEL_CACHE");
  fs::path cached = cacheDir && *cacheDir ? fs::path(cacheDir) / (key + ".so") : fs::path();
  std::error_code ec;
  if (!cached.empty() && fs::exists(cached)) {
    fs::copy_file(cached, out, fs::copy_options::overwrite_existing, ec);
    if (!ec)
      return true;
  }
  std::string log = (dir / "compile.log").string();
  std::string cmd = compiler + " " + flags + " " + shellQuote((dir / "kernels.cpp").string()) +
                    " -o " + shellQuote(out.string()) + " -lopenblas > " + shellQuote(log) +
                    " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    error = "compiling the kernels failed (" + compiler + "):\n" + readFile(log).substr(0, 4000);
    return false;
  }
  fs::remove(log, ec);
  if (!cached.empty()) {
    fs::create_directories(cached.parent_path(), ec);
    fs::path tmp = cached.string() + ".tmp." + std::to_string(getpid());
    fs::copy_file(out, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec)
      fs::rename(tmp, cached, ec);
  }
  return true;
}

} // namespace

bool writeArtifact(const ArtifactOptions &options, const TensorTable &table,
                   const std::vector<FunctionKernels> &functions,
                   const std::string &kernelSource, std::string &error) {
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

  if (!writeFile(tmp / "kernels.cpp", kernelSource, error) ||
      !writeFile(tmp / "ortc_kernels.h", ortcKernelLibrarySource, error) ||
      !compileKernels(tmp, kernelSource, error)) {
    cleanup();
    return false;
  }

  nlohmann::json manifest;
  manifest["format"] = "ortc-artifact";
  manifest["format_version"] = 1;
  manifest["target"] = options.target;
  manifest["arch"] = options.arch.empty() ? std::vector<std::string>{"x86-64-v2"} : options.arch;
  manifest["kernels_object"] = "kernels.so";
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
  for (const char *f : {"kernels.so", "kernels.cpp", "ortc_kernels.h", "params.bin"})
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
