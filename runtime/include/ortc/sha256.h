//===- sha256.h - SHA-256 of artifact files ---------------------*- C++ -*-===//
//
// The compiler writes, and the runtime checks, the SHA-256 of every artifact file
// but params.bin (ortc/digest.h says why); both use this one implementation (no
// OpenSSL dependency in the runtime). The compiler also keys its kernel cache and
// names kernels by it.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_SHA256_H
#define ORTC_RUNTIME_SHA256_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace ortc {
/// Incremental SHA-256: hash a file while it is written, without holding it.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t size);
  /// The lower-case hex digest of everything updated so far; starts over.
  std::string hex();

private:
  void reset();
  uint32_t h[8];
  uint8_t buf[64];
  size_t pending;
  uint64_t total;
};

/// Whether hashing may use the CPU's SHA extensions (x86 SHA-NI, picked at run time
/// when present; the portable code otherwise). Returns whether they are in use.
/// For tests that compare both paths.
bool sha256UsesCpuExtensions(bool allow);

/// Lower-case hex SHA-256 of `size` bytes at `data`.
std::string sha256Hex(const void *data, size_t size);
inline std::string sha256Hex(const std::string &bytes) {
  return sha256Hex(bytes.data(), bytes.size());
}
} // namespace ortc

#endif // ORTC_RUNTIME_SHA256_H
