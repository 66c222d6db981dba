// The fused convolution block conv2d_relu_max_pool2d (core/cpu/conv_block.cpp) against its reference,
// the composition max_pool2d(relu(conv2d(...)), 2) (run with fusion off): output, dx and dw bit for
// bit, db to 1e-6; gradients against finite differences; nn::Sequential's use of it.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../core/test_util.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

using rgtest::FusionScope;
using rgtest::ThreadsScope;

// Whether the fused kernel ran during fn (its profiler row), recording nothing else afterwards.
bool fused_kernel_ran(const std::function<void()>& fn) {
  profiler::reset();
  profiler::enable();
  fn();
  profiler::disable();
  bool ran = false;
  for (const profiler::OpStats& row : profiler::op_table()) ran = ran || row.name == "conv2d_relu_max_pool2d";
  profiler::reset();
  return ran;
}

// Equal element by element, NaN equal to NaN: "" or the first difference.
std::string bitwise_difference(const Tensor& got, const Tensor& expected) {
  if (got.shape() != expected.shape()) return "shape " + shape_str(got.shape()) + " vs " + shape_str(expected.shape());
  const auto a = got.to_vector(), e = expected.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))))
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(e[i]);
  return "";
}

struct BlockRun {
  Tensor y, dx, dw, db;
};

// The block's output and the gradients of sum(y * r) with respect to x, w, b.
BlockRun run_block(bool fused, const std::vector<double>& xv, const Shape& xs, const std::vector<double>& wv,
                   const Shape& ws, const std::vector<double>& bv, int64_t stride, int64_t padding, DType dtype) {
  FusionScope fusion(fused);
  const TensorOptions grad{.dtype = dtype, .requires_grad = true};
  Tensor x = from_vector(xv, xs, grad), w = from_vector(wv, ws, grad);
  Tensor b = bv.empty() ? Tensor() : from_vector(bv, {ws[0]}, grad);
  BlockRun run;
  const bool ran = fused_kernel_ran([&] {
    run.y = conv2d_relu_max_pool2d(x, w, b, stride, padding);
    const Tensor r = from_vector(rgtest::random_values(run.y.numel(), 77, 0.5, 1.5), run.y.shape(), {.dtype = dtype});
    (run.y * r).sum().backward();
  });
  CHECK(ran == fused);  // with fusion on, these shapes take the fused kernel; off, the plain ops
  run.dx = x.grad();
  run.dw = w.grad();
  if (b.defined()) run.db = b.grad();
  return run;
}

// Small integers (x in {-2..2}, w in {-1, 0, 1}, b in {-1, 0, 1}) make every convolution output
// an exact integer: many windows tie, many are all <= 0 (ReLU's zeros), the cases where the window
// rule and ReLU's mask must agree with the plain ops.
std::vector<double> small_integers(int64_t n, uint64_t seed, int64_t half_range) {
  rgtest::TestRng rng(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = static_cast<double>(static_cast<int64_t>(rng.next() % (2 * half_range + 1)) - half_range);
  return v;
}

}  // namespace

