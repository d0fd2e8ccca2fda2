//===- Pipeline.cpp - Phases and the `ortc build` driver -----------------===//
//
// Algorithm of `ortc build`:
//  1. import the model (compiler/Import) — a phase of its own, dumped as
//     `00-import-onnx.mlir`;
//  2. for each later phase, build its pass pipeline and run it, writing a numbered
//     dump after every pass that --dump-after selects;
//  3. stop after --stop-after (printing the IR), or hand the result to codegen and
//     packaging.
//
//===----------------------------------------------------------------------===//
#include "compiler/Pipeline/Pipeline.h"
#include "compiler/Pipeline/Registration.h"
#include "compiler/Import/InferenceGraph.h"
#include "compiler/Import/OnnxImporter.h"
#include "passes/autodiff/Passes.h"
#include "passes/checkpointing/Passes.h"
#include "passes/mixed_precision/Passes.h"
#include "passes/fusion/Passes.h"
#include "passes/memory_planning/Passes.h"
#include "codegen/Artifact.h"
#include "codegen/cpu/CppEmitter.h"
#include "codegen/gpu/GpuEmitter.h"

#include "ortc/cpu_features.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"

#include "mlir/IR/Verifier.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CrashRecoveryContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <fstream>
#include <set>
#include <thread>
#include <unistd.h>

using namespace mlir;

namespace ortc {

const char *phaseName(Phase p) {
  switch (p) {
#define ORTC_PHASE_CASE(e, s)                                                  \
  case Phase::e:                                                               \
    return s;
    ORTC_PHASES(ORTC_PHASE_CASE)
#undef ORTC_PHASE_CASE
  }
  return "?";
}

std::vector<std::string> phaseNames() {
  return {
#define ORTC_PHASE_NAME(e, s) s,
      ORTC_PHASES(ORTC_PHASE_NAME)
#undef ORTC_PHASE_NAME
  };
}

std::optional<Phase> parsePhase(const std::string &name) {
  int i = 0;
  for (const std::string &n : phaseNames()) {
    if (n == name)
      return static_cast<Phase>(i);
    ++i;
  }
  return std::nullopt;
}

bool phaseHasPasses(Phase phase) { return phase <= Phase::Schedule; }

void buildPhasePipeline(Phase phase, OpPassManager &pm, const BuildOptions &options) {
  switch (phase) {
  case Phase::Import:
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    pm.addPass(createFuseGelu());
    pm.addPass(createCanonicalizerPass());
    break;
  case Phase::Training: {
    AttachLossOptions loss;
    loss.loss = options.loss;
    loss.labels = options.labels;
    loss.logits = options.logits;
    loss.ignoreIndex = options.ignoreIndex;
    loss.classAxis = options.classAxis.value_or(INT64_MIN);
    loss.labelSmoothing = options.labelSmoothing;
    loss.lossOutput = options.lossOutput;
    pm.addPass(createAttachLoss(loss));
    AutodiffOptions ad;
    ad.freeze.assign(options.freeze.begin(), options.freeze.end());
    ad.trainable.assign(options.trainable.begin(), options.trainable.end());
    ad.syncBatchnorm = options.syncBatchnorm;
    pm.addPass(createAutodiff(ad));
    OptimizerOptions opt;
    opt.optimizer = options.optimizer;
    opt.momentum = options.momentum;
    opt.dampening = options.dampening;
    opt.nesterov = options.nesterov;
    opt.weightDecay = options.weightDecay;
    opt.beta1 = options.beta1;
    opt.beta2 = options.beta2;
    opt.eps = options.eps;
    opt.clipGradNorm = options.clipGradNorm;
    opt.gradAccum = options.gradAccum;
    opt.dataParallel = options.dataParallel;
    opt.bucketBytes = options.bucketBytes;
    opt.zero = options.zero;
    opt.ranks = options.ranks;
    if (options.precision == "fp16") {
      opt.lossScaleInit = options.lossScaleInit;
      opt.lossScaleInterval = options.lossScaleInterval;
    }
    pm.addPass(createOptimizer(opt));
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    break;
  }
  case Phase::Precision:
    if (options.precision != "fp32") {
      MixedPrecisionOptions mp;
      mp.dtype = options.precision;
      mp.accum = options.accumDtype;
      mp.accumChunk = options.accumChunk;
      pm.addPass(createMixedPrecision(mp));
    }
    break;
  case Phase::Recompute:
    if (options.recompute != "none") {
      RecomputeOptions rc;
      rc.policy = options.recompute;
      rc.fusion = options.fusion != "none";
      pm.addPass(createRecompute(rc));
    }
    break;
  case Phase::Fusion:
    if (options.fusion != "none")
      pm.addPass(createFormKernels());
    break;
  case Phase::Schedule:
    pm.addPass(createMemoryPlan());
    break;
  default:
    break;
  }
}

namespace {

/// Writes `<n>-<phase>-<pass>.mlir` after each selected pass.
class DumpInstrumentation : public PassInstrumentation {
public:
  DumpInstrumentation(std::string dir, std::set<std::string> passes, int &counter,
                      Phase &phase)
      : dir(std::move(dir)), passes(std::move(passes)), counter(counter), phase(phase) {}

