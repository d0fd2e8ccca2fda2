//===- ortc-run.cpp - Train a compiled artifact without the compiler -----===//
//
// Why: a model.ortc folder should train on a machine that has no MLIR, LLVM,
// protobuf or Python. This binary is the runtime's train loop behind a tiny,
// hand-written command line (no CLI library, to stay small). Exit codes: 0 ok,
// 1 runtime error ("ortc-run: error: ..."), 2 usage error ("ortc-run: error: ..." too: every error line starts the same).
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"
#include "ortc/train_loop.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

namespace {

const char *kUsage = "usage: ortc-run train MODEL.ortc --data FEED.npz [options]\n";

const char *kHelp =
    "ortc-run: train a compiled ortc artifact (model.ortc/) on the CPU or a GPU.\n"
    "\n"
    "usage: ortc-run train MODEL.ortc --data FEED.npz [options]\n"
    "\n"
    "  --data FEED              an .npz with one array per model input, named as in the\n"
    "                           model (an extra leading dimension K: K batches), a\n"
    "                           folder of .npz shards or NAME.npy arrays, or a glob of\n"
    "                           shards; read a batch at a time. Under mpirun (a\n"
    "                           --data-parallel artifact) rank r reads batches\n"
    "                           m * ranks + r, or its own feed where FEED has {rank}\n"
    "  --epochs E               train to the end of E passes over the feed (not --steps)\n"
    "  --shuffle SEED           each epoch's batches in an order drawn from SEED\n"
    "  --steps N                number of training steps (default 10)\n"
    "  --grad-accum N           micro-batches per step, gradients averaged (the\n"
    "                           artifact needs ortc build --grad-accum)\n"
    "  --lr LR                  learning rate, the schedule's peak (default 0.01)\n"
    "  --lr-schedule S          constant (default), linear, cosine or inverse-sqrt\n"
    "  --warmup-steps N         linear warm-up from 0 over N steps (default 0)\n"
    "  --min-lr LR              floor the decaying schedules end at (default 0)\n"
    "  --schedule-steps N       step where linear/cosine reach --min-lr (default:\n"
    "                           the run's last step)\n"
    "  --seed S                 dropout seed (default 0)\n"
    "  --beta1 B, --beta2 B, --eps E, --weight-decay W\n"
    "                           AdamW's settings (default: the artifact's)\n"
    "  --log-json FILE          write {\"step\",\"loss\",\"time_ms\"} per step, one per line\n"
    "  --save-params OUT.npz    write the trained parameters and buffers\n"
    "  --load-params IN.npz     start from these parameters and buffers\n"
    "  --save-checkpoint FILE   write parameters, buffers and optimizer state (.npz)\n"
    "  --load-checkpoint FILE   resume from a checkpoint\n"
    "  --init-seed S            draw the weights an `ortc build --no-params` artifact\n"
    "                           leaves out (N(0, 0.02^2), seeded), e.g. for benchmarks\n"
    "  --eval                   evaluate after training (on --eval-data, else --data)\n"
    "  --eval-data FILE.npz     eval feed: loss, and accuracy for classification\n"
    "  --eval-every N           evaluate on --eval-data every N steps (logged)\n"
    "  --log-every N            print every N-th step (the JSON log has all)\n"
    "  --threads N              kernel threads (default: ORTC_THREADS, else\n"
    "                           OMP_NUM_THREADS, else one per physical core)\n"
    "  --quiet                  no progress output\n"
    "  --no-graphs              GPU: launch every kernel every step instead of\n"
    "                           replaying the captured step graph\n"
    "  --on-nonfinite stop|skip a step whose loss or gradients are not finite (its\n"
    "                           update is not applied) stops the run (default) or is\n"
    "                           skipped; either way it is logged with \"finite\": false\n"
    "  -h, --help               show this help\n"
    "\n"
    "Exit status: 0 success, 1 error, 2 usage error.\n";

int usageError(const std::string &message) {
  std::cerr << "ortc-run: error: " << message << "\n"
            << kUsage << "Run 'ortc-run --help' for the options.\n";
  return 2;
}

bool parseInt(const std::string &s, int64_t &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  out = v;
  return errno == 0 && *end == '\0';
}

bool parseDouble(const std::string &s, double &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return errno == 0 && *end == '\0' && std::isfinite(out);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usageError("missing command");
  std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kHelp;
    return 0;
  }
  if (command != "train")
    return usageError("unknown command '" + command + "' (the only command is 'train')");

