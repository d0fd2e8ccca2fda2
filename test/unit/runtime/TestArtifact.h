//===- TestArtifact.h - Hand-built artifacts for the runtime tests -*- C++ -*-===//
//
// Why: the runtime tests must not depend on the compiler, so they build a tiny
// model.ortc/ themselves: y = scale * w * x, loss = sum((y - labels)^2), SGD with
// momentum 0.9 on w, a "count" buffer and a "step" state that move only on finite
// steps. kernels.so is compiled once per source hash into a cache under the build
// directory; each test then writes the manifest (optionally mutated) by hand.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_TEST_RUNTIME_TESTARTIFACT_H
#define ORTC_TEST_RUNTIME_TESTARTIFACT_H

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ortc::test {

/// A fresh, empty directory for test `name` under the build tree.
std::string freshDir(const std::string &name);
std::string readBytes(const std::string &path);
void writeBytes(const std::string &path, const std::string &bytes);
/// Runs a shell command; returns its exit status.
int shell(const std::string &command);
/// Whether /usr/bin/python3 can import numpy.
bool haveNumpy();

/// Index of each tensor of the test model in manifest order.
enum Tensor { X, Labels, Lr, Seed, W, Count, Momentum, Step, Scale, Loss, Finite, Pred };

struct TestArtifact {
  std::string dir;         ///< <fresh dir>/model.ortc
  nlohmann::json manifest; ///< edit before write()
  std::string params;      ///< params.bin contents
  std::vector<float> w0{0.5f, 0.5f, 0.5f, 0.5f};

  explicit TestArtifact(const std::string &testName);
  /// Writes kernels.so, kernels.cpp, params.bin and manifest.json (with hashes
  /// computed from the current files unless `rehash` is false).
  void write(bool rehash = true);
  /// Recomputes the "files" hashes from disk and rewrites manifest.json.
  void rehashAndWriteManifest();
};

/// Path of the cached kernels.so of the test model (compiled on first use).
std::string testKernelsSo();
/// The kernel source of the test model.
const std::string &testKernelsSource();

} // namespace ortc::test

#endif // ORTC_TEST_RUNTIME_TESTARTIFACT_H
