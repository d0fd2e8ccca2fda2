//===- TrainLoopTest.cpp - runTrainLoop and the ortc-run binary ----------===//
//
// Why: `ortc train` and `ortc-run` promise the same feed semantics (reused batch,
// sequences of K batches, error messages naming the input and both shapes), the
// non-finite guard with its step number, per-step JSON logs, parameter files,
// checkpoint resume and eval. Each promise is exercised on the hand-built model
// (lr = 0 makes the per-batch losses exact: 67.5 for labels 2x, 7.5 for labels x).
//
//===----------------------------------------------------------------------===//
#include "Npz.h"
#include "TestArtifact.h"
#include "ortc/train_loop.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

using namespace ortc;
using namespace ortc::test;
using npz::DType;

namespace {

struct Fixture {
  TestArtifact artifact;
  std::string dir;
  std::ostringstream out, progress;
  TrainOptions options;

  explicit Fixture(const std::string &name) : artifact(name) {
    artifact.write();
    dir = std::filesystem::path(artifact.dir).parent_path().string();
    options.artifact = artifact.dir;
    options.data = dir + "/feed.npz";
    options.lr = 0.005;
    options.out = &out;
    options.progress = &progress;
    options.terminal = 0;
  }

  /// Writes feed.npz from x and labels of the given shapes.
  void feed(const std::vector<float> &x, std::vector<int64_t> xShape, const std::vector<float> &t,
            std::vector<int64_t> tShape, DType xType = DType::F32) {
    std::string error;
    std::vector<double> x64(x.begin(), x.end());
    std::vector<int64_t> xi64(x.begin(), x.end());
    const void *xData = xType == DType::F64   ? static_cast<const void *>(x64.data())
                        : xType == DType::I64 ? static_cast<const void *>(xi64.data())
                                              : x.data();
    ASSERT_TRUE(npz::writeNpz(
        options.data, {{"x", xType, xShape, xData}, {"labels", DType::F32, tShape, t.data()}},
        error))
        << error;
  }

  int run(TrainResult &result, std::string &error) {
    out.str("");
    progress.str("");
    return runTrainLoop(options, result, error);
  }

  /// The logged losses; a step logged as not finite (loss null) reads as NaN. Eval
  /// records ("eval_loss") are not steps.
  std::vector<double> loggedLosses(const std::string &path) {
    std::ifstream f(path);
    std::vector<double> losses;
    std::string line;
    for (int64_t i = 1; std::getline(f, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("eval_loss"))
        continue;
      EXPECT_TRUE(j["lr"].is_number());
      EXPECT_EQ(j["step"], i);
      EXPECT_GE(j["time_ms"].get<double>(), 0.0);
      EXPECT_EQ(j["finite"], !j["loss"].is_null() && std::isfinite(j["loss"].get<double>()));
      losses.push_back(j["loss"].is_null() ? std::nan("") : j["loss"].get<double>());
      ++i;
    }
    return losses;
  }
};

const std::vector<float> kX{1, 2, 3, 4}, kT{2, 4, 6, 8};

std::vector<float> concat(std::vector<float> a, const std::vector<float> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

} // namespace

TEST(TrainLoop, TrainsLogsAndSavesParams) {
  Fixture f("TrainLoop.Trains");
  f.feed(kX, {4}, kT, {4});
  f.options.steps = 20;
  f.options.logJson = f.dir + "/log.jsonl";
  f.options.saveParams = f.dir + "/params.npz";
  TrainResult r;
  std::string error;
  ASSERT_EQ(f.run(r, error), 0) << error;
  EXPECT_EQ(r.stepsDone, 20);
  EXPECT_LT(r.lastLoss, r.firstLoss * 0.1);
  std::vector<double> losses = f.loggedLosses(f.options.logJson);
  ASSERT_EQ(losses.size(), 20u);
  EXPECT_DOUBLE_EQ(losses[0], 67.5);
  EXPECT_EQ(readBytes(f.options.logJson).rfind("{\"step\": 1, \"loss\": 67.5, \"lr\": ", 0), 0u);
  EXPECT_EQ(f.out.str().rfind("step 1 loss 67.5\nstep 2 loss ", 0), 0u) << f.out.str();
  EXPECT_NE(f.out.str().find("step 20 loss "), std::string::npos);
  EXPECT_EQ(f.progress.str(), "");
  std::vector<npz::Array> saved;
  ASSERT_TRUE(npz::readNpz(f.options.saveParams, saved, error)) << error;
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].name, "w");
  EXPECT_EQ(saved[1].name, "count");
  float count;
  std::memcpy(&count, saved[1].data.data(), 4);
  EXPECT_EQ(count, 20.0f);
}

