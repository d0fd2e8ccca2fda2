//===- main.cpp - The `ortc` command line ---------------------------------===//
//
// Only argument parsing lives here (CLI11's header is slow to compile, MLIR's too:
// keep them apart). `build` and `inspect` go to compiler/Pipeline, `train` to the
// runtime's train loop. Exit codes: 0 ok, 1 bad model/options, 2 usage.
//
//===----------------------------------------------------------------------===//
#include "compiler/Pipeline/Options.h"
#include "tools/ortc/Commands.h"
#include "ortc/train_loop.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <sstream>

namespace {

/// Parses NAME=N pairs for --dim (N >= 1; a name given twice must agree); "" or the
/// usage error.
std::string parseDims(const std::vector<std::string> &raw, std::map<std::string, int64_t> &out) {
  for (const std::string &s : raw) {
    size_t eq = s.find('=');
    char *end = nullptr;
    if (eq == std::string::npos || eq == 0)
      return "--dim takes NAME=N with N >= 1, got '" + s + "'";
    long long v = std::strtoll(s.c_str() + eq + 1, &end, 10);
    if (*end || end == s.c_str() + eq + 1 || v < 1)
      return "--dim takes NAME=N with N >= 1, got '" + s + "'";
    auto [it, fresh] = out.emplace(s.substr(0, eq), v);
    if (!fresh && it->second != v)
      return "--dim " + it->first + " given twice (" + std::to_string(it->second) + " and " +
             std::to_string(v) + ")";
  }
  return "";
}

/// Parses INPUT=AxBxC pairs for --shape.
bool parseShapes(const std::vector<std::string> &raw,
                 std::map<std::string, std::vector<int64_t>> &out) {
  for (const std::string &s : raw) {
    size_t eq = s.rfind('=');
    if (eq == std::string::npos || eq == 0)
      return false;
    std::vector<int64_t> dims;
    std::stringstream ss(s.substr(eq + 1));
    std::string part;
    while (std::getline(ss, part, 'x')) {
      char *end = nullptr;
      long long v = std::strtoll(part.c_str(), &end, 10);
      if (part.empty() || *end || v < 1)
        return false;
      dims.push_back(v);
    }
    out[s.substr(0, eq)] = dims;
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"ortc: an offline compiler for training. It reads an ONNX inference graph,\n"
               "derives the training step (loss, backward, optimizer) and emits kernels\n"
               "plus a small runtime that runs it."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", std::string("ortc ") + ORTC_VERSION + " (LLVM/MLIR " + ORTC_LLVM_VERSION +
                                        ", ONNX opsets 7-28)");

  ortc::BuildOptions b;
  std::vector<std::string> dims, shapes, dumpAfter;
  std::string stopAfter, emit;
  auto *build = app.add_subcommand("build", "Compile an ONNX model into a training artifact");
  build->add_option("model", b.model, "The ONNX model (.onnx, or .onnxtxt text format)")
      ->required()->check(CLI::ExistingFile);
  build->add_option("-o,--output", b.output, "Artifact folder to write (model.ortc)");
  build->add_option("--target", b.target, "cpu, cuda or rocm")
      ->check(CLI::IsMember({"cpu", "cuda", "rocm"}))->default_val("cpu");
  build->add_option("--arch", b.arch,
                    "GPU architectures, comma separated (cuda: sm_75, sm_80, sm_86, sm_89, "
                    "sm_90, sm_100, sm_120; default sm_80,sm_90, plus the PTX of the newest for "
                    "later GPUs. rocm: gfx90a, gfx942, gfx950, gfx1100, gfx1201; default "
                    "gfx90a,gfx942)")
      ->delimiter(',');
  build->add_option("--cpu", b.cpu,
                    "cpu target: instruction-set level of the kernels, x86-64-v2, x86-64-v3 "
                    "(the default: AVX2 + FMA), x86-64-v4 (AVX-512) or native (this machine's "
                    "CPU, recorded in the artifact)")
      ->check(CLI::IsMember({"x86-64-v2", "x86-64-v3", "x86-64-v4", "native"}));
  build->add_option("--dim", dims, "Bind a symbolic dim: NAME=N (repeatable)");
  build->add_option("--shape", shapes, "Set an input's shape: INPUT=AxBxC (repeatable)");
  auto *train = build->add_option_group("Training", "Loss and optimizer of the step");
  train->add_option("--loss", b.loss, "cross_entropy, mse or none")
      ->check(CLI::IsMember({"cross_entropy", "mse", "none"}))->default_val("cross_entropy");
  train->add_option("--labels", b.labels, "Name of the labels/target input")->default_val("labels");
  train->add_option("--logits", b.logits, "Output the loss reads (for several outputs)");
  train->add_option("--ignore-index", b.ignoreIndex,
                    "Label value left out of cross_entropy's mean (PyTorch's default)")
      ->default_val(-100);
  train->add_option("--class-axis", b.classAxis,
                    "cross_entropy: class axis of the logits (default 1 as PyTorch, or 2 for "
                    "rank-3 [B, T, V] language-model logits)");
  train->add_option("--label-smoothing", b.labelSmoothing,
                    "cross_entropy: PyTorch's label_smoothing")->default_val(0.0);
  train->add_option("--loss-output", b.lossOutput, "Scalar loss output (with --loss none)");
  train->add_option("--optimizer", b.optimizer, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))->default_val("sgd");
  train->add_option("--momentum", b.momentum, "SGD momentum")->default_val(0.0);
  train->add_option("--dampening", b.dampening, "SGD dampening")->default_val(0.0);
  train->add_flag("--nesterov", b.nesterov, "SGD with Nesterov momentum");
  train->add_option("--weight-decay", b.weightDecay,
                    "Weight decay (default: 0 for sgd, 0.01 for adamw)");
  train->add_option("--beta1", b.beta1, "AdamW beta1")->default_val(0.9);
  train->add_option("--beta2", b.beta2, "AdamW beta2")->default_val(0.999);
  train->add_option("--eps", b.eps, "AdamW epsilon")->default_val(1e-8);
  train->add_option("--clip-grad-norm", b.clipGradNorm, "Clip the global gradient norm");
  train->add_option("--freeze", b.freeze, "Keep matching weights out of training (glob)");
  train->add_option("--trainable", b.trainable,
                    "Train matching weights that the rule takes as exporter constants (glob)");
  build->add_flag("--no-params", b.noParams,
                  "Leave the weights out of the artifact (no params.bin), so that it travels "
                  "small; ortc-run then needs --load-params, --load-checkpoint or --init-seed");
  build->add_flag("--no-ptx", b.noPtx,
                  "cuda: embed machine code only, without the PTX of the newest --arch that later "
                  "GPUs (sm_100, sm_120, ...) compile when loading");
  build->add_option("--fusion", b.fusion,
                    "default: fuse ops into generated kernels (pointwise chains with the "
                    "broadcasts they read); none: one kernel per op, for comparison and "
                    "bisecting")
      ->check(CLI::IsMember({"default", "none"}))->default_val("default");
  auto *debug = build->add_option_group("Debugging", "Look inside the compile");
  std::string phases;
  for (const std::string &p : ortc::phaseNames())
    phases += (phases.empty() ? "" : ", ") + p;
  debug->add_option("--stop-after", stopAfter, "Stop after a phase and print its IR: " + phases);
  debug->add_option("--emit", emit, "Print the final IR instead of writing an artifact")
      ->check(CLI::IsMember({"mlir"}));
  debug->add_option("--dump-after", dumpAfter,
                    "Dump the IR after these passes (or 'all')")->delimiter(',');
  debug->add_option("--dump-dir", b.dumpDir, "Folder for the numbered dump files");
  debug->add_flag("--timing", b.timing,
                  "Print the time of each phase and pass, each kernel unit's compile and "
                  "cache hits");
  debug->add_option("--report", b.report,
                    "Write a JSON report: kernels (launches, distinct), compile units, cache "
                    "hits, phase times");
  build->add_option("-j,--jobs", b.jobs,
                    "Kernel units compiled at once (default: one per CPU core)")
      ->check(CLI::Range(1u, 1024u));

  std::string inspectModel;
  auto *inspect = app.add_subcommand("inspect", "Summarise an ONNX model as ortc imports it");
  inspect->add_option("model", inspectModel, "The ONNX model")->required()->check(CLI::ExistingFile);
  inspect->add_option("--dim", dims, "Bind a symbolic dim: NAME=N (repeatable)");
  inspect->add_option("--shape", shapes, "Set an input's shape: INPUT=AxBxC (repeatable)");
  inspect->add_option("--freeze", b.freeze, "As build: keep matching weights out of training");
  inspect->add_option("--trainable", b.trainable, "As build: train matching weights");

  ortc::TrainOptions t;
  auto *trainCmd = app.add_subcommand("train", "Train a compiled artifact");
  trainCmd->add_option("artifact", t.artifact, "The model.ortc folder")->required();
  trainCmd->add_option("--data", t.data, "Feed .npz: one array per input (plus labels)")->required();
  trainCmd->add_option("--steps", t.steps, "Number of steps")->default_val(10);
  trainCmd->add_option("--lr", t.lr, "Learning rate")
      ->default_val(0.01)
      ->check(CLI::Validator(
          [](std::string &v) {
            char *end = nullptr;
            double x = std::strtod(v.c_str(), &end);
            return *end || end == v.c_str() || !std::isfinite(x) || x < 0
                       ? "needs a finite number >= 0, got '" + v + "'"
                       : std::string();
          },
          "FINITE >= 0"));
  trainCmd->add_option("--seed", t.seed, "Dropout seed")->default_val(0);
  trainCmd->add_option("--log-json", t.logJson, "Write one JSON line per step");
  trainCmd->add_option("--save-params", t.saveParams, "Write trained parameters (.npz)");
  trainCmd->add_option("--load-params", t.loadParams, "Start from these parameters (.npz)");
  trainCmd->add_option("--save-checkpoint", t.saveCheckpoint, "Write params + optimizer state");
  trainCmd->add_option("--load-checkpoint", t.loadCheckpoint, "Resume from a checkpoint");
  trainCmd->add_option("--init-seed", t.initSeed,
                       "Draw the weights a --no-params artifact leaves out (N(0, 0.02^2), seeded)")
      ->check(CLI::NonNegativeNumber);
  trainCmd->add_flag("--eval", t.eval, "Evaluate the loss after training");
  trainCmd->add_option("--threads", t.threads,
                       "Kernel threads (default: ORTC_THREADS, else one per physical core)")
      ->check(CLI::PositiveNumber);
  trainCmd->add_option_function<std::string>(
               "--on-nonfinite", [&t](const std::string &v) { t.skipNonFinite = v == "skip"; },
               "A step whose loss or gradients are not finite: stop (default) or skip (logged "
               "either way)")
      ->check(CLI::IsMember({"stop", "skip"}));
  trainCmd->add_flag("--no-graphs", t.noGraphs,
                     "GPU: launch every kernel every step (no graph capture and replay)");

  // A first word that is no subcommand: name it (CLI11 would only ask for a subcommand).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App *sub : app.get_subcommands([](CLI::App *) { return true; })) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "ortc: usage error: unknown command '" << argv[1] << "' (commands: " << names
                << ")\nRun 'ortc --help' for usage.\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    std::cerr << "ortc: usage error: " << e.what() << "\nRun 'ortc --help' for usage.\n";
    return 2;
  }
  if (std::string why = parseDims(dims, b.dims); !why.empty()) {
    std::cerr << "ortc: usage error: " << why << "\n";
    return 2;
  }
  if (!parseShapes(shapes, b.shapes)) {
    std::cerr << "ortc: usage error: --shape takes INPUT=AxBxC with every dim >= 1\n";
    return 2;
  }
  if (build->parsed()) {
    if (!stopAfter.empty()) {
      b.stopAfter = ortc::parsePhase(stopAfter);
      if (!b.stopAfter) {
        std::cerr << "ortc: usage error: --stop-after " << stopAfter
                  << ": not a phase (phases: " << phases << ")\n";
        return 2;
      }
    }
    b.emitMlir = emit == "mlir";
    b.dumpAfter = dumpAfter;
    b.argv.assign(argv, argv + argc);
    if (b.output.empty() && !b.stopAfter && !b.emitMlir) {
      std::cerr << "ortc: usage error: build needs -o OUT (or --stop-after/--emit mlir)\n";
      return 2;
    }
    if ((b.stopAfter || b.emitMlir) && !b.output.empty() &&
        (b.output.size() >= 5 && b.output.compare(b.output.size() - 5, 5, ".ortc") == 0)) {
      std::cerr << "ortc: usage error: " << (b.emitMlir ? "--emit mlir" : "--stop-after")
                << " writes IR to -o, and " << b.output
                << " names an artifact folder: give the IR file another name (e.g. model.mlir)\n";
      return 2;
    }
    if (b.loss == "none" && b.lossOutput.empty()) {
      std::cerr << "ortc: usage error: --loss none needs --loss-output NAME (the graph's scalar "
                   "loss output)\n";
      return 2;
    }
    return ortc::runBuild(b);
  }
  if (inspect->parsed()) {
    b.model = inspectModel;
    return ortc::runInspect(b);
  }
  return ortc::runTrainLoop(t);
}
