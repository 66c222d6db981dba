// nn::Module: registration order, state_dict round trip, strict-load errors, layer shapes and init.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ringgrad.h"

using namespace ringgrad;

namespace {

struct Block : nn::Module {
  Block() : Module("Block") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2, nn::LinearOptions{.bias = false}));
    scale = register_buffer("scale", full({1}, 2.0));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))) * scale; }
  std::shared_ptr<nn::Linear> fc1, fc2;
  Tensor scale;
};

struct Net : nn::Module {
  Net() : Module("Net") {
    embed = register_parameter("embed", zeros({5}));
    block = register_module("block", std::make_shared<Block>());
  }
  Tensor embed;
  std::shared_ptr<Block> block;
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("named_parameters are dotted and in registration order, recursively") {
  Net net;
  CHECK(names(net.named_parameters()) ==
        std::vector<std::string>{"embed", "block.fc1.weight", "block.fc1.bias", "block.fc2.weight"});
  CHECK(names(net.named_buffers()) == std::vector<std::string>{"block.scale"});
  CHECK(net.parameter_count() == 5 + 4 * 3 + 3 + 3 * 2);
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());
  CHECK(net.summary().find("block.fc1.weight") != std::string::npos);
  CHECK(net.summary().find("total parameters: 26") != std::string::npos);
}

TEST_CASE("train and eval propagate to children") {
  Net net;
  net.eval();
  CHECK_FALSE(net.block->fc1->is_training());
  net.train();
  CHECK(net.block->fc2->is_training());
}

TEST_CASE("ModuleList and ModuleDict register their modules; named_modules and apply walk the tree") {
  struct Tower : nn::Module {
    Tower() : Module("Tower") {
      layers = register_module("layers", std::make_shared<nn::ModuleList>());
      for (int i = 0; i < 2; ++i) layers->push_back(std::make_shared<nn::Linear>(3, 3));
      heads = register_module("heads", std::make_shared<nn::ModuleDict>());
      heads->insert("cls", std::make_shared<nn::Linear>(3, 2));
      heads->insert("reg", std::make_shared<nn::Linear>(3, 1));
    }
    std::shared_ptr<nn::ModuleList> layers;
    std::shared_ptr<nn::ModuleDict> heads;
  };
  Tower t;
  std::vector<std::string> names;
  for (const auto& [name, p] : t.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                          "heads.cls.weight", "heads.cls.bias", "heads.reg.weight", "heads.reg.bias"});
  std::vector<std::string> modules;
  for (const auto& [name, m] : t.named_modules()) modules.push_back(name + ":" + m->type_name());
  CHECK(modules == std::vector<std::string>{":Tower", "layers:ModuleList", "layers.0:Linear", "layers.1:Linear",
                                            "heads:ModuleDict", "heads.cls:Linear", "heads.reg:Linear"});
  // apply: zero every Linear's bias.
  t.apply([](const std::string&, nn::Module& m) {
    if (auto* fc = dynamic_cast<nn::Linear*>(&m)) fc->bias.detach().zero_();
  });
  for (const auto& [name, p] : t.named_parameters())
    if (name.size() > 4 && name.substr(name.size() - 4) == "bias") CHECK(p.abs().sum().item() == 0.0);
  CHECK(t.heads->keys() == std::vector<std::string>{"cls", "reg"});
  CHECK(t.heads->at("reg").get() == t.named_modules().back().second);
  CHECK_THROWS_WITH_AS(t.heads->at("box"), doctest::Contains("no key 'box' (keys: cls reg)"), Error);
  CHECK_THROWS_WITH_AS(t.heads->insert("cls", std::make_shared<nn::ReLU>()), doctest::Contains("already a key"), Error);
  CHECK_THROWS_WITH_AS((*t.layers)[2], doctest::Contains("index 2 out of range for a list of 2"), Error);
  // summary() shows the tree with each subtree's parameter count.
  const std::string summary = t.summary();
  CHECK(summary.find("  layers (ModuleList): 24 parameters\n    0 (Linear): 12 parameters\n") != std::string::npos);
  CHECK(summary.find("    reg (Linear): 4 parameters\n") != std::string::npos);
}

