// Element types: the f16 / bf16 conversions (exhaustively where 2^16 patterns allow), the rule that
// 16-bit float arithmetic computes in f32 and rounds once, integer arithmetic, and dtype errors.
//
// References are written here from the IEEE 754 definitions in double precision: the value an f16
// pattern encodes is sign * mantissa * 2^exponent, and rounding to nearest-even picks the closer of the
// two neighbouring representable values, the one with an even last bit on a tie.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ringgrad;
using rgtest::make;

namespace {

// The value an f16 bit pattern encodes: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
double half_value_ref(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool is_bf16_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// f32 -> f16 bits, round to nearest even, from the definition (not NaN).
uint16_t half_bits_ref(float value) {
  double x = value;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  x = std::fabs(x);
  if (x >= 65520.0) return sign | 0x7c00;  // 65520 is halfway from 65504 to 2^16; 65504 is odd: up
  if (x < 0x1p-14) {                       // subnormal: multiples of 2^-24 (1024 * 2^-24 = 2^-14 works too)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(x * 0x1p24)));
  }
  int e;
  std::frexp(x, &e);  // x in [2^(e-1), 2^e)
  int exponent = e - 1;
  double m = std::nearbyint(std::ldexp(x, 10 - exponent));  // in [1024, 2048]; nearbyint ties to even
  if (m == 2048) {
    m = 1024;
    ++exponent;
  }
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | (static_cast<int>(m) - 1024));
}

// f32 -> bf16 bits, round to nearest even, by comparing distances to the two neighbours in double.
uint16_t bf16_bits_ref(float value) {
  const uint32_t u = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t mag = u & 0x7fffffffu;
  const uint16_t below = static_cast<uint16_t>(mag >> 16);  // truncation toward zero
  const double x = std::fabs(static_cast<double>(value));
  const double lo = bits_float(static_cast<uint32_t>(below) << 16);
  const double hi = (below + 1 == 0x7f80) ? 0x1p128 : bits_float(static_cast<uint32_t>(below + 1) << 16);
  uint16_t pick;
  if (x - lo < hi - x) pick = below;
  else if (x - lo > hi - x) pick = static_cast<uint16_t>(below + 1);
  else pick = (below & 1) ? static_cast<uint16_t>(below + 1) : below;
  return static_cast<uint16_t>(sign | pick);
}

// A tensor of `dtype` holding a copy of host memory (the 16-bit patterns themselves, no conversion).
// The dtype is also passed in the options so that these tests do not depend on from_blob's default.
Tensor blob(const void* data, const Shape& shape, DType dtype) {
  return from_blob(data, shape, dtype, {.dtype = dtype});
}

std::string hex(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  if (c.dtype() == DType::f16) {
    const Half* p = c.data<Half>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i].bits;
  } else {
    const BFloat16* p = c.data<BFloat16>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i].bits;
  }
  return out;
}

std::vector<uint16_t> all_patterns() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

// Floats that probe f16 rounding: every midpoint between neighbouring f16 values, one f32 ulp either
// side of it, both signs; then random finite f32 bit patterns.
std::vector<float> f16_probe_floats() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = half_value_ref(static_cast<uint16_t>(h));
    const double hi = (h == 0x7bff) ? 65536.0 : half_value_ref(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs 12 significant bits
    for (float f : {static_cast<float>(lo), mid, std::nextafterf(mid, 0.0f), std::nextafterf(mid, INFINITY)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  rgtest::TestRng rng(2024);
  while (out.size() < 1'500'000) {
    const uint32_t u = static_cast<uint32_t>(rng.next() >> 32);
    if ((u & 0x7f800000u) != 0x7f800000u) out.push_back(bits_float(u));
  }
  return out;
}

std::vector<float> bf16_probe_floats() {
  std::vector<float> out;
  for (uint32_t b = 0; b < 0x7f80; b += 7) {  // midpoints of a spread of bf16 neighbours
    const uint32_t mid = (b << 16) | 0x8000u;
    for (uint32_t u : {mid, mid - 1, mid + 1, b << 16}) {
      out.push_back(bits_float(u));
      out.push_back(bits_float(u | 0x80000000u));
    }
  }
  rgtest::TestRng rng(4048);
  while (out.size() < 1'000'000) {
    const uint32_t u = static_cast<uint32_t>(rng.next() >> 32);
    if ((u & 0x7f800000u) != 0x7f800000u) out.push_back(bits_float(u));
  }
  return out;
}

}  // namespace

TEST_CASE("dtype sizes, names and the floating predicate") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(std::string(dtype_name(DType::f32)) == "f32");
  CHECK(std::string(dtype_name(DType::f16)) == "f16");
  CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
  CHECK(std::string(dtype_name(DType::i64)) == "i64");
  CHECK(std::string(dtype_name(DType::u8)) == "u8");
  CHECK(is_floating(DType::f32));
  CHECK(is_floating(DType::f64));
  CHECK(is_floating(DType::f16));
  CHECK(is_floating(DType::bf16));
  CHECK_FALSE(is_floating(DType::i32));
  CHECK_FALSE(is_floating(DType::i64));
  CHECK_FALSE(is_floating(DType::u8));
}

