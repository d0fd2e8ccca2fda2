//===- TrainLoop.cpp - The loop behind `ortc train` and `ortc-run` -------===//
//
// FEED.npz holds one array per input of the train step, named as in the model. An
// array with one more leading dim than the input is a sequence of batches used in
// turn; otherwise the same batch is reused. Integer and float arrays are converted to
// the input's dtype. The dropout seed of step i is seed * 1000003 + i.
//
//===----------------------------------------------------------------------===//
#include "ortc/train_loop.h"

#include "Npz.h"
#include "ortc/runtime.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <vector>

namespace ortc {
namespace {

using npz::DType;

bool isFloat(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::F16; }

double readElem(const npz::Array &a, int64_t i) {
  const char *p = a.data.data();
  switch (a.dtype) {
  case DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
  case DType::F64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
  case DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return (double)v; }
  case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
  default: return (unsigned char)p[i];
  }
}

void writeElem(std::vector<char> &out, const std::string &dtype, int64_t i, double v) {
  char *p = out.data();
  if (dtype == "f32") { float x = v; std::memcpy(p + 4 * i, &x, 4); }
  else if (dtype == "f64") { std::memcpy(p + 8 * i, &v, 8); }
  else if (dtype == "i64") { int64_t x = (int64_t)v; std::memcpy(p + 8 * i, &x, 8); }
  else if (dtype == "i32") { int32_t x = (int32_t)v; std::memcpy(p + 4 * i, &x, 4); }
  else p[i] = v != 0;
}

/// One input's batches, already converted to its dtype.
struct Feed {
  std::string name;
  std::vector<std::vector<char>> batches;
};

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

struct Runner {
  const TrainOptions &o;
  ortc_artifact *artifact = nullptr;
  ortc_session *session = nullptr;
  explicit Runner(const TrainOptions &o) : o(o) {}
  ~Runner() {
    ortc_session_free(session);
    ortc_artifact_free(artifact);
  }
  int error(const std::string &msg) {
    std::fprintf(stderr, "%s: error: %s\n", o.program.c_str(), msg.c_str());
    return 1;
  }
  int run();
};

int Runner::run() {
  if (ortc_artifact_load(o.artifact.c_str(), &artifact) != ORTC_OK ||
      ortc_session_create(artifact, &session) != ORTC_OK)
    return error(ortc_last_error());
  std::vector<npz::Array> list;
  std::string err;
  if (!npz::readNpz(o.data, list, err))
    return error(err);
  std::map<std::string, npz::Array> data;
  for (auto &a : list)
    data[a.name] = std::move(a);

  std::vector<Feed> feeds;
  int lrIndex = -1, seedIndex = -1;
  for (int i = 0; i < ortc_tensor_count(session); ++i) {
    const char *name, *role, *dtype;
    int rank;
    const int64_t *dims;
    ortc_tensor_info(session, i, &name, &role, &dtype, &rank, &dims);
    std::string r = role;
    if (r == "scalar") {
      if (std::string(name) == "lr")
        lrIndex = i;
      else if (std::string(name) == "seed")
        seedIndex = i;
      continue;
    }
    if (r != "input")
      continue;
    std::vector<int64_t> shape(dims, dims + rank);
    auto it = data.find(name);
    if (it == data.end())
      return error(o.data + ": no array for input '" + std::string(name) + "' " + shapeStr(shape));
    const npz::Array &a = it->second;
    bool sequence = a.shape.size() == shape.size() + 1 &&
                    std::vector<int64_t>(a.shape.begin() + 1, a.shape.end()) == shape;
    if (a.shape != shape && !sequence)
      return error(o.data + ": input '" + std::string(name) + "' needs shape " + shapeStr(shape) +
                   " (or [K," + shapeStr(shape).substr(1) + " for K batches), got " +
                   shapeStr(a.shape));
    if (isFloat(a.dtype) != (std::string(dtype)[0] == 'f'))
      return error(o.data + ": input '" + std::string(name) + "' needs " + dtype + " data, got " +
                   npz::describe(a.dtype));
    Feed f{name, {}};
    int64_t numel = 1;
    for (int64_t dim : a.shape)
      numel *= dim;
    int64_t count = sequence ? a.shape[0] : 1, per = numel / std::max<int64_t>(count, 1);
    for (int64_t b = 0; b < count; ++b) {
      std::vector<char> buf(ortc_tensor_bytes(session, i));
      for (int64_t k = 0; k < per; ++k)
        writeElem(buf, dtype, k, readElem(a, b * per + k));
      f.batches.push_back(std::move(buf));
    }
    feeds.push_back(std::move(f));
  }
  if (lrIndex < 0)
    return error(o.artifact + ": the train step has no run-time 'lr'");
  if (!o.loadParams.empty() && ortc_params_load(session, o.loadParams.c_str()) != ORTC_OK)
    return error(ortc_last_error());
  if (!o.loadCheckpoint.empty() &&
      ortc_checkpoint_load(session, o.loadCheckpoint.c_str()) != ORTC_OK)
    return error(ortc_last_error());

  std::FILE *log = nullptr;
  if (!o.logJson.empty() && !(log = std::fopen(o.logJson.c_str(), "w")))
    return error(o.logJson + ": cannot write");
  bool tty = isatty(fileno(stderr));
  auto start = std::chrono::steady_clock::now();
  float lr = static_cast<float>(o.lr);
  for (int64_t step = 1; step <= o.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    for (const Feed &f : feeds) {
      const auto &b = f.batches[(step - 1) % f.batches.size()];
      ortc_bind_input(session, f.name.c_str(), b.data(), b.size());
    }
    ortc_bind_input(session, "lr", &lr, sizeof lr);
    if (seedIndex >= 0) {
      int64_t seed = o.seed * 1000003 + step;
      ortc_bind_input(session, "seed", &seed, sizeof seed);
    }
    ortc_run(session, "train_step");
    float loss = 0;
    uint8_t finite = 0;
    ortc_read_output(session, "loss", &loss, sizeof loss);
    ortc_read_output(session, "finite", &finite, sizeof finite);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
    if (log)
      std::fprintf(log, "{\"step\": %lld, \"loss\": %.9g, \"time_ms\": %.4f, \"finite\": %s}\n",
                   (long long)step, loss, ms, finite ? "true" : "false");
    if (!finite) {
      if (log)
        std::fclose(log);
      return error("step " + std::to_string(step) +
                   ": loss or gradients are not finite (loss=" + std::to_string(loss) +
                   "); parameters left unchanged");
    }
    double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (tty)
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.6f  %.1f steps/s   ", (long long)step,
                   (long long)o.steps, loss, step / std::max(secs, 1e-9));
    else
      std::printf("step %lld loss %.6f\n", (long long)step, loss);
  }
  if (tty)
    std::fprintf(stderr, "\n");
  if (log)
    std::fclose(log);
  if (o.eval) {
    for (const Feed &f : feeds)
      ortc_bind_input(session, f.name.c_str(), f.batches[0].data(), f.batches[0].size());
    ortc_run(session, "eval_step");
    float loss = 0;
    ortc_read_output(session, "loss", &loss, sizeof loss);
    std::printf("eval loss %.6f\n", loss);
  }
  if (!o.saveParams.empty() && ortc_params_save(session, o.saveParams.c_str()) != ORTC_OK)
    return error(ortc_last_error());
  if (!o.saveCheckpoint.empty() &&
      ortc_checkpoint_save(session, o.saveCheckpoint.c_str()) != ORTC_OK)
    return error(ortc_last_error());
  std::fflush(stdout);
  return 0;
}

} // namespace

int runTrainLoop(const TrainOptions &options) {
  Runner r(options);
  return r.run();
}

} // namespace ortc