TEST_CASE("AvgPool2d and AdaptiveAvgPool2d average their windows, gradchecked; unsupported cases are errors") {
  // x: (1, 1, 5, 4) holding 0..19 row-major.
  const Tensor x = arange(0, 20).reshape({1, 1, 5, 4});
  nn::AvgPool2d pool(2);
  // Windows over rows {0,1}, {2,3} (row 4 dropped) and columns {0,1}, {2,3}; e.g. (0+1+4+5)/4 = 2.5.
  CHECK(pool(x).shape() == Shape{1, 1, 2, 2});
  CHECK(pool(x).to_vector() == std::vector<double>{2.5, 4.5, 10.5, 12.5});
  nn::AdaptiveAvgPool2d global(1);
  const Tensor square = arange(0, 16).reshape({1, 1, 4, 4});
  CHECK(global(square).shape() == Shape{1, 1, 1, 1});
  CHECK(global(square).item() == 7.5);
  nn::AdaptiveAvgPool2d two(2, 1);  // blocks of 2 rows x 4 columns
  CHECK(two(square).to_vector() == std::vector<double>{3.5, 11.5});
  Generator gen(4);
  Tensor input = randn({2, 3, 6, 5}, gen);
  input.requires_grad_(true);
  auto r = gradcheck([&](const std::vector<Tensor>& v) { return pool(v[0]); }, {input});
  CHECK_MESSAGE(r.ok, r.message);
  nn::AdaptiveAvgPool2d three(3, 5);
  r = gradcheck([&](const std::vector<Tensor>& v) { return three(v[0]); }, {input});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_AS(nn::AvgPool2d(3, 2)(input), doctest::Contains("only non-overlapping windows"), Error);
  CHECK_THROWS_WITH_AS(nn::AdaptiveAvgPool2d(4)(input), doctest::Contains("must divide the input's (H, W) = (6, 5)"),
                       Error);
}

TEST_CASE("BatchNorm2d against a double-precision loop: training, running statistics, eval; gradchecked") {
  const int64_t N = 3, C = 2, H = 2, W = 3, n = N * H * W;
  Generator gen(21);
  const Tensor x = randn({N, C, H, W}, gen) * 2.0 + 1.0;
  nn::BatchNorm2d bn(C, /*eps=*/1e-5, /*momentum=*/0.25);
  {
    NoGradGuard no_grad;
    bn.weight.copy_(from_vector(std::vector<double>{1.5, -0.5}, {C}));
    bn.bias.copy_(from_vector(std::vector<double>{0.25, 2.0}, {C}));
  }
  const std::vector<double> xv = x.to_vector(), w{1.5, -0.5}, b{0.25, 2.0};
  auto at = [&](int64_t i, int64_t c, int64_t h, int64_t k) { return ((i * C + c) * H + h) * W + k; };
  std::vector<double> mean(C, 0), var(C, 0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < N; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t k = 0; k < W; ++k) mean[c] += xv[at(i, c, h, k)] / n;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t k = 0; k < W; ++k) var[c] += std::pow(xv[at(i, c, h, k)] - mean[c], 2) / n;
  }
  const std::vector<double> y = bn(x).to_vector();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t k = 0; k < W; ++k) {
          const double want = (xv[at(i, c, h, k)] - mean[c]) / std::sqrt(var[c] + 1e-5) * w[c] + b[c];
          CHECK(y[at(i, c, h, k)] == doctest::Approx(want).epsilon(1e-5));
        }
  // Running statistics: 0.75 * initial + 0.25 * batch, the variance unbiased.
  for (int64_t c = 0; c < C; ++c) {
    CHECK(bn.running_mean.to_vector()[c] == doctest::Approx(0.25 * mean[c]).epsilon(1e-5));
    CHECK(bn.running_var.to_vector()[c] == doctest::Approx(0.75 + 0.25 * var[c] * n / (n - 1.0)).epsilon(1e-5));
  }
  CHECK(bn.num_batches_tracked.item() == 1.0);
  // Eval normalises with the running statistics and leaves them alone.
  bn.eval();
  const std::vector<double> rm = bn.running_mean.to_vector(), rv = bn.running_var.to_vector();
  const std::vector<double> ye = bn(x).to_vector();
  CHECK(ye[at(1, 1, 0, 2)] ==
        doctest::Approx((xv[at(1, 1, 0, 2)] - rm[1]) / std::sqrt(rv[1] + 1e-5) * w[1] + b[1]).epsilon(1e-5));
  CHECK(bn.running_mean.to_vector() == rm);
  CHECK(bn.num_batches_tracked.item() == 1.0);
  // The running statistics are buffers: saved, and broadcast by DDP.
  std::vector<std::string> buffers;
  for (const auto& [name, t] : bn.named_buffers()) buffers.push_back(name);
  CHECK(buffers == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  // Gradients in training mode, through the batch mean and variance, against finite differences.
  bn.train();
  bn.to(DType::f64);
  Tensor input = randn({N, C, H, W}, gen);
  input.requires_grad_(true);
  auto r = gradcheck([&](const std::vector<Tensor>& v) { return bn(v[0]); }, {input});
  CHECK_MESSAGE(r.ok, r.message);
  // And the scale and shift: dL/dw_c = sum(g * xhat), dL/db_c = sum(g), with L = sum(g * y).
  bn.zero_grad();
  const Tensor g = randn({N, C, H, W}, gen).to(DType::f64);
  const Tensor xd = x.to(DType::f64);
  (bn(xd) * g).sum().backward();
  const Tensor xhat = (xd - xd.mean({0, 2, 3}, true)) * rsqrt(xd.var({0, 2, 3}, true, false) + 1e-5);
  CHECK(allclose(bn.weight.grad(), (g * xhat).sum({0, 2, 3}), 1e-9, 1e-9));
  CHECK(allclose(bn.bias.grad(), g.sum({0, 2, 3}), 1e-9, 1e-9));
  CHECK_THROWS_WITH_AS(bn(randn({2, 3, 2, 2}, gen)), doctest::Contains("input must be (N, 2, H, W)"), Error);
}