  void runAfterPass(Pass *pass, Operation *op) override {
    std::string arg = pass->getArgument().str();
    if (arg.empty() || (!passes.count("all") && !passes.count(arg)))
      return; // pass adaptors have no name; their nested passes are dumped
    write(arg, op);
  }

  void write(const std::string &passName, Operation *op) {
    char prefix[8];
    snprintf(prefix, sizeof prefix, "%02d", counter++);
    std::string path =
        dir + "/" + prefix + "-" + phaseName(phase) + "-" + passName + ".mlir";
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec) {
      llvm::errs() << "ortc: warning: cannot write dump " << path << ": "
                   << ec.message() << "\n";
      return;
    }
    op->print(os);
    os << "\n";
  }

private:
  std::string dir;
  std::set<std::string> passes;
  int &counter;
  Phase &phase;
};

/// Writes `text` to `path` through a temporary file and a rename; straight into it when it
/// exists and is not a regular file (/dev/null, /dev/stdout, a pipe: a rename would
/// replace the device).
bool writeAtomically(const std::string &path, const std::string &text) {
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(path, st) && llvm::sys::fs::exists(st) &&
      !llvm::sys::fs::is_regular_file(st) && !llvm::sys::fs::is_directory(st)) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (!ec) {
      os << text;
      os.close(); // (a write error shows at the flush)
    }
    if (ec || os.has_error()) {
      llvm::errs() << "ortc: error: cannot write " << path << ": "
                   << (ec ? ec : os.error()).message() << "\n";
      os.clear_error();
      return false;
    }
    return true;
  }
  std::string tmp = path + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec) {
      llvm::errs() << "ortc: error: cannot write " << path << ": " << ec.message() << "\n";
      return false;
    }
    os << text;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    llvm::errs() << "ortc: error: cannot write " << path << "\n";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace

