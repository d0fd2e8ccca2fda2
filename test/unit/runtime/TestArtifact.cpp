//===- TestArtifact.cpp - Hand-built artifacts for the runtime tests -----===//
//
// Why: see TestArtifact.h. The kernels below follow the real kernel ABI
// (runtime/include/ortc/kernel_abi.h: `extern "C" void k(void *const *ptrs)`; here
// every launch binds ptrs[0..11] to the twelve tensors and ptrs[12] to the arena),
// use the arena for intermediates, and honour the finite flag exactly as generated
// code does.
//
//===----------------------------------------------------------------------===//
#include "TestArtifact.h"

#include "ortc/digest.h"
#include "ortc/sha256.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace ortc::test {

const std::string &testKernelsSource() {
  static const std::string source = R"(// Test model: pred = scale*w*x, loss = sum((pred-labels)^2).
#include <cmath>
#include <cstdint>
#include <cstring>
enum { X, Labels, Lr, Seed, W, Count, Momentum, Step, Scale, Loss, Finite, Pred, Arena };
extern "C" const int ortc_kernel_abi_version = 2;
#define F(i) static_cast<float *>(bufs[i])
// k0: the prediction, into the arena.
extern "C" void ortc_train_step_k0(void *const *bufs) {
  char *arena = static_cast<char *>(bufs[Arena]);
  float *pred = reinterpret_cast<float *>(arena);
  for (int i = 0; i < 4; ++i)
    pred[i] = *F(Scale) * F(W)[i] * F(X)[i];
}
// k1: loss, gradient (arena + 64) and the finite flag.
extern "C" void ortc_train_step_k1(void *const *bufs) {
  char *arena = static_cast<char *>(bufs[Arena]);
  float *pred = reinterpret_cast<float *>(arena), *g = pred + 16;
  float loss = 0;
  for (int i = 0; i < 4; ++i) {
    float d = pred[i] - F(Labels)[i];
    loss += d * d;
    g[i] = 2 * d * F(X)[i] * *F(Scale);
  }
  *F(Loss) = loss;
  bool ok = std::isfinite(loss);
  for (int i = 0; i < 4; ++i)
    ok = ok && std::isfinite(g[i]);
  *static_cast<uint8_t *>(bufs[Finite]) = ok;
}
// k2: SGD with momentum; parameters, buffers and state move only on finite steps.
extern "C" void ortc_train_step_k2(void *const *bufs) {
  char *arena = static_cast<char *>(bufs[Arena]);
  if (!*static_cast<uint8_t *>(bufs[Finite]))
    return;
  float *g = reinterpret_cast<float *>(arena) + 16;
  for (int i = 0; i < 4; ++i) {
    F(Momentum)[i] = 0.9f * F(Momentum)[i] + g[i];
    F(W)[i] -= *F(Lr) * F(Momentum)[i];
  }
  *F(Count) += 1;
  *static_cast<int64_t *>(bufs[Step]) += 1;
}
extern "C" void ortc_eval_step_k0(void *const *bufs) {
  float loss = 0;
  for (int i = 0; i < 4; ++i) {
    F(Pred)[i] = *F(Scale) * F(W)[i] * F(X)[i];
    float d = F(Pred)[i] - F(Labels)[i];
    loss += d * d;
  }
  *F(Loss) = loss;
}
)";
  return source;
}

std::string readBytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