// ---- f16 --------------------------------------------------------------------------------------

TEST_CASE("every f16 bit pattern converts to the value its fields encode") {
  int bad = 0;
  std::string first;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float got = half_bits_to_float(h);
    const double want = half_value_ref(h);
    const bool ok = std::isnan(want) ? std::isnan(got)
                                     : (static_cast<double>(got) == want && std::signbit(got) == std::signbit(want));
    if (!ok && bad++ == 0) first = hex(h) + " -> " + std::to_string(got) + ", expected " + std::to_string(want);
  }
  CHECK_MESSAGE(bad == 0, bad << " patterns wrong; first: " << first);
}

TEST_CASE("every f16 bit pattern round-trips f16 to f32 to f16 exactly and NaN stays NaN") {
  int bad = 0;
  std::string first;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const uint16_t back = float_to_half_bits(half_bits_to_float(h));
    const bool ok = is_half_nan(h) ? is_half_nan(back) : back == h;
    if (!ok && bad++ == 0) first = hex(h) + " came back as " + hex(back);
  }
  CHECK_MESSAGE(bad == 0, bad << " patterns wrong; first: " << first);
}

TEST_CASE("every f16 bit pattern round-trips through f32 tensors") {
  const std::vector<uint16_t> patterns = all_patterns();
  const Tensor h = blob(patterns.data(), {65536}, DType::f16);
  REQUIRE(h.dtype() == DType::f16);
  const Tensor f = h.to(DType::f32);
  REQUIRE(f.dtype() == DType::f32);
  const Tensor fc = f.contiguous();
  const float* fp = fc.data<float>();
  const std::vector<double> hv = h.to_vector();
  const std::vector<uint16_t> back = bits_of(f.to(DType::f16));
  int bad_value = 0, bad_vector = 0, bad_back = 0;
  std::string first;
  for (uint32_t i = 0; i < 65536; ++i) {
    const double want = half_value_ref(static_cast<uint16_t>(i));
    const bool nan = std::isnan(want);
    if (nan ? !std::isnan(fp[i]) : static_cast<double>(fp[i]) != want) {
      if (bad_value++ == 0) first = "to(f32) of " + hex(i) + " gave " + std::to_string(fp[i]);
    }
    if (nan ? !std::isnan(hv[i]) : hv[i] != want) ++bad_vector;
    if (nan ? !is_half_nan(back[i]) : back[i] != i) {
      if (bad_back++ == 0 && first.empty()) first = hex(i) + " came back as " + hex(back[i]);
    }
  }
  CHECK_MESSAGE(bad_value == 0, bad_value << " wrong f32 values; " << first);
  CHECK_MESSAGE(bad_vector == 0, bad_vector << " wrong to_vector() values of the f16 tensor");
  CHECK_MESSAGE(bad_back == 0, bad_back << " patterns did not round-trip; " << first);
}

