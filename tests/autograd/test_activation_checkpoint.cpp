// autograd::checkpoint and Module::checkpoint_activations against the same model run without them:
// gradients bit-equal (the recompute runs the same kernels in the same order), dropout replayed,
// hooks fired once, activations freed, and the misuses refused.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "autograd/activation_checkpoint.h"
#include "ringgrad.h"

using namespace ringgrad;
using autograd::TensorList;

namespace {

// Every parameter's gradient of `model` (undefined ones as empty tensors).
std::vector<Tensor> gradients(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return out;
}

void check_bit_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a[i].defined() == b[i].defined());
    if (a[i].defined()) CHECK(equal(a[i], b[i]));
  }
}

nn::GPTConfig tiny_gpt(double dropout) {
  return {.vocab_size = 13, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 16, .dropout = dropout};
}

// Loss of a tiny GPT on fixed tokens; the model's blocks checkpointed or not.
Tensor gpt_loss(nn::GPT& model) {
  std::vector<int64_t> x, y;
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t t = 0; t < 8; ++t) {
      x.push_back((s * 5 + t * 3) % 13);
      y.push_back((s * 5 + t * 3 + 1) % 13);
    }
  Tensor idx = from_vector(x, {3, 8}, {.dtype = DType::i64});
  Tensor targets = from_vector(y, {24}, {.dtype = DType::i64});
  return cross_entropy(model(idx).reshape({24, 13}), targets);
}

struct GptRun {
  std::vector<Tensor> grads;
  double loss;
  uint64_t dropout_offset_after;  // where the dropout stream stands once backward is done
};

GptRun run_gpt(bool checkpointed, double dropout) {
  Generator init(3);
  nn::GPT model(tiny_gpt(dropout), &init);
  if (checkpointed)
    for (const auto& block : *model.h) block->checkpoint_activations();
  manual_seed(77);
  Tensor loss = gpt_loss(model);
  loss.backward();
  return {gradients(model), loss.item(), dropout_generator().offset()};
}

}  // namespace

TEST_CASE("checkpoint: a GPT's gradients are bit-equal with and without checkpointed blocks, dropout on") {
  for (double dropout : {0.0, 0.2}) {
    CAPTURE(dropout);
    const GptRun plain = run_gpt(false, dropout), checkpointed = run_gpt(true, dropout);
    CHECK(plain.loss == checkpointed.loss);
    check_bit_equal(plain.grads, checkpointed.grads);
    // The recompute replays the forward's draws and then puts the stream back where it was.
    CHECK(plain.dropout_offset_after == checkpointed.dropout_offset_after);
    if (dropout > 0) CHECK(checkpointed.dropout_offset_after > 0);
  }
}

TEST_CASE("checkpoint: the block's activations are freed after its forward and the gradients are unchanged") {
  // x: (64, 256) through 4 layers of 256 -> 256 with GELU: each layer saves its input and output.
  Generator gen(5);
  auto model = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 4; ++i) {
    model->push_back(std::make_shared<nn::Linear>(256, 256, nn::LinearOptions{.generator = &gen}));
    model->push_back(std::make_shared<nn::GELU>());
  }
  Tensor x = randn({64, 256}, gen);
  auto held_after_forward = [&](bool checkpointed) {
    model->checkpoint_activations(checkpointed);
    model->zero_grad();
    const size_t before = memory_stats(Device::cpu()).allocated;
    Tensor loss = (*model)(x).pow(2).mean();
    const size_t held = memory_stats(Device::cpu()).allocated - before;
    loss.backward();
    return std::make_pair(held, gradients(*model));
  };
  const auto [plain_bytes, plain_grads] = held_after_forward(false);
  const auto [checkpointed_bytes, checkpointed_grads] = held_after_forward(true);
  check_bit_equal(plain_grads, checkpointed_grads);
  // Without: 8 saved (64, 256) f32 activations (64 KiB each) at least. With: the output and the loss.
  CHECK(plain_bytes >= 8 * 64 * 256 * 4);
  CHECK(checkpointed_bytes <= 2 * 64 * 256 * 4 + 4096);
}