TEST_CASE("conv2d_relu_max_pool2d: the fused kernel's output, dx and dw are the composition's bit for bit") {
  struct Case {
    const char* name;
    Shape xs, ws;
    int64_t stride, padding;
    bool bias, integers, nan;
  };
  const Case cases[] = {
      {"W2's first block", {5, 1, 28, 28}, {8, 1, 3, 3}, 1, 1, true, false, false},
      {"W2's second block, odd 7 x 7 output", {3, 8, 14, 14}, {16, 8, 3, 3}, 1, 1, true, false, false},
      {"ties and zeros (integers)", {4, 3, 12, 38}, {5, 3, 3, 3}, 1, 1, true, true, false},
      {"no bias, ties", {2, 3, 9, 11}, {4, 3, 3, 3}, 1, 0, false, true, false},
      {"stride 2, odd width", {2, 3, 15, 17}, {4, 3, 3, 3}, 2, 0, true, false, false},
      {"a NaN in x", {2, 2, 8, 8}, {3, 2, 3, 3}, 1, 1, true, false, true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const int64_t xn = shape_numel(c.xs), wn = shape_numel(c.ws);
    std::vector<double> xv = c.integers ? small_integers(xn, 1, 2) : rgtest::random_values(xn, 1);
    const std::vector<double> wv = c.integers ? small_integers(wn, 2, 1) : rgtest::random_values(wn, 2, -0.5, 0.5);
    std::vector<double> bv = c.integers ? small_integers(c.ws[0], 3, 1) : rgtest::random_values(c.ws[0], 3, -0.3, 0.3);
    if (!c.bias) bv.clear();
    if (c.nan) xv[37] = std::nan("");
    for (DType dtype : {DType::f32, DType::f64}) {
      for (ringgrad::CpuIsa isa : rgtest::isas_to_test("conv2d_relu_max_pool2d")) {
        for (int threads : {1, 2}) {
          rgtest::IsaScope scope(isa);
          ThreadsScope pool(threads);
          const std::string isa_name = cpu_isa_name(isa), dtype_text = dtype_name(dtype);
          CAPTURE(isa_name);
          CAPTURE(dtype_text);
          CAPTURE(threads);
          const BlockRun plain = run_block(false, xv, c.xs, wv, c.ws, bv, c.stride, c.padding, dtype);
          const BlockRun fused = run_block(true, xv, c.xs, wv, c.ws, bv, c.stride, c.padding, dtype);
          CHECK(bitwise_difference(fused.y, plain.y) == "");
          CHECK(bitwise_difference(fused.dx, plain.dx) == "");
          CHECK(bitwise_difference(fused.dw, plain.dw) == "");
          if (!c.bias) continue;
          // The bias gradient sums in double in another order than the plain reduction: to 1e-6.
          const auto e = plain.db.to_vector();
          CHECK(rgtest::compare_values(fused.db, plain.db.shape(), e, 1e-6, 1e-6) == "");
        }
      }
    }
  }
}

TEST_CASE("conv2d_relu_max_pool2d: gradients match finite differences, values a loop written here") {
  FusionScope fusion(true);
  Generator gen(9);
  // Values away from ReLU's kink and from ties at this size: finite differences are exact there.
  Tensor x = randn({2, 3, 6, 7}, gen, {.dtype = DType::f64}), w = randn({4, 3, 3, 3}, gen, {.dtype = DType::f64});
  Tensor b = randn({4}, gen, {.dtype = DType::f64});
  const bool ran = fused_kernel_ran([&] {
    auto r = gradcheck([](const std::vector<Tensor>& v) { return conv2d_relu_max_pool2d(v[0], v[1], v[2], 1, 1); },
                       {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
  });
  CHECK(ran);
  // The forward against the definition: the maximum of ReLU over each 2 x 2 window of the
  // convolution, here computed from conv2d's output by loops.
  const Tensor conv = conv2d(x, w, b, 1, 1);  // (2, 4, 6, 7)
  const auto cv = conv.to_vector();
  std::vector<double> expected;
  for (int64_t plane = 0; plane < 2 * 4; ++plane)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        double best = 0;  // ReLU's floor
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t e = 0; e < 2; ++e) best = std::max(best, cv[(plane * 6 + 2 * i + a) * 7 + 2 * j + e]);
        expected.push_back(best);
      }
  CHECK(rgtest::compare_values(conv2d_relu_max_pool2d(x, w, b, 1, 1), {2, 4, 3, 3}, expected, 0, 0) == "");
}

TEST_CASE("nn::Sequential computes Conv2d, ReLU, MaxPool2d(2) as the fused block, the same as module by module") {
  auto make = [] {
    Generator gen(3);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1, .generator = &gen}),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
        std::make_shared<nn::Conv2d>(4, 6, 3, nn::Conv2dOptions{.padding = 1, .generator = &gen}),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(6 * 3 * 3, 5, nn::LinearOptions{.generator = &gen})});
  };
  const Tensor x = rgtest::random_tensor({7, 1, 12, 12}, 5);
  const Tensor target = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1}, {7}, {.dtype = DType::i64});
  struct Result {
    Tensor loss;
    std::vector<Tensor> grads;
    bool fused;
  };
  auto train_step = [&](bool fusion, const std::function<void(nn::Sequential&)>& adjust) {
    FusionScope scope(fusion);
    auto model = make();
    adjust(*model);
    Result result;
    result.fused = fused_kernel_ran([&] {
      result.loss = cross_entropy((*model)(x), target);
      result.loss.backward();
    });
    for (const Tensor& p : model->parameters()) result.grads.push_back(p.grad());
    return result;
  };
  const auto as_built = [](nn::Sequential&) {};
  const Result plain = train_step(false, as_built), fused = train_step(true, as_built);
  CHECK_FALSE(plain.fused);
  CHECK(fused.fused);
  CHECK(bitwise_difference(fused.loss, plain.loss) == "");
  const char* names[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc.weight", "fc.bias"};
  REQUIRE(fused.grads.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(names[i]);
    if (i == 1 || i == 3) {  // bias gradients: to 1e-6 (see the first test)
      CHECK(rgtest::compare_values(fused.grads[i], plain.grads[i].shape(), plain.grads[i].to_vector(), 1e-6, 1e-6) ==
            "");
    } else {
      CHECK(bitwise_difference(fused.grads[i], plain.grads[i]) == "");
    }
  }

  SUBCASE("a module with a forward hook is called as a module: the hook fires, nothing is fused") {
    int calls = 0;
    const Result hooked = train_step(true, [&](nn::Sequential& m) {
      m[1]->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
        ++calls;
        return Tensor();
      });
    });  // the second block has no hooks: it is fused
    CHECK(calls == 1);
    CHECK(hooked.fused);  // the second block
    CHECK(bitwise_difference(hooked.loss, plain.loss) == "");
    const Result checkpointed = train_step(true, [&](nn::Sequential& m) {
      m[0]->checkpoint_activations(true);
      m[3]->register_forward_pre_hook([](nn::Module&, const Tensor&) { return Tensor(); });
    });
    CHECK_FALSE(checkpointed.fused);  // neither block is plain
    CHECK(bitwise_difference(checkpointed.loss, plain.loss) == "");
  }
  SUBCASE("other pooling is not fused") {
    FusionScope scope(true);
    nn::Sequential overlapping{std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::ReLU>(),
                               std::make_shared<nn::MaxPool2d>(3, 2)};
    CHECK_FALSE(fused_kernel_ran([&] { overlapping(x); }));
  }
  SUBCASE("an error inside the fused block names the convolution module") {
    FusionScope scope(true);
    auto model = make();
    CHECK(rgtest::error_problem(
              [&] {
                (*model)(rgtest::random_tensor({2, 3, 12, 12}, 6));
              },
              {"input channels differ", "in module '0' (Conv2d)"}) == "");
  }
}
