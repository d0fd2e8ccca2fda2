//===- FuzzArtifact.cpp - libFuzzer harness: the artifact loader ------------===//
//
// Why: `ortc-run` loads artifacts that were copied, edited or truncated. The input is
// an artifact's manifest.json, put beside the real files of the small artifact that
// $ORTC_FUZZ_ARTIFACT names (hashes, params.bin and kernels.so stay valid, so a
// manifest close to the real one gets through every check to dlopen and the kernel
// symbols); the load and, when it succeeds, a session are made and freed.
//
//===----------------------------------------------------------------------===//
#include "ortc/runtime.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

/// A copy of the artifact's folder without its manifest.
std::string folder() {
  const char *from = std::getenv("ORTC_FUZZ_ARTIFACT");
  if (!from || !*from) {
    std::fprintf(stderr, "FuzzArtifact: set ORTC_FUZZ_ARTIFACT to an artifact folder\n");
    std::abort();
  }
  std::string dir = "/tmp/ortc-fuzz-artifact-" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::copy(from, dir, fs::copy_options::recursive);
  fs::remove(fs::path(dir) / "manifest.json");
  return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string dir = folder();
  {
    std::ofstream f(dir + "/manifest.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char *>(data), std::streamsize(size));
  }
  ortc_artifact *artifact = nullptr;
  ortc_status s = ortc_artifact_load(dir.c_str(), &artifact);
  if (s != ORTC_OK) {
    if (artifact || !*ortc_last_error())
      std::abort(); // a failed load owns nothing and says why
    return 0;
  }
  ortc_session *session = nullptr;
  if (ortc_session_create(artifact, &session) == ORTC_OK)
    ortc_session_free(session);
  ortc_artifact_free(artifact);
  return 0;
}
