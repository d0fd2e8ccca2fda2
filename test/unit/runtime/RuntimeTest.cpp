//===- RuntimeTest.cpp - The C API on a hand-built artifact --------------===//
//
// Why: the C API is the contract with every caller, so each promise is tested on
// a real dlopen'ed kernels.so: training lowers the loss, every corrupt artifact is
// refused with a message naming the file/tensor/kernel (never a crash), binding
// checks sizes, checkpoints restore state bit for bit and are written atomically,
// and a non-finite step leaves parameters, buffers and state untouched.
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"
#include "ortc/sha256.h"
#include "Npz.h"
#include "TestArtifact.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

using namespace ortc;
using namespace ortc::test;

namespace {

struct Loaded {
  ortc_artifact *artifact = nullptr;
  ortc_session *session = nullptr;
  ~Loaded() {
    ortc_session_free(session);
    ortc_artifact_free(artifact);
  }
};

/// Loads `a` and creates a session; fails the test on error.
std::unique_ptr<Loaded> open(const TestArtifact &a) {
  auto l = std::make_unique<Loaded>();
  EXPECT_EQ(ortc_artifact_load(a.dir.c_str(), &l->artifact), ORTC_OK) << ortc_last_error();
  if (l->artifact) {
    EXPECT_EQ(ortc_session_create(l->artifact, &l->session), ORTC_OK) << ortc_last_error();
  }
  return l;
}

/// Status of loading `a`; the message goes to `message`.
ortc_status loadStatus(const TestArtifact &a, std::string &message) {
  ortc_artifact *artifact = nullptr;
  ortc_status s = ortc_artifact_load(a.dir.c_str(), &artifact);
  message = ortc_last_error();
  EXPECT_EQ(artifact == nullptr, s != ORTC_OK);
  ortc_artifact_free(artifact);
  return s;
}

void bindBatch(ortc_session *s, const std::vector<float> &x, const std::vector<float> &t,
               float lr) {
  int64_t seed = 0;
  ASSERT_EQ(ortc_bind_input(s, "x", x.data(), 16), ORTC_OK) << ortc_last_error();
  ASSERT_EQ(ortc_bind_input(s, "labels", t.data(), 16), ORTC_OK) << ortc_last_error();
  ASSERT_EQ(ortc_bind_input(s, "lr", &lr, 4), ORTC_OK) << ortc_last_error();
  ASSERT_EQ(ortc_bind_input(s, "seed", &seed, 8), ORTC_OK) << ortc_last_error();
}

float step(ortc_session *s) {
  EXPECT_EQ(ortc_run(s, "train_step"), ORTC_OK) << ortc_last_error();
  float loss = 0;
  EXPECT_EQ(ortc_read_output(s, "loss", &loss, 4), ORTC_OK) << ortc_last_error();
  return loss;
}

/// Bytes of every parameter, buffer and state tensor.
std::string trainedState(ortc_session *s) {
  std::string out;
  for (int64_t i = 0; i < ortc_tensor_count(s); ++i) {
    const char *role;
    ortc_tensor_info(s, i, nullptr, &role, nullptr, nullptr, nullptr);
    if (!std::strcmp(role, "parameter") || !std::strcmp(role, "buffer") ||
        !std::strcmp(role, "state"))
      out.append(static_cast<char *>(ortc_tensor_data(s, i)), ortc_tensor_bytes(s, i));
  }
  return out;
}

const std::vector<float> kX{1, 2, 3, 4}, kT{2, 4, 6, 8};

} // namespace

