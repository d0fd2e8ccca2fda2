//===- TrainLoop.cpp - The loop behind `ortc train` and `ortc-run` -------===//
//
// Why: one implementation of the feed semantics and the step guard for both
// front ends, written against the public C API only (so the API is enough to
// train). The feed (Dataset.h: a file, folder or glob of shards, read a batch at a
// time) holds one array per function input of role "input"; an array with one extra
// leading dimension is a sequence of K batches, otherwise the batch is reused.
// Micro-batch m (counted from the first step of training, so a resumed run goes on
// where it stopped) reads batch m mod K, or the epoch's shuffled order's. numpy's
// defaults (float64, int64) are
// converted within their kind (float -> f32/f64, int -> i64/i32 range-checked);
// float <-> int is refused. "lr" and "seed" scalars come from the options ("lr"
// follows the schedule, "seed" is the same every step); "step" is optimizer state
// the kernels advance, which also places a resumed run on its schedule.
//
//===----------------------------------------------------------------------===//
#include "ortc/train_loop.h"

#include "Dataset.h"
#include "Npz.h"
#include "ortc/runtime.h"
#include "ortc_scalar.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <vector>

namespace ortc {
namespace {

using Clock = std::chrono::steady_clock;

struct ArtifactDeleter {
  void operator()(ortc_artifact *a) const { ortc_artifact_free(a); }
};
struct SessionDeleter {
  void operator()(ortc_session *s) const { ortc_session_free(s); }
};

struct TensorRef {
  int64_t index = -1;
  std::string name, role, dtype;
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string checkNumber(const char *flag, double v, double lo, bool loOpen, double hi = INFINITY) {
  if (std::isfinite(v) && (loOpen ? v > lo : v >= lo) && v <= hi)
    return "";
  return std::string(flag) + " needs a finite number " + (loOpen ? "> " : ">= ") + fmt(lo) +
         (std::isfinite(hi) ? " and <= " + fmt(hi) : "") + ", got " + fmt(v);
}

std::string checkCount(const char *flag, int64_t v, int64_t lo) {
  return v >= lo ? "" : std::string(flag) + " needs an integer >= " + std::to_string(lo) +
                            ", got " + std::to_string(v);
}

class Loop {
public:
  /// A failure of this rank alone in a data-parallel run: the others must be ended.
  bool failedAlone() const { return world > 1 && !agreed; }
  Loop(const TrainOptions &o, TrainResult &r, std::string &error)
      : o(o), r(r), error(error), out(o.out ? *o.out : std::cout),
        progress(o.progress ? *o.progress : std::cerr),
        tty(o.terminal < 0 ? isatty(2) == 1 : o.terminal == 1) {}

