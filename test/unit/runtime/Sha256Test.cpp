//===- Sha256Test.cpp - SHA-256 against published vectors ----------------===//
//
// Why: the runtime refuses artifacts whose hashes differ, so a wrong SHA-256 would
// refuse every artifact (or accept a corrupt one if the compiler shared the bug).
// FIPS 180-2 vectors plus the padding boundaries (55/56/63/64/65/119/120 bytes).
//
//===----------------------------------------------------------------------===//
#include "ortc/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using ortc::sha256Hex;

TEST(Sha256, PublishedVectors) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  const std::pair<size_t, const char *> cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"}};
  for (const auto &[n, hex] : cases)
    EXPECT_EQ(sha256Hex(std::string(n, 'a')), hex) << n << " bytes";
}

TEST(Sha256, AllByteValues) {
  std::string bytes;
  for (int i = 0; i < 256; ++i)
    bytes += char(i);
  EXPECT_EQ(sha256Hex(bytes), "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880");
}

TEST(Sha256, IncrementalMatchesOneShotForEverySplit) {
  // params.bin is hashed while streamed in pieces of any size: every split point
  // of a 200-byte message (across block and padding boundaries) and a split into
  // single bytes must give the one-shot digest.
  std::string bytes;
  for (int i = 0; i < 200; ++i)
    bytes += char(i * 7 + 3);
  std::string expected = sha256Hex(bytes);
  ortc::Sha256 s;
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    s.update(bytes.data(), cut);
    s.update(bytes.data() + cut, bytes.size() - cut);
    EXPECT_EQ(s.hex(), expected) << "split at " << cut;
  }
  for (char c : bytes)
    s.update(&c, 1);
  EXPECT_EQ(s.hex(), expected);
  s.update("abc", 3);
  EXPECT_EQ(s.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, CpuExtensionsAgreeWithPortableCode) {
  // Where the CPU has SHA extensions both paths run: every vector above, and 1 MB of
  // varied bytes, must hash the same (elsewhere this checks the portable path twice).
  std::string bytes;
  for (int i = 0; i < (1 << 20); ++i)
    bytes += char((i * 2654435761u) >> 13);
  std::vector<std::string> inputs = {"", "abc", std::string(55, 'a'), std::string(64, 'a'),
                                     std::string(119, 'a'), bytes};
  std::vector<std::string> fast, portable;
  bool used = ortc::sha256UsesCpuExtensions(true);
  for (const std::string &in : inputs)
    fast.push_back(sha256Hex(in));
  ortc::sha256UsesCpuExtensions(false);
  for (const std::string &in : inputs)
    portable.push_back(sha256Hex(in));
  ortc::sha256UsesCpuExtensions(true);
  EXPECT_EQ(fast, portable) << (used ? "SHA extensions in use" : "portable only");
  EXPECT_EQ(fast[1], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
