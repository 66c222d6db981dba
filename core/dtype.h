// Element types, and the f16 / bf16 <-> f32 conversions every backend shares.
//
// Conversions to f16 and bf16 round to nearest, ties to even (from f32 and from f64 alike), and keep
// NaN (quietened) and Inf.
// Arithmetic on f16 / bf16 tensors loads each element as f32, computes in f32 and rounds once on store.
// f64 exists so that gradcheck can run finite differences in double precision.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/host_device.h"

namespace ringgrad {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f16", ...
bool is_floating(DType t);        // f32, f64, f16, bf16

// 16-bit float storage types. They convert to and from float explicitly; all math is done in float.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

RG_HOST_DEVICE RG_INLINE uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
RG_HOST_DEVICE RG_INLINE float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// f32 -> f16, round to nearest even. Normal numbers round by adding 0xfff (+1 when the kept mantissa
// is odd) before truncating 13 bits; subnormals let the FPU do the rounding by adding a magic
// number whose exponent lines the f16 subnormal ulp up with the f32 mantissa's last bit.
//
// Note [Branch-free f16 conversions]: both directions compute every case and select one with bit
// masks. With an if per case GCC neither vectorises a loop of them nor predicts the branch on
// gradients, whose magnitudes straddle the f16 subnormal boundary: a tensor cast took 5-6 ns per
// element (the fp16 compression hook spent 3 ms a step on W1's 670k gradients). Masks make the
// loops branch-free and vectorisable: 0.5-1 ns per element, the same bits.
RG_HOST_DEVICE RG_INLINE uint16_t float_to_half_bits(float value) {
  uint32_t u = float_bits(value);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t subnormal = float_bits(bits_float(u) + bits_float(magic)) - magic;  // |x| < 2^-14
  // 65520 <= |x| < 65536 carries into Inf.
  const uint32_t normal = (u + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  const uint32_t inf_or_nan = 0x7c00u | (static_cast<uint32_t>(u > 0x7f800000u) << 9);  // NaN -> quiet NaN
  const uint32_t small = 0u - static_cast<uint32_t>(u < (113u << 23));                  // f16 subnormal or zero
  const uint32_t large = 0u - static_cast<uint32_t>(u >= ((127u + 16u) << 23));         // |x| >= 65536, Inf, NaN
  uint32_t out = (subnormal & small) | (normal & ~small);
  out = (inf_or_nan & large) | (out & ~large);
  return static_cast<uint16_t>(out | (sign >> 16));
}

// f16 -> f32, exact. Branch-free: Note [Branch-free f16 conversions].
RG_HOST_DEVICE RG_INLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  // zero or subnormal: mantissa * 2^-24, exact in f32
  const uint32_t subnormal = float_bits(static_cast<float>(mantissa) * 5.9604644775390625e-8f);
  const uint32_t inf_or_nan = 0x7f800000u | (mantissa << 13);
  const uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);
  const uint32_t zero_exponent = 0u - static_cast<uint32_t>(exponent == 0);
  const uint32_t max_exponent = 0u - static_cast<uint32_t>(exponent == 31);
  const uint32_t bits =
      (subnormal & zero_exponent) | (inf_or_nan & max_exponent) | (normal & ~(zero_exponent | max_exponent));
  return bits_float(bits | sign);
}

// f32 -> bf16, round to nearest even; NaN stays NaN (quietened).
RG_HOST_DEVICE RG_INLINE uint16_t float_to_bf16_bits(float value) {
  uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

RG_HOST_DEVICE RG_INLINE float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Loading any storage type as its compute type, and storing back with one rounding.
template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <class T>
using compute_t = typename ComputeType<T>::type;

template <class T>
RG_HOST_DEVICE RG_INLINE compute_t<T> load(const T& v) {
  return v;
}
template <>
RG_HOST_DEVICE RG_INLINE float load<Half>(const Half& v) {
  return half_bits_to_float(v.bits);
}
template <>
RG_HOST_DEVICE RG_INLINE float load<BFloat16>(const BFloat16& v) {
  return bf16_bits_to_float(v.bits);
}

template <class T, class V>
RG_HOST_DEVICE RG_INLINE T store_as(V v) {
  return static_cast<T>(v);
}
template <>
RG_HOST_DEVICE RG_INLINE Half store_as<Half, float>(float v) {
  return Half{float_to_half_bits(v)};
}
template <>
RG_HOST_DEVICE RG_INLINE BFloat16 store_as<BFloat16, float>(float v) {
  return BFloat16{float_to_bf16_bits(v)};
}
// f64 -> f32 rounding to odd: truncate toward zero and set the last bit when inexact. Rounding the
// result once more to f16/bf16 (at least 13 bits shorter) then equals rounding the double directly,
// with no double-rounding error (Boldo & Melquiond, "When double rounding is odd").
RG_HOST_DEVICE RG_INLINE float double_to_float_round_odd(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v || v != v) return f;
  uint32_t bits = float_bits(f);
  const bool away_from_zero = (f > 0) ? (static_cast<double>(f) > v) : (static_cast<double>(f) < v);
  if (away_from_zero && (bits & 0x7fffffffu) != 0) bits -= 1;  // step back toward zero: truncation
  return bits_float(bits | 1u);
}
template <>
RG_HOST_DEVICE RG_INLINE Half store_as<Half, double>(double v) {
  return Half{float_to_half_bits(double_to_float_round_odd(v))};
}
template <>
RG_HOST_DEVICE RG_INLINE BFloat16 store_as<BFloat16, double>(double v) {
  return BFloat16{float_to_bf16_bits(double_to_float_round_odd(v))};
}

// The type a value of storage type In is converted to before store_as<Out> rounds it: Out's compute
// type, except that doubles going to f16/bf16 stay double so they are rounded once (round-to-odd
// above), not twice through f32. The CPU and CUDA cast kernels both use it.
template <class Out, class In>
using cast_compute_t =
    std::conditional_t<(std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>)&&std::is_same_v<In, double>, double,
                       compute_t<Out>>;

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

// Calls fn(T{}) with T the storage type of `t`: RG_DISPATCH style without macros.
template <class Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
    case DType::u8: return fn(uint8_t{});
  }
  return fn(float{});
}

// Same, for floating types only (others are the caller's error to report first).
template <class Fn>
decltype(auto) dispatch_floating(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn(double{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    default: return fn(float{});
  }
}

}  // namespace ringgrad
