// The wire formats of the low-precision ring (dist/compression/): the OCP FP8 codecs against all
// 256 codes of each format, a brute-force nearest-value reference and a hand-checked table, and
// the scaled blocks (Note [Scaled FP8 blocks]). One process, no MPI.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "dist/compression/fp8.h"
#include "dist/compression/wire_format.h"

namespace rg = ringgrad;
namespace dist = ringgrad::dist;
using dist::Fp8;

namespace {

struct Format {
  Fp8 kind;
  int exponent_bits, mantissa_bits, bias;
  const char* name;
};
const Format kFormats[] = {{Fp8::e4m3, 4, 3, 7, "e4m3"}, {Fp8::e5m2, 5, 2, 15, "e5m2"}};

uint8_t encode(Fp8 f, float x) {
  return f == Fp8::e4m3 ? dist::encode_fp8<Fp8::e4m3>(x) : dist::encode_fp8<Fp8::e5m2>(x);
}
float decode(Fp8 f, uint8_t c) {
  return f == Fp8::e4m3 ? dist::decode_fp8<Fp8::e4m3>(c) : dist::decode_fp8<Fp8::e5m2>(c);
}

// The value of a code straight from the specification's definition, in double: NaN for the NaN
// codes, +-inf for E5M2's infinities.
double reference_value(const Format& f, uint8_t code) {
  const int sign = code >> 7, exponent = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int max_exponent = (1 << f.exponent_bits) - 1;
  if (f.kind == Fp8::e4m3 && exponent == max_exponent && mantissa == (1 << f.mantissa_bits) - 1) return NAN;
  if (f.kind == Fp8::e5m2 && exponent == max_exponent) return mantissa == 0 ? (sign ? -INFINITY : INFINITY) : NAN;
  const double frac = static_cast<double>(mantissa) / (1 << f.mantissa_bits);
  const double magnitude = exponent == 0 ? std::ldexp(frac, 1 - f.bias) : std::ldexp(1 + frac, exponent - f.bias);
  return sign ? -magnitude : magnitude;
}

// Round-to-nearest-even by exhaustive search over the finite codes, saturating: the independent
// reference for the bit-twiddling encoder.
uint8_t reference_encode(const Format& f, float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  uint8_t best = 0;
  double best_distance = INFINITY;
  double largest = 0;
  uint8_t largest_code = 0;
  for (int c = 0; c < 128; ++c) {
    const double v = reference_value(f, static_cast<uint8_t>(c));
    if (!std::isfinite(v)) continue;
    if (v > largest) largest = v, largest_code = static_cast<uint8_t>(c);
    const double d = std::fabs(a - v);
    // Codes ascend with value, so an equal distance later is the upper neighbour of a tie: take
    // whichever has the even mantissa (code's lowest bit clear).
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) best = static_cast<uint8_t>(c), best_distance = d;
  }
  if (a > largest) return sign | largest_code;  // saturating mode (infinities too)
  return sign | best;
}

}  // namespace

TEST_CASE("fp8: every one of the 256 codes decodes to the value the OCP definition gives, and encodes back") {
  for (const Format& f : kFormats) {
    CAPTURE(f.name);
    int nans = 0;
    for (int c = 0; c < 256; ++c) {
      CAPTURE(c);
      const auto code = static_cast<uint8_t>(c);
      const double want = reference_value(f, code);
      const float got = decode(f.kind, code);
      if (std::isnan(want)) {
        ++nans;
        CHECK(std::isnan(got));
        CHECK((encode(f.kind, got) & 0x7F) == 0x7F);  // a NaN stays a NaN
        continue;
      }
      CHECK(static_cast<double>(got) == want);
      CHECK(std::signbit(got) == ((c & 0x80) != 0));
      if (std::isinf(want)) continue;                     // E5M2's infinities saturate: below
      CHECK(static_cast<int>(encode(f.kind, got)) == c);  // -0 included
    }
    CHECK(nans == (f.kind == Fp8::e4m3 ? 2 : 6));
  }
}

