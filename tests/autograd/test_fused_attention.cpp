// The fused causal attention (core/cpu/fused_attention.cpp, f32 with AVX-512) against its references:
// the plain kernels in f64 (output and gradients of the packed projection, with and without dropout),
// the plain kernels in f32 (the fused path may not be less accurate than they are), and each row's
// log-sum-exp written out here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/test_util.h"
#include "core/native/native.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

using rgtest::FusionScope;

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

struct Run {
  std::vector<double> y, grad;
};

// y = attention(qkv) with dropout `rate` (mask from seed 5), and the gradient of sum(y * g).
Run attention_run(const Tensor& qkv, const Tensor& g, int64_t H, double rate) {
  Tensor leaf = qkv.detach().requires_grad_(true);
  Generator gen(5);
  Tensor y = causal_self_attention(leaf, H, rate, gen);
  y.backward(g.to(y.dtype()));
  return {y.to_vector(), leaf.grad().to_vector()};
}

}  // namespace

TEST_CASE("fused causal attention: f32 output and gradients match the plain kernels (f64), dropout on and off") {
  if (!cpu_supports(CpuIsa::avx512)) {
    MESSAGE("skipped: the fused attention kernel needs AVX-512");
    return;
  }
  rgtest::IsaScope isa(CpuIsa::avx512);
  FusionScope on(true);
  struct Shape4 {
    int64_t B, T, H, D;
  };
  // One block; three blocks with a partial last one (70 = 32 + 32 + 6); a single position; four
  // full blocks with heads of 64 (two tile widths); two panels of keys (150 = 128 + 22: the online
  // softmax rescales, and the dropout mask continues past the first panel).
  for (const Shape4 s : {Shape4{3, 32, 1, 32}, Shape4{2, 70, 2, 32}, Shape4{2, 1, 2, 32}, Shape4{1, 128, 2, 64},
                         Shape4{1, 150, 2, 32}}) {
    for (const double rate : {0.0, 0.25}) {
      CAPTURE(s.B);
      CAPTURE(s.T);
      CAPTURE(s.D);
      CAPTURE(rate);
      const int64_t C = s.H * s.D;
      Generator data(17);
      const Tensor qkv = randn({s.B, s.T, 3 * C}, data) * 1.5, g = randn({s.B, s.T, C}, data);
      {  // the fused kernel runs (no probabilities kept), and not with fusion off
        CHECK(!native::causal_self_attention(qkv, s.H).att.defined());
        CHECK(native::causal_self_attention(qkv, s.H).lse.shape() == Shape{s.B, s.H, s.T});
        FusionScope off(false);
        CHECK(native::causal_self_attention(qkv, s.H).att.defined());
      }
      const Run fused = attention_run(qkv, g, s.H, rate);
      Run plain, exact;
      {
        FusionScope off(false);
        plain = attention_run(qkv, g, s.H, rate);
        exact = attention_run(qkv.to(DType::f64), g, s.H, rate);
      }
      const double y_err = max_abs_diff(fused.y, exact.y), grad_err = max_abs_diff(fused.grad, exact.grad);
      const double plain_y_err = max_abs_diff(plain.y, exact.y), plain_grad_err = max_abs_diff(plain.grad, exact.grad);
      MESSAGE("fused / plain f32 against f64: y ", y_err, " / ", plain_y_err, ", dqkv ", grad_err, " / ",
              plain_grad_err);
      CHECK(y_err <= 5e-6);
      CHECK(grad_err <= 1e-5);
      // Not less accurate than the plain f32 kernels beyond rounding of the same size.
      CHECK(y_err <= 2 * plain_y_err + 1e-6);
      CHECK(grad_err <= 2 * plain_grad_err + 2e-6);
    }
  }
}