TEST(Runtime, LoadRunAndLossDecreases) {
  TestArtifact a("Runtime.LoadRun");
  a.write();
  auto l = open(a);
  ASSERT_TRUE(l->session);
  ortc_session *s = l->session;
  EXPECT_EQ(ortc_tensor_count(s), 12);
  EXPECT_EQ(ortc_tensor_find(s, "w"), W);
  EXPECT_EQ(ortc_tensor_find(s, "nope"), -1);
  const char *name, *role, *dtype;
  int64_t rank;
  const int64_t *dims;
  ASSERT_EQ(ortc_tensor_info(s, W, &name, &role, &dtype, &rank, &dims), ORTC_OK);
  EXPECT_STREQ(name, "w");
  EXPECT_STREQ(role, "parameter");
  EXPECT_STREQ(dtype, "f32");
  ASSERT_EQ(rank, 1);
  EXPECT_EQ(dims[0], 4);
  EXPECT_NE(ortc_tensor_info(s, 99, &name, nullptr, nullptr, nullptr, nullptr), ORTC_OK);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ortc_tensor_data(s, X)) % 64, 0u);
  EXPECT_EQ(std::memcmp(ortc_tensor_data(s, W), a.w0.data(), 16), 0); // from params.bin
  EXPECT_EQ(*static_cast<float *>(ortc_tensor_data(s, Scale)), 1.0f);
  EXPECT_EQ(*static_cast<int64_t *>(ortc_tensor_data(s, Step)), 0); // zero-filled

  bindBatch(s, kX, kT, 0.005f);
  float first = step(s), last = first;
  for (int i = 0; i < 30; ++i)
    last = step(s);
  EXPECT_LT(last, first * 0.05f) << first << " -> " << last;
  uint8_t finite = 0;
  ASSERT_EQ(ortc_read_output(s, "finite", &finite, 1), ORTC_OK);
  EXPECT_EQ(finite, 1);
  EXPECT_EQ(*static_cast<int64_t *>(ortc_tensor_data(s, Step)), 31);
  EXPECT_EQ(*static_cast<float *>(ortc_tensor_data(s, Count)), 31.0f);

  // The same 31 steps on the host: SGD with momentum 0.9.
  std::vector<float> w = a.w0, m(4, 0.0f);
  for (int i = 0; i < 31; ++i)
    for (int j = 0; j < 4; ++j) {
      m[j] = 0.9f * m[j] + 2 * (w[j] * kX[j] - kT[j]) * kX[j];
      w[j] -= 0.005f * m[j];
    }
  ASSERT_EQ(ortc_run(s, "eval_step"), ORTC_OK) << ortc_last_error();
  float pred[4];
  ASSERT_EQ(ortc_read_output(s, "pred", pred, 16), ORTC_OK);
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(pred[j], w[j] * kX[j], 1e-4f) << j;
  EXPECT_EQ(ortc_run(s, "predict"), ORTC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ortc_last_error()).find("'predict'"), std::string::npos);
}

TEST(Runtime, SessionsAreIndependentAndOutliveTheArtifact) {
  TestArtifact a("Runtime.Sessions");
  a.write();
  ortc_artifact *artifact = nullptr;
  ASSERT_EQ(ortc_artifact_load(a.dir.c_str(), &artifact), ORTC_OK) << ortc_last_error();
  ortc_session *s1 = nullptr, *s2 = nullptr;
  ASSERT_EQ(ortc_session_create(artifact, &s1), ORTC_OK);
  ASSERT_EQ(ortc_session_create(artifact, &s2), ORTC_OK);
  ortc_artifact_free(artifact);
  bindBatch(s1, kX, kT, 0.005f);
  step(s1);
  EXPECT_NE(std::memcmp(ortc_tensor_data(s1, W), ortc_tensor_data(s2, W), 16), 0);
  EXPECT_EQ(std::memcmp(ortc_tensor_data(s2, W), a.w0.data(), 16), 0);
  ortc_session_free(s1);
  ortc_session_free(s2);
}

TEST(Runtime, RunRefusesUnboundInputs) {
  TestArtifact a("Runtime.Unbound");
  a.write();
  auto l = open(a);
  ASSERT_EQ(ortc_bind_input(l->session, "x", kX.data(), 16), ORTC_OK);
  EXPECT_EQ(ortc_run(l->session, "train_step"), ORTC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ortc_last_error()).find("'labels' was never bound"), std::string::npos)
      << ortc_last_error();
}