TEST(TrainLoop, SequenceOfBatchesIsUsedInTurn) {
  Fixture f("TrainLoop.Sequence");
  f.feed(concat(kX, kX), {2, 4}, concat(kT, kX), {2, 4});
  f.options.steps = 4;
  f.options.lr = 0;
  f.options.logJson = f.dir + "/log.jsonl";
  f.options.eval = true;
  TrainResult r;
  std::string error;
  ASSERT_EQ(f.run(r, error), 0) << error;
  EXPECT_EQ(f.loggedLosses(f.options.logJson), (std::vector<double>{67.5, 7.5, 67.5, 7.5}));
  EXPECT_TRUE(r.evaluated);
  EXPECT_DOUBLE_EQ(r.evalLoss, 37.5);
  std::string out = f.out.str();
  ASSERT_GE(out.size(), 15u);
  EXPECT_EQ(out.substr(out.size() - 15), "eval loss 37.5\n") << out;
}

TEST(TrainLoop, SingleBatchMixesWithASequence) {
  Fixture f("TrainLoop.Mixed");
  f.feed(kX, {4}, concat(kT, kX), {2, 4}); // x reused, labels in turn
  f.options.steps = 3;
  f.options.lr = 0;
  f.options.logJson = f.dir + "/log.jsonl";
  TrainResult r;
  std::string error;
  ASSERT_EQ(f.run(r, error), 0) << error;
  EXPECT_EQ(f.loggedLosses(f.options.logJson), (std::vector<double>{67.5, 7.5, 67.5}));
}

TEST(TrainLoop, Float64FeedIsConvertedToF32) {
  Fixture f("TrainLoop.Convert");
  f.feed(kX, {4}, kT, {4}, DType::F64);
  f.options.steps = 1;
  TrainResult r;
  std::string error;
  ASSERT_EQ(f.run(r, error), 0) << error;
  EXPECT_EQ(r.firstLoss, 67.5);
}

TEST(TrainLoop, NonFiniteLossWithFiniteInputsIsNamedAsTheLoss) {
  Fixture f("TrainLoop.NonFiniteLoss");
  std::vector<float> huge = kT;
  huge[1] = 3e38f; // finite, but its square overflows the loss
  f.feed(kX, {1, 4}, huge, {1, 4});
  f.options.steps = 1;
  TrainResult r;
  std::string error;
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_EQ(error, "step 1: not finite: the loss is inf (every input of the step is finite); "
                   "parameters left unchanged");
}

TEST(TrainLoop, NonFiniteLossStopsWithTheStepNumber) {
  Fixture f("TrainLoop.NonFinite");
  std::vector<float> bad = kT;
  bad[1] = std::numeric_limits<float>::infinity();
  f.feed(concat(concat(kX, kX), kX), {3, 4}, concat(concat(kT, kT), bad), {3, 4});
  f.options.steps = 5;
  f.options.saveParams = f.dir + "/params.npz";
  f.options.saveCheckpoint = f.dir + "/ckpt.npz";
  f.options.logJson = f.dir + "/log.jsonl";
  TrainResult r;
  std::string error;
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_EQ(error, "step 3: not finite: input 'labels' holds inf at [1] (its first NaN/Inf; "
                   "batch 3 of 3 in the feed), loss=inf; parameters left unchanged");
  EXPECT_EQ(r.stepsDone, 2);
  // The step that stopped the run is logged too, as not finite.
  std::vector<double> logged = f.loggedLosses(f.options.logJson);
  ASSERT_EQ(logged.size(), 3u);
  EXPECT_TRUE(std::isnan(logged[2]));
  EXPECT_FALSE(std::filesystem::exists(f.options.saveParams));
  EXPECT_FALSE(std::filesystem::exists(f.options.saveCheckpoint));
}

