//===- half.h - 16-bit float types of the emulated device ------*- C++ -*-===//
//
// Why: the generated prelude names __half, __nv_bfloat16 and hip_bfloat16; here
// they are storage types that convert through float with round-to-nearest-even,
// as the hardware conversions do, so fp16/bf16 kernels compute what a GPU would.
//
//===----------------------------------------------------------------------===//
#ifndef ORTC_EMU_HALF_H
#define ORTC_EMU_HALF_H

#include <cstdint>
#include <cstring>

namespace emu {
inline uint16_t floatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf / nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) // rounds to >= 65520: inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (absx < 0x38800000u) { // subnormal half (or zero)
    float a;
    std::memcpy(&a, &absx, 4);
    const float scaled = a * 16777216.0f; // 2^24: units of the smallest subnormal
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u)))
      ++m;
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t e = ((absx >> 23) - 112u) << 10, m = (absx >> 13) & 0x3ffu;
  uint32_t h = e | m;
  const uint32_t rest = absx & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    float f = static_cast<float>(m) / 16777216.0f;
    std::memcpy(&x, &f, 4);
    x |= sign;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint16_t floatToBf16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u); // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16BitsToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// A 16-bit float stored as bits; arithmetic goes through float.
template <uint16_t (*ToBits)(float), float (*FromBits)(uint16_t)> struct Float16 {
  uint16_t bits;
  Float16() = default;
  Float16(float f) : bits(ToBits(f)) {}
  Float16(double f) : bits(ToBits(static_cast<float>(f))) {}
  Float16(int v) : bits(ToBits(static_cast<float>(v))) {}
  operator float() const { return FromBits(bits); }
  Float16 &operator+=(Float16 o) { return *this = Float16(float(*this) + float(o)); }
  Float16 &operator-=(Float16 o) { return *this = Float16(float(*this) - float(o)); }
  Float16 &operator*=(Float16 o) { return *this = Float16(float(*this) * float(o)); }
  Float16 &operator/=(Float16 o) { return *this = Float16(float(*this) / float(o)); }
};
} // namespace emu

typedef emu::Float16<emu::floatToHalfBits, emu::halfBitsToFloat> __half;
typedef emu::Float16<emu::floatToBf16Bits, emu::bf16BitsToFloat> __nv_bfloat16;
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }

#endif // ORTC_EMU_HALF_H