/// The arena in use over the train step's schedule as an SVG line chart (wrapped in a page
/// for .html): `step` as built, and `plain`, when given, as it would be without recompute.
/// The x axis is the fraction of each schedule (recompute adds ops), the y axis MiB.
static std::string memoryTimeline(func::FuncOp step, func::FuncOp plain,
                                  const std::string &policy, bool html) {
  struct Line {
    std::vector<int64_t> bytes;
    std::string label, colour;
  };
  std::vector<Line> lines;
  if (plain)
    lines.push_back({arenaBytesOverSchedule(plain), "without recompute", "#888888"});
  lines.push_back({arenaBytesOverSchedule(step),
                   plain ? "--recompute " + policy : std::string("arena in use"), "#1f5fbf"});
  int64_t top = 1;
  for (const Line &l : lines)
    for (int64_t b : l.bytes)
      top = std::max(top, b);
  const int w = 880, h = 320, x0 = 70, y0 = 30; // plot area, pixels
  const double mib = top / 1048576.0;
  std::string svg;
  llvm::raw_string_ostream os(svg);
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << x0 + w + 20 << "\" height=\""
     << y0 + h + 60 << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  os << "<text x=\"" << x0 << "\" y=\"18\" font-size=\"14\">@" << step.getSymName()
     << ": arena in use over the schedule (peak " << llvm::format("%.2f", mib) << " MiB)</text>\n";
  os << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << w << "\" height=\"" << h
     << "\" fill=\"none\" stroke=\"#cccccc\"/>\n";
  for (int k = 0; k <= 4; ++k) { // y ticks
    int y = y0 + h - h * k / 4;
    os << "<text x=\"" << x0 - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
       << llvm::format("%.3g", mib * k / 4) << "</text>\n";
  }
  os << "<text x=\"14\" y=\"" << y0 + h / 2 << "\" transform=\"rotate(-90 14 " << y0 + h / 2
     << ")\" text-anchor=\"middle\">MiB</text>\n";
  os << "<text x=\"" << x0 + w / 2 << "\" y=\"" << y0 + h + 36
     << "\" text-anchor=\"middle\">position in the step's schedule (forward, backward, "
        "optimizer)</text>\n";
  for (auto [i, l] : llvm::enumerate(lines)) {
    os << "<polyline fill=\"none\" stroke=\"" << l.colour << "\" stroke-width=\"1.5\" points=\"";
    size_t n = std::max<size_t>(l.bytes.size(), 2);
    for (size_t t = 0; t < l.bytes.size(); ++t)
      os << llvm::format("%.1f,%.1f ", x0 + w * double(t) / double(n - 1),
                         y0 + h - h * double(l.bytes[t]) / double(top));
    os << "\"/>\n";
    int64_t peak = 0;
    for (int64_t b : l.bytes)
      peak = std::max(peak, b);
    os << "<text x=\"" << x0 + 10 + 330 * i << "\" y=\"" << y0 + h + 52 << "\" fill=\""
       << l.colour << "\">" << l.label << ": peak "
       << llvm::format("%.2f", peak / 1048576.0) << " MiB, " << l.bytes.size() << " ops</text>\n";
  }
  os << "</svg>\n";
  if (!html)
    return svg;
  return "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>ortc memory timeline"
         "</title></head><body>\n" + svg + "</body></html>\n";
}

/// The process's peak resident memory in MB: VmHWM, which (unlike getrusage's
/// ru_maxrss, inherited across exec from the parent) counts this program only;
/// child compilers are not included.
static double peakRssMB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0)
      return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

/// Where a diagnostic points, as a user reads it: the ONNX node a location names,
/// a source line, or nothing (the model file, which the message names already).
static std::string describeLocation(Location loc) {
  if (auto n = dyn_cast<NameLoc>(loc))
    return "node '" + n.getName().str() + "': ";
  if (auto f = dyn_cast<FileLineColLoc>(loc))
    return f.getLine() ? f.getFilename().str() + ":" + std::to_string(f.getLine()) + ": " : "";
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations())
      if (std::string d = describeLocation(l); !d.empty())
        return d;
  return "";
}

/// Where a crash reproducer goes: a folder beside the output (or in the current
/// directory without one), filled only when a pass fails.
class Reproducer {
public:
  explicit Reproducer(const BuildOptions &options)
      : final((options.output.empty() ? std::string("ortc") : options.output) + ".reproducer"),
        tmp(final + ".tmp." + std::to_string(getpid())) {
    for (const std::string &a : options.argv)
      commandLine += (commandLine.empty() ? "" : " ") + shellQuote(a);
  }
  ~Reproducer() { discard(); }

  /// Makes `pm` write the IR before a failing pass, and that pass, into the folder.
  void enable(PassManager &pm) {
    llvm::CrashRecoveryContext::Enable(); // a crashing pass fails the run instead
    std::string dir = tmp;
    pm.enableCrashReproducerGeneration(
        [dir](std::string &error) -> std::unique_ptr<ReproducerStream> {
          std::error_code ec = llvm::sys::fs::create_directories(dir);
          auto file = std::make_unique<llvm::ToolOutputFile>(dir + "/reproducer.mlir", ec,
                                                             llvm::sys::fs::OF_None);
          if (ec) {
            error = "cannot write " + dir + "/reproducer.mlir: " + ec.message();
            return nullptr;
          }
          struct Stream : ReproducerStream {
            std::unique_ptr<llvm::ToolOutputFile> file;
            std::string path;
            llvm::StringRef description() override { return path; }
            llvm::raw_ostream &os() override { return file->os(); }
            ~Stream() override { file->keep(); }
          };
          auto s = std::make_unique<Stream>();
          s->path = dir + "/reproducer.mlir";
          s->file = std::move(file);
          return s;
        },
        /*genLocalReproducer=*/true);
  }