TEST(Runtime, BindChecksBytesAndRole) {
  TestArtifact a("Runtime.Bind");
  a.write();
  auto l = open(a);
  EXPECT_EQ(ortc_bind_input(l->session, "x", kX.data(), 12), ORTC_ERR_MISMATCH);
  std::string msg = ortc_last_error();
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("takes 16 bytes, got 12"), std::string::npos) << msg;
  EXPECT_EQ(ortc_bind_input(l->session, "nope", kX.data(), 16), ORTC_ERR_NOT_FOUND);
  EXPECT_NE(std::string(ortc_last_error()).find("'nope'"), std::string::npos);
  EXPECT_EQ(ortc_bind_input(l->session, "w", kX.data(), 16), ORTC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ortc_last_error()).find("parameter"), std::string::npos);
  float loss[2];
  EXPECT_EQ(ortc_read_output(l->session, "loss", loss, 8), ORTC_ERR_MISMATCH);
  EXPECT_EQ(ortc_bind_input(nullptr, "x", kX.data(), 16), ORTC_ERR_INVALID_ARGUMENT);
}

TEST(Runtime, RefusesShaMismatchNamingTheFile) {
  TestArtifact a("Runtime.Sha");
  a.write();
  std::string params = readBytes(a.dir + "/params.bin");
  params[5] ^= 0x40;
  writeBytes(a.dir + "/params.bin", params);
  std::string msg;
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_INTEGRITY);
  EXPECT_NE(msg.find("params.bin: XXH3-128 does not match the manifest"), std::string::npos) << msg;

  TestArtifact b("Runtime.ShaKernels");
  b.write();
  std::string so = readBytes(b.dir + "/kernels.so");
  so[so.size() / 2] ^= 1;
  writeBytes(b.dir + "/kernels.so", so);
  EXPECT_EQ(loadStatus(b, msg), ORTC_ERR_INTEGRITY);
  EXPECT_NE(msg.find("kernels.so: SHA-256 does not match the manifest"), std::string::npos) << msg;

  // An artifact written before params.bin had an XXH3 digest records its SHA-256: still loads.
  TestArtifact c("Runtime.ShaParams");
  c.write();
  c.manifest["files"]["params.bin"] = ortc::sha256Hex(readBytes(c.dir + "/params.bin"));
  c.write(/*rehash=*/false);
  EXPECT_EQ(loadStatus(c, msg), ORTC_OK) << msg;
}

TEST(Runtime, RefusesOtherFormatVersion) {
  TestArtifact a("Runtime.Version");
  a.manifest["format_version"] = 3;
  a.write();
  std::string msg;
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_VERSION);
  EXPECT_NE(msg.find("manifest.json: format version 3, but this runtime reads version 2"),
            std::string::npos)
      << msg;
}

TEST(Runtime, RefusesOtherTarget) {
  TestArtifact a("Runtime.Target");
  a.manifest["target"] = "cuda";
  a.write();
  std::string msg;
  // A cuda manifest over CPU kernels: the GPU backend finds no device API in them.
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_KERNEL);
  EXPECT_NE(msg.find("missing GPU runtime symbol 'ortc_gpu_error'"), std::string::npos) << msg;
  a.manifest["target"] = "tpu";
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_TARGET);
  EXPECT_NE(msg.find("unknown target 'tpu'"), std::string::npos) << msg;
  a.manifest["target"] = "cpu";
  a.manifest["arch"] = {"armv9-a"};
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_TARGET);
  EXPECT_NE(msg.find("armv9-a"), std::string::npos) << msg;
}

TEST(Runtime, RefusesMissingKernelSymbol) {
  TestArtifact a("Runtime.Symbol");
  a.manifest["functions"]["eval_step"]["launches"].push_back(
      {{"kernel", "ortc_eval_step_k9"}, {"args", nlohmann::json::array()}});
  a.write();
  std::string msg;
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_KERNEL);
  EXPECT_NE(msg.find("missing kernel symbol 'ortc_eval_step_k9'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'eval_step'"), std::string::npos) << msg;
}