  int run() {
    if (std::string why = checkTrainOptions(o); !why.empty())
      return fail(why);
    ortc_artifact *a = nullptr;
    if (ortc_artifact_load(o.artifact.c_str(), &a))
      return apiFail();
    artifact.reset(a);
    ortc_artifact_set_threads(a, o.threads);
    ortc_artifact_ranks(a, &rank, &world);
    sharded = ortc_artifact_shard_ranks(a) > 0;
    // Data parallel: rank 0 speaks for the run (its loss is the global mean); the
    // others only train.
    lead = rank == 0;
    ortc_session *s = nullptr;
    if (ortc_session_create(a, &s))
      return apiFail();
    session.reset(s);
    ortc_session_set_graphs(s, !o.noGraphs);
    if (o.initSeed >= 0 && ortc_session_init_omitted(s, uint64_t(o.initSeed)))
      return apiFail();
    if (ortc_artifact_omitted_inits(a) && o.initSeed < 0 && o.loadParams.empty() && o.loadCheckpoint.empty())
      return fail(o.artifact + " was built with --no-params: its weights are not in it; give --load-params, "
                               "--load-checkpoint or --init-seed");
    if (!o.loadCheckpoint.empty() &&
        ortc_checkpoint_load(s, checkpointOfRank(o.loadCheckpoint).c_str()))
      return fail(std::string(ortc_last_error()) +
                  (sharded ? " (a --zero 1 checkpoint is one file per rank, NAME.npz for rank 0 "
                             "and NAME.rank<r>.npz for the others, and resumes on as many ranks "
                             "as wrote it)"
                           : ""));
    if (!o.loadParams.empty() && ortc_load_params_npz(s, o.loadParams.c_str(), ORTC_ROLES_PARAMS))
      return apiFail();
    // Data parallel: `{rank}` in --data names each rank's own feed (read in order);
    // otherwise every rank reads its rank-strided share of the one feed.
    ownFeed = o.data.find("{rank}") != std::string::npos;
    std::string data = o.data;
    if (ownFeed)
      data.replace(data.find("{rank}"), 6, std::to_string(rank));
    if (!train.open(data, error) || !prepare("train_step", train) ||
        !outputScalar("train_step", "loss", lossRef))
      return 1;
    if (world > 1 && !ownFeed && train.batches() < world)
      return fail(o.data + " has " + std::to_string(train.batches()) + " batch" +
                  (train.batches() == 1 ? "" : "es") + ", fewer than the " +
                  std::to_string(world) + " ranks of this run (each rank trains on its own)");
    bool haveFinite = outputScalar("train_step", "finite", finiteRef, /*optional=*/true);
    // fp16 artifacts scale the loss (ortc build --precision fp16): a step whose gradients
    // overflow is skipped by design, the scale halves, and training goes on.
    TensorRef scaleRef;
    bool scaled = outputScalar("train_step", "loss_scale", scaleRef, /*optional=*/true);
    if (!error.empty())
      return 1;
    // Gradient accumulation: micro-batches 1..N-1 of a step run accumulate_step (whose
    // inputs are train_step's but lr).
    TensorRef accumulateLossRef;
    bool accumulates = ortc_function_input_count(session.get(), "accumulate_step") >= 0;
    if (o.gradAccum > 1 && !accumulates)
      return fail("--grad-accum " + std::to_string(o.gradAccum) + ": " + o.artifact +
                  " has no accumulate_step; build it with ortc build --grad-accum");
    if (o.gradAccum > 1 && !outputScalar("accumulate_step", "loss", accumulateLossRef))
      return 1;
    if (accumulates && !setScalar("grad_scale", 1.0 / double(o.gradAccum)))
      return 1;
    for (const auto &[name, value] : o.hyper) {
      TensorRef t = tensor(name);
      if (t.role != "scalar")
        return fail("--" + (name == "weight_decay" ? std::string("weight-decay") : name) + ": " +
                    o.artifact + " has no run-time '" + name +
                    "' (AdamW's betas, eps and weight decay are; an sgd artifact's settings are "
                    "fixed at build)");
      if (!setScalar(name.c_str(), value))
        return 1;
    }
    // The schedule goes on from the optimizer steps a loaded checkpoint has applied.
    int64_t start = 0;
    if (TensorRef step = tensor("step"); step.role == "state" && step.dtype == "i64")
      std::memcpy(&start, ortc_tensor_data(session.get(), step.index), 8);
    int64_t steps = o.steps;
    if (o.epochs > 0) { // to the end of epoch E, from where a resumed run stands
      int64_t readers = ownFeed ? 1 : world; // ranks sharing the feed's batches
      steps = std::max<int64_t>(0, o.epochs * train.batches() / (o.gradAccum * readers) - start);
      if (o.epochs * train.batches() < o.gradAccum * readers)
        return fail("--epochs " + std::to_string(o.epochs) + " of " + std::to_string(train.batches()) +
                    " batches is less than one step of --grad-accum " + std::to_string(o.gradAccum));
    }
    int64_t horizon = o.scheduleSteps > 0 ? o.scheduleSteps : start + steps;
    Prefetcher prefetch(train, BatchOrder(train.batches(), o.shuffle >= 0, uint64_t(o.shuffle),
                                          ownFeed ? 1 : world, ownFeed ? 0 : rank));
    if (o.lrSchedule != "constant" && o.lrSchedule != "inverse-sqrt" && horizon <= o.warmupSteps)
      return fail("--lr-schedule " + o.lrSchedule + " decays after the " +
                  std::to_string(o.warmupSteps) + " warm-up steps, but the schedule ends at step " +
                  std::to_string(horizon) + " (--schedule-steps, else the run's last step)");
    if (!o.logJson.empty() && lead) {
      log = std::make_unique<std::ofstream>(o.logJson);
      if (!*log)
        return fail("cannot write " + o.logJson + ": " + std::strerror(errno));
    }
    Clock::time_point start0 = Clock::now(), lastDraw;
    for (int64_t i = 0; i < steps; ++i) {
      Clock::time_point t0 = Clock::now();
      double lr = scheduledLr(o, start + i, horizon);
      // Micro-batch k of step i is micro-batch (start + i) * N + k of the training, and
      // draws its own dropout masks.
      int64_t n = o.gradAccum, micro = (start + i) * n, batch = 0;
      // Each rank's micro-batches draw their own dropout masks.
      auto seedOf = [&](int64_t k) {
        return int64_t(uint64_t(o.seed) + uint64_t(k * world + rank) * ortc::scalar::kGoldenGamma);
      };
      double lossSum = 0;
      for (int64_t k = 0; k < n; ++k) {
        const char *fn = k + 1 < n ? "accumulate_step" : "train_step";
        if (!prefetch.take(micro + k, current, batch, error) ||
            !bindAll(trainInputs, current, lr, seedOf(k)) || ortc_run(session.get(), fn)) {
          endLine();
          return error.empty() ? apiFail() : 1;
        }
        lossSum += readScalar(k + 1 < n ? accumulateLossRef : lossRef);
      }
      double loss = lossSum / double(n);
      bool finite = haveFinite ? readScalar(finiteRef) != 0 : std::isfinite(loss);
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      double scale = scaled ? readScalar(scaleRef) : 1.0;
      // An overflow that loss scaling handles: the loss is finite, a gradient is not.
      bool overflow = scaled && !finite && std::isfinite(loss);
      if (log) { // also for a step that is not finite, before stopping on it
        char line[240];
        std::snprintf(line, sizeof line,
                      "{\"step\": %lld, \"loss\": %s, \"lr\": %s, \"time_ms\": %.4f, \"finite\": %s%s%s}\n",
                      (long long)(i + 1), jsonNumber(loss, lossRef.dtype == "f32" ? 9 : 17).c_str(),
                      jsonNumber(lr, 9).c_str(), ms, finite ? "true" : "false",
                      scaled ? ", \"loss_scale\": " : "", scaled ? jsonNumber(scale, 9).c_str() : "");
        *log << line << std::flush;
      }
      if (!finite && !o.skipNonFinite && !overflow) {
        endLine();
        agreed = true; // the flag is global: every rank stops here with this message
        return fail("step " + std::to_string(i + 1) + ": not finite: " +
                    nonFiniteCause(batch, loss) + "; parameters left unchanged");
      }
      r.stepsDone = i + 1;
      if (!finite) {
        ++r.skipped;
        if (!quiet()) {
          endLine();
          if (overflow)
            out << "step " << i + 1 << " skipped: gradients overflow at loss scale " << fmt(scale)
                << " (parameters left unchanged; the scale halves)\n";
          else
            out << "step " << i + 1 << " skipped: not finite: " << nonFiniteCause(batch, loss)
                << "; parameters left unchanged\n";
        }
      } else {
        if (r.stepsDone == r.skipped + 1)
          r.firstLoss = loss;
        r.lastLoss = loss;
        bool shown = (i + 1) % o.logEvery == 0 || i + 1 == steps;
        if (quiet() || !shown) {
        } else if (!tty) {
          out << "step " << i + 1 << " loss " << fmt(loss)
              << (o.lrSchedule != "constant" || o.warmupSteps ? " lr " + fmt(lr) : "")
              << (scaled ? " loss_scale " + fmt(scale) : "") << "\n";
        } else if (i + 1 == steps || Clock::now() - lastDraw > std::chrono::milliseconds(100)) {
          double secs = std::chrono::duration<double>(Clock::now() - start0).count();
          progress << "\rstep " << i + 1 << "/" << steps << "  loss " << fmt(loss) << "  lr "
                   << fmt(lr) << "  " << fmt(secs > 0 ? (i + 1) / secs : 0) << " steps/s\x1b[K"
                   << std::flush;
          lastDraw = Clock::now();
          drawn = true;
        }
      }
      if (lead && o.evalEvery > 0 && (i + 1) % o.evalEvery == 0 && !evaluate(i + 1, true))
        return 1;
    }
    endLine();
    if (log && !*log)
      return fail("cannot write " + o.logJson);
    // ZeRO: each rank's optimizer state is its own, so every rank writes its checkpoint.
    if (sharded && !o.saveCheckpoint.empty() &&
        ortc_checkpoint_save(session.get(), checkpointOfRank(o.saveCheckpoint).c_str()))
      return apiFail();
    if (!lead) // rank 0 writes what every rank holds alike and evaluates
      return 0;
    if (!o.saveParams.empty() &&
        ortc_save_params_npz(session.get(), o.saveParams.c_str(), ORTC_ROLES_PARAMS))
      return apiFail();
    if (!sharded && !o.saveCheckpoint.empty() &&
        ortc_checkpoint_save(session.get(), o.saveCheckpoint.c_str()))
      return apiFail();
    return o.eval && !evaluate(0, false) ? 1 : 0;
  }

private:
  const TrainOptions &o;
  TrainResult &r;
  std::string &error;
  std::ostream &out, &progress;
  bool tty, drawn = false;
  int rank = 0, world = 1; ///< this process in a data-parallel run (ortc_artifact_ranks)
  bool lead = true;        ///< rank 0: logs, evaluates and writes
  bool sharded = false;     ///< ZeRO: each rank holds its own shard of the optimizer state
  bool agreed = false;      ///< the failure is every rank's (a global non-finite step)
  bool ownFeed = false;     ///< --data names one feed per rank ({rank})
  bool quiet() const { return o.quiet || !lead; }
  /// The checkpoint file of this rank: `path` for rank 0 (and every rank of an unsharded
  /// run), NAME.rank<r>.npz for rank r of a ZeRO run.
  std::string checkpointOfRank(const std::string &path) const {
    if (!sharded || rank == 0)
      return path;
    std::string tag = ".rank" + std::to_string(rank);
    size_t dot = path.size() >= 4 && path.compare(path.size() - 4, 4, ".npz") == 0 ? path.size() - 4
                                                                                 : path.size();
    return path.substr(0, dot) + tag + path.substr(dot);
  }
  std::string inputsNote() const {
    return world == 1 ? "every input of the step is finite"
                      : "the mean over " + std::to_string(world) + " data-parallel ranks";
  }
  std::unique_ptr<ortc_artifact, ArtifactDeleter> artifact;
  std::unique_ptr<ortc_session, SessionDeleter> session;
  Dataset train, evalSet;
  std::vector<TensorRef> trainInputs, evalInputs; ///< what the datasets fill, in order
  std::vector<std::string> current;               ///< the training batch bound last
  TensorRef lossRef, finiteRef;
  std::unique_ptr<std::ofstream> log;
  TensorRef evalLossRef, correctRef, countedRef;
  bool evalReady = false, haveAccuracy = false;

