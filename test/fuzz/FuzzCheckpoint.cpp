//===- FuzzCheckpoint.cpp - libFuzzer harness: the checkpoint reader ---------===//
//
// Why: `ortc train --load-checkpoint` and `--load-params` read .npz files that may be
// from another model, truncated or hostile. The input is loaded as a checkpoint and as
// a parameter file into a session of the artifact $ORTC_FUZZ_ARTIFACT names; a refusal
// must leave every tensor as it was (all or nothing).
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

ortc_session *openSession() {
  const char *dir = std::getenv("ORTC_FUZZ_ARTIFACT");
  ortc_artifact *artifact = nullptr;
  ortc_session *session = nullptr;
  if (!dir || ortc_artifact_load(dir, &artifact) != ORTC_OK ||
      ortc_session_create(artifact, &session) != ORTC_OK) {
    std::fprintf(stderr, "FuzzCheckpoint: ORTC_FUZZ_ARTIFACT must name a loadable artifact: %s\n",
                 ortc_last_error());
    std::abort();
  }
  ortc_artifact_free(artifact);
  return session;
}

/// Every tensor's bytes, to see that a refused load changed nothing.
std::string snapshot(ortc_session *s) {
  std::string all;
  for (int64_t i = 0; i < ortc_tensor_count(s); ++i)
    all.append(static_cast<const char *>(ortc_tensor_data(s, i)), ortc_tensor_bytes(s, i));
  return all;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static ortc_session *session = openSession();
  static const std::string path = "/tmp/ortc-fuzz-ckpt-" + std::to_string(getpid()) + ".npz";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char *>(data), std::streamsize(size));
  }
  std::string before = snapshot(session);
  if (ortc_checkpoint_load(session, path.c_str()) != ORTC_OK && snapshot(session) != before)
    std::abort(); // a refused checkpoint must change nothing
  before = snapshot(session);
  if (ortc_load_params_npz(session, path.c_str(), ORTC_ROLES_PARAMS) != ORTC_OK &&
      snapshot(session) != before)
    std::abort();
  std::remove(path.c_str());
  return 0;
}
