// The two OCP 8-bit floating-point formats (OCP "OFP8" specification, 2023), as the
// low-precision ring carries gradients in them (dist/compression/wire_format.h). Scalar,
// inline and branch-light: a bucket of a million gradients is encoded per ring step.
//
//             sign  exponent  mantissa  bias   largest finite        smallest subnormal  inf  NaN codes
//   E4M3       1      4          3        7    S.1111.110 = 448      2^-9                none S.1111.111
//   E5M2       1      5          2       15    S.11110.11 = 57344    2^-16               S.11111.00  S.11111.{01,10,11}
//
// E4M3 trades E5M2's infinities (and three of its NaN codes) for one more binade. Conversions
// from f32 round to nearest, ties to even, subnormals included, in the specification's
// saturating mode: a finite value beyond the largest finite one, and an infinity, become the
// largest finite value of its sign; a NaN stays a NaN (0x7F / 0xFF, in both formats). Decoding
// is exact (every FP8 value is an f32).
#pragma once

#include <bit>
#include <cstdint>

namespace ringgrad::dist {

enum class Fp8 { e4m3, e5m2 };

namespace detail {

// The constants of one format. Codes are S EEEE MMM (or S EEEEE MM).
template <Fp8 F>
struct Fp8Traits;
template <>
struct Fp8Traits<Fp8::e4m3> {
  static constexpr int mantissa_bits = 3, bias = 7;
  static constexpr uint8_t max_code = 0x7E, nan_code = 0x7F;
  static constexpr float max_value = 448.0f;
};
template <>
struct Fp8Traits<Fp8::e5m2> {
  static constexpr int mantissa_bits = 2, bias = 15;
  static constexpr uint8_t max_code = 0x7B, nan_code = 0x7F;
  static constexpr float max_value = 57344.0f;
};

}  // namespace detail

// f32 -> FP8, round to nearest even, saturating (see above).
//
// Why it works: a normal FP8 value's bits are an f32's with the exponent rebiased and the low
// 23 - M mantissa bits rounded off -- an integer addition of "half an FP8 ulp, less one, plus the
// kept lsb" does the rounding to nearest even, carrying into the exponent when the mantissa
// overflows. Below the smallest normal, adding the f32 `magic` (whose ulp is the FP8's smallest
// subnormal) makes the FPU round the value to a multiple of that subnormal; the low bits of the
// sum are then the subnormal's mantissa (and a round-up to the smallest normal lands on its code).
template <Fp8 F>
inline uint8_t encode_fp8(float value) {
  using Tr = detail::Fp8Traits<F>;
  constexpr int drop = 23 - Tr::mantissa_bits;
  constexpr uint32_t min_normal_bits = static_cast<uint32_t>(127 - Tr::bias + 1) << 23;
  constexpr uint32_t magic_bits = static_cast<uint32_t>((127 - Tr::bias) + drop + 1) << 23;
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  // Both roundings computed, then selected: no branch, so a loop of them vectorises (2 ns per value
  // with early returns, measured).
  const float sum = std::bit_cast<float>(magnitude) + std::bit_cast<float>(magic_bits);
  const uint32_t subnormal = std::bit_cast<uint32_t>(sum) - magic_bits;
  const uint32_t kept_lsb = (magnitude >> drop) & 1u;
  const uint32_t normal =
      (magnitude + (static_cast<uint32_t>(Tr::bias - 127) << 23) + ((1u << (drop - 1)) - 1u) + kept_lsb) >> drop;
  // Saturate (infinities too; a value just below max_value never rounds past it), then NaN. As
  // masks (all ones where true) rather than ?:, which GCC 12 leaves as branches here.
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(magnitude < min_normal_bits);
  const uint32_t saturates = 0u - static_cast<uint32_t>(magnitude >= std::bit_cast<uint32_t>(Tr::max_value));
  const uint32_t is_nan = 0u - static_cast<uint32_t>(magnitude > 0x7F800000u);
  uint32_t code = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  code = (Tr::max_code & saturates) | (code & ~saturates);
  code = (Tr::nan_code & is_nan) | (code & ~is_nan);
  return static_cast<uint8_t>(sign | code);
}

// FP8 -> f32, exact.
template <Fp8 F>
inline float decode_fp8(uint8_t code) {
  using Tr = detail::Fp8Traits<F>;
  constexpr int M = Tr::mantissa_bits;
  const bool negative = (code & 0x80u) != 0;
  const uint32_t exponent = (code & 0x7Fu) >> M, mantissa = code & ((1u << M) - 1);
  float magnitude;
  if constexpr (F == Fp8::e4m3) {
    if ((code & 0x7Fu) == Tr::nan_code) return std::bit_cast<float>(negative ? 0xFFC00000u : 0x7FC00000u);
  } else {
    if (exponent == 31) {
      if (mantissa != 0) return std::bit_cast<float>(negative ? 0xFFC00000u : 0x7FC00000u);
      return std::bit_cast<float>(negative ? 0xFF800000u : 0x7F800000u);
    }
  }
  if (exponent == 0) {  // subnormal: mantissa * 2^(1 - bias - M)
    magnitude =
        static_cast<float>(mantissa) * std::bit_cast<float>(static_cast<uint32_t>(127 + 1 - Tr::bias - M) << 23);
  } else {
    magnitude = std::bit_cast<float>(((exponent - Tr::bias + 127) << 23) | (mantissa << (23 - M)));
  }
  return negative ? -magnitude : magnitude;
}

// The largest finite value of a format.
inline float fp8_max(Fp8 f) {
  return f == Fp8::e4m3 ? detail::Fp8Traits<Fp8::e4m3>::max_value : detail::Fp8Traits<Fp8::e5m2>::max_value;
}

}  // namespace ringgrad::dist