TEST_CASE("fused causal attention: each row's log-sum-exp, and the same dropout mask as the plain kernels") {
  if (!cpu_supports(CpuIsa::avx512)) {
    MESSAGE("skipped: the fused attention kernel needs AVX-512");
    return;
  }
  rgtest::IsaScope isa(CpuIsa::avx512);
  FusionScope on(true);
  const int64_t B = 2, T = 40, H = 2, D = 64, C = H * D;
  Generator data(23);
  const Tensor qkv = randn({B, T, 3 * C}, data);
  const native::AttentionOutput out = native::causal_self_attention(qkv, H);
  REQUIRE(out.lse.defined());
  // lse[b, h, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(D)), in double here.
  const std::vector<double> x = qkv.to_vector(), lse = out.lse.to_vector();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> scores;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += x[static_cast<size_t>((b * T + i) * 3 * C + h * D + d)] *
                   x[static_cast<size_t>((b * T + j) * 3 * C + C + h * D + d)];
          scores.push_back(dot / std::sqrt(static_cast<double>(D)));
        }
        const double top = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (const double v : scores) sum += std::exp(v - top);
        worst = std::max(worst, std::abs(lse[static_cast<size_t>((b * H + h) * T + i)] - (top + std::log(sum))));
      }
  CHECK(worst <= 1e-5);

  // The backward of a fused forward runs fused whatever ISA is selected by then (there are no
  // probabilities to fall back on): the same gradient as with AVX-512 selected throughout.
  const Tensor g = randn({B, T, C}, data);
  std::vector<std::vector<double>> grads;
  for (const bool switch_to_avx2 : {false, true}) {
    Tensor leaf = qkv.detach().requires_grad_(true);
    Tensor y = causal_self_attention(leaf, H);
    rgtest::IsaScope later(switch_to_avx2 ? CpuIsa::avx2 : CpuIsa::avx512);
    y.backward(g);
    grads.push_back(leaf.grad().to_vector());
  }
  CHECK(grads[1] == grads[0]);

  // v = the identity in each head (row j of v is e_j, D >= T), so y row i, column j of a head is its
  // (dropped) probability p_ij: the fused kernel drops exactly the plain one's, in both key blocks.
  std::vector<double> values = x;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) values[static_cast<size_t>((b * T + j) * 3 * C + 2 * C + h * D + d)] = d == j;
  const Tensor probe = from_vector(values, {B, T, 3 * C});
  Generator g1(9), g2(9);
  const std::vector<double> fused = causal_self_attention(probe, H, 0.5, g1).to_vector();
  FusionScope off(false);
  const std::vector<double> plain = causal_self_attention(probe, H, 0.5, g2).to_vector();
  int64_t visible = 0, dropped = 0, disagree = 0;
  for (size_t e = 0; e < fused.size(); ++e) {
    const int64_t i = static_cast<int64_t>(e) / C % T, j = static_cast<int64_t>(e) % C % D;  // query, key
    if ((fused[e] == 0) != (plain[e] == 0)) ++disagree;
    if (j > i || j >= T) continue;  // zero either way (masked, or no such key)
    ++visible;
    if (fused[e] == 0) ++dropped;
  }
  CHECK(disagree == 0);
  CHECK(visible == B * H * T * (T + 1) / 2);
  CHECK(dropped > visible * 3 / 10);  // rate 0.5: the mask drops about half of the visible entries
  CHECK(dropped < visible * 7 / 10);
}

TEST_CASE("fused causal attention on f16 activations, a few samples at a time: the bits of one f32 call") {
  // Note [Half-precision attention a few samples at a time]: 12 samples of 64 x 3 x 64 f16 run in
  // chunks of 5, 5 and 2 samples; against the f32 kernel on the converted batch in one call, output
  // and gradient rounded to f16 once, with dropout (its numbers must be the whole batch's).
  if (!cpu_supports(CpuIsa::avx512)) {
    MESSAGE("skipped: the fused attention kernel needs AVX-512");
    return;
  }
  rgtest::IsaScope isa(CpuIsa::avx512);
  FusionScope on(true);
  const int64_t B = 12, T = 64, H = 2, C = 64;
  Generator gen(17);
  const Tensor qkv16 = randn({B, T, 3 * C}, gen).to(DType::f16), dy16 = randn({B, T, C}, gen).to(DType::f16);
  const Tensor qkv32 = native::cast(qkv16, DType::f32), dy32 = native::cast(dy16, DType::f32);
  const double rate = 0.25;
  const uint64_t seed = 99, offset = 7;
  const native::AttentionOutput half = native::causal_self_attention(qkv16, H, rate, seed, offset);
  const native::AttentionOutput full = native::causal_self_attention(qkv32, H, rate, seed, offset);
  REQUIRE(half.lse.defined());  // the fused kernel ran
  REQUIRE(half.y.dtype() == DType::f16);
  CHECK(half.y.to_vector() == native::cast(full.y, DType::f16).to_vector());
  CHECK(half.lse.to_vector() == full.lse.to_vector());
  const Tensor dqkv16 = native::causal_self_attention_backward(dy16, qkv16, half, H, rate, seed, offset);
  const Tensor dqkv32 = native::causal_self_attention_backward(dy32, qkv32, full, H, rate, seed, offset);
  REQUIRE(dqkv16.dtype() == DType::f16);
  CHECK(dqkv16.to_vector() == native::cast(dqkv32, DType::f16).to_vector());
  // The dropout really dropped something in the later chunks: their samples differ from a run
  // without it.
  const native::AttentionOutput kept = native::causal_self_attention(qkv16, H, 0.0, seed, offset);
  const Tensor last = native::select(half.y, 0, B - 1), last_kept = native::select(kept.y, 0, B - 1);
  CHECK(last.to_vector() != last_kept.to_vector());
}
