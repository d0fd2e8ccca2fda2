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
#include <cstdlib>
#include <tuple>
#include <iostream>
#include <sstream>

namespace {

/// Parses NAME=N pairs for --dim (N >= 1, each name once); "" or the usage error.
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
    if (!fresh)
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

/// A CLI11 check: a finite number in [lo, hi], either end open on request.
CLI::Validator finiteIn(double lo, double hi, bool loOpen = false, bool hiOpen = false) {
  std::string range = std::string(loOpen ? "> " : ">= ") + CLI::detail::to_string(lo) +
                      (std::isfinite(hi) ? std::string(hiOpen ? " and < " : " and <= ") +
                                               CLI::detail::to_string(hi)
                                         : "");
  return CLI::Validator(
      [=](std::string &v) {
        char *end = nullptr;
        double x = std::strtod(v.c_str(), &end);
        bool ok = !*end && end != v.c_str() && std::isfinite(x) && (loOpen ? x > lo : x >= lo) &&
                  (hiOpen ? x < hi : x <= hi);
        return ok ? std::string() : "needs a finite number " + range + ", got '" + v + "'";
      },
      "FINITE " + range);
}

/// The usage error of flags that only make sense together ("" if none).
std::string checkBuildFlags(const CLI::App &build, const ortc::BuildOptions &b, bool printsIr,
                            const std::string &emitFile) {
  auto given = [&](const char *flag) { return build.count(flag) > 0; };
  for (const char *f : {"--momentum", "--dampening", "--nesterov"})
    if (given(f) && b.optimizer != "sgd")
      return std::string(f) + " is an sgd setting, and --optimizer is " + b.optimizer;
  for (const char *f : {"--beta1", "--beta2", "--eps"})
    if (given(f) && b.optimizer != "adamw")
      return std::string(f) + " is an adamw setting, and --optimizer is " + b.optimizer;
  if (b.nesterov && (b.momentum <= 0 || b.dampening != 0))
    return "--nesterov needs --momentum > 0 and --dampening 0 (as torch.optim.SGD)";
  for (const char *f : {"--ignore-index", "--class-axis", "--label-smoothing"})
    if (given(f) && b.loss != "cross_entropy")
      return std::string(f) + " is a cross_entropy setting, and --loss is " + b.loss;
  if (given("--loss-output") && b.loss != "none")
    return "--loss-output names the graph's own loss, for --loss none (--loss is " + b.loss + ")";
  if (b.loss == "none" && b.lossOutput.empty())
    return "--loss none needs --loss-output NAME (the graph's scalar loss output)";
  if (given("--labels") && b.loss == "none")
    return "--labels names the input ortc adds for its loss, and --loss is none";
  if (given("--arch") && b.target == "cpu")
    return "--arch is for --target cuda or rocm (the cpu target takes --cpu)";
  if (given("--cpu") && b.target != "cpu")
    return "--cpu is for --target cpu (GPU targets take --arch)";
  if (b.noPtx && b.target != "cuda")
    return "--no-ptx is for --target cuda (PTX is NVIDIA's portable code)";
  if (given("--bucket-mb") && !b.dataParallel)
    return "--bucket-mb sizes the all-reduces of --data-parallel";
  if (b.syncBatchnorm && !b.dataParallel)
    return "--sync-batchnorm shares BatchNorm statistics between the ranks of --data-parallel";
  if (b.zero && !b.dataParallel)
    return "--zero 1 shards the optimizer state of --data-parallel";
  if (b.zero && !given("--ranks"))
    return "--zero 1 needs --ranks N, the number of ranks the run will have (the shards are "
           "built for it)";
  if (given("--ranks") && !b.zero)
    return "--ranks sizes the shards of --zero 1";
  for (const char *flag : {"--loss-scale-init", "--loss-scale-interval"})
    if (given(flag) && b.precision != "fp16")
      return std::string(flag) + " is for --precision fp16 (bf16 needs no loss scaling)";
  if ((given("--accum-dtype") && b.accumDtype != "fp32") && b.precision == "fp32")
    return "--accum-dtype " + b.accumDtype +
           " accumulates in the 16-bit type of --precision bf16 or fp16";
  if (given("--accum-chunk") && b.accumDtype != "chunked16")
    return "--accum-chunk is the chunk length of --accum-dtype chunked16";
  if (b.syncBatchnorm && b.target != "cpu")
    return "--sync-batchnorm is for --target cpu so far (its BatchNorm kernels have no GPU "
           "version yet)";
  if (b.recompute == "fused" && b.fusion == "none")
    return "--recompute fused recomputes inside fused kernels: it needs --fusion default";
  if (given("--dump-dir") && b.dumpAfter.empty())
    return "--dump-dir needs --dump-after PASSES (or all)";
  if (!emitFile.empty() && !printsIr)
    return "--emit-file is where --stop-after or --emit mlir print their IR";
  if (printsIr && !b.output.empty())
    return std::string(b.emitMlir ? "--emit mlir" : "--stop-after") +
           " prints IR and writes no artifact: drop -o " + b.output +
           " (the IR goes to standard output, or to --emit-file FILE)";
  if (!printsIr && b.output.empty())
    return "build needs -o OUT (or --stop-after/--emit mlir)";
  return "";
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"ortc: an offline compiler for training. It reads an ONNX inference graph,\n"
               "derives the training step (loss, backward, optimizer) and emits kernels\n"
               "plus a small runtime that runs it."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", "(printed by ortc::versionText)");

  ortc::BuildOptions b;
  std::vector<std::string> dims, shapes, dumpAfter;
  std::string stopAfter, emit, emitFile;
  double bucketMb = 25.0;
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
                    "cross_entropy: PyTorch's label_smoothing")->default_val(0.0)
      ->check(finiteIn(0, 1));
  train->add_option("--loss-output", b.lossOutput, "Scalar loss output (with --loss none)");
  train->add_option("--optimizer", b.optimizer, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))->default_val("sgd");
  train->add_option("--momentum", b.momentum, "SGD momentum")->default_val(0.0)
      ->check(finiteIn(0, INFINITY));
  train->add_option("--dampening", b.dampening, "SGD dampening")->default_val(0.0)
      ->check(finiteIn(0, 1));
  train->add_flag("--nesterov", b.nesterov, "SGD with Nesterov momentum");
  train->add_option("--weight-decay", b.weightDecay,
                    "Weight decay (default: 0 for sgd, 0.01 for adamw)")
      ->check(finiteIn(0, INFINITY));
  train->add_option("--beta1", b.beta1, "AdamW beta1")->default_val(0.9)
      ->check(finiteIn(0, 1, false, true));
  train->add_option("--beta2", b.beta2, "AdamW beta2")->default_val(0.999)
      ->check(finiteIn(0, 1, false, true));
  train->add_option("--eps", b.eps, "AdamW epsilon")->default_val(1e-8)
      ->check(finiteIn(0, INFINITY, true));
  train->add_option("--clip-grad-norm", b.clipGradNorm, "Clip the global gradient norm")
      ->check(finiteIn(0, INFINITY, true));
  train->add_flag("--grad-accum", b.gradAccum,
                  "Also build accumulate_step, so that ortc train --grad-accum N can sum "
                  "the gradients of N micro-batches per optimizer step");
  train->add_flag("--data-parallel", b.dataParallel,
                  "Average the loss and gradients over the ranks of a run (mpirun -np N "
                  "ortc-run train ...; GPU targets also torchrun-style): each rank trains on "
                  "its own batches");
  train->add_option("--bucket-mb", bucketMb,
                    "--data-parallel: the most MiB of gradients one all-reduce carries "
                    "(PyTorch DDP's bucket_cap_mb)")
      ->default_val(25.0)->check(finiteIn(0, 1 << 20, true));
  train->add_flag("--sync-batchnorm", b.syncBatchnorm,
                  "--data-parallel: BatchNorm statistics over every rank's batch, as "
                  "torch.nn.SyncBatchNorm (default: each rank's own, as PyTorch DDP)");
  train->add_option("--zero", b.zero,
                    "--data-parallel: 1 shards the optimizer state (and its update) over the "
                    "ranks, ZeRO stage 1; needs --ranks")
      ->check(CLI::IsMember({0, 1}))->default_val(0);
  train->add_option("--ranks", b.ranks,
                    "--zero 1: the number of ranks the run will have (mpirun -np N): the "
                    "optimizer state's shards are built for it")
      ->check(CLI::Range(1, 1 << 20));
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
  build->add_option("--precision", b.precision,
                    "fp32: every tensor float32; bf16 or fp16: activations and GEMM/convolution "
                    "operands stored in 16 bits as PyTorch's autocast rounds them (float32 "
                    "compute, float32 master weights, optimizer state, loss and reductions)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->default_val("fp32");
  build->add_option(
      "--loss-scale-init", b.lossScaleInit,
      "--precision fp16: the first scale of dynamic loss scaling (as PyTorch's GradScaler: "
      "halved after a step whose gradients overflow, which is skipped; doubled after "
      "--loss-scale-interval good steps in a row); 0: no loss scaling")
      ->check(finiteIn(0, 1e30))->default_val(65536.0);
  build->add_option(
      "--loss-scale-interval", b.lossScaleInterval,
      "--precision fp16: good steps in a row before the loss scale doubles")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->default_val(2000);
  build->add_option(
      "--accum-dtype", b.accumDtype,
      "--precision bf16|fp16: how GEMMs, convolutions and sums on 16-bit operands add. "
      "fp32: in float; chunked16: in the 16-bit type over chunks of --accum-chunk terms "
      "whose sums add in float (Wang et al. 2018: what hardware with fast 16-bit "
      "accumulation can use; emulated on the CPU, slower); plain16: in the 16-bit type "
      "throughout (for comparison)")
      ->check(CLI::IsMember({"fp32", "chunked16", "plain16"}))->default_val("fp32");
  build->add_option("--accum-chunk", b.accumChunk,
                    "--accum-dtype chunked16: terms per 16-bit partial sum (default: 64 for "
                    "fp16 as Wang et al. 2018 found, 16 for bf16's shorter significand)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  build->add_option("--recompute", b.recompute,
                    "Gradient checkpointing. auto (default): fused under --fusion default, "
                    "none under --fusion none; "
                    "none: keep every forward value the backward reads; "
                    "selective: recompute the cheap ones (elementwise, GELU, dropout, norms, "
                    "softmax, gathers) in the backward from values it keeps anyway; "
                    "fused: those of selective whose recompute joins kernels the step "
                    "launches anyway (no launch added, as TorchInductor's partitioner "
                    "recomputes what it fuses); "
                    "layers: keep only what crosses the boundaries of each repeated block "
                    "(transformer layers, residual blocks) and run each block again in the "
                    "backward; "
                    "budget=BYTES or budget=PCT% (of the arena without recompute): recompute "
                    "as little as makes the train step's arena fit")
      ->check(CLI::Validator(
          [](std::string &v) -> std::string {
            if (v == "auto" || v == "none" || v == "selective" || v == "fused" || v == "layers")
              return "";
            std::string n = v.rfind("budget=", 0) == 0 ? v.substr(7) : "";
            bool pct = !n.empty() && n.back() == '%';
            if (pct)
              n.pop_back();
            char *end = nullptr;
            double x = n.empty() ? 0 : std::strtod(n.c_str(), &end);
            if (n.empty() || *end || !(x > 0) || (pct && x > 100) ||
                (!pct && n.find_first_not_of("0123456789") != std::string::npos))
              return "'" + v + "': want auto, none, selective, fused, layers, budget=BYTES or budget=PCT% (0 < PCT <= 100)";
            return "";
          },
          "POLICY"))
      ->default_val("auto");
  auto *debug = build->add_option_group("Debugging", "Look inside the compile");
  std::string phases;
  for (const std::string &p : ortc::phaseNames())
    phases += (phases.empty() ? "" : ", ") + p;
  debug->add_option("--stop-after", stopAfter, "Stop after a phase and print its IR: " + phases);
  debug->add_option("--emit", emit, "Print the final IR instead of writing an artifact")
      ->check(CLI::IsMember({"mlir"}));
  debug->add_option("--emit-file", emitFile,
                    "Where --stop-after / --emit mlir print (default: standard output)");
  debug->add_option("--dump-after", dumpAfter,
                    "Dump the IR after these passes (or 'all')")->delimiter(',');
  debug->add_option("--dump-dir", b.dumpDir, "Folder for the numbered dump files");
  debug->add_flag("--timing", b.timing,
                  "Print the time of each phase and pass, each kernel unit's compile and "
                  "cache hits");
  debug->add_option("--memory-timeline", b.memoryTimeline,
                    "Draw the train step's arena in use over its schedule (with the plan "
                    "without recompute beside it under --recompute) into FILE.svg or FILE.html")
      ->check(CLI::Validator(
          [](std::string &v) -> std::string {
            if ((v.size() > 4 && v.compare(v.size() - 4, 4, ".svg") == 0) ||
                (v.size() > 5 && v.compare(v.size() - 5, 5, ".html") == 0))
              return "";
            return "'" + v + "': want FILE.svg or FILE.html";
          },
          "FILE.svg|FILE.html"));
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

  ortc::ExportOptions x;
  auto *exportCmd = app.add_subcommand(
      "export", "Write the trained model as ONNX: the graph as given, trained initializers");
  exportCmd->add_option("artifact", x.artifact, "The model.ortc folder")->required();
  exportCmd->add_option("-o,--output", x.output, "The .onnx file to write")->required();
  auto *fromParams = exportCmd->add_option(
      "--params", x.params, "Trained parameters and buffers (.npz of ortc train --save-params)");
  auto *fromCheckpoint = exportCmd->add_option(
      "--checkpoint", x.checkpoint, "A checkpoint (.npz of ortc train --save-checkpoint)");
  fromParams->excludes(fromCheckpoint);

  ortc::TrainOptions t;
  auto *trainCmd = app.add_subcommand("train", "Train a compiled artifact");
  trainCmd->add_option("artifact", t.artifact, "The model.ortc folder")->required();
  trainCmd->add_option("--data", t.data,
                       "The feed: an .npz (one array per input, plus labels), a folder of .npz "
                       "shards or NAME.npy arrays, or a glob of shards; read a batch at a time. "
                       "Under mpirun (a --data-parallel artifact) rank r reads batches "
                       "m * ranks + r, or its own feed where FEED has {rank}")
      ->required();
  auto *stepsOpt = trainCmd->add_option("--steps", t.steps, "Number of optimizer steps")
                       ->default_val(10);
  trainCmd->add_option("--epochs", t.epochs,
                       "Train to the end of this many passes over the feed (instead of --steps)")
      ->check(CLI::PositiveNumber)
      ->excludes(stepsOpt);
  trainCmd->add_option("--shuffle", t.shuffle,
                       "Visit each epoch's batches in an order drawn from this seed (and the "
                       "epoch); a resumed run reads what an unbroken one would")
      ->check(CLI::NonNegativeNumber);
  trainCmd->add_option("--lr", t.lr, "Learning rate (the peak of --lr-schedule)")
      ->default_val(0.01)
      ->check(finiteIn(0, INFINITY));
  auto *sched = trainCmd->add_option_group("Schedule", "How the learning rate moves");
  sched->add_option("--lr-schedule", t.lrSchedule,
                    "constant, linear, cosine or inverse-sqrt (Hugging Face's schedules; "
                    "the lr of each step is logged)")
      ->check(CLI::IsMember({"constant", "linear", "cosine", "inverse-sqrt"}))
      ->default_val("constant");
  sched->add_option("--warmup-steps", t.warmupSteps,
                    "Steps of linear warm-up from 0 to --lr")->default_val(0)
      ->check(CLI::NonNegativeNumber);
  sched->add_option("--min-lr", t.minLr, "Floor that linear, cosine and inverse-sqrt decay to")
      ->default_val(0.0)->check(finiteIn(0, INFINITY));
  sched->add_option("--schedule-steps", t.scheduleSteps,
                    "Step at which linear and cosine reach --min-lr (default: the last step of "
                    "this run; give the total when a run resumes from a checkpoint)")
      ->check(CLI::PositiveNumber);
  trainCmd->add_option("--grad-accum", t.gradAccum,
                       "Micro-batches per optimizer step: their gradients' mean updates the "
                       "weights, as PyTorch's accumulation (the artifact needs ortc build "
                       "--grad-accum)")
      ->default_val(1)->check(CLI::PositiveNumber);
  trainCmd->add_option("--seed", t.seed, "Dropout seed")->default_val(0);
  auto *hyper = trainCmd->add_option_group(
      "AdamW", "Run-time settings of an adamw artifact (default: the values it was built with)");
  for (auto [flag, key, range] :
       {std::tuple<const char *, const char *, CLI::Validator>{"--beta1", "beta1",
                                                               finiteIn(0, 1, false, true)},
        {"--beta2", "beta2", finiteIn(0, 1, false, true)},
        {"--eps", "eps", finiteIn(0, INFINITY, true)},
        {"--weight-decay", "weight_decay", finiteIn(0, INFINITY)}}) {
    std::string name = key;
    hyper->add_option_function<double>(
             flag, [&t, name](double v) { t.hyper[name] = v; }, std::string("AdamW ") + key)
        ->check(range);
  }
  trainCmd->add_option("--log-json", t.logJson, "Write one JSON line per step");
  trainCmd->add_option("--save-params", t.saveParams, "Write trained parameters (.npz)");
  trainCmd->add_option("--load-params", t.loadParams, "Start from these parameters (.npz)");
  trainCmd->add_option("--save-checkpoint", t.saveCheckpoint, "Write params + optimizer state");
  trainCmd->add_option("--load-checkpoint", t.loadCheckpoint, "Resume from a checkpoint");
  trainCmd->add_option("--init-seed", t.initSeed,
                       "Draw the weights a --no-params artifact leaves out (N(0, 0.02^2), seeded)")
      ->check(CLI::NonNegativeNumber);
  trainCmd->add_flag("--eval", t.eval,
                     "Evaluate after training (on --eval-data, else on the training feed)");
  trainCmd->add_option("--eval-data", t.evalData,
                       "Eval feed (.npz, as --data): loss, and accuracy for cross_entropy");
  trainCmd->add_option("--eval-every", t.evalEvery,
                       "Evaluate on --eval-data every N steps (logged with the steps)")
      ->check(CLI::PositiveNumber);
  trainCmd->add_flag("--quiet", t.quiet, "Print nothing but errors");
  trainCmd->add_option("--log-every", t.logEvery,
                       "Print every N-th step (and the last); --log-json still has every step")
      ->default_val(1)->check(CLI::PositiveNumber);
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
      std::cerr << "ortc: error: unknown command '" << argv[1] << "' (commands: " << names
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
  } catch (const CLI::CallForVersion &) {
    std::cout << ortc::versionText(std::string("ortc ") + ORTC_VERSION + " (LLVM/MLIR " +
                                   ORTC_LLVM_VERSION + ", ONNX opsets 7-28)");
    return 0;
  } catch (const CLI::ParseError &e) {
    std::cerr << "ortc: error: " << e.what() << "\nRun 'ortc --help' for usage.\n";
    return 2;
  }
  if (std::string why = parseDims(dims, b.dims); !why.empty()) {
    std::cerr << "ortc: error: " << why << "\n";
    return 2;
  }
  if (!parseShapes(shapes, b.shapes)) {
    std::cerr << "ortc: error: --shape takes INPUT=AxBxC with every dim >= 1\n";
    return 2;
  }
  if (build->parsed()) {
    if (!stopAfter.empty()) {
      b.stopAfter = ortc::parsePhase(stopAfter);
      if (!b.stopAfter) {
        std::cerr << "ortc: error: --stop-after " << stopAfter
                  << ": not a phase (phases: " << phases << ")\n";
        return 2;
      }
    }
    b.emitMlir = emit == "mlir";
    b.emitFile = emitFile;
    b.bucketBytes = std::max<int64_t>(1, int64_t(bucketMb * 1024 * 1024));
    b.dumpAfter = dumpAfter;
    b.argv.assign(argv, argv + argc);
    if (std::string why = checkBuildFlags(*build, b, b.stopAfter || b.emitMlir, emitFile);
        !why.empty()) {
      std::cerr << "ortc: error: " << why << "\n";
      return 2;
    }
    return ortc::runBuild(b);
  }
  if (exportCmd->parsed())
    return ortc::runExport(x);
  if (inspect->parsed()) {
    b.model = inspectModel;
    return ortc::runInspect(b);
  }
  if (std::string why = ortc::checkTrainOptions(t); !why.empty()) {
    std::cerr << "ortc: error: " << why << "\n";
    return 2;
  }
  return ortc::runTrainLoop(t);
}