  /// JSON has no NaN or Infinity: a non-finite loss is logged as null.
  static std::string jsonNumber(double v, int digits) {
    if (!std::isfinite(v))
      return "null";
    char b[40];
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    return b;
  }

  int fail(std::string message) {
    error = std::move(message);
    return 1;
  }
  int apiFail() { return fail(ortc_last_error()); }
  void endLine() {
    if (drawn)
      progress << "\n" << std::flush;
    drawn = false;
  }

  TensorRef tensor(const std::string &name) {
    TensorRef t;
    t.index = ortc_tensor_find(session.get(), name.c_str());
    const char *n, *role, *dtype;
    int64_t rank;
    const int64_t *dims;
    if (t.index < 0 || ortc_tensor_info(session.get(), t.index, &n, &role, &dtype, &rank, &dims))
      return TensorRef();
    t.name = n;
    t.role = role;
    t.dtype = dtype;
    t.shape.assign(dims, dims + rank);
    t.bytes = ortc_tensor_bytes(session.get(), t.index);
    return t;
  }

  /// Matches the inputs of `fn` (but the scalars the loop sets) with `data`.
  bool prepare(const char *fn, Dataset &data) {
    int64_t n = ortc_function_input_count(session.get(), fn);
    if (n < 0)
      return fail(o.artifact + " has no function '" + fn + "'"), false;
    std::vector<TensorRef> &refs = &data == &train ? trainInputs : evalInputs;
    std::vector<FeedInput> inputs;
    for (int64_t i = 0; i < n; ++i) {
      TensorRef t = tensor(ortc_function_input(session.get(), fn, i));
      if (t.role == "scalar" && (t.name == "lr" || t.name == "seed" || t.name == "grad_scale" ||
                                 ortc_tensor_default(session.get(), t.index, nullptr)))
        continue; // set by the loop, or holding its default unless --beta1 ... set it
      refs.push_back(t);
      inputs.push_back({t.name, t.role, t.dtype, t.shape, t.bytes});
    }
    return data.bind(inputs, fn, error);
  }