int shell(const std::string &command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

bool haveNumpy() {
  static const bool have = shell("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return have;
}

std::string freshDir(const std::string &name) {
  fs::path dir = fs::path(ORTC_TEST_TMP) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string testKernelsSo() {
  static std::string cached;
  if (!cached.empty())
    return cached;
  const std::string &source = testKernelsSource();
  std::string flags = "-std=c++17 -O1 -fPIC -shared";
  fs::path cache(ORTC_TEST_KERNEL_CACHE);
  fs::create_directories(cache);
  fs::path so = cache / (sha256Hex(source + flags) + ".so");
  if (!fs::exists(so)) {
    std::string pid = std::to_string(getpid());
    fs::path src = cache / ("kernels." + pid + ".cpp"), tmp = cache / ("kernels." + pid + ".so");
    writeBytes(src.string(), source);
    std::string cmd = std::string(ORTC_TEST_CXX) + " " + flags + " '" + src.string() + "' -o '" +
                      tmp.string() + "'";
    EXPECT_EQ(shell(cmd), 0) << cmd;
    fs::rename(tmp, so);
    fs::remove(src);
  }
  cached = so.string();
  return cached;
}

TestArtifact::TestArtifact(const std::string &testName) {
  dir = freshDir(testName) + "/model.ortc";
  fs::create_directories(dir);
  using nlohmann::json;
  auto tensor = [](const char *name, const char *role, const char *dtype,
                   std::vector<int64_t> shape) {
    return json{{"name", name}, {"role", role}, {"dtype", dtype}, {"shape", shape}};
  };
  json tensors = json::array(
      {tensor("x", "input", "f32", {4}), tensor("labels", "input", "f32", {4}),
       tensor("lr", "scalar", "f32", {}), tensor("seed", "scalar", "i64", {}),
       tensor("w", "parameter", "f32", {4}), tensor("count", "buffer", "f32", {}),
       tensor("w.momentum_buffer", "state", "f32", {4}), tensor("step", "state", "i64", {}),
       tensor("scale", "constant", "f32", {}), tensor("loss", "output", "f32", {}),
       tensor("finite", "output", "bool", {}), tensor("pred", "output", "f32", {4})});
  // Every test kernel sees the twelve tensors, then the arena.
  auto launch = [](const char *kernel) {
    json args = json::array();
    for (int i = 0; i < 12; ++i)
      args.push_back({{"tensor", i}});
    args.push_back({{"arena", 0}});
    return json{{"kernel", kernel}, {"args", args}};
  };
  float scale = 1.0f;
  params.assign(reinterpret_cast<const char *>(w0.data()), 16);
  params.append(reinterpret_cast<const char *>(&scale), 4);
  tensors[W]["init"] = {{"offset", 0}, {"bytes", 16}};
  tensors[Scale]["init"] = {{"offset", 16}, {"bytes", 4}};
  manifest = {{"format", "ortc-artifact"},
              {"format_version", 2},
              {"target", "cpu"},
              {"arch", {"x86-64-v2"}},
              {"kernels_object", "kernels.so"},
              {"arena_bytes", 256},
              {"tensors", tensors},
              {"functions",
               {{"train_step",
                 {{"launches", {launch("ortc_train_step_k0"), launch("ortc_train_step_k1"),
                               launch("ortc_train_step_k2")}},
                  {"inputs", {"x", "labels", "lr", "seed"}},
                  {"outputs", {"loss", "finite"}},
                  {"arena_bytes", 256},
                  {"arena_lower_bound", 160}}},
                {"eval_step",
                 {{"launches", {launch("ortc_eval_step_k0")}},
                  {"inputs", {"x", "labels"}},
                  {"outputs", {"loss", "pred"}}}}}},
              {"files", json::object()}};
}

void TestArtifact::write(bool rehash) {
  fs::copy_file(testKernelsSo(), dir + "/kernels.so", fs::copy_options::overwrite_existing);
  writeBytes(dir + "/kernels.cpp", testKernelsSource());
  writeBytes(dir + "/params.bin", params);
  if (rehash)
    rehashAndWriteManifest();
  else
    writeBytes(dir + "/manifest.json", manifest.dump(2));
}

void TestArtifact::rehashAndWriteManifest() {
  for (const char *f : {"kernels.so", "kernels.cpp"})
    manifest["files"][f] = sha256Hex(readBytes(dir + "/" + f));
  std::string bytes = readBytes(dir + "/params.bin");
  manifest["files"]["params.bin"] = paramsDigest(bytes.data(), bytes.size());
  writeBytes(dir + "/manifest.json", manifest.dump(2));
}

} // namespace ortc::test
