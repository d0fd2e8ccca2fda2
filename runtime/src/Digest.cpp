//===- Digest.cpp - Artifact file digests --------------------------------===//
//
// XXH3-128 from Debian's libxxhash-dev, inlined (XXH_INLINE_ALL): the runtime
// links no xxhash library, so `ortc-run` stays self-contained.
//
//===----------------------------------------------------------------------===//
#include "ortc/digest.h"

#include "ortc/sha256.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ortc {
namespace {
constexpr const char kXxh3Prefix[] = "xxh3-128:";

bool isXxh3(const std::string &digest) { return digest.rfind(kXxh3Prefix, 0) == 0; }

std::string xxh3Text(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char *digits = "0123456789abcdef";
  std::string out = kXxh3Prefix;
  for (unsigned char b : c.digest) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}
} // namespace

struct ParamsDigest::State {
  XXH3_state_t xxh;
};

ParamsDigest::ParamsDigest() : state(std::make_unique<State>()) {
  XXH3_128bits_reset(&state->xxh);
}
ParamsDigest::~ParamsDigest() = default;

void ParamsDigest::update(const void *data, size_t size) {
  XXH3_128bits_update(&state->xxh, data, size);
}

std::string ParamsDigest::digest() const { return xxh3Text(XXH3_128bits_digest(&state->xxh)); }

std::string paramsDigest(const void *data, size_t size) {
  return xxh3Text(XXH3_128bits(data, size));
}

std::string digestLike(const std::string &expected, const void *data, size_t size) {
  return isXxh3(expected) ? paramsDigest(data, size) : sha256Hex(data, size);
}

const char *digestName(const std::string &expected) {
  return isXxh3(expected) ? "XXH3-128" : "SHA-256";
}
} // namespace ortc