  /// What made a step not finite, as far as the host can tell without the device's
  /// gradients: the first NaN/Inf of a float input of its last micro-batch (batch
  /// `batch` of the feed), else the loss, else the gradients.
  std::string nonFiniteCause(int64_t batch, double loss) {
    // A data-parallel step's loss and flags are global, its inputs each rank's own:
    // every rank names the same cause.
    for (size_t in = 0; world == 1 && in < trainInputs.size(); ++in) {
      const TensorRef &t = trainInputs[in];
      size_t size = t.dtype == "f32" ? 4 : t.dtype == "f64" ? 8 : 0;
      if (!size || in >= current.size())
        continue;
      const char *p = current[in].data();
      for (size_t k = 0; k < t.bytes / size; ++k) {
        double v;
        if (size == 4) {
          float f;
          std::memcpy(&f, p + 4 * k, 4);
          v = f;
        } else {
          std::memcpy(&v, p + 8 * k, 8);
        }
        if (std::isfinite(v))
          continue;
        std::string at; // the element's index in the input's shape
        for (size_t d = t.shape.size(), rest = k; d-- > 0;) {
          size_t dim = size_t(std::max<int64_t>(t.shape[d], 1));
          at = std::to_string(rest % dim) + (at.empty() ? "" : ", ") + at;
          rest /= dim;
        }
        std::string where = train.where(batch);
        return "input '" + t.name + "' holds " + fmt(v) + " at [" + at + "] (its first NaN/Inf" +
               (where.empty() ? "" : "; " + where) + "), loss=" + fmt(loss);
      }
    }
    if (!std::isfinite(loss))
      return "the loss is " + fmt(loss) + " (" + inputsNote() + ")";
    // The device's per-gradient flags (finite_each) say which.
    TensorRef each = tensor("finite_each");
    std::vector<std::string> bad;
    if (each.role == "output" && each.dtype == "bool") {
      std::vector<char> flags(each.bytes);
      ortc_read_output(session.get(), "finite_each", flags.data(), flags.size());
      for (size_t k = 0; k < flags.size(); ++k)
        if (!flags[k])
          if (const char *what = ortc_function_finite_check(session.get(), "train_step", int64_t(k)))
            bad.push_back(what);
    }
    if (bad.empty() || bad[0] == "loss")
      return "a gradient (the loss is " + fmt(loss) + "; " + inputsNote() + ")";
    return "the gradient of '" + bad[0] + "'" +
           (bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more)" : "") +
           " (the loss is " + fmt(loss) + "; " + inputsNote() + ")";
  }