TEST_CASE("state_dict round trip copies values into another instance") {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  CHECK_FALSE(equal(a.block->fc1->weight, b.block->fc1->weight));
  b.load_state_dict(a.state_dict());
  for (size_t i = 0; i < a.state_dict().size(); ++i) CHECK(equal(a.state_dict()[i].second, b.state_dict()[i].second));
  // The handles stay the same tensors (an optimizer holding them keeps working).
  CHECK(b.parameters()[1].is_same(b.block->fc1->weight));
}

TEST_CASE("strict load_state_dict lists missing, unexpected and mis-shaped keys and changes nothing") {
  Net net;
  const Tensor before = net.block->fc1->weight.clone();
  nn::StateDict state = net.state_dict();
  state.erase(state.begin());                          // drop "embed"
  state.emplace_back("block.fc3.weight", zeros({1}));  // unexpected
  state[0].second = zeros({9, 9});                     // block.fc1.weight mis-shaped
  try {
    net.load_state_dict(state);
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("[load_state_dict]") != std::string::npos);
    CHECK(msg.find("missing keys: embed") != std::string::npos);
    CHECK(msg.find("unexpected keys: block.fc3.weight") != std::string::npos);
    CHECK(msg.find("block.fc1.weight: checkpoint (9, 9) vs model (3, 4)") != std::string::npos);
    // The hint does not send the user to strict = false, which would fail on the same mismatch.
    CHECK(msg.find("pass strict = false") == std::string::npos);
    CHECK(msg.find("not shape mismatches") != std::string::npos);
  }
  CHECK(equal(net.block->fc1->weight, before));
  // Non-strict still rejects the shape mismatch, and still changes nothing.
  CHECK_THROWS_WITH_AS(net.load_state_dict(state, /*strict=*/false), doctest::Contains("vs model (3, 4)"), Error);
  CHECK(equal(net.block->fc1->weight, before));
}