TEST_CASE("f32 to f16 rounds to nearest with ties to even at the edge cases") {
  struct Case {
    float value;
    uint16_t bits;
    const char* why;
  };
  const Case cases[] = {
      {1.0f, 0x3c00, "one"},
      {1.0f + 0x1p-11f, 0x3c00, "1 + 2^-11 is halfway to the next f16; 1.0 is even"},
      {1.0f + 3 * 0x1p-11f, 0x3c02, "1 + 3*2^-11 is halfway; 1 + 2^-10 is odd, so up"},
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01, "just above halfway rounds up"},
      {1.0f + 0x1p-11f - 0x1p-20f, 0x3c00, "just below halfway rounds down"},
      {-1.5f, 0xbe00, "negative"},
      {0.1f, 0x2e66, "0.1"},
      {65504.0f, 0x7bff, "largest finite f16"},
      {65519.99609375f, 0x7bff, "just below 65520 stays finite"},
      {65520.0f, 0x7c00, "65520 is halfway to 2^16 from an odd mantissa: Inf"},
      {1e6f, 0x7c00, "overflow"},
      {-1e6f, 0xfc00, "negative overflow"},
      {INFINITY, 0x7c00, "Inf"},
      {-INFINITY, 0xfc00, "-Inf"},
      {0x1p-14f, 0x0400, "smallest normal"},
      {0x1p-24f, 0x0001, "smallest subnormal"},
      {1023 * 0x1p-24f, 0x03ff, "largest subnormal"},
      {1023.5f * 0x1p-24f, 0x0400, "halfway between the largest subnormal and the smallest normal"},
      {0x1p-25f, 0x0000, "half the smallest subnormal: tie to even zero"},
      {0x1p-25f + 0x1p-40f, 0x0001, "just above half the smallest subnormal"},
      {3 * 0x1p-25f, 0x0002, "1.5 subnormal ulps: tie to even 2"},
      {5 * 0x1p-25f, 0x0002, "2.5 subnormal ulps: tie to even 2"},
      {1e-10f, 0x0000, "underflow to zero"},
      {-1e-10f, 0x8000, "underflow keeps the sign"},
      {0.0f, 0x0000, "zero"},
      {-0.0f, 0x8000, "negative zero"},
  };
  std::vector<float> values;
  for (const Case& c : cases) {
    INFO(std::string(c.why) << " (" << hex(float_bits(c.value)) << ")");
    CHECK(hex(float_to_half_bits(c.value)) == hex(c.bits));
    CHECK(hex(half_bits_ref(c.value)) == hex(c.bits));  // the reference agrees with the table
    values.push_back(c.value);
  }
  // The same through a tensor conversion.
  const std::vector<uint16_t> got =
      bits_of(blob(values.data(), {static_cast<int64_t>(values.size())}, DType::f32).to(DType::f16));
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("tensor to(f16): " << std::string(cases[i].why));
    CHECK(hex(got[i]) == hex(cases[i].bits));
  }
  // NaN stays NaN, with either sign and any payload.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu}) {
    INFO("NaN " << hex(nan_bits));
    CHECK(is_half_nan(float_to_half_bits(bits_float(nan_bits))));
  }
}

TEST_CASE("f32 to f16 agrees with the double-precision reference on every midpoint and random floats") {
  const std::vector<float> probes = f16_probe_floats();
  int bad = 0;
  std::string first;
  for (float f : probes) {
    const uint16_t got = float_to_half_bits(f), want = half_bits_ref(f);
    if (got != want && bad++ == 0) first = hex(float_bits(f)) + " -> " + hex(got) + ", expected " + hex(want);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << probes.size() << " wrong; first: " << first);

  const std::vector<uint16_t> tensor_bits =
      bits_of(blob(probes.data(), {static_cast<int64_t>(probes.size())}, DType::f32).to(DType::f16));
  bad = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    const uint16_t want = half_bits_ref(probes[i]);
    if (tensor_bits[i] != want && bad++ == 0)
      first = hex(float_bits(probes[i])) + " -> " + hex(tensor_bits[i]) + ", expected " + hex(want);
  }
  CHECK_MESSAGE(bad == 0, "tensor to(f16): " << bad << " of " << probes.size() << " wrong; first: " << first);
}

// ---- bf16 -------------------------------------------------------------------------------------