TEST_CASE("checkpoint: inputs that do not require grad still give the parameters their gradients") {
  Generator gen(8);
  auto fc1 = std::make_shared<nn::Linear>(6, 5, nn::LinearOptions{.generator = &gen}),
       fc2 = std::make_shared<nn::Linear>(5, 3, nn::LinearOptions{.generator = &gen});
  Tensor x = randn({4, 6}, gen);  // data: no gradient
  auto block = [&](const Tensor& in) { return (*fc2)(gelu((*fc1)(in))); };
  block(x).sum().backward();
  const std::vector<Tensor> want = {fc1->weight.grad().clone(), fc1->bias.grad().clone(), fc2->weight.grad().clone(),
                                    fc2->bias.grad().clone()};
  for (auto* p : {&fc1->weight, &fc1->bias, &fc2->weight, &fc2->bias}) p->set_grad(Tensor());
  Tensor y = autograd::checkpoint(block, x);
  CHECK(y.requires_grad());
  y.sum().backward();
  check_bit_equal(want, {fc1->weight.grad(), fc1->bias.grad(), fc2->weight.grad(), fc2->bias.grad()});
}

TEST_CASE("checkpoint: a weight used inside and outside the block, and a tensor the block captures, sum once") {
  // Tied use: w inside the block and in the loss outside it; `scale` is a non-leaf made before the
  // block and captured by its closure, so its gradient must leave the block to reach `s`.
  Generator gen(9);
  Tensor w = randn({4, 4}, gen).requires_grad_(), s = randn({4}, gen).requires_grad_();
  Tensor x = randn({3, 4}, gen).requires_grad_();
  int hook_calls = 0;
  w.register_post_accumulate_grad_hook([&](Tensor&) { ++hook_calls; });
  auto run = [&](bool checkpointed) {
    w.set_grad(Tensor());
    s.set_grad(Tensor());
    x.set_grad(Tensor());
    hook_calls = 0;
    Tensor scale = s.exp();
    auto block = [w, scale](const Tensor& in) { return linear(in, w).tanh() * scale; };
    Tensor h = checkpointed ? autograd::checkpoint(block, x) : block(x);
    Tensor loss = (h.matmul(w) * h).sum();
    loss.backward();
    CHECK(hook_calls == 1);  // once per backward, although two paths reach w
    return std::vector<Tensor>{w.grad().clone(), s.grad().clone(), x.grad().clone()};
  };
  check_bit_equal(run(false), run(true));
}

TEST_CASE("checkpoint: nested checkpoints are supported and change nothing") {
  Generator gen(10);
  auto inner = std::make_shared<nn::Sequential>(), outer = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::Linear>(8, 8, nn::LinearOptions{.generator = &gen}));
  inner->push_back(std::make_shared<nn::GELU>());
  outer->push_back(std::make_shared<nn::Linear>(8, 8, nn::LinearOptions{.generator = &gen}));
  outer->push_back(inner);
  outer->push_back(std::make_shared<nn::Dropout>(0.3));
  outer->push_back(std::make_shared<nn::Linear>(8, 2, nn::LinearOptions{.generator = &gen}));
  Tensor x = randn({5, 8}, gen).requires_grad_();
  auto run = [&](bool checkpointed) {
    outer->checkpoint_activations(checkpointed);
    inner->checkpoint_activations(checkpointed);
    outer->zero_grad();
    x.set_grad(Tensor());
    manual_seed(4);
    (*outer)(x).pow(2).sum().backward();
    std::vector<Tensor> g = gradients(*outer);
    g.push_back(x.grad().clone());
    return g;
  };
  check_bit_equal(run(false), run(true));
}

TEST_CASE("checkpoint: retain_graph recomputes again; without it a second backward is refused") {
  Generator gen(11);
  auto fc = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.generator = &gen});
  fc->checkpoint_activations();
  Tensor x = randn({2, 4}, gen).requires_grad_();
  Tensor y = (*fc)(x);  // its grad_fn is the checkpoint's node
  Tensor dy = randn({2, 4}, gen);
  y.backward(dy, /*retain_graph=*/true);
  const Tensor once = fc->weight.grad().clone();
  y.backward(dy);
  CHECK(allclose(fc->weight.grad(), once * 2.0, 1e-6, 1e-7));
  CHECK_THROWS_WITH_AS(y.backward(dy),
                       doctest::Contains("[checkpoint] trying to backward through a checkpointed block a second time"),
                       Error);
}

TEST_CASE("checkpoint: a block that computes something else on recompute is refused, naming what differs") {
  Generator gen(12);
  Tensor a = randn({3, 3}, gen).requires_grad_(), b = randn({3, 3}, gen).requires_grad_();
  Tensor x = randn({2, 3}, gen);
  int calls = 0;
  auto fickle = [&](const Tensor& in) { return linear(in, ++calls == 1 ? a : b); };
  CHECK_THROWS_WITH_AS(autograd::checkpoint(fickle, x).sum().backward(),
                       doctest::Contains("the recomputed block reached other parameters or outer tensors"), Error);
  calls = 0;
  auto reshaping = [&](const Tensor& in) { return ++calls == 1 ? linear(in, a) : linear(in, a).sum({0}); };
  CHECK_THROWS_WITH_AS(autograd::checkpoint(reshaping, x).sum().backward(),
                       doctest::Contains("the recomputed block returned [(3,) f32"), Error);
}