TEST(Runtime, RefusesBrokenManifests) {
  TestArtifact a("Runtime.Manifest");
  a.write();
  std::string text = readBytes(a.dir + "/manifest.json"), msg;
  for (const std::string &broken :
       {text.substr(0, text.size() / 2), std::string("\x00\xff garbage \x01", 12), std::string()}) {
    writeBytes(a.dir + "/manifest.json", broken);
    EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT) << msg;
    EXPECT_NE(msg.find("manifest.json: not valid JSON"), std::string::npos) << msg;
  }
  a.manifest["tensors"][Count]["role"] = "running_stat";
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT);
  EXPECT_NE(msg.find("tensors[5] ('count').role"), std::string::npos) << msg;
  a.manifest["tensors"][Count]["role"] = "buffer";
  a.manifest.erase("arena_bytes");
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT);
  EXPECT_NE(msg.find("\"arena_bytes\""), std::string::npos) << msg;
  std::filesystem::remove(a.dir + "/manifest.json");
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_IO);
  EXPECT_NE(msg.find("model.ortc: not an ortc artifact (no manifest.json)"), std::string::npos)
      << msg;
  TestArtifact none("Runtime.NoDir");
  std::filesystem::remove_all(none.dir);
  EXPECT_EQ(loadStatus(none, msg), ORTC_ERR_IO);
  EXPECT_NE(msg.find("model.ortc: not an ortc artifact (no such directory)"), std::string::npos)
      << msg;
}

TEST(Runtime, RefusesLaunchArgumentsOutsideTheArtifact) {
  TestArtifact a("Runtime.LaunchArgs");
  a.write();
  std::string msg;
  auto &args = a.manifest["functions"]["train_step"]["launches"][1]["args"];
  args[0] = {{"tensor", 12}};
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT);
  EXPECT_NE(msg.find("function 'train_step': kernel 'ortc_train_step_k1' has an argument "
                     "outside \"tensors\" (index 12)"),
            std::string::npos)
      << msg;
  args[0] = {{"arena", 257}};
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT);
  EXPECT_NE(msg.find("outside the arena (offset 257, 0 bytes, of 256 bytes)"), std::string::npos) << msg;
  args[0] = {{"arena", 200}, {"bytes", 64}}; // starts inside, ends past the end
  a.rehashAndWriteManifest();
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT);
  EXPECT_NE(msg.find("outside the arena (offset 200, 64 bytes, of 256 bytes)"), std::string::npos) << msg;
  for (nlohmann::json bad : {nlohmann::json{{"arena", 0}, {"tensor", 0}}, nlohmann::json{{"tensor", 0}, {"bytes", 4}}}) {
    args[0] = bad;
    a.rehashAndWriteManifest();
    EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_BAD_ARTIFACT);
    EXPECT_NE(msg.find("not exactly one of \"tensor\", \"arena\" (with its \"bytes\") or \"value\""),
              std::string::npos)
        << msg;
  }
}

TEST(Runtime, RefusesKernelsOfAnotherAbi) {
  TestArtifact a("Runtime.Abi");
  a.write();
  std::string source = testKernelsSource();
  const std::string version = "ortc_kernel_abi_version = 2";
  source.replace(source.find(version), version.size(), "ortc_kernel_abi_version = 1");
  writeBytes(a.dir + "/old.cpp", source);
  ASSERT_EQ(shell(std::string(ORTC_TEST_CXX) + " -std=c++17 -fPIC -shared '" + a.dir +
                  "/old.cpp' -o '" + a.dir + "/kernels.so'"),
            0);
  std::filesystem::remove(a.dir + "/old.cpp");
  a.rehashAndWriteManifest();
  std::string msg;
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_KERNEL);
  EXPECT_NE(msg.find("kernels.so: kernel ABI version 1, this runtime calls version 2"),
            std::string::npos)
      << msg;
}