  /// Keeps the folder (with the command line) and says how to replay it.
  void keep(const std::string &pass, const char *what) {
    std::error_code ec;
    llvm::sys::fs::remove_directories(final);
    if (!llvm::sys::fs::exists(tmp + "/reproducer.mlir") ||
        llvm::sys::fs::rename(tmp, final)) {
      llvm::errs() << "ortc: internal error: pass '" << pass << "' " << what
                   << "; this is a bug in ortc, not in the model (no reproducer could be "
                      "written)\n";
      return;
    }
    std::ofstream(final + "/command.txt") << commandLine << "\n";
    llvm::errs() << "ortc: internal error: pass '" << pass << "' " << what
                 << "; this is a bug in ortc, not in the model. The IR before it and the pass "
                    "are in "
                 << final << "/reproducer.mlir (the command in command.txt): replay with "
                 << "`ortc-opt --run-reproducer " << final
                 << "/reproducer.mlir` and please report it\n";
  }

  void discard() { llvm::sys::fs::remove_directories(tmp); }

private:
  std::string final, tmp, commandLine;
};

/// Tells a pass that refused the model (valid IR, its own diagnostic) from ortc's own
/// failures: a crash (the pass never returns) or IR that no longer verifies.
struct FailureKind : PassInstrumentation {
  std::string lastPass;
  bool returned = false, refused = false;
  void runBeforePass(Pass *pass, Operation *) override { lastPass = pass->getArgument().str(); }
  void runAfterPassFailed(Pass *pass, Operation *op) override {
    lastPass = pass->getArgument().str();
    returned = true;
    ScopedDiagnosticHandler quiet(op->getContext(), [](Diagnostic &) { return success(); });
    refused = succeeded(verify(op));
  }
};

std::string versionText(const std::string &headline) {
  // The line of `compiler --version` that names the version (nvcc's first line does not).
  auto versionOf = [](const std::string &compiler) {
    std::string text, first;
    if (FILE *p = popen((shellQuote(compiler) + " --version 2>/dev/null").c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) {
        std::string line(buf);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
          line.pop_back();
        if (first.empty())
          first = line;
        if (text.empty() && (line.find("version") != std::string::npos ||
                             line.find("release") != std::string::npos))
          text = line;
      }
      pclose(p);
    }
    return text.empty() ? first : text;
  };
  std::string out = headline + "\ntargets (the compiler each would build with):\n";
  const char *cxx = std::getenv("CXX");
  std::string cpu = findExecutable(cxx && *cxx ? cxx : "c++");
  out += "  cpu:  " + (cpu.empty() ? std::string("not available: no C++ compiler (") +
                                         (cxx && *cxx ? cxx : "c++") + ") found"
                                   : cpu + " (" + versionOf(cpu) + ")") +
         "\n";
  for (const char *name : {"cuda", "rocm"}) {
    const TargetInfo *t = gpuTargetByName(name);
    std::string why, c = t->findCompiler(why);
    out += std::string("  ") + name + ": " +
           (c.empty() ? "not available: " + why : c + " (" + versionOf(c) + ")") + "\n";
  }
  return out;
}