  /// Binds one batch of every fed input, plus lr and seed.
  bool bindAll(const std::vector<TensorRef> &refs, const std::vector<std::string> &batch,
               double lr, int64_t seed) {
    for (size_t i = 0; i < refs.size(); ++i)
      if (ortc_bind_input(session.get(), refs[i].name.c_str(), batch[i].data(), refs[i].bytes))
        return false;
    return setScalar("lr", lr) && setScalar("seed", double(seed), seed);
  }

  /// Writes `v` into scalar `name` if the model has it.
  bool setScalar(const char *name, double v, int64_t iv = 0) {
    TensorRef t = tensor(name);
    if (t.index < 0 || t.role != "scalar")
      return true;
    char buf[8] = {0};
    bool isInt = std::string(name) == "seed";
    if (t.dtype == "f32") {
      float f = float(v);
      std::memcpy(buf, &f, 4);
    } else if (t.dtype == "f64") {
      std::memcpy(buf, &v, 8);
    } else if (t.dtype == "i64") {
      int64_t x = isInt ? iv : int64_t(v);
      std::memcpy(buf, &x, 8);
    } else if (t.dtype == "i32") {
      int32_t x = int32_t(isInt ? iv : int64_t(v));
      std::memcpy(buf, &x, 4);
    } else {
      return fail(std::string("scalar '") + name + "' has dtype " + t.dtype +
                  ", which the train loop cannot set"),
             false;
    }
    if (t.bytes > sizeof buf)
      return fail(std::string("scalar '") + name + "' is not a single value"), false;
    return ortc_bind_input(session.get(), name, buf, t.bytes) == ORTC_OK;
  }