  ortc::TrainOptions o;
  bool haveData = false, stepsGiven = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "-h" || arg == "--help") {
      std::cout << kHelp;
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!o.artifact.empty())
        return usageError("unexpected argument '" + arg + "' (the artifact is '" + o.artifact +
                          "')");
      o.artifact = arg;
      continue;
    }
    size_t eq = arg.find('=');
    bool inlineValue = eq != std::string::npos;
    if (inlineValue) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg == "--eval" || arg == "--quiet" || arg == "--no-graphs") {
      if (inlineValue)
        return usageError(arg + " takes no value");
      (arg == "--eval" ? o.eval : arg == "--quiet" ? o.quiet : o.noGraphs) = true;
      continue;
    }
    static const char *valued[] = {
        "--data",          "--steps",         "--lr",           "--seed",
        "--log-json",      "--save-params",   "--load-params",  "--save-checkpoint",
        "--load-checkpoint", "--threads",     "--init-seed",    "--on-nonfinite",
        "--lr-schedule",   "--warmup-steps",  "--min-lr",       "--schedule-steps",
        "--eval-data",     "--eval-every",    "--log-every",    "--grad-accum",
        "--epochs",        "--shuffle",       "--beta1",        "--beta2",
        "--eps",           "--weight-decay"};
    bool known = false;
    for (const char *v : valued)
      known |= arg == v;
    if (!known)
      return usageError("unknown option '" + arg + "'");
    if (!inlineValue) {
      if (i + 1 >= argc)
        return usageError(arg + " needs a value");
      value = argv[++i];
    }
    int64_t n = 0;
    if (arg == "--data") {
      o.data = value;
      haveData = true;
    } else if (arg == "--steps") {
      if (!parseInt(value, n) || n < 0)
        return usageError("--steps needs a non-negative integer, got '" + value + "'");
      o.steps = n;
      stepsGiven = true;
    } else if (arg == "--lr") {
      if (!parseDouble(value, o.lr) || o.lr < 0)
        return usageError("--lr needs a finite number >= 0, got '" + value + "'");
    } else if (arg == "--seed") {
      if (!parseInt(value, o.seed))
        return usageError("--seed needs an integer, got '" + value + "'");
    } else if (arg == "--threads") {
      if (!parseInt(value, n) || n < 1 || n > 4096)
        return usageError("--threads needs a positive integer, got '" + value + "'");
      o.threads = int(n);
    } else if (arg == "--on-nonfinite") {
      if (value != "stop" && value != "skip")
        return usageError("--on-nonfinite takes stop or skip, got '" + value + "'");
      o.skipNonFinite = value == "skip";
    } else if (arg == "--init-seed") {
      if (!parseInt(value, n) || n < 0)
        return usageError("--init-seed needs a non-negative integer, got '" + value + "'");
      o.initSeed = n;
    } else if (arg == "--lr-schedule") {
      o.lrSchedule = value;
    } else if (arg == "--warmup-steps" || arg == "--schedule-steps" || arg == "--eval-every" ||
               arg == "--log-every" || arg == "--grad-accum" || arg == "--epochs" ||
               arg == "--shuffle") {
      if (!parseInt(value, n))
        return usageError(arg + " needs an integer, got '" + value + "'");
      if ((arg == "--epochs" || arg == "--schedule-steps") && n < 1) // (0 is "not given")
        return usageError(arg + " needs an integer >= 1, got '" + value + "'");
      (arg == "--warmup-steps"     ? o.warmupSteps
       : arg == "--schedule-steps" ? o.scheduleSteps
       : arg == "--eval-every"     ? o.evalEvery
       : arg == "--grad-accum"     ? o.gradAccum
       : arg == "--epochs"         ? o.epochs
       : arg == "--shuffle"        ? o.shuffle
                                   : o.logEvery) = n;
    } else if (arg == "--beta1" || arg == "--beta2" || arg == "--eps" || arg == "--weight-decay") {
      double v = 0;
      if (!parseDouble(value, v))
        return usageError(arg + " needs a finite number, got '" + value + "'");
      o.hyper[arg == "--weight-decay" ? "weight_decay" : arg.substr(2)] = v;
    } else if (arg == "--min-lr") {
      if (!parseDouble(value, o.minLr))
        return usageError("--min-lr needs a finite number, got '" + value + "'");
    } else if (arg == "--eval-data") {
      o.evalData = value;
    } else if (arg == "--log-json") {
      o.logJson = value;
    } else if (arg == "--save-params") {
      o.saveParams = value;
    } else if (arg == "--load-params") {
      o.loadParams = value;
    } else if (arg == "--save-checkpoint") {
      o.saveCheckpoint = value;
    } else {
      o.loadCheckpoint = value;
    }
  }
  if (o.artifact.empty())
    return usageError("missing the artifact folder (MODEL.ortc)");
  if (!haveData || o.data.empty())
    return usageError("missing --data FEED.npz");

  if (stepsGiven && o.epochs > 0)
    return usageError("--steps and --epochs both say how long to train: give one");
  if (std::string why = ortc::checkTrainOptions(o); !why.empty())
    return usageError(why);
  o.program = "ortc-run";
  return ortc::runTrainLoop(o);
}