TEST_CASE("f32 to bf16 rounds to nearest with ties to even and keeps NaN and Inf") {
  struct Case {
    uint32_t f32_bits;
    uint16_t bits;
    const char* why;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80, "one"},
      {0x3f808000u, 0x3f80, "tie; 0x3f80 is even: down"},
      {0x3f818000u, 0x3f82, "tie; 0x3f81 is odd: up"},
      {0x3f808001u, 0x3f81, "just above the tie"},
      {0x3f807fffu, 0x3f80, "just below the tie"},
      {0xbf808000u, 0xbf80, "negative tie, even: toward zero"},
      {0xbf818000u, 0xbf82, "negative tie, odd: away from zero"},
      {0x3fffffffu, 0x4000, "carry into the exponent"},
      {0x7f7f7fffu, 0x7f7f, "large, below the tie"},
      {0x7f7fffffu, 0x7f80, "largest f32 rounds up to Inf"},
      {0x7f800000u, 0x7f80, "Inf"},
      {0xff800000u, 0xff80, "-Inf"},
      {0x00008000u, 0x0000, "subnormal tie to even zero"},
      {0x00018000u, 0x0002, "subnormal tie up to even"},
      {0x80000000u, 0x8000, "negative zero"},
  };
  std::vector<float> values;
  for (const Case& c : cases) {
    INFO(std::string(c.why) << " (" << hex(c.f32_bits) << ")");
    CHECK(hex(float_to_bf16_bits(bits_float(c.f32_bits))) == hex(c.bits));
    CHECK(hex(bf16_bits_ref(bits_float(c.f32_bits))) == hex(c.bits));
    values.push_back(bits_float(c.f32_bits));
  }
  const std::vector<uint16_t> got =
      bits_of(blob(values.data(), {static_cast<int64_t>(values.size())}, DType::f32).to(DType::bf16));
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("tensor to(bf16): " << std::string(cases[i].why));
    CHECK(hex(got[i]) == hex(cases[i].bits));
  }
  // NaN stays NaN: a NaN whose payload lives only in the low 16 bits must not truncate to Inf.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffc00000u}) {
    INFO("NaN " << hex(nan_bits));
    CHECK(is_bf16_nan(float_to_bf16_bits(bits_float(nan_bits))));
  }
  std::vector<float> nans = {bits_float(0x7f800001u), bits_float(0xffc00000u)};
  for (uint16_t b : bits_of(blob(nans.data(), {2}, DType::f32).to(DType::bf16))) CHECK(is_bf16_nan(b));
}

TEST_CASE("f32 to bf16 agrees with the double-precision reference on midpoints and random floats") {
  const std::vector<float> probes = bf16_probe_floats();
  int bad = 0;
  std::string first;
  for (float f : probes) {
    const uint16_t got = float_to_bf16_bits(f), want = bf16_bits_ref(f);
    if (got != want && bad++ == 0) first = hex(float_bits(f)) + " -> " + hex(got) + ", expected " + hex(want);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << probes.size() << " wrong; first: " << first);

  const std::vector<uint16_t> tensor_bits =
      bits_of(blob(probes.data(), {static_cast<int64_t>(probes.size())}, DType::f32).to(DType::bf16));
  bad = 0;
  for (size_t i = 0; i < probes.size(); ++i)
    if (tensor_bits[i] != bf16_bits_ref(probes[i]) && bad++ == 0) first = hex(float_bits(probes[i]));
  CHECK_MESSAGE(bad == 0, "tensor to(bf16): " << bad << " wrong; first input " << first);
}

TEST_CASE("every bf16 bit pattern round-trips through f32, as scalars and as tensors") {
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = bf16_bits_to_float(b);
    if (float_bits(f) != (i << 16)) ++bad;  // bf16 is the top half of an f32
    const uint16_t back = float_to_bf16_bits(f);
    if (is_bf16_nan(b) ? !is_bf16_nan(back) : back != b) ++bad;
  }
  CHECK(bad == 0);

  const std::vector<uint16_t> patterns = all_patterns();
  const Tensor t = blob(patterns.data(), {65536}, DType::bf16);
  const std::vector<uint16_t> back = bits_of(t.to(DType::f32).to(DType::bf16));
  bad = 0;
  for (uint32_t i = 0; i < 65536; ++i)
    if (is_bf16_nan(static_cast<uint16_t>(i)) ? !is_bf16_nan(back[i]) : back[i] != i) ++bad;
  CHECK(bad == 0);
}

// ---- 16-bit float arithmetic ------------------------------------------------------------------