  /// Resolves output `name` of `fn`, a single f32/f64/bool/i64 value.
  bool outputScalar(const char *fn, const char *name, TensorRef &ref, bool optional = false) {
    int64_t n = ortc_function_output_count(session.get(), fn);
    for (int64_t i = 0; i < n; ++i)
      if (std::string(ortc_function_output(session.get(), fn, i)) == name) {
        ref = tensor(name);
        bool ok = (ref.dtype == "f32" && ref.bytes == 4) ||
                  (ref.dtype == "f64" && ref.bytes == 8) ||
                  (ref.dtype == "bool" && ref.bytes == 1) || (ref.dtype == "i64" && ref.bytes == 8);
        if (!ok)
          return fail(std::string(fn) + " output '" + name + "' is " + ref.dtype + " " +
                      npz::shapeString(ref.shape) + ", expected a single number"),
                 false;
        return true;
      }
    if (!optional)
      fail(std::string(fn) + " has no '" + name + "' output");
    return false;
  }

  double readScalar(const TensorRef &t) {
    char buf[8] = {0};
    ortc_read_output(session.get(), t.name.c_str(), buf, t.bytes);
    if (t.dtype == "f32") {
      float f;
      std::memcpy(&f, buf, 4);
      return f;
    }
    if (t.dtype == "f64" || t.dtype == "i64") {
      double d;
      int64_t i;
      std::memcpy(&d, buf, 8);
      std::memcpy(&i, buf, 8);
      return t.dtype == "f64" ? d : double(i);
    }
    return buf[0] != 0;
  }

