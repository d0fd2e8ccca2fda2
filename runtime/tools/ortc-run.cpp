//===- ortc-run.cpp - Train a precompiled artifact, nothing else needed --===//
//
// The runtime as a standalone executable: depends on the C++ runtime, zlib and the
// artifact's own kernels only (no MLIR, LLVM, protobuf or Python), so a cluster node
// can train what was compiled elsewhere. Argument parsing is hand-written to keep it
// small.
//
//===----------------------------------------------------------------------===//
#include "ortc/train_loop.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static const char *kUsage =
    "usage: ortc-run train MODEL.ortc --data FEED.npz [options]\n"
    "\n"
    "Runs the training step of a compiled ortc artifact.\n"
    "\n"
    "options:\n"
    "  --data FEED.npz          one array per model input (plus labels); an extra leading\n"
    "                           dim makes a sequence of batches used in turn\n"
    "  --steps N                number of steps (default 10)\n"
    "  --lr LR                  learning rate (default 0.01)\n"
    "  --seed S                 dropout seed (default 0)\n"
    "  --log-json FILE          one JSON line per step: step, loss, time_ms\n"
    "  --save-params OUT.npz    write the trained parameters by ONNX name\n"
    "  --load-params IN.npz     start from these parameters\n"
    "  --save-checkpoint F.npz  write parameters and optimizer state\n"
    "  --load-checkpoint F.npz  resume from a checkpoint\n"
    "  --eval                   print the eval-step loss after training\n"
    "  -h, --help               show this help\n";

static int usage(const std::string &msg) {
  std::fprintf(stderr, "ortc-run: usage error: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

int main(int argc, char **argv) {
  ortc::TrainOptions o;
  o.program = "ortc-run";
  if (argc >= 2 && (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help"))) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc < 3 || std::strcmp(argv[1], "train") != 0)
    return usage("expected 'train MODEL.ortc'");
  o.artifact = argv[2];
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--eval") {
      o.eval = true;
      continue;
    }
    if (i + 1 >= argc)
      return usage(a + " needs a value");
    std::string v = argv[++i];
    char *end = nullptr;
    if (a == "--data") o.data = v;
    else if (a == "--log-json") o.logJson = v;
    else if (a == "--save-params") o.saveParams = v;
    else if (a == "--load-params") o.loadParams = v;
    else if (a == "--save-checkpoint") o.saveCheckpoint = v;
    else if (a == "--load-checkpoint") o.loadCheckpoint = v;
    else if (a == "--steps") {
      o.steps = std::strtoll(v.c_str(), &end, 10);
      if (*end || o.steps < 0)
        return usage("--steps takes a count >= 0");
    } else if (a == "--lr") {
      o.lr = std::strtod(v.c_str(), &end);
      if (*end)
        return usage("--lr takes a number");
    } else if (a == "--seed") {
      o.seed = std::strtoll(v.c_str(), &end, 10);
      if (*end)
        return usage("--seed takes an integer");
    } else
      return usage("unknown option " + a);
  }
  if (o.data.empty())
    return usage("--data is required");
  return ortc::runTrainLoop(o);
}
