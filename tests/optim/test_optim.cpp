// Optimizers against independent double-precision loops written here, mixed precision against f32,
// GradScaler's dynamic scale, clipping and schedules.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "../core/test_util.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

const std::vector<double> kInit{0.5, -1.0, 2.0, 0.25};
// The gradient at step t (fixed values, so the reference loop needs no autograd).
std::vector<double> grad_at(int t) { return {0.1 * (t + 1), -0.2, 0.3 / (t + 1), -0.05 * t}; }

Tensor param_from(const std::vector<double>& v, DType dtype = DType::f32) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = dtype, .requires_grad = true});
}

void set_grad(Tensor& p, int t) {
  p.set_grad(from_vector(grad_at(t), {static_cast<int64_t>(kInit.size())}, {.dtype = p.dtype()}));
}

void check_close(const Tensor& p, const std::vector<double>& expected, double tol) {
  const std::vector<double> got = p.to_vector();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(tol));
}

}  // namespace

TEST_CASE("SGD with momentum, nesterov and weight decay matches a hand loop for 3 steps") {
  for (bool nesterov : {false, true}) {
    const double lr = 0.1, mom = 0.9, wd = 0.01;
    std::vector<double> x = kInit, buf(4);
    for (int t = 0; t < 3; ++t) {
      for (size_t i = 0; i < 4; ++i) {
        double g = grad_at(t)[i] + wd * x[i];
        buf[i] = t == 0 ? g : mom * buf[i] + g;
        g = nesterov ? g + mom * buf[i] : buf[i];
        x[i] -= lr * g;
      }
    }
    Tensor p = param_from(kInit);
    optim::SGD opt({p}, {.lr = lr, .momentum = mom, .weight_decay = wd, .nesterov = nesterov});
    for (int t = 0; t < 3; ++t) {
      set_grad(p, t);
      opt.step();
    }
    check_close(p, x, 1e-6);
  }
}

