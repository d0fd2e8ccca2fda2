//===- Artifact.h - Persistent tensors and the model.ortc folder -*- C++ -*-===//
//
// Shared by every target: the table of persistent tensors (inputs, scalars,
// parameters, buffers, optimizer state, constants, outputs) that the runtime
// allocates and the kernels address by index, and the writer of the artifact folder.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_CODEGEN_ARTIFACT_H
#define ORTC_CODEGEN_ARTIFACT_H

#include "compiler/Import/OnnxImporter.h"

#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ortc {

struct TensorInfo {
  std::string name, role, dtype;
  std::vector<int64_t> shape;
  const WeightData *init = nullptr; ///< initial value; null: zero-filled
  /// A scalar's value until the caller binds one (AdamW's betas: the build's values).
  std::optional<double> defaultValue;
};

/// The step functions an artifact runs, in manifest order: @train_step and
/// @eval_step, then @accumulate_step where gradient accumulation was built.
std::vector<std::string> stepFunctionNames(mlir::ModuleOp module);

/// The persistent tensors of a planned module, in manifest order.
class TensorTable {
public:
  /// Collects the tensors of @train_step and @eval_step; fails with a message on
  /// inconsistent names.
  static mlir::FailureOr<TensorTable> build(mlir::ModuleOp module,
                                            const WeightStore &weights,
                                            std::string &error);
  const std::vector<TensorInfo> &tensors() const { return list; }
  /// Index of a tensor by name (asserts it exists).
  unsigned indexOf(const std::string &name) const { return byName.at(name); }

private:
  std::vector<TensorInfo> list;
  std::map<std::string, unsigned> byName;
};

/// Where one operand of a launch lives: a persistent tensor (manifest index), an
/// offset into the arena, or an int64 value the runtime keeps for the launch (a
/// per-op constant such as dropout's stream key, so equal kernels stay one). The
/// step program binds each kernel argument to one.
struct LaunchArg {
  enum Kind { Tensor, Arena, Value } kind = Tensor;
  int64_t value = 0;
  /// Arena: the bytes the kernel may touch from there (the largest value it reads or
  /// writes at that offset), written to the manifest for the runtime's operand hook.
  int64_t bytes = 0;
  bool operator==(const LaunchArg &o) const { return kind == o.kind && value == o.value; }
};

/// One entry of a step program: a kernel (shared by every launch with the same
/// printed body) and the addresses its pointer arguments are bound to.
struct Launch {
  std::string kernel;
  std::vector<LaunchArg> args;
  std::string node, op; ///< the ONNX node and ortc op it runs (for profiles and errors)
  /// Estimated memory traffic: the bytes of the tensors it reads and writes (values
  /// inside a fused kernel never reach memory; literals are not read).
  int64_t bytes = 0;
};

/// One step function as the runtime sees it.
/// A step input that an op uses as an index (IndexOperandOpInterface): the values it
/// may hold, which the runtime checks a feed against before a step.
struct IndexInput {
  std::string input, node, what;
  int64_t low = 0, high = 0; ///< [low, high)
  std::optional<int64_t> ignore;
};

struct FunctionKernels {
  std::string name;
  std::vector<Launch> launches;
  std::vector<std::string> inputs, outputs;
  std::vector<IndexInput> indexInputs;
  /// What each element of the "finite_each" output checked: "loss", then parameters
  /// (whose gradient), in order.
  std::vector<std::string> finiteChecks;
  int64_t arenaBytes = 0, arenaLowerBound = 0;
  /// Data-parallel steps: the ortc.all_reduce ops of one run and the bytes they carry.
  int64_t collectives = 0, collectiveBytes = 0;
  int64_t shardRanks = 0; ///< ZeRO: the ranks the optimizer state is sharded over (0: none)
  /// What --recompute chose here (the ortc.recompute* attributes of the step function):
  /// for --report.
  struct Recompute {
    std::string policy; ///< as --recompute said
    int64_t values = 0, addedFlops = 0, forwardFlops = 0;
    int64_t arenaWithout = -1; ///< the arena planned without recompute, -1 unknown
    int64_t budget = -1;       ///< budget=, in bytes; -1 for other policies
    std::optional<std::vector<int64_t>> blocks; ///< layers: the ops of each repeated block found
    int64_t blocksRecomputed = 0; ///< layers: how many of them are recomputed
    std::vector<std::string> nodes; ///< "<ONNX node> (<op>)" of each value
  };
  std::optional<Recompute> recompute;
};

/// The dtype name of an element type ("f32", "i64", "bool"...), or "" if none.
std::string dtypeOf(mlir::Type elementType);

struct ArtifactOptions {
  std::string target, output;
  std::vector<std::string> arch; ///< recorded in the manifest (resolved by the target)
  std::vector<std::string> cpuFeatures; ///< flags a `--cpu native` build requires
  bool timing = false;
  unsigned jobs = 1; ///< compile units at once
  bool noParams = false; ///< no params.bin: tensors with a value get "init_omitted"
  std::string precision = "fp32"; ///< ortc build --precision, recorded in the manifest
  /// Further files of the artifact (name, content), hashed like the others:
  /// model.onnx, the graph `ortc export` writes back.
  std::vector<std::pair<std::string, std::string>> extraFiles;
  /// > 0: the precompiled header was compiled (in ms) by precompileHeaderEarly
  /// while the model loaded; its cache hit is reported as that compile.
  double headerCompiledEarlyMs = 0;
};

