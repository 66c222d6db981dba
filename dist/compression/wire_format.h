// What the low-precision ring puts on the wire (public; dist/process_group.h includes it): a chunk
// of f32 values encoded as bf16, or as FP8 with one f32 scale per block of elements.
//
// Note [Scaled FP8 blocks]: FP8 spans few binades (E4M3: 2^-9 .. 448), and gradients live far
// below 1. So a chunk is cut into blocks of `scale_block` elements, and each block travels as its
// values times max / amax (max: the format's largest finite value; amax: the block's largest
// magnitude), followed by the f32 decode factor amax / max. The block's largest value lands on
// the format's largest, smaller ones keep the format's relative precision (E4M3: 2^-4, E5M2:
// 2^-3 relative rounding error, half an ulp) until they are 2^-15 (E4M3) or 2^-31 (E5M2) below
// amax, where they reach the subnormals and then zero. A block of zeros sends factor 0. A block
// holding an infinity or a NaN sends factor NaN: every value of it decodes as NaN, on every rank,
// so an overflow check downstream (optim::GradScaler) still sees it. Scales cost 4 / scale_block
// bytes per element: 0.4% of the payload at the default 1024.
//
// bf16 has f32's exponent range: it needs no scale, and keeps infinities and NaNs as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringgrad::dist {

enum class WireFormat { bf16, fp8_e4m3, fp8_e5m2 };
const char* wire_format_name(WireFormat format);  // "bf16", "fp8-e4m3", "fp8-e5m2"
// The inverse; throws naming the formats there are.
WireFormat parse_wire_format(const std::string& name);

inline constexpr int64_t kDefaultScaleBlock = 1024;

// The bytes that n values take on the wire.
struct WireBytes {
  uint64_t payload = 0;  // the encoded values
  uint64_t scales = 0;   // FP8's per-block decode factors
  uint64_t total() const { return payload + scales; }
  WireBytes& operator+=(const WireBytes& o) {
    payload += o.payload;
    scales += o.scales;
    return *this;
  }
};
WireBytes wire_bytes(WireFormat format, int64_t n, int64_t scale_block = kDefaultScaleBlock);

// x: (n) -> wire_bytes(format, n).total() bytes at out: the payload, then the scales.
void encode_to_wire(WireFormat format, const float* x, int64_t n, int64_t scale_block, std::byte* out);

// How decoded values v land in out.
enum class DecodeInto { assign, add, subtract };  // out = v, out += v, out -= factor * v
// wire: what encode_to_wire wrote for n values. out[i] = v[i] / out[i] += v[i] / out[i] -= factor * v[i].
void decode_from_wire(WireFormat format, const std::byte* wire, int64_t n, int64_t scale_block, float* out,
                      DecodeInto how, float factor = 1);

// Sets every element of an error-feedback residual that is not finite to zero. Such an element is
// not a rounding error to carry: the value encoded was an infinity or a NaN (a block holding one
// decodes as NaN, Note [Scaled FP8 blocks]), the step it belongs to is skipped
// (optim::GradScaler), and carrying it would poison every later step. The low-precision ring's
// residuals and PowerSGD's both pass through it.
void keep_finite(float* residual, int64_t n);

}  // namespace ringgrad::dist