TEST_CASE("Adam and AdamW match a hand loop for 3 steps") {
  for (bool decoupled : {false, true}) {
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    std::vector<double> x = kInit, m(4), v(4);
    for (int t = 1; t <= 3; ++t) {
      for (size_t i = 0; i < 4; ++i) {
        double g = grad_at(t - 1)[i];
        if (decoupled) x[i] *= 1 - lr * wd;
        else g += wd * x[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
        x[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
    Tensor p = param_from(kInit);
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{.lr = lr, .weight_decay = wd});
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{.lr = lr, .weight_decay = wd});
    for (int t = 0; t < 3; ++t) {
      set_grad(p, t);
      opt->step();
    }
    check_close(p, x, 1e-5);
  }
}

TEST_CASE("parameters without a gradient are skipped, and zero_grad sets grads to none") {
  Tensor a = param_from(kInit), b = param_from(kInit);
  optim::SGD opt({a, b}, {.lr = 1.0});
  set_grad(a, 0);
  opt.step();
  CHECK(equal(b, param_from(kInit)));
  CHECK_FALSE(equal(a, param_from(kInit)));
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

// Linear regression y = X w* fitted with Adam: f16 parameters through f32 master weights track the
// f32 run. Tolerance: the f16 copy of a weight is within half an f16 ulp of its master (2^-11
// relative), and the masters drift apart only through f16-rounded forward passes: 2e-2 absolute.
TEST_CASE("Adam with f16 parameters and f32 master weights tracks f32 Adam over 200 steps") {
  Generator gen(5);
  Tensor X = randn({64, 8}, gen), w_true = randn({8, 1}, gen);
  Tensor y = matmul(X, w_true);
  auto run = [&](DType dtype) {
    Generator init(9);
    Tensor w = randn({8, 1}, init, {.dtype = dtype, .requires_grad = true});
    optim::Adam opt({w}, {.lr = 0.05});
    for (int step = 0; step < 200; ++step) {
      Tensor pred = matmul(X.to(dtype), w).to(DType::f32);
      Tensor loss = nn::F::mse_loss(pred, y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    return std::make_pair(w.to(DType::f32), opt.state_bytes());
  };
  auto [w32, bytes32] = run(DType::f32);
  auto [w16, bytes16] = run(DType::f16);
  CHECK(max_abs_diff(w32, w16) < 2e-2);
  CHECK(max_abs_diff(w32, w_true) < 0.5);  // both actually learned
  // Memory model: f32 Adam keeps 8 bytes/param (m, v); f16 adds a 4-byte master: 12.
  CHECK(bytes32 == 8 * 8);
  CHECK(bytes16 == 8 * 12);
}

TEST_CASE("Module::to(dtype) on parameters an optimizer holds is an error naming the parameter") {
  nn::Linear fc(4, 3);
  {
    optim::Adam opt(fc.parameters(), {.lr = 1e-3});
    const size_t f32_state = opt.state_bytes();
    CHECK_THROWS_WITH_AS(fc.to(DType::f16),
                         doctest::Contains("parameter 'weight' of Linear ((3, 4) f32 cpu) is held by optimizer Adam"),
                         Error);
    // Nothing was converted, and converting to the dtype it already has is no change.
    CHECK(fc.weight.dtype() == DType::f32);
    CHECK(fc.bias.dtype() == DType::f32);
    fc.to(DType::f32);
    CHECK(opt.state_bytes() == f32_state);
  }
  // Once the optimizer is gone the model converts, and a new optimizer sizes its state for f16:
  // 12 bytes per parameter (f32 master + two f32 moments).
  fc.to(DType::f16);
  CHECK(fc.weight.dtype() == DType::f16);
  optim::Adam opt(fc.parameters(), {.lr = 1e-3});
  CHECK(opt.state_bytes() == 12 * static_cast<size_t>(fc.parameter_count()));
}

TEST_CASE("state_bytes_by_kind: f16 Adam holds 4 bytes of master weight and 8 of moments per parameter") {
  nn::Linear fc(30, 20);
  const size_t psi = static_cast<size_t>(fc.parameter_count());
  using Kinds = std::vector<std::pair<std::string, size_t>>;
  {
    optim::Adam opt(fc.parameters(), {.lr = 1e-3});  // f32: no master copy
    CHECK(opt.state_bytes_by_kind() == Kinds{{"moments", 8 * psi}});
    optim::SGD sgd(fc.parameters(), {.lr = 0.1, .momentum = 0.9});
    CHECK(sgd.state_bytes_by_kind() == Kinds{{"momentum", 4 * psi}});
    optim::SGD plain(fc.parameters(), {.lr = 0.1});
    CHECK(plain.state_bytes_by_kind().empty());
    CHECK(plain.state_bytes() == 0);
  }
  fc.to(DType::f16);
  optim::Adam opt(fc.parameters(), {.lr = 1e-3});
  CHECK(opt.state_bytes_by_kind() == Kinds{{"master weights", 4 * psi}, {"moments", 8 * psi}});
  size_t sum = 0;
  for (const auto& [kind, bytes] : opt.state_bytes_by_kind()) sum += bytes;
  CHECK(sum == opt.state_bytes());
}

TEST_CASE("GradScaler skips the step and backs off on inf, grows after the interval") {
  Tensor p = param_from(kInit);
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  // Injected inf: no step, scale halves.
  p.set_grad(from_vector(std::vector<double>{1, std::numeric_limits<double>::infinity(), 0, 0}, {4}));
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(equal(p, param_from(kInit)));
  CHECK(scaler.get_scale() == 512.0);
  // Finite gradients scaled by S are divided by S before the step.
  for (int i = 0; i < 3; ++i) {
    p.set_grad(full({4}, 512.0 * 2.0));  // true gradient 2 at scale 512
    const Tensor before = p.clone().detach();
    CHECK(scaler.step(opt));
    CHECK(allclose(p, before - 0.2, 1e-6, 1e-6));
    if (i < 2) {
      scaler.update();
      CHECK(scaler.get_scale() == 512.0);
    }
  }
  scaler.update();  // third consecutive good step: grows
  CHECK(scaler.get_scale() == 1024.0);
  // A NaN also counts, and the reducer seam sees the local flag.
  bool seen = false;
  scaler.set_found_inf_reducer([&](bool local) {
    seen = local;
    return local;
  });
  p.set_grad(from_vector(std::vector<double>{std::nan(""), 0, 0, 0}, {4}));
  CHECK_FALSE(scaler.step(opt));
  CHECK(seen);
}

TEST_CASE("GradScaler's state_dict round-trips its scale and growth tracker") {
  optim::GradScaler a({.init_scale = 1024.0, .growth_interval = 5});
  a.set_state(256.0, 3);
  optim::GradScaler b;
  b.load_state_dict(a.state_dict());
  CHECK(b.get_scale() == 256.0);
  CHECK(b.growth_tracker() == 3);
  CHECK_THROWS_WITH_AS(b.load_state_dict({{"scale", scalar_tensor(2.0)}}),
                       doctest::Contains("state entry 'growth_tracker' is missing"), Error);
  CHECK_THROWS_WITH_AS(b.load_state_dict({{"scale", scalar_tensor(-1.0)}, {"growth_tracker", scalar_tensor(0.0)}}),
                       doctest::Contains("need a positive finite scale"), Error);
}

TEST_CASE("GradScaler finds one inf or NaN anywhere in long f16 and f32 gradients") {
  // Long enough for the vectorised body of the unscale loop, not only its scalar tail.
  const int64_t n = 1000;
  for (DType dtype : {DType::f16, DType::f32}) {
    for (int64_t bad_at : {int64_t{0}, int64_t{517}, n - 1}) {
      for (double bad :
           {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), std::nan("")}) {
        CAPTURE(bad_at);
        CAPTURE(bad);
        Tensor p = full({n}, 1.0, {.dtype = dtype}).requires_grad_();
        optim::SGD opt({p}, {.lr = 0.5});
        optim::GradScaler scaler({.init_scale = 256.0});
        std::vector<double> g(n, 256.0 * 3.0);  // true gradient 3 at scale 256
        g[static_cast<size_t>(bad_at)] = bad;
        p.set_grad(from_vector(g, {n}, {.dtype = dtype}));
        CHECK_FALSE(scaler.step(opt));
        CHECK(equal(p, full({n}, 1.0, {.dtype = dtype})));
      }
    }
    // All finite: unscaled exactly (powers of two), then stepped: 1 - 0.5 * 3.
    Tensor p = full({n}, 1.0, {.dtype = dtype}).requires_grad_();
    optim::SGD opt({p}, {.lr = 0.5});
    optim::GradScaler scaler({.init_scale = 256.0});
    p.set_grad(full({n}, 256.0 * 3.0, {.dtype = dtype}));
    CHECK(scaler.step(opt));
    CHECK(equal(p, full({n}, -0.5, {.dtype = dtype})));
  }
}

TEST_CASE("clip_grad_norm scales gradients to the maximum global norm") {
  Tensor a = param_from({0, 0}), b = param_from({0});
  a.set_grad(from_vector(std::vector<double>{3, 0}, {2}));
  b.set_grad(from_vector(std::vector<double>{4}, {1}));
  const double norm = optim::clip_grad_norm({a, b}, 1.0);
  CHECK(norm == doctest::Approx(5.0));
  CHECK(a.grad().to_vector()[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(b.grad().to_vector()[0] == doctest::Approx(0.8).epsilon(1e-5));
  CHECK(optim::clip_grad_norm({a, b}, 10.0) == doctest::Approx(1.0).epsilon(1e-5));  // no change below max
}

TEST_CASE("clip_grad_norm's norm is the f64 sum of squares in parameter order, to the last bit") {
  // Summed on the gradients' device and read back once: the same f64 additions, in the same order,
  // as adding one scalar per parameter on the host.
  std::vector<Tensor> params;
  double want_sq = 0;
  for (int i = 0; i < 3; ++i) {
    const std::vector<double> g = rgtest::random_values(static_cast<size_t>(50 + 31 * i), 70 + i, -2.0, 2.0);
    Tensor p = param_from(std::vector<double>(g.size(), 0.0), DType::f64);
    p.set_grad(from_vector(g, {static_cast<int64_t>(g.size())}, {.dtype = DType::f64}));
    want_sq += sum(p.grad() * p.grad()).item();
    params.push_back(p);
  }
  CHECK(optim::clip_grad_norm(params, 1e9) == std::sqrt(want_sq));
}

TEST_CASE("learning-rate schedules") {
  optim::StepLR step(0.1, 10, 0.5);
  CHECK(step.at(9) == doctest::Approx(0.1));
  CHECK(step.at(10) == doctest::Approx(0.05));
  optim::WarmupCosineLR cos(1e-3, 100, 3000, 1e-4);
  CHECK(cos.at(0) == doctest::Approx(1e-5));
  CHECK(cos.at(99) == doctest::Approx(1e-3));
  CHECK(cos.at(1550) == doctest::Approx(1e-4 + 0.5 * (1e-3 - 1e-4)));
  CHECK(cos.at(3000) == doctest::Approx(1e-4));
  Tensor p = param_from(kInit);
  optim::SGD opt({p}, {.lr = 1.0});
  cos.apply(opt, 99);
  CHECK(opt.lr() == doctest::Approx(1e-3));
}