/// Launches of the step programs, distinct kernels among them, and the launches'
/// estimated bytes read + written.
struct KernelCounts {
  size_t launches = 0, distinct = 0;
  int64_t bytes = 0;
};
KernelCounts countKernels(const std::vector<FunctionKernels> &functions);

/// What packaging did, for --timing and --report.
struct PackageStats {
  struct Unit {
    std::string source;
    bool cached = false;
    double compileMs = 0; ///< 0 for a cache hit
    bool early = false;   ///< compiled while the model loaded (the precompiled header)
    bool prebuilt = false; ///< ortc's own prebuilt copy (the library object)
  };
  std::vector<Unit> units;
  bool artifactCached = false; ///< every product came from the cache, nothing compiled
  double compileWallMs = 0, linkMs = 0, paramsMs = 0;
  size_t cacheHits() const {
    size_t n = 0;
    for (const Unit &u : units)
      n += u.cached;
    return n;
  }
};

/// What a target puts into the artifact besides the manifest and params.bin, and
/// how it compiles it: either one source (`sourceName`, `compile`), or units
/// `<unitStem>_NNN<unitExt>` compiled one by one (`compileUnit`, in parallel and
/// each cached) and linked (`link`).
struct KernelBuild {
  std::string sourceName;  ///< one unit: "kernels.cu", "kernels.hip"
  std::string unitStem, unitExt; ///< several units: "kernels", ".cpp"
  std::string libraryName; ///< the kernel library header the source includes
  std::string librarySource;
  /// Files the compile produces, all hashed into the manifest; the first is the
  /// shared object the runtime loads.
  std::vector<std::string> products;
  /// Compiler, its version and flags: part of every cache key.
  std::string compilerId;
  /// One unit: compiles in `dir` (source and headers already there) into `products`.
  std::function<bool(const std::string &dir, std::string &error)> compile;
  /// Units: the shell command compiling `src` into object `obj` (both in `dir`),
  /// and the one linking `objs` there into products.front().
  std::function<std::string(const std::string &dir, const std::string &src,
                            const std::string &obj)>
      compileUnit;
  std::function<std::string(const std::string &dir, const std::vector<std::string> &objs)>
      link;
  /// Units (optional): the command writing `<libraryName>.gch`, a precompiled kernel
  /// library header that every unit includes first (about half of a unit's compile
  /// is parsing the library otherwise).
  std::function<std::string(const std::string &dir)> precompile;
  /// Units (optional): an object every link takes besides the units' (the kernel
  /// library's float instantiations), its name, the command compiling it in `dir`
  /// (from librarySource), and its bytes when ortc carries it prebuilt for exactly
  /// this compiler and these flags (null otherwise).
  std::string libraryObject;
  std::function<std::string(const std::string &dir)> compileLibraryObject;
  const unsigned char *prebuiltLibraryObject = nullptr;
  size_t prebuiltLibraryObjectSize = 0;
};

/// The default x86-64 level of the cpu target: AVX2 + FMA, which every x86-64
/// server CPU since 2013 (Intel Haswell) and 2017 (AMD Zen) has.
constexpr const char *kDefaultCpuLevel = "x86-64-v3";

/// The CPU build: the system C++ compiler at an explicit ISA level (`level`, or
/// "native" for the build machine, whose `nativeFeatures` key the kernel cache),
/// OpenMP, oneDNN.
KernelBuild cpuKernelBuild(const std::string &level,
                           const std::vector<std::string> &nativeFeatures);

/// `s` quoted for a POSIX shell.
std::string shellQuote(const std::string &s);

/// Runs shell `commands` in order, stdout/stderr into `dir`/`log`; on failure
/// sets `error` to "<what> failed:" and the log's head.
bool runCompileCommands(const std::vector<std::string> &commands, const std::string &dir,
                        const std::string &what, std::string &error,
                        const std::string &log = "compile.log");

/// The first line of `<compiler> --version`, for cache keys ("" if it cannot run).
std::string compilerVersion(const std::string &compiler);

/// Writes `options.output` (a folder) from emitted kernel source units: compiles
/// them (reusing $ORTC_KERNEL_CACHE: whole artifacts and single units, keyed by the
/// SHA-256 of source, headers, compiler version and flags; bounded by
/// $ORTC_KERNEL_CACHE_MAX_MB, least recently used evicted), streams params.bin,
/// writes manifest.json with hashes, all in a temporary folder renamed into place
/// at the end. Returns false with `error` on failure.
bool writeArtifact(const ArtifactOptions &options, const TensorTable &table,
                   const std::vector<FunctionKernels> &functions,
                   const std::vector<std::string> &units, const KernelBuild &build,
                   PackageStats &stats, std::string &error);

/// Starts compiling `build`'s precompiled header into the kernel cache on a thread
/// of its own (nothing to do, an empty thread, when it is cached, there is no cache
/// or no precompiled header): `ortc build` calls it before the import, so the
/// header compiles while the model loads. Join before writeArtifact.
/// `compiledMs` (kept alive until the join) receives the compile's time, 0 if none ran.
std::thread precompileHeaderEarly(const KernelBuild &build, double *compiledMs);

/// Writes the --report JSON: kernels (launches, distinct, per function), the
/// compile units and cache hits, and phase times (`phasesMs`, name -> ms).
bool writeBuildReport(const std::string &path, const ArtifactOptions &options,
                      const std::vector<FunctionKernels> &functions, const PackageStats &stats,
                      const std::vector<std::pair<std::string, double>> &phasesMs,
                      std::string &error);

} // namespace ortc

#endif // ORTC_CODEGEN_ARTIFACT_H
