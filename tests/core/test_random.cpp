// Counter-based random numbers: the Philox known-answer vectors, reproducibility (same seed, any
// thread count), the generator offset, and the distributions' moments.
//
// Statistical checks use 10^6 samples and a tolerance of 5 standard errors of the statistic under the
// ideal distribution. The draws are deterministic (fixed seeds), so these never flake: a failure
// means the distribution is wrong (or, with probability ~6e-7 per check, an unlucky fixed seed).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ringgrad;

namespace {

constexpr int64_t kSamples = 1'000'000;
constexpr double kSigmas = 5.0;

struct Moments {
  double mean = 0, var = 0, min = INFINITY, max = -INFINITY;
  bool finite = true;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
    m.finite = m.finite && std::isfinite(x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

using Draw = std::function<Tensor(Generator&)>;

std::vector<std::pair<std::string, Draw>> draws(const Shape& shape) {
  return {
      {"rand", [shape](Generator& g) { return rand(shape, g); }},
      {"uniform", [shape](Generator& g) { return uniform(shape, -3.0, 5.0, g); }},
      {"randn", [shape](Generator& g) { return randn(shape, g); }},
      {"normal", [shape](Generator& g) { return normal(shape, 1.0, 0.5, g); }},
      {"bernoulli", [shape](Generator& g) { return bernoulli(shape, 0.3, g); }},
      {"randn f64", [shape](Generator& g) { return randn(shape, g, {.dtype = DType::f64}); }},
  };
}

}  // namespace

TEST_CASE("Philox-4x32-10 reproduces the Random123 known-answer vectors") {
  // Random123 tests/kat_vectors, philox4x32 10: counter words c0..c3, key words k0 k1, output.
  // core/random.h packs c0 = lo32(counter_lo), c1 = hi32(counter_lo), c2 = lo32(counter_hi),
  // c3 = hi32(counter_hi), k0 = lo32(key), k1 = hi32(key).
  struct Vector {
    uint32_t c[4];
    uint32_t k[2];
    uint32_t out[4];
  };
  const Vector vectors[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Vector& v : vectors) {
    const uint64_t counter_lo = (uint64_t{v.c[1]} << 32) | v.c[0];
    const uint64_t counter_hi = (uint64_t{v.c[3]} << 32) | v.c[2];
    const uint64_t key = (uint64_t{v.k[1]} << 32) | v.k[0];
    const Philox4x32 r = philox4x32(counter_lo, counter_hi, key);
    for (int w = 0; w < 4; ++w) {
      INFO("counter " << v.c[0] << " word " << w);
      CHECK(r.v[w] == v.out[w]);
    }
  }
}

TEST_CASE("uint_to_unit_float keeps the top 24 bits and stays below 1") {
  CHECK(uint_to_unit_float(0) == 0.0f);
  CHECK(uint_to_unit_float(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(uint_to_unit_float(0x80000000u) == 0.5f);
  CHECK(uint_to_unit_float(0x000000ffu) == 0.0f);  // the low 8 bits are dropped
}

TEST_CASE("rand element i is word i mod 4 of counter offset + i / 4 keyed by the seed") {
  // core/random.h: element i uses counter (offset + i / 4) and word i % 4; the key is the seed.
  const uint64_t seed = 0x1234abcd5678ull;
  Generator g(seed);
  const int64_t n = 10;
  const std::vector<double> first = rand({n}, g).to_vector();
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    CHECK(first[i] == uint_to_unit_float(philox4x32(static_cast<uint64_t>(i / 4), 0, seed).v[i % 4]));
  }
  // 10 elements use counters 0, 1, 2; the next draw starts at the offset the generator reports.
  const uint64_t offset = g.offset();
  CHECK(offset >= 3);
  const std::vector<double> second = rand({5}, g).to_vector();
  for (int64_t i = 0; i < 5; ++i) {
    INFO("second draw, element " << i);
    CHECK(second[i] == uint_to_unit_float(philox4x32(offset + static_cast<uint64_t>(i / 4), 0, seed).v[i % 4]));
  }
}

TEST_CASE("the same seed gives the same tensor and different seeds differ") {
  for (const auto& [draw_name, draw] : draws({1000, 7})) {
    const std::string& name = draw_name;  // INFO cannot name a structured binding (clang 14)
    INFO(name);
    Generator a(42), b(42), c(43);
    const Tensor ta = draw(a), tb = draw(b), tc = draw(c);
    CHECK(equal(ta, tb));
    CHECK(a.offset() == b.offset());
    const std::vector<double> va = ta.to_vector(), vc = tc.to_vector();
    int64_t same = 0;
    for (size_t i = 0; i < va.size(); ++i) same += va[i] == vc[i];
    // bernoulli(0.3) agrees by chance on 0.3^2 + 0.7^2 = 58% of elements; continuous draws almost never.
    const double limit = name == "bernoulli" ? 0.62 : 0.001;
    CHECK(static_cast<double>(same) / static_cast<double>(va.size()) < limit);
  }
}

TEST_CASE("the generator offset advances so that consecutive draws differ, and set_offset replays") {
  for (const auto& [draw_name, draw] : draws({4001})) {
    const std::string& name = draw_name;  // INFO cannot name a structured binding (clang 14)
    INFO(name);
    Generator g(7);
    CHECK(g.offset() == 0);
    const Tensor first = draw(g);
    const uint64_t after_first = g.offset();
    CHECK(after_first >= (4001 + 3) / 4);  // at least one counter per four elements
    const Tensor second = draw(g);
    CHECK(g.offset() > after_first);
    CHECK_FALSE(equal(first, second));

    g.set_offset(after_first);  // restoring a checkpointed generator replays the second draw
    CHECK(equal(draw(g), second));
    g.manual_seed(7);  // and manual_seed starts over
    CHECK(g.offset() == 0);
    CHECK(equal(draw(g), first));
  }
}

TEST_CASE("random tensors do not depend on the number of threads") {
  ThreadCountGuard guard;
  // An odd size, so that chunk boundaries fall inside a group of four elements sharing a counter.
  const Shape shape{1'000'003};
  for (const auto& [draw_name, draw] : draws(shape)) {
    const std::string& name = draw_name;  // INFO cannot name a structured binding (clang 14)
    INFO(name);
    set_num_threads(1);
    Generator g1(99);
    const Tensor one = draw(g1);
    const Tensor one_again = draw(g1);  // the second draw at a non-zero offset
    set_num_threads(2);
    Generator g2(99);
    const Tensor two = draw(g2);
    const Tensor two_again = draw(g2);
    CHECK(equal(one, two));
    CHECK(equal(one_again, two_again));
    CHECK(g1.offset() == g2.offset());
  }
}

TEST_CASE("uniform samples lie between lo and hi, hi excluded, with the moments of U(lo, hi)") {
  const double lo = -2.0, hi = 3.0, w = hi - lo;
  Generator g(2024);
  const std::vector<double> v = uniform({kSamples}, lo, hi, g).to_vector();
  const Moments m = moments(v);
  const double n = static_cast<double>(kSamples);
  CHECK(m.min >= lo);
  CHECK(m.max < hi);
  CHECK(m.min < lo + 1e-4 * w);  // the whole range is covered
  CHECK(m.max > hi - 1e-4 * w);
  // mean: (lo + hi) / 2, standard error w / sqrt(12 n)
  CHECK(std::fabs(m.mean - (lo + hi) / 2) < kSigmas * w / std::sqrt(12 * n));
  // variance: w^2 / 12; the sample variance has standard error sqrt((mu4 - sigma^4) / n) = w^2 / sqrt(180 n)
  CHECK(std::fabs(m.var - w * w / 12) < kSigmas * w * w / std::sqrt(180 * n));
  // ten equal bins each hold n / 10, standard error sqrt(n * 0.1 * 0.9)
  std::vector<int64_t> bins(10, 0);
  for (double x : v) ++bins[std::min<size_t>(9, static_cast<size_t>((x - lo) / w * 10))];
  for (int b = 0; b < 10; ++b) {
    INFO("bin " << b);
    CHECK(std::fabs(static_cast<double>(bins[b]) - n / 10) < kSigmas * std::sqrt(n * 0.09));
  }

  Generator g2(5);
  const Moments r = moments(rand({kSamples}, g2).to_vector());
  CHECK(r.min >= 0.0);
  CHECK(r.max < 1.0);
  CHECK(std::fabs(r.mean - 0.5) < kSigmas / std::sqrt(12 * n));
  Generator g3(6);
  const Moments r64 = moments(rand({kSamples}, g3, {.dtype = DType::f64}).to_vector());
  CHECK(r64.min >= 0.0);
  CHECK(r64.max < 1.0);
}

TEST_CASE("normal samples have the requested mean and standard deviation") {
  const double n = static_cast<double>(kSamples);
  Generator g(31337);
  const std::vector<double> v = randn({kSamples}, g).to_vector();
  const Moments m = moments(v);
  CHECK(m.finite);
  CHECK(std::fabs(m.mean) < kSigmas / std::sqrt(n));
  CHECK(std::fabs(m.var - 1.0) < kSigmas * std::sqrt(2.0 / n));  // Var(s^2) = 2 sigma^4 / n
  // the shape, not only two moments: P(|x| < 1) and P(|x| < 2)
  int64_t within1 = 0, within2 = 0;
  for (double x : v) {
    within1 += std::fabs(x) < 1;
    within2 += std::fabs(x) < 2;
  }
  const double p1 = std::erf(1 / std::sqrt(2.0)), p2 = std::erf(2 / std::sqrt(2.0));
  CHECK(std::fabs(static_cast<double>(within1) / n - p1) < kSigmas * std::sqrt(p1 * (1 - p1) / n));
  CHECK(std::fabs(static_cast<double>(within2) / n - p2) < kSigmas * std::sqrt(p2 * (1 - p2) / n));
  // a symmetric distribution: as many samples above 0 as below
  int64_t positive = 0;
  for (double x : v) positive += x > 0;
  CHECK(std::fabs(static_cast<double>(positive) / n - 0.5) < kSigmas * 0.5 / std::sqrt(n));

  Generator g2(4);
  const Moments s = moments(normal({kSamples}, 3.0, 2.0, g2).to_vector());
  CHECK(std::fabs(s.mean - 3.0) < kSigmas * 2.0 / std::sqrt(n));
  CHECK(std::fabs(s.var - 4.0) < kSigmas * 4.0 * std::sqrt(2.0 / n));

  Generator g3(8);
  CHECK(moments(randn({4096}, g3, {.dtype = DType::f16}).to_vector()).finite);
}

TEST_CASE("bernoulli gives zeros and ones with frequency p") {
  const double n = static_cast<double>(kSamples);
  for (double p : {0.1, 0.5, 0.93}) {
    INFO("p = " << p);
    Generator g(static_cast<uint64_t>(p * 1000));
    const std::vector<double> v = bernoulli({kSamples}, p, g).to_vector();
    int64_t count_ones = 0, others = 0;
    for (double x : v) {
      count_ones += x == 1.0;
      others += x != 0.0 && x != 1.0;
    }
    CHECK(others == 0);
    CHECK(std::fabs(static_cast<double>(count_ones) / n - p) < kSigmas * std::sqrt(p * (1 - p) / n));
  }
  Generator g(1);
  CHECK(bernoulli({1000}, 0.0, g).sum().item() == 0.0);
  CHECK(bernoulli({1000}, 1.0, g).sum().item() == 1000.0);
}

TEST_CASE("uniform never returns hi, even for the largest unit draw below 1") {
  // Find a counter whose word has all top 24 bits set, so the unit draw is 1 - 2^-24: then
  // 1 + (2 - 1) * (1 - 2^-24) = 2 - 2^-24 lies halfway between the f32 neighbours 2 - 2^-23 and 2,
  // and rounding the double result to f32 gives exactly hi unless the implementation guards it.
  const uint64_t seed = 3;
  uint64_t counter = 0;
  int word = -1;
  for (; word < 0; ++counter)
    for (int w = 0; w < 4; ++w)
      if ((philox4x32(counter, 0, seed).v[w] >> 8) == 0xffffffu) word = w;
  --counter;
  REQUIRE(uint_to_unit_float(philox4x32(counter, 0, seed).v[word]) == 1.0f - 0x1p-24f);
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    Generator g(seed);
    g.set_offset(counter);
    const std::vector<double> v = uniform({4}, 1.0, 2.0, g, {.dtype = dt}).to_vector();
    for (double x : v) CHECK(x < 2.0);
    CHECK(v[static_cast<size_t>(word)] > 1.99);  // it is the draw we were looking for
  }
}

TEST_CASE("rand in 16-bit dtypes stays below 1") {
  // Just below 1 the bf16 spacing is 2^-8 and the f16 spacing 2^-11: a unit draw in the top half of the
  // last gap rounds up to 1.0 unless the implementation guards it. 2^20 draws hit that gap ~2^11 times.
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    Generator g(11);
    const Tensor t = rand({1 << 20}, g, {.dtype = dt});
    CHECK(t.dtype() == dt);
    const std::vector<double> v = t.to_vector();
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
  }
}