TEST(TrainLoop, FeedErrorsNameTheInputAndShapes) {
  Fixture f("TrainLoop.FeedErrors");
  TrainResult r;
  std::string error;
  f.feed({1, 2, 3, 4, 5}, {5}, kT, {4});
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("feed.npz: input 'x' needs shape [4] (or [K,4] for a sequence of K "
                       "batches), got [5]"),
            std::string::npos)
      << error;
  f.feed(kX, {4}, concat(kT, kT), {4, 2});
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("input 'labels' needs shape [4] (or [K,4] for a sequence of K batches), "
                       "got [4,2]"),
            std::string::npos)
      << error;
  f.feed(kX, {4}, kT, {4}, DType::I64);
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("input 'x' is int64 (<i8), the model expects f32 (<f4)"), std::string::npos)
      << error;
  f.feed(concat(kX, kX), {2, 4}, concat(concat(kT, kT), kT), {3, 4});
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("different numbers of batches (2 and 3)"), std::string::npos) << error;
  std::string e2;
  ASSERT_TRUE(npz::writeNpz(f.options.data, {{"x", DType::F32, {4}, kX.data()}}, e2));
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("feed.npz: no array for input 'labels' [4] (train_step input f32); the "
                       "file has: x"),
            std::string::npos)
      << error;
  f.options.data = f.dir + "/absent.npz";
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("absent.npz"), std::string::npos) << error;
}

TEST(TrainLoop, LoadParamsBeforeTraining) {
  Fixture f("TrainLoop.LoadParams");
  f.feed(kX, {4}, kT, {4});
  std::vector<float> exact{2, 2, 2, 2}, count{0}, three{1, 2, 3};
  std::string error;
  f.options.loadParams = f.dir + "/start.npz";
  ASSERT_TRUE(npz::writeNpz(
      f.options.loadParams,
      {{"w", DType::F32, {4}, exact.data()}, {"count", DType::F32, {}, count.data()}}, error));
  f.options.steps = 1;
  TrainResult r;
  ASSERT_EQ(f.run(r, error), 0) << error;
  EXPECT_EQ(r.firstLoss, 0.0);
  ASSERT_TRUE(npz::writeNpz(
      f.options.loadParams,
      {{"w", DType::F32, {3}, three.data()}, {"count", DType::F32, {}, count.data()}}, error));
  EXPECT_EQ(f.run(r, error), 1);
  EXPECT_NE(error.find("'w' has shape [3]"), std::string::npos) << error;
  EXPECT_EQ(r.stepsDone, 0);
}

TEST(TrainLoop, CheckpointResumeMatchesAContinuousRun) {
  Fixture f("TrainLoop.Resume");
  f.feed(concat(kX, kX), {2, 4}, concat(kT, kX), {2, 4});
  TrainResult r;
  std::string error;
  f.options.steps = 10;
  f.options.logJson = f.dir + "/all.jsonl";
  ASSERT_EQ(f.run(r, error), 0) << error;
  std::vector<double> all = f.loggedLosses(f.options.logJson);

  f.options.steps = 6;
  f.options.logJson = f.dir + "/first.jsonl";
  f.options.saveCheckpoint = f.dir + "/ckpt.npz";
  ASSERT_EQ(f.run(r, error), 0) << error;
  f.options.saveCheckpoint.clear();
  f.options.loadCheckpoint = f.dir + "/ckpt.npz";
  f.options.steps = 4; // 6 is even, so batch i mod 2 lines up again
  f.options.logJson = f.dir + "/second.jsonl";
  ASSERT_EQ(f.run(r, error), 0) << error;
  std::vector<double> resumed = f.loggedLosses(f.dir + "/first.jsonl");
  for (double l : f.loggedLosses(f.options.logJson))
    resumed.push_back(l);
  EXPECT_EQ(resumed, all);
}