TEST(Runtime, RefusesParamsShorterThanAnInit) {
  TestArtifact a("Runtime.ShortParams");
  a.params.resize(18); // scale's init is bytes [16, 20)
  a.write();           // hashes match the short file
  std::string msg;
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_INTEGRITY);
  EXPECT_NE(msg.find("params.bin: tensor 'scale' has init bytes [16, 20)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("(18 bytes)"), std::string::npos) << msg;
}

TEST(Runtime, RefusesMissingFile) {
  TestArtifact a("Runtime.MissingFile");
  a.write();
  std::filesystem::remove(a.dir + "/kernels.cpp");
  std::string msg;
  EXPECT_EQ(loadStatus(a, msg), ORTC_ERR_IO);
  EXPECT_NE(msg.find("kernels.cpp: cannot open"), std::string::npos) << msg;
}

TEST(Runtime, CheckpointRoundTripIsExact) {
  TestArtifact a("Runtime.Checkpoint");
  a.write();
  auto l1 = open(a), l2 = open(a);
  bindBatch(l1->session, kX, kT, 0.005f);
  for (int i = 0; i < 5; ++i)
    step(l1->session);
  std::string ckpt = std::filesystem::path(a.dir).parent_path().string() + "/ckpt.npz";
  ASSERT_EQ(ortc_checkpoint_save(l1->session, ckpt.c_str()), ORTC_OK) << ortc_last_error();
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".tmp"));
  std::vector<npz::Array> arrays;
  std::string error;
  ASSERT_TRUE(npz::readNpz(ckpt, arrays, error)) << error;
  std::vector<std::string> names;
  for (const auto &arr : arrays)
    names.push_back(arr.name);
  EXPECT_EQ(names, (std::vector<std::string>{"w", "count", "w.momentum_buffer", "step"}));

  EXPECT_NE(trainedState(l1->session), trainedState(l2->session));
  ASSERT_EQ(ortc_checkpoint_load(l2->session, ckpt.c_str()), ORTC_OK) << ortc_last_error();
  EXPECT_EQ(trainedState(l1->session), trainedState(l2->session));
  // Resuming gives bit-identical steps.
  bindBatch(l2->session, kX, kT, 0.005f);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(step(l1->session), step(l2->session));
  EXPECT_EQ(trainedState(l1->session), trainedState(l2->session));
}

TEST(Runtime, CheckpointLoadNamesTheFirstMismatch) {
  TestArtifact a("Runtime.CheckpointMismatch");
  a.write();
  auto l = open(a);
  std::string dir = std::filesystem::path(a.dir).parent_path().string(), path = dir + "/bad.npz";
  std::string before = trainedState(l->session), error;
  std::vector<float> w3{1, 2, 3}, w4{1, 2, 3, 4}, m{0, 0, 0, 0}, count{1};
  std::vector<int64_t> stepv{1};
  std::vector<double> count64{1};
  auto expectRefused = [&](const std::vector<npz::ArrayRef> &arrays, const std::string &what) {
    ASSERT_TRUE(npz::writeNpz(path, arrays, error)) << error;
    EXPECT_EQ(ortc_checkpoint_load(l->session, path.c_str()), ORTC_ERR_MISMATCH);
    EXPECT_NE(std::string(ortc_last_error()).find(what), std::string::npos) << ortc_last_error();
    EXPECT_EQ(trainedState(l->session), before) << "a refused checkpoint changed the state";
  };
  expectRefused({{"w", npz::DType::F32, {3}, w3.data()},
                 {"count", npz::DType::F32, {}, count.data()},
                 {"w.momentum_buffer", npz::DType::F32, {4}, m.data()},
                 {"step", npz::DType::I64, {}, stepv.data()}},
                "'w' has shape [3], the artifact's parameter has shape [4]");
  expectRefused({{"w", npz::DType::F32, {4}, w4.data()},
                 {"count", npz::DType::F64, {}, count64.data()},
                 {"w.momentum_buffer", npz::DType::F32, {4}, m.data()},
                 {"step", npz::DType::I64, {}, stepv.data()}},
                "'count' is float64 (<f8), the artifact's buffer is f32");
  expectRefused({{"w", npz::DType::F32, {4}, w4.data()},
                 {"count", npz::DType::F32, {}, count.data()},
                 {"step", npz::DType::I64, {}, stepv.data()}},
                "no array 'w.momentum_buffer' (state f32 [4])");
  expectRefused({{"w", npz::DType::F32, {4}, w4.data()},
                 {"count", npz::DType::F32, {}, count.data()},
                 {"w.momentum_buffer", npz::DType::F32, {4}, m.data()},
                 {"step", npz::DType::I64, {}, stepv.data()},
                 {"extra", npz::DType::F32, {4}, m.data()}},
                "array 'extra' is not a tensor of this artifact");
  EXPECT_EQ(ortc_checkpoint_load(l->session, (dir + "/absent.npz").c_str()), ORTC_ERR_IO);
  EXPECT_NE(std::string(ortc_last_error()).find("absent.npz"), std::string::npos);
}