TEST_CASE("fp8: encoding rounds to nearest even and saturates, as a brute-force search over the codes does") {
  for (const Format& f : kFormats) {
    CAPTURE(f.name);
    std::vector<float> inputs = {0.0f,
                                 -0.0f,
                                 INFINITY,
                                 -INFINITY,
                                 NAN,
                                 -NAN,
                                 std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::denorm_min(),
                                 std::numeric_limits<float>::min(),
                                 1e-30f};
    // Every midpoint between neighbouring finite codes (the ties), and one f32 ulp either side.
    for (int c = 0; c + 1 < 128; ++c) {
      const double lo = reference_value(f, static_cast<uint8_t>(c)),
                   hi = reference_value(f, static_cast<uint8_t>(c + 1));
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      const auto mid = static_cast<float>((lo + hi) / 2);  // exact in f32
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        inputs.push_back(v);
        inputs.push_back(-v);
      }
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> log2(-24, 20);
    for (int i = 0; i < 20000; ++i) inputs.push_back(static_cast<float>((i % 2 ? -1 : 1) * std::exp2(log2(rng))));
    for (float x : inputs) {
      CAPTURE(x);
      const uint8_t want = reference_encode(f, x), got = encode(f.kind, x);
      if (std::isnan(x)) {
        CHECK(std::isnan(decode(f.kind, got)));
      } else {
        REQUIRE(static_cast<int>(got) == static_cast<int>(want));
      }
    }
  }
}

TEST_CASE("fp8: a table of hand-checked encodings") {
  struct Case {
    float x;
    uint8_t e4m3, e5m2;
  };
  const Case cases[] = {
      {1.0f, 0x38, 0x3C},       // 1.0: exponent field = bias, mantissa 0
      {-2.0f, 0xC0, 0xC0},      // sign bit, exponent + 1
      {448.0f, 0x7E, 0x5F},     // E4M3's largest finite; E5M2: 1.75 * 2^8
      {464.0f, 0x7E, 0x5F},     // E4M3: a tie of 448 (mantissa 110) and 480 (would be NaN): saturates
      {1e6f, 0x7E, 0x7B},       // beyond both: saturates to the largest finite
      {INFINITY, 0x7E, 0x7B},   // saturating mode: inf -> largest finite
      {-INFINITY, 0xFE, 0xFB},  //
      {57344.0f, 0x7E, 0x7B},   // E5M2's largest finite
      {61440.0f, 0x7E, 0x7B},   // E5M2: a tie of 57344 and 65536 (inf): saturates
      {0.0625f, 0x18, 0x2C},    // 2^-4
      {0x1p-9f, 0x01, 0x18},    // E4M3's smallest subnormal
      {0x1p-10f, 0x00, 0x14},   // E4M3: the tie of 0 and 2^-9 goes to 0 (even)
      {0x3p-10f, 0x02, 0x1A},   // E4M3: the tie of 2^-9 (0x01) and 2^-8 (0x02) goes to 0x02
      {0x1p-16f, 0x00, 0x01},   // E5M2's smallest subnormal; E4M3: far below half its smallest
      {0x1p-17f, 0x00, 0x00},   // E5M2: the tie of 0 and 2^-16 goes to 0
      {0x3p-17f, 0x00, 0x02},   // E5M2: the tie of 2^-16 (0x01) and 2^-15 (0x02) goes to 0x02
      {0x1.1p0f, 0x38, 0x3C},   // 1 + 1/16: E4M3's tie of 1 and 1.125 goes to 1 (mantissa 000)
      {0x1.3p0f, 0x3A, 0x3D},   // 1 + 3/16: E4M3's tie of 1.125 and 1.25 goes to 1.25 (010)
      {0x1.ep-7f, 0x08, 0x24},  // 0.9375 * 2^-6 rounds up to 2^-6: E4M3 smallest normal; E5M2 1.875 * 2^-7 -> 2^-6
  };
  for (const Case& c : cases) {
    CAPTURE(c.x);
    CHECK(static_cast<int>(dist::encode_fp8<Fp8::e4m3>(c.x)) == c.e4m3);
    CHECK(static_cast<int>(dist::encode_fp8<Fp8::e5m2>(c.x)) == c.e5m2);
  }
  CHECK(dist::encode_fp8<Fp8::e4m3>(NAN) == 0x7F);
  CHECK(dist::encode_fp8<Fp8::e5m2>(-NAN) == 0xFF);
  CHECK(std::isinf(dist::decode_fp8<Fp8::e5m2>(0x7C)));
}

