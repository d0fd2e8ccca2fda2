//===- DigestTest.cpp - params.bin's XXH3-128 digest ---------------------===//
//
// Why: the runtime refuses an artifact whose params.bin digest differs, and the
// compiler digests params.bin a piece at a time while streaming it; both must agree
// with the one-shot digest whatever the pieces, and artifacts that recorded SHA-256
// for params.bin (before XXH3) must still verify.
//
//===----------------------------------------------------------------------===//
#include "ortc/digest.h"
#include "ortc/sha256.h"

#include <gtest/gtest.h>

#include <string>

using ortc::digestLike;
using ortc::paramsDigest;

TEST(Digest, KnownAnswers) {
  // XXH3-128 (seed 0) of the empty input, high half first (xxHash's canonical form).
  EXPECT_EQ(paramsDigest("", 0), "xxh3-128:99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(paramsDigest("abc", 3), "xxh3-128:06b05ab6733a618578af5f94892f3950");
}

TEST(Digest, StreamingEqualsOneShotAtAnySplit) {
  std::string bytes(5000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = char((i * 131 + 7) % 251);
  const std::string whole = paramsDigest(bytes.data(), bytes.size());
  for (size_t piece : {1u, 3u, 64u, 239u, 240u, 241u, 1024u, 4999u}) {
    ortc::ParamsDigest d;
    for (size_t at = 0; at < bytes.size(); at += piece)
      d.update(bytes.data() + at, std::min(piece, bytes.size() - at));
    EXPECT_EQ(d.digest(), whole) << "pieces of " << piece;
  }
  bytes[4321] ^= 1;
  EXPECT_NE(paramsDigest(bytes.data(), bytes.size()), whole);
}

TEST(Digest, VerifiesByTheAlgorithmTheManifestNames) {
  const std::string bytes = "weights";
  const std::string xxh = paramsDigest(bytes.data(), bytes.size());
  const std::string sha = ortc::sha256Hex(bytes);
  EXPECT_EQ(digestLike(xxh, bytes.data(), bytes.size()), xxh);
  EXPECT_EQ(digestLike(sha, bytes.data(), bytes.size()), sha);
  EXPECT_STREQ(ortc::digestName(xxh), "XXH3-128");
  EXPECT_STREQ(ortc::digestName(sha), "SHA-256");
}
