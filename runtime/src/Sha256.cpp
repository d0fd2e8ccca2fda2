//===- Sha256.cpp - SHA-256 (FIPS 180-4) ---------------------------------===//
#include "ortc/sha256.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ortc {
namespace {

constexpr uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 |
           uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

#if defined(__x86_64__)
/// The same compression on the x86 SHA extensions (AMD Zen, Intel Goldmont and
/// Ice Lake onwards): 4 rounds per sha256rnds2 pair, the message schedule by
/// sha256msg1/msg2; about 10x the portable loop, which matters for params.bin
/// (hundreds of MB hashed at every build and every load).
__attribute__((target("sha,sse4.1,ssse3"))) void blocksShaNi(uint32_t h[8], const uint8_t *p,
                                                               size_t n) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  // The state as the instructions want it: ABEF and CDGH.
  __m128i t = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h)), 0xB1);
  __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + 4)), 0x1B);
  __m128i s0 = _mm_alignr_epi8(t, s1, 8);
  s1 = _mm_blend_epi16(s1, t, 0xF0);
  for (; n; --n, p += 64) {
    __m128i abef = s0, cdgh = s1, w[4];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) { // w[(i + j) & 3] holds W[i - 4 + j] (4 words each)
      __m128i m;
      if (i < 4) {
        m = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + 16 * i)),
                             bswap);
      } else {
        __m128i x = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
        x = _mm_add_epi32(x, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
        m = _mm_sha256msg2_epu32(x, w[(i + 3) & 3]);
      }
      w[i & 3] = m;
      __m128i k = _mm_add_epi32(m, _mm_loadu_si128(reinterpret_cast<const __m128i *>(K + 4 * i)));
      s1 = _mm_sha256rnds2_epu32(s1, s0, k);
      s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(k, 0x0E));
    }
    s0 = _mm_add_epi32(s0, abef);
    s1 = _mm_add_epi32(s1, cdgh);
  }
  t = _mm_shuffle_epi32(s0, 0x1B);  // FEBA
  s1 = _mm_shuffle_epi32(s1, 0xB1); // DCHG
  _mm_storeu_si128(reinterpret_cast<__m128i *>(h), _mm_blend_epi16(t, s1, 0xF0)); // DCBA
  _mm_storeu_si128(reinterpret_cast<__m128i *>(h + 4), _mm_alignr_epi8(s1, t, 8)); // HGFE
}

bool cpuHasShaNi() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3))
    return false;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#endif

std::atomic<bool> forcePortable{false};

/// Compresses `n` whole blocks at `p` into `h`.
void blocks(uint32_t h[8], const uint8_t *p, size_t n) {
#if defined(__x86_64__)
  static const bool shaNi = cpuHasShaNi();
  if (shaNi && !forcePortable.load(std::memory_order_relaxed))
    return blocksShaNi(h, p, n);
#endif
  for (; n; --n, p += 64)
    block(h, p);
}

} // namespace

bool sha256UsesCpuExtensions(bool allow) {
  forcePortable = !allow;
#if defined(__x86_64__)
  return allow && cpuHasShaNi();
#else
  return false;
#endif
}

Sha256::Sha256() { reset(); }

void Sha256::reset() {
  static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::memcpy(h, init, sizeof h);
  pending = 0;
  total = 0;
}

void Sha256::update(const void *data, size_t size) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  total += size;
  if (pending) { // fill the partial block first
    size_t take = std::min<size_t>(64 - pending, size);
    std::memcpy(buf + pending, p, take);
    pending += take;
    p += take;
    size -= take;
    if (pending < 64)
      return;
    blocks(h, buf, 1);
    pending = 0;
  }
  size_t full = size / 64 * 64;
  blocks(h, p, full / 64);
  std::memcpy(buf, p + full, size - full);
  pending = size - full;
}

std::string Sha256::hex() {
  uint8_t tail[128] = {0};
  std::memcpy(tail, buf, pending);
  tail[pending] = 0x80;
  size_t len = pending + 9 <= 64 ? 64 : 128;
  uint64_t bits = total * 8;
  for (int i = 0; i < 8; ++i)
    tail[len - 1 - i] = uint8_t(bits >> (8 * i));
  blocks(h, tail, len / 64);
  static const char *digits = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h)
    for (int s = 28; s >= 0; s -= 4)
      out += digits[(v >> s) & 15];
  reset();
  return out;
}

std::string sha256Hex(const void *data, size_t size) {
  Sha256 s;
  s.update(data, size);
  return s.hex();
}

} // namespace ortc