TEST_CASE("f16 and bf16 arithmetic computes in f32 and rounds once") {
  // Operands: random values already representable in the 16-bit type.
  const auto raw_a = rgtest::random_values(4096, 301, -20, 20);
  const auto raw_b = rgtest::random_values(4096, 302, 0.5, 20);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    auto to16 = [&](float f) { return dt == DType::f16 ? float_to_half_bits(f) : float_to_bf16_bits(f); };
    auto from16 = [&](uint16_t b) { return dt == DType::f16 ? half_bits_to_float(b) : bf16_bits_to_float(b); };
    std::vector<uint16_t> a_bits, b_bits;
    for (size_t i = 0; i < raw_a.size(); ++i) {
      a_bits.push_back(to16(static_cast<float>(raw_a[i])));
      b_bits.push_back(to16(static_cast<float>(i % 2 ? raw_b[i] : -raw_b[i])));
    }
    const Tensor a = blob(a_bits.data(), {64, 64}, dt);
    const Tensor b = blob(b_bits.data(), {64, 64}, dt);
    struct Op {
      const char* name;
      Tensor result;
      std::function<float(float, float)> f32_op;
    };
    const Op ops[] = {
        {"add", a + b, [](float x, float y) { return x + y; }},
        {"sub", a - b, [](float x, float y) { return x - y; }},
        {"mul", a * b, [](float x, float y) { return x * y; }},
        {"div", a / b, [](float x, float y) { return x / y; }},
        {"maximum", maximum(a, b), [](float x, float y) { return std::max(x, y); }},
    };
    for (const Op& op : ops) {
      INFO("op " << std::string(op.name));
      REQUIRE(op.result.dtype() == dt);
      const std::vector<uint16_t> got = bits_of(op.result);
      int bad = 0;
      std::string first;
      for (size_t i = 0; i < got.size(); ++i) {
        const uint16_t want = to16(op.f32_op(from16(a_bits[i]), from16(b_bits[i])));
        if (got[i] != want && bad++ == 0)
          first = hex(a_bits[i]) + ", " + hex(b_bits[i]) + " -> " + hex(got[i]) + ", expected " + hex(want);
      }
      CHECK_MESSAGE(bad == 0, bad << " wrong; first: " << first);
    }
    // exp: the f32 exp of the implementation may differ from std::exp by an f32 ulp, which can move the
    // 16-bit rounding by one step: allow one unit in the last place of the 16-bit result.
    const std::vector<uint16_t> got = bits_of(ringgrad::exp(a * 0.125));
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float x = from16(to16(from16(a_bits[i]) * 0.125f));
      const int want = to16(std::exp(x));
      if (std::abs(static_cast<int>(got[i]) - want) > 1) ++bad;
    }
    CHECK_MESSAGE(bad == 0, bad << " exp results off by more than one 16-bit ulp");
  }
}

TEST_CASE("f16 and bf16 reductions accumulate in f32") {
  // Accumulating ones in f16 stalls at 2048 (2048 + 1 rounds back to 2048); in bf16 at 256.
  CHECK(ones({4096}, {.dtype = DType::f16}).sum().item() == 4096.0);
  CHECK(ones({512}, {.dtype = DType::bf16}).sum().item() == 512.0);
  CHECK(ones({64, 64}, {.dtype = DType::f16}).sum({1}).to_vector() == std::vector<double>(64, 64.0));
  CHECK(ones({4096}, {.dtype = DType::f16}).sum().dtype() == DType::f16);
  // mean of 3000 ones and 1000 threes: 1.5, exact in f16
  std::vector<double> v(4000, 1.0);
  for (size_t i = 3000; i < v.size(); ++i) v[i] = 3.0;
  CHECK(make(v, {4000}, DType::f16).mean().item() == 1.5);
}

// ---- integers ---------------------------------------------------------------------------------

TEST_CASE("integer tensors add, subtract, multiply and compare exactly") {
  const Tensor a = make({1, -2, 300, 40000}, {4}, DType::i32);
  const Tensor b = make({7, 5, -3, 40000}, {4}, DType::i32);
  CHECK((a + b).dtype() == DType::i32);
  CHECK_VALUES(a + b, Shape({4}), (std::vector<double>{8, 3, 297, 80000}), 0, 0);
  CHECK_VALUES(a - b, Shape({4}), (std::vector<double>{-6, -7, 303, 0}), 0, 0);
  CHECK_VALUES(a * b, Shape({4}), (std::vector<double>{7, -10, -900, 1600000000}), 0, 0);
  CHECK_VALUES(-a, Shape({4}), (std::vector<double>{-1, 2, -300, -40000}), 0, 0);
  CHECK_VALUES(eq(a, b), Shape({4}), (std::vector<double>{0, 0, 0, 1}), 0, 0);
  CHECK(a.sum().item() == 40299.0);

  // i64 beyond 2^53: read through data<int64_t>() so no double rounding hides an error
  const int64_t big = (int64_t{1} << 60) + 3;
  const Tensor c = from_vector(std::vector<int64_t>{big, -big}, {2}, {.dtype = DType::i64});
  const Tensor d = from_vector(std::vector<int64_t>{5, 7}, {2}, {.dtype = DType::i64});
  const Tensor s = c + d;
  REQUIRE(s.dtype() == DType::i64);
  CHECK(s.data<int64_t>()[0] == big + 5);
  CHECK(s.data<int64_t>()[1] == -big + 7);
  const Tensor p = d * d;
  CHECK(p.data<int64_t>()[0] == 25);

  const Tensor u = make({200, 3, 0}, {3}, DType::u8);
  const Tensor w = make({50, 7, 1}, {3}, DType::u8);
  CHECK((u + w).dtype() == DType::u8);
  CHECK_VALUES(u + w, Shape({3}), (std::vector<double>{250, 10, 1}), 0, 0);
  CHECK_VALUES(u * make({1, 7, 9}, {3}, DType::u8), Shape({3}), (std::vector<double>{200, 21, 0}), 0, 0);
}