TEST_CASE("checkpoint: with grad mode off the block just runs, and records nothing") {
  Generator gen(13);
  auto fc = std::make_shared<nn::Linear>(4, 4, nn::LinearOptions{.generator = &gen});
  fc->checkpoint_activations();
  Tensor x = randn({2, 4}, gen);
  NoGradGuard no_grad;
  Tensor y = (*fc)(x);
  CHECK_FALSE(y.requires_grad());
  CHECK(equal(y, linear(x, fc->weight, fc->bias)));
}

TEST_CASE("checkpoint: a Dropout with a generator of its own is replayed too, and its stream put back") {
  Generator gen(14);
  auto fc = std::make_shared<nn::Linear>(16, 16, nn::LinearOptions{.generator = &gen});
  auto own = std::make_shared<Generator>(99);
  auto block = std::make_shared<nn::Sequential>();
  block->push_back(fc);
  block->push_back(std::make_shared<nn::Dropout>(0.5, own));
  block->push_back(std::make_shared<nn::GELU>());
  Tensor x = randn({8, 16}, gen).requires_grad_();
  auto run = [&](bool checkpointed) {
    block->checkpoint_activations(checkpointed);
    block->zero_grad();
    x.set_grad(Tensor());
    *own = Generator(99);
    (*block)(x).pow(2).sum().backward();
    std::vector<Tensor> g = gradients(*block);
    g.push_back(x.grad().clone());
    g.push_back(full({1}, static_cast<double>(own->offset())));  // where the stream stands after
    return g;
  };
  check_bit_equal(run(false), run(true));
}

TEST_CASE("checkpoint: BatchNorm2d's running statistics are updated once, not again in the recompute") {
  Generator gen(15);
  auto conv = std::make_shared<nn::Conv2d>(2, 4, 3, nn::Conv2dOptions{.padding = 1, .generator = &gen});
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  auto block = std::make_shared<nn::Sequential>();
  block->push_back(conv);
  block->push_back(bn);
  block->push_back(std::make_shared<nn::ReLU>());
  Tensor x = randn({3, 2, 5, 5}, gen).requires_grad_();
  auto run = [&](bool checkpointed) {
    block->checkpoint_activations(checkpointed);
    block->zero_grad();
    x.set_grad(Tensor());
    bn->running_mean.copy_(zeros({4}));
    bn->running_var.copy_(ones({4}));
    bn->num_batches_tracked.copy_(zeros({}, {.dtype = DType::i64}));
    (*block)(x).pow(2).sum().backward();
    std::vector<Tensor> g = gradients(*block);
    g.push_back(x.grad().clone());
    g.push_back(bn->running_mean.clone());
    g.push_back(bn->running_var.clone());
    g.push_back(bn->num_batches_tracked.clone());
    return g;
  };
  const std::vector<Tensor> plain = run(false), checkpointed = run(true);
  check_bit_equal(plain, checkpointed);
  CHECK(checkpointed.back().item() == 1);  // one forward, one update
}

TEST_CASE("checkpoint: an input returned unchanged, an input left unused, and an undefined output") {
  Generator gen(16);
  Tensor w = randn({3, 3}, gen).requires_grad_();
  Tensor a = randn({2, 3}, gen).requires_grad_(), b = randn({2, 3}, gen).requires_grad_();
  Tensor c = randn({2, 3}, gen).requires_grad_();
  // Output 1 is input 1 itself; input 2 is never used.
  auto block = [w](const TensorList& in) { return TensorList{linear(in[0], w).tanh(), in[1]}; };
  auto run = [&](bool checkpointed) {
    for (Tensor* t : {&w, &a, &b, &c}) t->set_grad(Tensor());
    const TensorList out = checkpointed ? autograd::checkpoint(block, {a, b, c}) : block({a, b, c});
    ((out[0] * out[1]).sum() + out[1].sum()).backward();
    CHECK_FALSE(c.grad().defined());
    return std::vector<Tensor>{w.grad().clone(), a.grad().clone(), b.grad().clone()};
  };
  check_bit_equal(run(false), run(true));
  auto undefined = [](const TensorList& in) { return TensorList{in[0] * 2.0, Tensor()}; };
  CHECK_THROWS_WITH_AS(autograd::checkpoint(undefined, {a}),
                       doctest::Contains("returned an undefined tensor as output 1 of 2"), Error);
}
