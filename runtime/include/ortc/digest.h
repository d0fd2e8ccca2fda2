//===- digest.h - What a manifest records of each artifact file -*- C++ -*-===//
//
// The compiler writes, and the runtime and `ortc export` check, a digest of every
// artifact file: SHA-256 (lower-case hex) for the small files, XXH3-128
// ("xxh3-128:" and 32 hex digits) for params.bin. Why two: params.bin holds the
// weights (0.5 GB for GPT-2-124M, tens of GB for the models people fine-tune),
// hashed on every build and every load; SHA-256 runs at ~1.3 GB/s even with SHA-NI,
// XXH3 at memory speed. The digest only tells a changed or corrupt file (the
// manifest is not signed, so a cryptographic hash of the weights guards nothing
// more). Artifacts that record SHA-256 for params.bin still load.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_RUNTIME_DIGEST_H
#define ORTC_RUNTIME_DIGEST_H

#include <cstddef>
#include <memory>
#include <string>

namespace ortc {
/// Incremental params.bin digest ("xxh3-128:<hex>"): hash the weights while they
/// are streamed to disk, without holding them.
class ParamsDigest {
public:
  ParamsDigest();
  ~ParamsDigest();
  void update(const void *data, size_t size);
  /// The digest of everything updated so far.
  std::string digest() const;

private:
  struct State;
  std::unique_ptr<State> state;
};

/// The params.bin digest of `size` bytes at `data`.
std::string paramsDigest(const void *data, size_t size);

/// The digest of `size` bytes at `data` by the algorithm `expected` is written in
/// (an "xxh3-128:" digest or SHA-256 hex), to compare with `expected`.
std::string digestLike(const std::string &expected, const void *data, size_t size);

/// What digestLike names its algorithm in messages ("XXH3-128" or "SHA-256").
const char *digestName(const std::string &expected);
} // namespace ortc

#endif // ORTC_RUNTIME_DIGEST_H
