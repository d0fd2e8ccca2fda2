//===- train_loop.h - The training loop of `ortc train` and ortc-run -*- C++ -*-===//
//
// Why: the compiler's `ortc train` subcommand and the standalone `ortc-run` must
// train an artifact in exactly the same way (feed semantics, scalars, the
// non-finite guard, logs, checkpoints), so the loop lives once, here, on top of
// the C API in runtime.h. Callers only parse their command line and print the
// returned error.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_TRAIN_LOOP_H
#define ORTC_RUNTIME_TRAIN_LOOP_H

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

namespace ortc {

/// What to train and where to write. Empty paths mean "not requested".
struct TrainOptions {
  std::string artifact;       ///< the model.ortc folder
  std::string data;           ///< the feed: an .npz, a folder of .npz shards (or of NAME.npy
                              ///< arrays) or a glob of shards, one array per train_step
                              ///< input of role "input", read a batch at a time (float
                              ///< arrays convert to f32/f64, int arrays to i64/i32)
                              ///< Data parallel: rank r reads micro-batches m * ranks + r;
                              ///< with "{rank}" in it, each rank its own feed, in order
  int64_t epochs = 0;         ///< > 0: train to the end of this many passes over the
                              ///< feed (instead of `steps`)
  int64_t shuffle = -1;       ///< >= 0: each epoch in an order drawn from (this, epoch)
  int64_t steps = 10;         ///< number of optimizer steps
  /// Micro-batches per optimizer step (feed batches i*N .. i*N+N-1 for step i): the
  /// first N-1 run accumulate_step, the last train_step with grad_scale 1/N; the
  /// logged loss is their mean. Dropout draws per micro-batch.
  int64_t gradAccum = 1;
  double lr = 0.01;           ///< peak learning rate; the schedule scales it per step
  /// Learning-rate schedule (scheduledLr): constant, linear, cosine or inverse-sqrt,
  /// after `warmupSteps` of linear warm-up from 0; linear and cosine decay to `minLr`
  /// at step `scheduleSteps` (0: the last step of this run).
  std::string lrSchedule = "constant";
  int64_t warmupSteps = 0;
  double minLr = 0;
  int64_t scheduleSteps = 0;
  int64_t seed = 0;           ///< written to the "seed" scalar, if the model has one
  /// Values for the optimizer's run-time scalars ("beta1", "beta2", "eps",
  /// "weight_decay" of AdamW), written before training; the rest keep the artifact's
  /// defaults (the build's values).
  std::map<std::string, double> hyper;
  std::string logJson;        ///< one {"step","loss","time_ms"} object per line
  std::string saveParams;     ///< .npz of parameters and buffers after training
  std::string loadParams;     ///< .npz of parameters and buffers loaded before training
  std::string saveCheckpoint; ///< .npz of parameters, buffers and state after training
  std::string loadCheckpoint; ///< checkpoint loaded before training (before loadParams)
  int64_t initSeed = -1;      ///< >= 0: draw the weights a --no-params artifact omits
                              ///< (ortc_session_init_omitted), before any load
  bool eval = false;          ///< run eval_step over the feed after training
  std::string evalData;       ///< eval feed (.npz); the training feed if empty
  int64_t evalEvery = 0;      ///< > 0: evaluate on evalData every N steps (logged)
  bool quiet = false;         ///< no progress output
  int64_t logEvery = 1;       ///< print every N-th step (and the last); the JSON log has all
  int threads = 0;            ///< kernel threads; 0 = ORTC_THREADS, else one per core
  bool noGraphs = false;      ///< GPU: launch every kernel every step (no graph replay)
  /// A step whose loss or gradients are not finite: false (`--on-nonfinite stop`)
  /// logs it and stops with exit 1; true (`skip`) logs it and goes on (the step's
  /// update is gated off on the device: parameters and optimizer state unchanged).
  bool skipNonFinite = false;
  /// `out` (default std::cout) gets the plain "step i loss X" lines and "eval loss X";
  /// `progress` (default std::cerr) gets the self-overwriting terminal line.
  std::ostream *out = nullptr, *progress = nullptr;
  /// Progress style: 1 = terminal line on `progress`, 0 = plain lines on `out`,
  /// -1 = decide by isatty(stderr).
  int terminal = -1;
  /// Message prefix of the printing overload of runTrainLoop ("ortc: error: ...", as
  /// every error of the ortc command starts).
  std::string program = "ortc";
};

/// What happened; filled as far as the loop got.
struct TrainResult {
  int64_t stepsDone = 0; ///< steps run (skipped ones included)
  int64_t skipped = 0;   ///< steps skipped as not finite (skipNonFinite)
  double firstLoss = 0;  ///< loss of step 1
  double lastLoss = 0;   ///< loss of the last successful step
  bool evaluated = false;
  double evalLoss = 0; ///< mean eval_step loss over the feed's batches
  /// Share of counted rows whose arg-max class is the label (classification
  /// artifacts: eval_step has "correct" and "counted" outputs), else NaN.
  double evalAccuracy = 0;
};

/// The usage error in `options` ("" if none), naming the flag as `--flag-name`:
/// numbers out of range, a schedule name that is none, flags that need another
/// (--eval-every without --eval-data, --min-lr with a constant schedule, ...).
std::string checkTrainOptions(const TrainOptions &options);

/// The learning rate of 0-based optimizer step `p` of a run whose schedule ends at
/// step `horizon` (HF transformers' schedules, with a floor): during warm-up
/// lr * p / warmup; then constant: lr; linear: minLr + (lr - minLr) * (horizon - p) /
/// (horizon - warmup); cosine: minLr + (lr - minLr) * (1 + cos(pi * progress)) / 2,
/// progress = (p - warmup) / (horizon - warmup); inverse-sqrt: max(minLr, lr /
/// sqrt((p + t - warmup) / t)), t = warmup, or 10000 without warm-up. Past the
/// horizon, linear and cosine stay at minLr.
double scheduledLr(const TrainOptions &options, int64_t p, int64_t horizon);

/// Data-parallel runs (an artifact built with --data-parallel, started by mpirun): every
/// rank runs the loop on its own batches; rank 0 prints, logs, evaluates and writes
/// parameters (and every rank its checkpoint with --zero 1). A failure of one rank alone
/// (not a non-finite step, which every rank sees) prints the error here and ends every
/// rank (ortc_abort_ranks), so that no rank waits forever.
/// Runs the loop: load the artifact, create a session, load checkpoint/params,
/// check the feed, then for each step i (0-based) bind batch i mod K of every
/// input, lr and seed, run train_step, read `loss` and `finite`, log the step
/// ("finite": false for a step whose `finite` is 0). Such a step stops the loop
/// with "step N: loss or gradients are not finite (loss=...); parameters left
/// unchanged", unless skipNonFinite. Returns the process exit code (0, or 1 with
/// `error` set; the message has no program-name prefix).
int runTrainLoop(const TrainOptions &options, TrainResult &result, std::string &error);

/// The same, for command-line front ends: on failure prints
/// "<options.program>: error: <message>" to stderr. Returns the exit code.
int runTrainLoop(const TrainOptions &options);

} // namespace ortc

#endif // ORTC_RUNTIME_TRAIN_LOOP_H