int runBuild(const BuildOptions &given) {
  // --recompute auto: what fusion recomputes in its kernels, where kernels are formed.
  BuildOptions options = given;
  if (options.recompute == "auto")
    options.recompute = options.fusion == "none" ? "none" : "fused";
  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  ctx.disableMultithreading();
  // Pass diagnostics speak ortc's format ("ortc: error: ..."), not MLIR's loc(...) one,
  // and without the IR of the failing op (--dump-after shows IR to those who ask).
  ctx.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler diagnostics(&ctx, [](Diagnostic &d) {
    // The pass manager's own summary of a failure (and where it put a reproducer):
    // ortc says which pass failed and how, below.
    if (llvm::StringRef(d.str()).starts_with("Failures have been detected while processing"))
      return success();
    const char *kind = d.getSeverity() == DiagnosticSeverity::Error     ? "error"
                       : d.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                                        : "note";
    llvm::errs() << "ortc: " << kind << ": " << describeLocation(d.getLocation()) << d.str() << "\n";
    for (const Diagnostic &note : d.getNotes())
      llvm::errs() << "ortc: note: " << describeLocation(note.getLocation()) << note.str() << "\n";
    return success();
  });

  // Everything a dump request names must be a pass that exists.
  std::set<std::string> dumpPasses(options.dumpAfter.begin(), options.dumpAfter.end());
  if (!dumpPasses.empty()) {
    if (options.dumpDir.empty()) {
      llvm::errs() << "ortc: error: --dump-after needs --dump-dir DIR\n";
      return 1;
    }
    std::set<std::string> known{"all", "onnx"};
    for (int p = 0; p <= static_cast<int>(Phase::Package); ++p) {
      PassManager pm(&ctx);
      buildPhasePipeline(static_cast<Phase>(p), pm, options);
      for (Pass &pass : pm.getPasses())
        known.insert(pass.getArgument().str());
    }
    for (const std::string &name : dumpPasses)
      if (!known.count(name)) {
        std::string list;
        for (const std::string &k : known)
          list += " " + k;
        llvm::errs() << "ortc: error: --dump-after " << name
                     << ": no such pass in this build (passes:" << list << ")\n";
        return 1;
      }
    if (std::error_code ec = llvm::sys::fs::create_directories(options.dumpDir)) {
      llvm::errs() << "ortc: error: cannot create " << options.dumpDir << ": "
                   << ec.message() << "\n";
      return 1;
    }
  }

  // The target's archs and toolchain are checked before any work.
  const TargetInfo *gpu = gpuTargetByName(options.target);
  std::vector<std::string> archs = options.arch;
  std::string gpuCompiler;
  std::vector<std::string> cpuFeatures;
  if (options.target == "cpu") {
    if (!archs.empty()) {
      llvm::errs() << "ortc: error: --arch is for --target cuda or rocm (the CPU target's "
                      "instruction-set level is --cpu)\n";
      return 1;
    }
    archs = {options.cpu.empty() ? std::string(kDefaultCpuLevel) : options.cpu};
    if (archs.front() == "native")
      cpuFeatures = hostNativeFeatures();
  } else if (!options.cpu.empty()) {
    llvm::errs() << "ortc: error: --cpu is for --target cpu (GPU targets take --arch)\n";
    return 1;
  }
  if (options.noPtx && options.target != "cuda") {
    llvm::errs() << "ortc: error: --no-ptx is for --target cuda (PTX is NVIDIA's portable code)\n";
    return 1;
  }
  if (gpu) {
    std::string why;
    if (!gpu->resolveArchs(archs, options.noPtx, why)) {
      llvm::errs() << "ortc: error: " << why << "\n";
      return 1;
    }
    bool printsOnly = (options.stopAfter && *options.stopAfter <= Phase::Codegen) ||
                      options.emitMlir;
    if (!printsOnly && (gpuCompiler = gpu->findCompiler(why)).empty()) {
      llvm::errs() << "ortc: error: " << why << "\n";
      return 1;
    }
  }

  // The CPU build's precompiled kernel library header compiles while the model loads.
  bool writesArtifact = !options.output.empty() && !options.emitMlir && !options.stopAfter;
  std::thread earlyHeader;
  double earlyHeaderMs = 0;
  if (writesArtifact && !gpu)
    earlyHeader =
        precompileHeaderEarly(cpuKernelBuild(archs.front(), cpuFeatures), &earlyHeaderMs);
  struct Joiner {
    std::thread &t;
    ~Joiner() {
      if (t.joinable())
        t.join();
    }
  } joinEarlyHeader{earlyHeader};

  auto t0 = std::chrono::steady_clock::now();
  ImportOptions importOptions{options.dims, options.shapes};
  std::string inferenceGraph; // model.onnx of the artifact, for `ortc export`
  if (writesArtifact)
    importOptions.inferenceGraph = &inferenceGraph;
  WeightStore weights;
  std::string error;
  OwningOpRef<ModuleOp> module =
      importOnnxModel(ctx, options.model, importOptions, weights, error);
  if (!module) {
    llvm::errs() << "ortc: error: " << error << "\n";
    return 1;
  }
  double importMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
          .count();
  if (options.timing)
    llvm::errs() << "ortc: import: " << llvm::format("%.2f", importMs) << " ms\n";
  auto passesStart = std::chrono::steady_clock::now();

  int counter = 0;
  Phase current = Phase::Import;
  auto dumper = dumpPasses.empty()
                    ? nullptr
                    : std::make_unique<DumpInstrumentation>(options.dumpDir, dumpPasses,
                                                            counter, current);
  if (dumper && (dumpPasses.count("all") || dumpPasses.count("onnx")))
    dumper->write("onnx", *module);

  Phase last = options.stopAfter.value_or(Phase::Package);
  // With a recompute policy and --memory-timeline, which draws the step without it too: the
  // module as the training passes left it, fused and planned on the side. (The arena without
  // recompute the summary prints is the pass's own, ortc.recompute_without.)
  OwningOpRef<ModuleOp> withoutRecompute;
  for (int p = 0; p <= static_cast<int>(last) && p <= static_cast<int>(Phase::Schedule); ++p) {
    current = static_cast<Phase>(p);
    PassManager pm(&ctx);
    buildPhasePipeline(current, pm, options);
    if (dumper) {
      // The pass manager owns its instrumentations: hand it a forwarding copy.
      struct Forward : PassInstrumentation {
        DumpInstrumentation &d;
        explicit Forward(DumpInstrumentation &d) : d(d) {}
        void runAfterPass(Pass *pass, Operation *op) override { d.runAfterPass(pass, op); }
      };
      pm.addInstrumentation(std::make_unique<Forward>(*dumper));
    }
    if (current == Phase::Recompute && options.recompute != "none" &&
        last >= Phase::Schedule && !options.memoryTimeline.empty()) {
      OwningOpRef<ModuleOp> plain(cast<ModuleOp>((*module)->clone()));
      PassManager side(&ctx);
      buildPhasePipeline(Phase::Fusion, side, options);
      buildPhasePipeline(Phase::Schedule, side, options);
      if (succeeded(side.run(*plain)))
        withoutRecompute = std::move(plain);
    }
    if (current == Phase::Training)
      if (const char *kind = std::getenv("ORTC_TEST_INTERNAL_ERROR"); kind && *kind)
        pm.addPass(createTestInternalErrorPass(kind));
    if (options.timing)
      pm.enableTiming();
    Reproducer reproducer(options);
    reproducer.enable(pm);
    auto kind = std::make_unique<FailureKind>();
    FailureKind &failure = *kind;
    pm.addInstrumentation(std::move(kind));
    if (failed(pm.run(*module))) {
      if (!failure.refused)
        reproducer.keep(failure.lastPass,
                        failure.returned ? "left IR that does not verify" : "crashed");
      return 1; // a refusing pass reported its diagnostic
    }
  }

  if (last >= Phase::Schedule) {
    for (auto fn : module->getOps<func::FuncOp>()) {
      auto bytes = fn->getAttrOfType<IntegerAttr>("ortc.arena_bytes");
      auto lower = fn->getAttrOfType<IntegerAttr>("ortc.arena_lower_bound");
      if (!bytes || !lower)
        continue;
      llvm::errs() << "ortc: memory plan @" << fn.getSymName() << ": arena "
                   << bytes.getInt() << " bytes, lower bound " << lower.getInt()
                   << " bytes, ratio "
                   << llvm::format("%.3f", lower.getInt()
                                               ? double(bytes.getInt()) / lower.getInt()
                                               : 1.0)
                   << "\n";
      auto recomputed = fn->getAttrOfType<IntegerAttr>("ortc.recomputed");
      auto without = fn->getAttrOfType<IntegerAttr>("ortc.recompute_without");
      if (!recomputed || !without)
        continue;
      int64_t plain = without.getInt();
      int64_t added = fn->getAttrOfType<IntegerAttr>("ortc.recompute_flops").getInt();
      int64_t forward = fn->getAttrOfType<IntegerAttr>("ortc.forward_flops").getInt();
      llvm::errs() << "ortc: recompute (" << options.recompute << ") @" << fn.getSymName()
                   << ": " << recomputed.getInt() << " values, arena " << bytes.getInt()
                   << " bytes vs " << plain << " without ("
                   << llvm::format("%+.1f%%", plain ? 100.0 * (bytes.getInt() - plain) / plain
                                                  : 0.0)
                   << "), +" << llvm::format("%.2f", added / 1e6) << " MFLOP ("
                   << llvm::format("%.1f%%", forward ? 100.0 * added / forward : 0.0)
                   << " of the forward's)";
      if (auto budget = fn->getAttrOfType<IntegerAttr>("ortc.recompute_budget"))
        llvm::errs() << ", budget " << budget.getInt() << " bytes";
      if (auto blocks = fn->getAttrOfType<DenseI64ArrayAttr>("ortc.recompute_blocks")) {
        auto taken = fn->getAttrOfType<IntegerAttr>("ortc.recomputed_blocks");
        llvm::errs() << ", " << (taken ? taken.getInt() : 0) << " of " << blocks.size()
                     << " repeated blocks";
        std::set<int64_t> sizes(blocks.asArrayRef().begin(), blocks.asArrayRef().end());
        if (!sizes.empty())
          llvm::errs() << " of " << llvm::join(llvm::map_range(sizes, [](int64_t n) {
                                                  return std::to_string(n);
                                                }), "/")
                       << " ops";
      }
      llvm::errs() << "\n";
      if (auto nodes = fn->getAttrOfType<ArrayAttr>("ortc.recomputed_nodes"); nodes && options.timing)
        for (Attribute n : nodes)
          llvm::errs() << "ortc: recompute @" << fn.getSymName() << ": "
                       << cast<StringAttr>(n).getValue() << "\n";
    }
  }

  if (!options.memoryTimeline.empty() && last >= Phase::Schedule) {
    auto step = module->lookupSymbol<func::FuncOp>("train_step");
    auto plainStep =
        withoutRecompute ? withoutRecompute->lookupSymbol<func::FuncOp>("train_step") : nullptr;
    if (!step || !writeAtomically(options.memoryTimeline,
                                  memoryTimeline(step, plainStep, options.recompute,
                                                 llvm::StringRef(options.memoryTimeline)
                                                     .ends_with(".html")))) {
      if (!step)
        llvm::errs() << "ortc: error: --memory-timeline: the model has no train step\n";
      return 1;
    }
  }

  auto emitText = [&](const std::string &text) {
    if (options.emitFile.empty()) {
      llvm::outs() << text;
      return 0;
    }
    return writeAtomically(options.emitFile, text) ? 0 : 1;
  };
  if ((options.stopAfter && *options.stopAfter <= Phase::Schedule) || options.emitMlir) {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    os << "\n"; // as mlir-opt/ortc-opt print it, so the text round-trips exactly
    return emitText(text);
  }

  // Codegen and packaging.
  auto c0 = std::chrono::steady_clock::now();
  std::string error2;
  auto table = TensorTable::build(*module, weights, error2);
  std::vector<FunctionKernels> functions;
  std::vector<std::string> units;
  if (failed(table) ||
      failed(gpu ? emitGpuKernels(*module, *table, *gpu, functions, units, error2)
                 : emitCpuKernels(*module, *table, functions, units, error2))) {
    llvm::errs() << "ortc: error: " << options.model << ": " << error2 << "\n";
    return 1;
  }
  if (options.stopAfter == Phase::Codegen) {
    std::string text;
    for (size_t i = 0; i < units.size(); ++i)
      text += (units.size() > 1 ? "// ===== kernel unit " + std::to_string(i) + " =====\n" : "") +
              units[i];
    return emitText(text);
  }
  for (FunctionKernels &f : functions)
    if (f.recompute)
      f.recompute->policy = options.recompute;
  auto c1 = std::chrono::steady_clock::now();
  ArtifactOptions artifact{options.target, options.output, archs, cpuFeatures, options.timing};
  artifact.jobs = options.jobs ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  artifact.noParams = options.noParams;
  artifact.precision = options.precision;
  if (!inferenceGraph.empty()) {
    std::set<std::string> inArtifact; // tensors params.bin holds (or would, --no-params)
    for (const TensorInfo &t : table->tensors())
      if (t.init)
        inArtifact.insert(t.name);
    auto held = [&](const std::string &name) { return inArtifact.count(name) > 0; };
    if (!completeInferenceGraph(inferenceGraph, weights, held, error2)) {
      llvm::errs() << "ortc: error: " << options.model << ": " << error2 << "\n";
      return 1;
    }
    artifact.extraFiles.push_back({"model.onnx", std::move(inferenceGraph)});
  }
  if (earlyHeader.joinable())
    earlyHeader.join();
  artifact.headerCompiledEarlyMs = earlyHeaderMs;
  KernelBuild build =
      gpu ? gpuKernelBuild(*gpu, gpuCompiler, archs) : cpuKernelBuild(archs.front(), cpuFeatures);
  PackageStats stats;
  if (!writeArtifact(artifact, *table, functions, units, build, stats, error2)) {
    llvm::errs() << "ortc: error: " << options.output << ": " << error2 << "\n";
    return 1;
  }
  auto c2 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (options.timing) {
    for (const PackageStats::Unit &u : stats.units)
      llvm::errs() << "ortc: kernel unit " << u.source << ": "
                   << (u.prebuilt ? std::string("prebuilt, carried by ortc")
                       : u.cached ? std::string("cache hit")
                                : llvm::formatv("compiled in {0:F2} ms", u.compileMs).str())
                   << (u.early ? " (while the model loaded)" : "")
                   << "\n";
    llvm::errs() << "ortc: kernel units: " << stats.units.size() << " (" << stats.cacheHits()
                 << " from the cache" << (stats.artifactCached ? ", whole artifact cached" : "")
                 << "), compile " << llvm::format("%.2f", stats.compileWallMs) << " ms on "
                 << artifact.jobs << " jobs, link " << llvm::format("%.2f", stats.linkMs)
                 << " ms, params.bin " << llvm::format("%.2f", stats.paramsMs) << " ms\n";
    llvm::errs() << "ortc: codegen: " << llvm::format("%.2f", ms(c0, c1))
                 << " ms, package (kernel compile included): " << llvm::format("%.2f", ms(c1, c2))
                 << " ms\n";
  }
  // Launches are what a step runs, distinct kernels what was compiled.
  for (const FunctionKernels &f : functions) {
    KernelCounts c = countKernels({f});
    llvm::errs() << "ortc: @" << f.name << ": " << c.launches << " launches, " << c.distinct
                 << " distinct kernels, ~" << llvm::format("%.2f", c.bytes / 1048576.0)
                 << " MB read+written per step\n";
  }
  KernelCounts counts = countKernels(functions);
  llvm::errs() << "ortc: wrote " << options.output << " (" << table->tensors().size()
               << " tensors, " << counts.launches << " launches of " << counts.distinct
               << " distinct kernels)\n";
  if (!options.report.empty() &&
      !writeBuildReport(options.report, artifact, functions, stats,
                        {{"import", importMs},
                         {"passes", ms(passesStart, c0)},
                         {"codegen", ms(c0, c1)},
                         {"package", ms(c1, c2)}},
                        error2)) {
    llvm::errs() << "ortc: error: " << error2 << "\n";
    return 1;
  }
  if (options.timing)
    llvm::errs() << "ortc: peak RSS " << llvm::format("%.1f", peakRssMB())
                 << " MB (the ortc process)\n";
  return 0;
}

} // namespace ortc