TEST(TrainLoop, TerminalAndQuietProgress) {
  Fixture f("TrainLoop.Progress");
  f.feed(kX, {4}, kT, {4});
  f.options.steps = 3;
  f.options.terminal = 1;
  TrainResult r;
  std::string error;
  ASSERT_EQ(f.run(r, error), 0) << error;
  std::string p = f.progress.str();
  EXPECT_NE(p.find("\rstep 3/3  loss "), std::string::npos) << p;
  EXPECT_NE(p.find(" steps/s"), std::string::npos) << p;
  EXPECT_EQ(p.back(), '\n');
  EXPECT_EQ(f.out.str(), "");
  f.options.quiet = true;
  f.options.terminal = 0;
  ASSERT_EQ(f.run(r, error), 0) << error;
  EXPECT_EQ(f.progress.str(), "");
  EXPECT_EQ(f.out.str(), "");
}

TEST(OrtcRun, CommandLine) {
  Fixture f("OrtcRun.CommandLine");
  f.feed(kX, {4}, kT, {4});
  std::string exe = ORTC_RUN_EXE, log = f.dir + "/out.txt";
  auto run = [&](const std::string &args) {
    return shell(exe + " " + args + " > '" + log + "' 2>&1");
  };
  EXPECT_EQ(run("--help"), 0);
  EXPECT_NE(readBytes(log).find("usage: ortc-run train MODEL.ortc --data FEED.npz"),
            std::string::npos);
  EXPECT_EQ(run(""), 2);
  EXPECT_EQ(run("fit x"), 2);
  EXPECT_EQ(run("train " + f.artifact.dir + " --data " + f.options.data + " --bogus"), 2);
  EXPECT_NE(readBytes(log).find("ortc-run: error: unknown option '--bogus'"),
            std::string::npos);
  EXPECT_EQ(run("train " + f.artifact.dir + " --data " + f.options.data + " --steps x"), 2);
  // A learning rate that is not a finite number >= 0 is refused before any step.
  for (const char *lr : {"nan", "-1", "inf"}) {
    EXPECT_EQ(run("train " + f.artifact.dir + " --data " + f.options.data + " --lr " + lr), 2) << lr;
    EXPECT_NE(readBytes(log).find("ortc-run: error: --lr needs a finite number >= 0, got '" +
                                  std::string(lr) + "'"),
              std::string::npos)
        << readBytes(log);
    EXPECT_EQ(readBytes(log).find("step 1"), std::string::npos) << readBytes(log);
  }
  EXPECT_EQ(run("train " + f.artifact.dir + " --steps 3"), 2);
  EXPECT_EQ(run("train " + f.artifact.dir + " --data"), 2);
  EXPECT_EQ(run("train " + f.dir + "/nope.ortc --data " + f.options.data), 1);
  EXPECT_NE(readBytes(log).find("ortc-run: error: " + f.dir +
                                "/nope.ortc: not an ortc artifact (no such directory)"),
            std::string::npos)
      << readBytes(log);
  EXPECT_EQ(run("train " + f.artifact.dir + " --data=" + f.options.data +
                " --steps 5 --lr=0.005 --seed 3 --threads 1 --eval --log-json " + f.dir +
                "/log.jsonl"),
            0)
      << readBytes(log);
  std::string text = readBytes(log);
  EXPECT_NE(text.find("step 5 loss "), std::string::npos) << text;
  EXPECT_NE(text.find("eval loss "), std::string::npos) << text;
  EXPECT_EQ(f.loggedLosses(f.dir + "/log.jsonl").size(), 5u);
}
