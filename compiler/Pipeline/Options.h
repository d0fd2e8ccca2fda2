//===- Options.h - What `ortc build` was asked to do -----------*- C++ -*-===//
//
// Plain C++ (no MLIR headers) so that the CLI's main.cpp, which pays for CLI11's
// heavy header, does not also pay for MLIR's.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_PIPELINE_OPTIONS_H
#define ORTC_PIPELINE_OPTIONS_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ortc {

/// The phases of a build, in order. One list drives the pipeline builder, the
/// `--stop-after` flag and the dump file names (`<n>-<phase>-<pass>.mlir`).
#define ORTC_PHASES(X)                                                         \
  X(Import, "import")                                                          \
  X(Training, "training")                                                      \
  X(Precision, "precision")                                                    \
  X(Recompute, "recompute")                                                    \
  X(Fusion, "fusion")                                                          \
  X(Schedule, "schedule")                                                      \
  X(Codegen, "codegen")                                                        \
  X(Package, "package")

enum class Phase {
#define ORTC_PHASE_ENUM(e, s) e,
  ORTC_PHASES(ORTC_PHASE_ENUM)
#undef ORTC_PHASE_ENUM
};

/// "import", "training"...
const char *phaseName(Phase p);
/// Every phase name, in order (for help text and validation).
std::vector<std::string> phaseNames();
std::optional<Phase> parsePhase(const std::string &name);

struct BuildOptions {
  std::string model;
  std::string output;
  std::string target = "cpu";
  std::vector<std::string> arch;
  std::string cpu; ///< --cpu level for the cpu target; empty: x86-64-v3
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::vector<int64_t>> shapes;

  // Training.
  std::string loss = "cross_entropy"; ///< cross_entropy | mse | none
  std::string labels = "labels";
  std::string logits;                 ///< which output the loss reads
  int64_t ignoreIndex = -100;        ///< PyTorch's default
  std::optional<int64_t> classAxis;  ///< default: 1, or 2 for rank-3 logits
  double labelSmoothing = 0.0;
  std::string lossOutput;             ///< for --loss none
  std::string optimizer = "sgd";      ///< sgd | adamw
  double momentum = 0.0, dampening = 0.0, weightDecay = -1.0; ///< -1: optimizer default
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clipGradNorm = 0.0;
  bool gradAccum = false; ///< also build @accumulate_step (ortc train --grad-accum N)
  /// Average the loss and gradients over the ranks of an mpirun (passes/autodiff,
  /// DataParallel.h), in all_reduce buckets of at most bucketBytes.
  bool dataParallel = false;
  int64_t bucketBytes = 25 * 1024 * 1024;
  /// ZeRO stage (0 or 1): 1 shards the optimizer state over `ranks` ranks.
  int64_t zero = 0;
  int64_t ranks = 0;
  bool syncBatchnorm = false; ///< BatchNorm statistics over every rank (SyncBatchNorm)
  std::vector<std::string> freeze;
  std::vector<std::string> trainable;

  /// fp32 | bf16 | fp16: 16-bit storage of activations (passes/mixed_precision)
  std::string precision = "fp32";
  /// fp16: dynamic loss scaling's first scale (0: none) and the finite steps in a row
  /// after which it doubles (PyTorch's GradScaler defaults).
  double lossScaleInit = 65536.0;
  int64_t lossScaleInterval = 2000;
  /// bf16 / fp16: how GEMMs and sums on 16-bit operands accumulate: fp32 | chunked16
  /// (16-bit partial sums over accumChunk terms, added in float; 0: the pass's default
  /// for the type) | plain16.
  std::string accumDtype = "fp32";
  int64_t accumChunk = 0;
  /// auto (fused under fusion "default", else none) | none | selective | fused | layers |
  /// budget=... (passes/checkpointing)
  std::string recompute = "auto";
  std::string fusion = "default"; ///< default | none (one kernel per op)
  /// Leave the initial values out of the artifact (no params.bin): the runtime takes
  /// them from --load-params / --load-checkpoint or draws them (--init-seed).
  bool noParams = false;
  /// cuda: leave out the PTX that newer GPUs compile when loading (machine code only).
  bool noPtx = false;

  // Pipeline control and debugging.
  std::optional<Phase> stopAfter;
  bool emitMlir = false;
  std::string emitFile; ///< where --stop-after / --emit print; "" = standard output
  std::vector<std::string> dumpAfter; ///< pass names, or "all"
  std::string dumpDir;
  /// The command line as typed, written beside a crash reproducer.
  std::vector<std::string> argv;
  bool timing = false;
  std::string report;  ///< --report FILE.json: kernels, compile units, cache hits, times
  /// --memory-timeline FILE.svg|.html: the train step's arena in use over its schedule
  /// (with the plan without recompute beside it when --recompute is on).
  std::string memoryTimeline;
  unsigned jobs = 0;   ///< -j: kernel units compiled at once; 0: one per core
};

/// Runs `ortc build`; returns the process exit code (0 ok, 1 bad model or options).
int runBuild(const BuildOptions &options);

/// What `ortc --version` prints: `headline`, then one line per target with the
/// compiler a build would use and its version, or why the target cannot build here.
std::string versionText(const std::string &headline);

} // namespace ortc

#endif // ORTC_PIPELINE_OPTIONS_H