TEST_CASE("non-strict load_state_dict loads a subset and returns what it skipped") {
  Net net;
  const size_t keys = net.state_dict().size();
  nn::StateDict subset{{"embed", ones({5})}, {"head.weight", zeros({1})}};
  const nn::LoadResult result = net.load_state_dict(subset, /*strict=*/false);
  CHECK(net.embed.sum().item() == 5.0);
  CHECK(result.unexpected == std::vector<std::string>{"head.weight"});
  CHECK(result.missing.size() == keys - 1);
  CHECK(result.missing.front() == net.state_dict()[1].first);
  CHECK(result.mismatched.empty());
  CHECK_FALSE(result.all_matched());
  CHECK(result.describe().find("unexpected keys: head.weight") != std::string::npos);
  // A strict load of everything matches everything.
  CHECK(net.load_state_dict(net.state_dict()).all_matched());
  // A state none of whose keys the model has (a prefix left on) loads nothing, and says so.
  nn::StateDict prefixed;
  for (const auto& [name, t] : net.state_dict()) prefixed.emplace_back("model." + name, t);
  CHECK_THROWS_WITH_AS(net.load_state_dict(prefixed, /*strict=*/false),
                       doctest::Contains("nothing would be loaded; a prefix to remove or add?"), Error);
}

TEST_CASE("Linear and Conv2d initialise within PyTorch's kaiming-uniform bounds") {
  manual_seed(7);
  nn::Linear fc(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);
  for (double v : fc.weight.to_vector()) CHECK(std::abs(v) <= bound);
  for (double v : fc.bias.to_vector()) CHECK(std::abs(v) <= bound);
  // Uniform on [-b, b] has variance b^2 / 3: the sample variance of 5000 draws is within 10%.
  const double var = fc.weight.var().item();
  CHECK(var == doctest::Approx(bound * bound / 3).epsilon(0.1));
  nn::Conv2d conv(3, 8, 3);
  const double cbound = 1.0 / std::sqrt(27.0);
  for (double v : conv.weight.to_vector()) CHECK(std::abs(v) <= cbound);
  CHECK(conv.weight.shape() == Shape{8, 3, 3, 3});
}

TEST_CASE("Sequential chains its layers and names them by position") {
  nn::Sequential seq{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(4, 2)};
  CHECK(names(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  Tensor x = ones({5, 3});
  CHECK(seq.forward(x).shape() == Shape{5, 2});
  auto* fc0 = dynamic_cast<nn::Linear*>(seq[0].get());
  auto* fc2 = dynamic_cast<nn::Linear*>(seq[2].get());
  Tensor expected = linear(relu(linear(x, fc0->weight, fc0->bias)), fc2->weight, fc2->bias);
  CHECK(allclose(seq.forward(x), expected));
}

namespace {
struct TwoStage : nn::Module {
  std::shared_ptr<nn::Sequential> head;
  TwoStage() : Module("TwoStage") {
    // head.2 expects 16 features but receives 8: the error must say which Linear it is.
    head = register_module("head", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                       std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                                       std::make_shared<nn::Linear>(16, 2)}));
  }
  Tensor forward(const Tensor& x) override { return (*head)(x); }
};
}  // namespace