TEST_CASE("wire: scaled FP8 blocks keep each value to the format's relative precision; bf16 as core rounds it") {
  const int64_t n = 2500, block = 1024;  // two full blocks and a tail
  std::vector<float> x(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n; ++i)
    x[i] = u(rng) * std::exp2(static_cast<float>(i / block) * 20 - 30);  // per block: 2^-30, 2^-10, 2^10
  for (dist::WireFormat w : {dist::WireFormat::fp8_e4m3, dist::WireFormat::fp8_e5m2, dist::WireFormat::bf16}) {
    CAPTURE(dist::wire_format_name(w));
    const dist::WireBytes bytes = dist::wire_bytes(w, n, block);
    CHECK(bytes.payload == (w == dist::WireFormat::bf16 ? 2 * n : n));
    CHECK(bytes.scales == (w == dist::WireFormat::bf16 ? 0 : 3 * 4));
    std::vector<std::byte> wire(bytes.total());
    dist::encode_to_wire(w, x.data(), n, block, wire.data());
    std::vector<float> y(n, 5.0f);
    dist::decode_from_wire(w, wire.data(), n, block, y.data(), dist::DecodeInto::assign);
    const double u_rel = w == dist::WireFormat::fp8_e4m3 ? 0x1p-4 : w == dist::WireFormat::fp8_e5m2 ? 0x1p-3 : 0x1p-8;
    for (int64_t b = 0; b * block < n; ++b) {
      float amax = 0;
      for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) amax = std::max(amax, std::fabs(x[i]));
      for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
        CAPTURE(i);
        if (w == dist::WireFormat::bf16) {
          REQUIRE(y[i] == rg::bf16_bits_to_float(rg::float_to_bf16_bits(x[i])));
          continue;
        }
        // Half an ulp relative, or below the (scaled) smallest normal half the smallest subnormal;
        // plus f32's rounding of the scale and its inverse.
        const double floor = amax / dist::fp8_max(w == dist::WireFormat::fp8_e4m3 ? Fp8::e4m3 : Fp8::e5m2) *
                             (w == dist::WireFormat::fp8_e4m3 ? 0x1p-10 : 0x1p-17);
        REQUIRE(std::fabs(y[i] - x[i]) <= u_rel * std::fabs(x[i]) + floor + 4e-7 * std::fabs(x[i]));
        if (std::fabs(x[i]) == amax) CHECK(std::fabs(y[i] - x[i]) <= 4e-7 * amax);  // amax lands on the largest code
      }
    }
    // Accumulating and subtracting decodes go through the same values.
    std::vector<float> acc(x.begin(), x.end());
    dist::decode_from_wire(w, wire.data(), n, block, acc.data(), dist::DecodeInto::subtract, 2.0f);
    for (int64_t i = 0; i < n; i += 97) CHECK(acc[i] == x[i] - 2.0f * y[i]);
  }
}

TEST_CASE("wire: a block holding inf or NaN decodes as NaN everywhere; a block of zeros as zeros") {
  std::vector<float> x(10, 0.0f);
  x[7] = INFINITY;
  for (int i = 0; i < 5; ++i) x[i] = 0.0f;  // block 0 (5 elements): zeros; block 1: 1, 1, inf, 1, 1
  x[5] = x[6] = x[8] = x[9] = 1.0f;
  for (dist::WireFormat w : {dist::WireFormat::fp8_e4m3, dist::WireFormat::fp8_e5m2}) {
    std::vector<std::byte> wire(dist::wire_bytes(w, 10, 5).total());
    dist::encode_to_wire(w, x.data(), 10, 5, wire.data());
    std::vector<float> y(10);
    dist::decode_from_wire(w, wire.data(), 10, 5, y.data(), dist::DecodeInto::assign);
    for (int i = 0; i < 5; ++i) CHECK(y[i] == 0.0f);
    for (int i = 5; i < 10; ++i) CHECK(std::isnan(y[i]));
  }
  CHECK_THROWS_WITH_AS(dist::parse_wire_format("fp4"), doctest::Contains("fp8-e4m3"), std::exception);
}
