//===- FuzzNpz.cpp - libFuzzer harness: the .npz / .npy reader --------------===//
//
// Why: feeds, parameter files and checkpoints arrive as .npz from anywhere (numpy,
// other tools, truncated copies). The input is written to a file and read as .npz
// (zip container, stored or deflated members) and, as bytes, as one .npy.
//
//===----------------------------------------------------------------------===//
#include "Npz.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string path = "/tmp/ortc-fuzz-npz-" + std::to_string(getpid()) + ".npz";
  std::string bytes(reinterpret_cast<const char *>(data), size);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  std::vector<ortc::npz::Array> arrays;
  std::string error;
  if (!ortc::npz::readNpz(path, arrays, error) && error.empty())
    std::abort(); // a refusal must say why
  ortc::npz::Array one;
  error.clear();
  if (!ortc::npz::parseNpy(bytes, one, error) && error.empty())
    std::abort();
  std::remove(path.c_str());
  return 0;
}
