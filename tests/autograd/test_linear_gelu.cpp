// linear_gelu(x, w, b): gelu(linear(x, w, b)) as one node whose GEMM applies the GELU in its epilogue
// (core/cpu/gemm.cpp). Against the two ops: output and every gradient to the bit, on both ISAs; its
// backward formula against finite differences in f64; GPT's MLP computing through it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../core/test_util.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

struct Grads {
  std::vector<double> y, dx, dw, db;
};

Grads run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, bool fused) {
  Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true),
         b = b0.detach().requires_grad_(true);
  Tensor y = fused ? linear_gelu(x, w, b) : gelu(linear(x, w, b));
  y.backward(g);
  return {y.to_vector(), x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
}

// Whether an op named `name` ran during fn (its profiler row).
template <class Fn>
bool op_ran(const std::string& name, Fn fn) {
  profiler::reset();
  profiler::enable();
  fn();
  profiler::disable();
  bool ran = false;
  for (const profiler::OpStats& row : profiler::op_table()) ran = ran || row.name == name;
  profiler::reset();
  return ran;
}

}  // namespace

TEST_CASE("linear_gelu: the GELU in the GEMM's epilogue gives gelu(linear(...))'s output and gradients bit for bit") {
  Generator gen(41);
  // (2, 9, 40) @ (70, 40)^T: an edge tile in the columns (70 = 2 x 32 + 6); (4, 16, 128) @ (512,
  // 128)^T: GPT-mini's c_fc, with an edge tile in the rows (64 = 10 x 6 + 4).
  for (const auto& [shape, out] : std::vector<std::pair<Shape, int64_t>>{{{2, 9, 40}, 70}, {{4, 16, 128}, 512}}) {
    const int64_t in = shape.back();
    const Tensor x = randn(shape, gen), w = randn({out, in}, gen) * 0.1, b = randn({out}, gen);
    Shape y_shape = shape;
    y_shape.back() = out;
    const Tensor g = randn(y_shape, gen);
    for (const CpuIsa isa : rgtest::isas_to_test("linear_gelu")) {
      rgtest::IsaScope isa_scope(isa);
      rgtest::FusionScope on(true);
      const Grads fused = run(x, w, b, g, true), plain = run(x, w, b, g, false);
      CHECK(fused.y == plain.y);
      CHECK(fused.dx == plain.dx);
      CHECK(fused.dw == plain.dw);
      CHECK(fused.db == plain.db);
      CHECK(op_ran("addmm_bias_gelu", [&] { linear_gelu(x, w, b); }));
    }
  }
}

TEST_CASE("linear_gelu: gradients match finite differences (f64); GPT's MLP runs through it") {
  Generator gen(43);
  const Tensor x = randn({2, 3, 5}, gen, {.dtype = DType::f64}), w = randn({4, 5}, gen, {.dtype = DType::f64}),
               b = randn({4}, gen, {.dtype = DType::f64});
  const auto r = gradcheck([](const std::vector<Tensor>& v) { return linear_gelu(v[0], v[1], v[2]); }, {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);

  nn::GPTConfig config;
  config.vocab_size = 11;
  config.block_size = 8;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 16;
  nn::MLP mlp(config, gen);
  const Tensor h = randn({2, 8, 16}, gen);
  {
    rgtest::FusionScope on(true);
    CHECK(op_ran("addmm_bias_gelu", [&] { mlp.forward(h); }));
  }
  rgtest::FusionScope off(false);
  CHECK(!op_ran("addmm_bias_gelu", [&] { mlp.forward(h); }));
}