TEST(Runtime, CheckpointSaveIsAtomic) {
  TestArtifact a("Runtime.CheckpointAtomic");
  a.write();
  auto l = open(a);
  std::string dir = std::filesystem::path(a.dir).parent_path().string();
  std::string path = dir + "/missing-dir/ckpt.npz";
  EXPECT_EQ(ortc_checkpoint_save(l->session, path.c_str()), ORTC_ERR_IO);
  EXPECT_NE(std::string(ortc_last_error()).find("missing-dir/ckpt.npz.tmp"), std::string::npos)
      << ortc_last_error();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing-dir"));
  // An existing checkpoint is only replaced by a complete new one.
  std::string good = dir + "/ckpt.npz";
  ASSERT_EQ(ortc_checkpoint_save(l->session, good.c_str()), ORTC_OK);
  std::filesystem::create_directories(dir + "/occupied");
  EXPECT_NE(ortc_checkpoint_save(l->session, (dir + "/occupied").c_str()), ORTC_OK);
  EXPECT_FALSE(std::filesystem::exists(dir + "/occupied.tmp"));
}

TEST(Runtime, SaveParamsByRole) {
  TestArtifact a("Runtime.SaveParams");
  a.write();
  auto l = open(a);
  std::string path = std::filesystem::path(a.dir).parent_path().string() + "/p.npz", error;
  ASSERT_EQ(ortc_save_params_npz(l->session, path.c_str(), ORTC_ROLES_PARAMS), ORTC_OK);
  std::vector<npz::Array> arrays;
  ASSERT_TRUE(npz::readNpz(path, arrays, error)) << error;
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].name, "w");
  EXPECT_EQ(arrays[1].name, "count");
  EXPECT_EQ(arrays[0].data, std::string(reinterpret_cast<const char *>(a.w0.data()), 16));
  ASSERT_EQ(ortc_save_params_npz(l->session, path.c_str(), ORTC_ROLE_CONSTANT), ORTC_OK);
  arrays.clear();
  ASSERT_TRUE(npz::readNpz(path, arrays, error)) << error;
  ASSERT_EQ(arrays.size(), 1u);
  EXPECT_EQ(arrays[0].name, "scale");
}

TEST(Runtime, NonFiniteStepLeavesStateUnchanged) {
  TestArtifact a("Runtime.NonFinite");
  a.write();
  auto l = open(a);
  bindBatch(l->session, kX, kT, 0.005f);
  step(l->session);
  step(l->session);
  std::string before = trainedState(l->session);
  std::vector<float> bad = kT;
  bad[2] = std::numeric_limits<float>::infinity();
  bindBatch(l->session, kX, bad, 0.005f);
  float loss = step(l->session);
  EXPECT_TRUE(std::isinf(loss));
  uint8_t finite = 1;
  ASSERT_EQ(ortc_read_output(l->session, "finite", &finite, 1), ORTC_OK);
  EXPECT_EQ(finite, 0);
  EXPECT_EQ(trainedState(l->session), before);
  EXPECT_EQ(*static_cast<int64_t *>(ortc_tensor_data(l->session, Step)), 2);
}