TEST_CASE("to converts between dtypes and returns self for the same dtype") {
  const Tensor x = make({0.1, -2.5, 3}, {3});
  CHECK(x.to(DType::f32).is_same(x));
  const Tensor d = x.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  CHECK_VALUES(d, Shape({3}), rgtest::round_to_f32({0.1, -2.5, 3}), 0, 0);  // f32 -> f64 is exact
  CHECK(make({0.1}, {1}, DType::f64).to(DType::f32).item() == static_cast<double>(0.1f));
  CHECK_VALUES(make({1, -7, 300}, {3}, DType::i64).to(DType::f32), Shape({3}), (std::vector<double>{1, -7, 300}), 0, 0);
  CHECK_VALUES(make({1, -7, 300}, {3}).to(DType::i32), Shape({3}), (std::vector<double>{1, -7, 300}), 0, 0);
  CHECK_VALUES(make({0, 1, 255}, {3}).to(DType::u8), Shape({3}), (std::vector<double>{0, 1, 255}), 0, 0);
  CHECK_VALUES(make({1.5, -2}, {2}).to(DType::bf16).to(DType::f16), Shape({2}), (std::vector<double>{1.5, -2}), 0, 0);
}

TEST_CASE("binary ops reject operands of different dtypes") {
  const Tensor f = make({1, 2, 3, 4}, {2, 2});
  const Tensor d = make({1, 2, 3, 4}, {2, 2}, DType::f64);
  const Tensor h = make({1, 2, 3, 4}, {2, 2}, DType::f16);
  const Tensor i = make({1, 2, 3, 4}, {2, 2}, DType::i32);
  auto add_fd = [&] { add(f, d); };
  CHECK_ERROR(add_fd, "[add]", "f32", "f64");
  auto mul_fi = [&] { mul(f, i); };
  CHECK_ERROR(mul_fi, "[mul]", "f32", "i32");
  auto mm_fh = [&] { matmul(f, h); };
  CHECK_ERROR(mm_fh, "[matmul]", "f32", "f16");
  auto lt_fd = [&] { lt(f, d); };
  CHECK_ERROR(lt_fd, "f32", "f64");
}

TEST_CASE("f64 to f16 and bf16 rounds once, not through a rounded f32") {
  using namespace ringgrad;
  // 1 + 2^-11 + 2^-30: just above the f16 midpoint between 1 and 1 + 2^-10, so it rounds up. Through
  // f32 first it would become the midpoint 1 + 2^-11 and then tie to even: 1.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  Tensor h = from_vector(std::vector<double>{x, -x}, {2}).to(DType::f64);
  h = from_blob(std::vector<double>{x, -x}.data(), {2}, DType::f64).to(DType::f16);
  CHECK(h.to_vector() == std::vector<double>{1.0 + std::ldexp(1.0, -10), -(1.0 + std::ldexp(1.0, -10))});
  // bf16 keeps 8 significant bits: the midpoint is 1 + 2^-8.
  const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  Tensor b = from_blob(&y, {1}, DType::f64).to(DType::bf16);
  CHECK(b.item() == 1.0 + std::ldexp(1.0, -7));
  // Exact values and the tie rule are unchanged.
  const double tie = 1.0 + std::ldexp(1.0, -11);
  CHECK(from_blob(&tie, {1}, DType::f64).to(DType::f16).item() == 1.0);
}