TEST_CASE("an error inside a module's forward names the module's path and type, once") {
  auto net = std::make_shared<TwoStage>();
  CHECK(net->head->path() == "head");
  CHECK((*net->head)[2]->path() == "head.2");
  CHECK(net->path().empty());
  try {
    (*net)(ones({3, 4}));
    FAIL("a mis-shaped Linear must be an error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("[linear]") == 0);
    CHECK(what.find("in module 'head.2' (Linear)") != std::string::npos);
    CHECK(what.find("in module", what.find("in module") + 1) == std::string::npos);  // not again by the parents
  }
  auto lone = std::make_shared<nn::Linear>(4, 2);
  CHECK_THROWS_WITH_AS((*lone)(ones({3, 5})), doctest::Contains("in module (the root) (Linear)"), Error);
  // A module shared by two parents keeps the first one's path; a parent destroyed first clears it.
  auto shared = std::make_shared<nn::Linear>(2, 2);
  {
    nn::ModuleDict first;
    first.insert("a", shared);
    nn::ModuleDict second;
    second.insert("b", shared);
    CHECK(shared->path() == "a");
  }
  CHECK(shared->path().empty());
}

TEST_CASE("Module::to converts parameters in place") {
  Net net;
  Tensor w = net.block->fc1->weight;
  const std::vector<double> before = w.to_vector();
  net.to(DType::f16);
  CHECK(w.dtype() == DType::f16);  // the same handle now holds f16 values
  CHECK(w.requires_grad());
  const std::vector<double> after = w.to_vector();
  for (size_t i = 0; i < before.size(); ++i) CHECK(after[i] == doctest::Approx(before[i]).epsilon(1e-3));
}

TEST_CASE("Dropout zeroes about p of the elements in training and is the identity in eval") {
  nn::Dropout drop(0.25, std::make_shared<Generator>(3));
  Tensor x = ones({100000});
  Tensor y = drop.forward(x);
  const std::vector<double> v = y.to_vector();
  int64_t zeros_seen = 0;
  for (double e : v) {
    if (e == 0) ++zeros_seen;
    else CHECK(e == doctest::Approx(1.0 / 0.75));
  }
  // Binomial(100000, 0.25): standard deviation ~137; allow 5 of them.
  CHECK(std::abs(static_cast<double>(zeros_seen) - 25000.0) < 5 * 137);
  drop.eval();
  CHECK(equal(drop.forward(x), x));
}

TEST_CASE("dropout without a generator draws a per-rank stream, seeded from the default seed and the rank") {
  const Tensor x = ones({4096});
  // The stream's seed is a function of (seed, rank): rank 0 differs from rank 1, and from the
  // default generator's own stream; manual_seed restarts it.
  CHECK(dropout_seed(5, 0) != dropout_seed(5, 1));
  CHECK(dropout_seed(5, 0) != 5);
  manual_seed(5);
  CHECK(dropout_generator().seed() == dropout_seed(5, 0));
  CHECK(dropout_generator().offset() == 0);
  nn::Dropout drop(0.5);
  const Tensor a = drop(x);
  Generator by_hand(dropout_seed(5, 0));
  CHECK(equal(a, nn::F::dropout(x, 0.5, true, by_hand)));
  // Another rank's stream (as dist::init sets it) gives another mask.
  set_random_rank(1);
  CHECK(dropout_generator().seed() == dropout_seed(5, 1));
  CHECK_FALSE(equal(drop(x), a));
  // Identical masks on every rank, when asked: the default seed itself, whatever the rank.
  set_dropout_streams(DropoutStreams::same_on_every_rank);
  CHECK(dropout_generator().seed() == 5);
  Generator plain(5);
  CHECK(equal(drop(x), nn::F::dropout(x, 0.5, true, plain)));
  set_dropout_streams(DropoutStreams::per_rank);
  set_random_rank(0);
  // A generator of its own, shared with the layer, is used instead.
  auto own = std::make_shared<Generator>(9);
  nn::Dropout seeded(0.5, own);
  Generator nine(9);
  CHECK(equal(seeded(x), nn::F::dropout(x, 0.5, true, nine)));
  CHECK(own->offset() > 0);
}

TEST_CASE("dropout's mask comes from the generator's seed and offset, and the backward reuses it") {
  // 100000 elements: several chunks of the CPU loop, so a mask that depended on the split would show.
  Generator data(4);
  const Tensor x0 = add(rand({100000}, data), 1.0);  // in [1, 2): never zero, so a zero output means dropped
  const int threads_before = num_threads();
  auto run = [&](int threads, uint64_t seed) {
    set_num_threads(threads);
    Generator gen(seed);
    Tensor x = x0.clone().requires_grad_();
    Tensor y = nn::F::dropout(x, 0.3, /*training=*/true, gen);
    y.backward(full({100000}, 2.0));
    set_num_threads(threads_before);
    return std::make_pair(y.to_vector(), x.grad().to_vector());
  };
  const auto [y, dx] = run(1, 11);
  const std::vector<double> x = x0.to_vector();
  int64_t dropped = 0;
  bool consistent = true;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) {
      ++dropped;
      consistent &= dx[i] == 0;  // dropped forward, no gradient backward
    } else {
      consistent &= std::abs(y[i] - x[i] / 0.7) < 1e-5 && std::abs(dx[i] - 2.0 / 0.7) < 1e-5;
    }
  }
  CHECK(consistent);
  CHECK(std::abs(static_cast<double>(dropped) - 30000.0) < 5 * 145);  // Binomial(100000, 0.3): sd ~145
  CHECK(run(2, 11).first == y);                                       // the same mask with two threads
  CHECK(run(1, 12).first != y);                                       // another seed, another mask
  // The mask follows the logical (row-major) index: a transposed view drops what its dense copy drops.
  const Tensor square = x0.narrow(0, 0, 10000).reshape({100, 100});
  Generator g1(13), g2(13);
  CHECK(equal(nn::F::dropout(square.t(), 0.3, true, g1), nn::F::dropout(square.t().contiguous(), 0.3, true, g2)));
  // Each call takes fresh counters from the generator: two draws in a row differ.
  Generator gen(11);
  CHECK_FALSE(equal(nn::F::dropout(x0, 0.3, true, gen), nn::F::dropout(x0, 0.3, true, gen)));
}

