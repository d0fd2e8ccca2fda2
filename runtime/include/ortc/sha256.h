//===- sha256.h - SHA-256 of artifact files ---------------------*- C++ -*-===//
//
// The compiler writes, and the runtime checks, the SHA-256 of every artifact file;
// both use this one implementation (no OpenSSL dependency in the runtime).
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_SHA256_H
#define ORTC_RUNTIME_SHA256_H

#include <cstddef>
#include <string>

namespace ortc {
/// Lower-case hex SHA-256 of `size` bytes at `data`.
std::string sha256Hex(const void *data, size_t size);
inline std::string sha256Hex(const std::string &bytes) {
  return sha256Hex(bytes.data(), bytes.size());
}
} // namespace ortc

#endif // ORTC_RUNTIME_SHA256_H