  /// Runs eval_step over every batch of the eval feed (--eval-data, else the training
  /// feed): mean loss and, where eval_step counts them, accuracy; printed, and logged
  /// (with the step it followed) for --eval-every.
  bool evaluate(int64_t afterStep, bool logged) {
    if (!evalReady) {
      if (!evalSet.open(o.evalData.empty() ? o.data : o.evalData, error) ||
          !prepare("eval_step", evalSet) || !outputScalar("eval_step", "loss", evalLossRef))
        return false;
      haveAccuracy = outputScalar("eval_step", "correct", correctRef, true) &&
                     outputScalar("eval_step", "counted", countedRef, true);
      if (!error.empty())
        return false;
      evalReady = true;
    }
    int64_t batches = evalSet.batches();
    double sum = 0, correct = 0, counted = 0;
    std::vector<std::string> batch;
    for (int64_t i = 0; i < batches; ++i) {
      if (!evalSet.read(i, batch, error) || !bindAll(evalInputs, batch, o.lr, o.seed) ||
          ortc_run(session.get(), "eval_step"))
        return error.empty() ? (apiFail(), false) : false;
      sum += readScalar(evalLossRef);
      if (haveAccuracy) {
        correct += readScalar(correctRef);
        counted += readScalar(countedRef);
      }
    }
    r.evaluated = true;
    r.evalLoss = sum / double(batches);
    r.evalAccuracy = haveAccuracy && counted > 0 ? correct / counted : NAN;
    endLine();
    out << (afterStep ? "step " + std::to_string(afterStep) + " eval loss " : "eval loss ")
        << fmt(r.evalLoss);
    if (haveAccuracy)
      out << " accuracy " << fmt(r.evalAccuracy);
    out << "\n" << std::flush;
    if (log && logged) {
      *log << "{\"step\": " << afterStep << ", \"eval_loss\": " << jsonNumber(r.evalLoss, 9);
      if (haveAccuracy)
        *log << ", \"eval_accuracy\": " << jsonNumber(r.evalAccuracy, 9);
      *log << ", \"eval_batches\": " << batches << "}\n" << std::flush;
    }
    return true;
  }
};

} // namespace

std::string checkTrainOptions(const TrainOptions &o) {
  std::string why;
  auto check = [&](std::string w) {
    if (why.empty())
      why = std::move(w);
  };
  if (o.artifact.empty())
    check("no artifact given");
  if (o.data.empty())
    check("no feed given (--data FEED.npz)");
  check(checkCount("--steps", o.steps, 0));
  check(checkCount("--grad-accum", o.gradAccum, 1));
  check(checkCount("--epochs", o.epochs, 0));
  for (const auto &[name, v] : o.hyper) {
    if (name == "beta1" || name == "beta2") {
      if (!(v >= 0 && v < 1))
        check("--" + name + " needs a finite number >= 0 and < 1, got " + fmt(v));
    } else if (name == "eps") {
      check(checkNumber("--eps", v, 0, true));
    } else if (name == "weight_decay") {
      check(checkNumber("--weight-decay", v, 0, false));
    } else {
      check("no optimizer setting '" + name + "'");
    }
  }
  check(checkCount("--shuffle", o.shuffle, -1));
  check(checkNumber("--lr", o.lr, 0, false));
  if (o.lrSchedule != "constant" && o.lrSchedule != "linear" && o.lrSchedule != "cosine" &&
      o.lrSchedule != "inverse-sqrt")
    check("--lr-schedule takes constant, linear, cosine or inverse-sqrt, got '" + o.lrSchedule +
          "'");
  check(checkCount("--warmup-steps", o.warmupSteps, 0));
  check(checkNumber("--min-lr", o.minLr, 0, false, o.lr));
  check(checkCount("--schedule-steps", o.scheduleSteps, 0));
  if (o.minLr > 0 && o.lrSchedule == "constant")
    check("--min-lr is the floor of a decaying --lr-schedule (linear, cosine, inverse-sqrt), "
          "and the schedule is constant");
  if (o.scheduleSteps > 0 && (o.lrSchedule == "constant" || o.lrSchedule == "inverse-sqrt"))
    check("--schedule-steps is where linear and cosine schedules end, and the schedule is " +
          o.lrSchedule);
  check(checkCount("--eval-every", o.evalEvery, 0));
  if (o.evalEvery > 0 && o.evalData.empty())
    check("--eval-every needs --eval-data FILE (the batches to evaluate)");
  if (!o.evalData.empty() && o.evalEvery == 0 && !o.eval)
    check("--eval-data needs --eval-every N or --eval (when to evaluate)");
  check(checkCount("--log-every", o.logEvery, 1));
  if (o.logEvery > 1 && o.quiet)
    check("--log-every and --quiet contradict each other");
  check(checkCount("--threads", o.threads, 0));
  check(checkCount("--init-seed", o.initSeed, -1));
  if (!o.saveParams.empty() && o.saveParams == o.saveCheckpoint)
    check("--save-params and --save-checkpoint name the same file, " + o.saveParams);
  return why;
}

double scheduledLr(const TrainOptions &o, int64_t p, int64_t horizon) {
  double w = double(o.warmupSteps), t = double(p);
  if (t < w)
    return o.lr * t / w;
  if (o.lrSchedule == "linear" || o.lrSchedule == "cosine") {
    double span = double(horizon) - w;
    double progress = span > 0 ? std::min(1.0, (t - w) / span) : 1.0;
    double f = o.lrSchedule == "linear" ? 1.0 - progress
                                        : 0.5 * (1.0 + std::cos(M_PI * progress));
    return o.minLr + (o.lr - o.minLr) * f;
  }
  if (o.lrSchedule == "inverse-sqrt") {
    double scale = o.warmupSteps > 0 ? w : 10000.0;
    return std::max(o.minLr, o.lr / std::sqrt((t + scale - w) / scale));
  }
  return o.lr;
}

int runTrainLoop(const TrainOptions &options, TrainResult &result, std::string &error) {
  error.clear();
  result = TrainResult();
  int rc = 1;
  bool alone = false;
  try {
    Loop loop(options, result, error);
    rc = loop.run();
    alone = rc != 0 && loop.failedAlone();
  } catch (const std::exception &e) {
    error = std::string("internal error: ") + e.what();
  }
  if (alone) { // say why, then end the ranks that wait for this one
    std::cerr << (options.program + ": error: " + error + "\n") << std::flush;
    ortc_abort_ranks(rc);
  }
  return rc;
}

int runTrainLoop(const TrainOptions &options) {
  TrainResult result;
  std::string error;
  int rc = runTrainLoop(options, result, error);
  if (rc != 0) // one write: the ranks of a data-parallel run share the terminal
    std::cerr << (options.program + ": error: " + error + "\n");
  return rc;
}

} // namespace ortc