TEST_CASE("functional losses and accuracy against hand-computed values") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3}), b = from_vector(std::vector<double>{1, 0, 5}, {3});
  CHECK(nn::F::mse_loss(a, b).item() == doctest::Approx((0 + 4 + 4) / 3.0));
  Tensor logits = from_vector(std::vector<double>{0.1, 0.9, 0.8, 0.2, 0.3, 0.7}, {3, 2});
  Tensor target = from_vector(std::vector<int64_t>{1, 1, 1}, {3});
  CHECK(nn::F::accuracy(logits, target) == doctest::Approx(2.0 / 3.0));
}

TEST_CASE("Module: forward pre-hooks and hooks run around operator() in order, replace, and are removed") {
  auto fc = std::make_shared<nn::Linear>(3, 2);
  std::vector<std::string> calls;
  const int pre = fc->register_forward_pre_hook([&](nn::Module& m, const Tensor& x) {
    calls.push_back("pre:" + m.type_name());
    return x * 2.0;  // replaces the input
  });
  fc->register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    calls.push_back("pre2");
    return Tensor();  // keeps it
  });
  Tensor seen_input, seen_output;
  const int post = fc->register_forward_hook([&](nn::Module&, const Tensor& x, const Tensor& y) {
    calls.push_back("post");
    seen_input = x;
    seen_output = y;
    return y + 1.0;  // replaces the output
  });
  Tensor x = ones({4, 3});
  Tensor y = (*fc)(x);
  CHECK(calls == std::vector<std::string>{"pre:Linear", "pre2", "post"});
  CHECK(equal(seen_input, x * 2.0));
  CHECK(equal(seen_output, fc->forward(x * 2.0)));
  CHECK(equal(y, fc->forward(x * 2.0) + 1.0));
  CHECK(fc->forward(x).defined());
  CHECK(calls.size() == 3);  // forward() itself runs no hook

  CHECK(fc->remove_forward_hook(pre));
  CHECK(fc->remove_forward_hook(post));
  CHECK_FALSE(fc->remove_forward_hook(post));
  calls.clear();
  CHECK(equal((*fc)(x), fc->forward(x)));
  CHECK(calls == std::vector<std::string>{"pre2"});

  fc->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor&) -> Tensor { throw Error("[probe] the hook failed"); });
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(fc);
  CHECK_THROWS_WITH_AS((*model)(x), doctest::Contains("in module '0' (Linear)"), Error);
}

TEST_CASE("Module: a checkpointed module's own hooks fire once per call, its children's again in the recompute") {
  auto inner = std::make_shared<nn::Linear>(3, 3);
  auto block = std::make_shared<nn::Sequential>();
  block->push_back(inner);
  block->push_back(std::make_shared<nn::GELU>());
  block->checkpoint_activations();
  int block_calls = 0, inner_calls = 0, inner_recomputes = 0;
  block->register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    ++block_calls;
    return Tensor();
  });
  inner->register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    ++inner_calls;
    if (autograd::recomputing()) ++inner_recomputes;
    return Tensor();
  });
  Generator gen(2);
  Tensor x = randn({2, 3}, gen).requires_grad_();
  (*block)(x).sum().backward();
  CHECK(block_calls == 1);
  CHECK(inner_calls == 2);
  CHECK(inner_recomputes == 1);
}
