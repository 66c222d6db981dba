// The layers' kernels on CUDA against the CPU: softmax and cross-entropy, layer_norm,
// causal attention (dropout included), embedding / gather / one_hot, conv2d and max_pool2d, the fused
// SGD / Adam updates, GradScaler, and a whole GPT-mini and CNN training step. Every case runs the
// same op on CPU and GPU tensors holding the same values -- forward and, through autograd, backward --
// and compares. main() is in test_cuda_ops.cpp (skips without a device).
//
// Tolerances (f32): row kernels sum in a different order than the CPU loops and use CUDA's exp:
// rtol 1e-5 / atol 1e-6. Attention, conv and whole models go through cuBLAS / cuDNN, which add in
// other orders again: atol 1e-5 .. 1e-4 against values of size ~1. f64 cases use 1e-12.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/native/native.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

const Device kGpu = Device::cuda(0);

Tensor randn_on_cpu(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return randn(shape, gen).to(dtype);
}

void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol, const char* what) {
  REQUIRE(gpu.defined());
  REQUIRE(cpu.defined());
  CHECK(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  const Tensor back = gpu.to(Device::cpu());
  CHECK_MESSAGE(allclose(back, cpu, rtol, atol), what, ": max |cuda - cpu| = ", max_abs_diff(back, cpu), " over ",
                shape_str(cpu.shape()), " ", dtype_name(cpu.dtype()));
}

// Runs fn on CPU copies and GPU copies of `inputs` (all made leaves that require grad when floating),
// backpropagates the same random upstream gradient, and compares the outputs and every gradient.
void check_op_and_grads(const std::vector<Tensor>& inputs, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                        double rtol, double atol, const char* what) {
  std::vector<Tensor> on_cpu, on_gpu;
  for (const Tensor& t : inputs) {
    const bool differentiable = is_floating(t.dtype());
    on_cpu.push_back(differentiable ? t.clone().requires_grad_() : t);
    on_gpu.push_back(differentiable ? t.to(kGpu).requires_grad_() : t.to(kGpu));
  }
  const Tensor y_cpu = fn(on_cpu), y_gpu = fn(on_gpu);
  check_close(y_gpu, y_cpu, rtol, atol, what);
  const Tensor g = randn_on_cpu(y_cpu.shape(), 999, y_cpu.dtype());
  y_cpu.backward(g);
  y_gpu.backward(g.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!is_floating(inputs[i].dtype())) continue;
    CAPTURE(i);
    check_close(on_gpu[i].grad(), on_cpu[i].grad(), rtol, atol, what);
  }
}

// Every parameter's gradient of the GPU model against the CPU model's (same architecture and init).
void check_gradients_match(nn::Module& on_cpu, nn::Module& on_gpu, const char* what) {
  const auto named_cpu = on_cpu.named_parameters(), named_gpu = on_gpu.named_parameters();
  REQUIRE(named_cpu.size() == named_gpu.size());
  for (size_t i = 0; i < named_cpu.size(); ++i) {
    CAPTURE(named_cpu[i].first);
    check_close(named_gpu[i].second.grad(), named_cpu[i].second.grad(), 1e-4, 1e-5, what);
  }
}

}  // namespace

TEST_CASE("softmax, log_softmax and cross-entropy match the CPU, gradients included") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dtype));
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
    const Tensor x = randn_on_cpu({7, 45, 33}, 1, dtype);
    check_op_and_grads(
        {x}, [](const auto& in) { return softmax(in[0], -1); }, tol, tol, "softmax");
    check_op_and_grads(
        {x}, [](const auto& in) { return log_softmax(in[0], 1); }, tol, tol, "log_softmax (dim 1)");
    // Rows longer than a warp and a vocabulary-sized one.
    const Tensor logits = randn_on_cpu({64, 1000}, 2, dtype);
    Tensor target = from_vector(std::vector<int64_t>(64, 3), {64});
    for (int64_t i = 0; i < 64; ++i) target.data<int64_t>()[i] = (i * 37) % 1000;
    target.data<int64_t>()[5] = -100;  // ignored
    check_op_and_grads(
        {logits, target}, [](const auto& in) { return cross_entropy(in[0], in[1]); }, tol, tol, "cross_entropy");
  }
  // f16 logits compute in f32 and round once on both devices.
  const Tensor h = randn_on_cpu({16, 10}, 3, DType::f16);
  check_close(softmax(h.to(kGpu), -1), softmax(h, -1), 1e-2, 1e-3, "softmax f16");
  // A target out of range is a clear error on the GPU too, raised when the loss is read (checked by
  // the kernel: Note [Device-side index checks]).
  const Tensor bad = from_vector(std::vector<int64_t>{0, 10}, {2});
  const Tensor bad_loss = cross_entropy(randn_on_cpu({2, 10}, 4).to(kGpu), bad.to(kGpu));
  CHECK_THROWS_WITH(bad_loss.item(), doctest::Contains("target value 10 at position 1 is not a class index"));
}

TEST_CASE("layer_norm matches the CPU, forward and backward") {
  for (int64_t C : {int64_t{128}, int64_t{7}, int64_t{300}}) {
    CAPTURE(C);
    const Tensor x = randn_on_cpu({3, 50, C}, 10);
    const Tensor w = randn_on_cpu({C}, 11), b = randn_on_cpu({C}, 12);
    check_op_and_grads(
        {x, w, b}, [](const auto& in) { return layer_norm(in[0], in[1], in[2]); }, 1e-5, 1e-5, "layer_norm");
    check_op_and_grads(
        {x}, [](const auto& in) { return layer_norm(in[0]); }, 1e-5, 1e-5, "layer_norm, no affine");
  }
  const Tensor x64 = randn_on_cpu({130, 64}, 13, DType::f64);  // more rows than one dw/db chunk
  const Tensor w64 = randn_on_cpu({64}, 14, DType::f64), b64 = randn_on_cpu({64}, 15, DType::f64);
  check_op_and_grads(
      {x64, w64, b64}, [](const auto& in) { return layer_norm(in[0], in[1], in[2]); }, 1e-12, 1e-12, "layer_norm f64");
}

TEST_CASE("causal softmax and the fused attention match the CPU, with and without dropout") {
  const Tensor scores = randn_on_cpu({2, 3, 70, 70}, 20);
  check_op_and_grads(
      {scores}, [](const auto& in) { return causal_softmax(in[0], 0.25); }, 1e-5, 1e-6, "causal_softmax");
  // qkv: (B, T, 3C) with T = 70 (not a multiple of the CPU's 32-row blocks), C = 64, 4 heads.
  const Tensor qkv = randn_on_cpu({2, 70, 192}, 21);
  check_op_and_grads(
      {qkv}, [](const auto& in) { return causal_self_attention(in[0], 4); }, 1e-5, 2e-5, "causal_self_attention");
  // The dropout mask is Philox(seed, offset) on both devices: the same generator state gives the
  // same mask, so the results agree entry for entry up to rounding.
  check_op_and_grads(
      {qkv},
      [](const auto& in) {
        Generator gen(7);
        return causal_self_attention(in[0], 4, 0.3, gen);
      },
      1e-5, 2e-5, "causal_self_attention with dropout");
  const Tensor qkv64 = randn_on_cpu({1, 33, 96}, 22, DType::f64);
  check_op_and_grads(
      {qkv64}, [](const auto& in) { return causal_self_attention(in[0], 2); }, 1e-12, 1e-12,
      "causal_self_attention f64");
}

TEST_CASE("embedding, gather and one_hot match the CPU; repeated indices accumulate") {
  const Tensor weight = randn_on_cpu({50, 24}, 30);
  Tensor idx = from_vector(std::vector<int64_t>{3, 7, 3, 49, 0, 3, 7, 12}, {2, 4});  // repeats
  check_op_and_grads(
      {weight, idx}, [](const auto& in) { return embedding(in[0], in[1]); }, 1e-6, 1e-6, "embedding");
  const Tensor a = randn_on_cpu({6, 9}, 31);
  Tensor gidx = from_vector(std::vector<int64_t>{0, 8, 8, 1, 2, 3, 4, 5, 6, 7, 0, 0}, {6, 2});
  check_op_and_grads(
      {a, gidx}, [](const auto& in) { return gather(in[0], 1, in[1]); }, 1e-6, 1e-6, "gather");
  const Tensor rows = from_vector(std::vector<int64_t>{3, 5, 3, 0}, {4});
  check_op_and_grads(
      {a, rows}, [](const auto& in) { return index_select(in[0], 0, in[1]); }, 1e-6, 1e-6, "index_select dim 0");
  check_op_and_grads(
      {a, rows}, [](const auto& in) { return index_select(in[0], 1, in[1]); }, 1e-6, 1e-6, "index_select dim 1");
  const Tensor classes = from_vector(std::vector<int64_t>{2, 0, 4}, {3});
  check_close(one_hot(classes.to(kGpu), 5), one_hot(classes, 5), 0, 0, "one_hot");
  // Checked by the kernel, raised at the next copy to the host (Note [Device-side index checks]).
  const Tensor looked_up = embedding(weight.to(kGpu), from_vector(std::vector<int64_t>{50}, {1}).to(kGpu));
  CHECK_THROWS_WITH(looked_up.to(Device::cpu()), doctest::Contains("out of range"));
}

TEST_CASE("conv2d (cuDNN) and max_pool2d match the CPU, gradients included") {
  const Tensor x = randn_on_cpu({4, 3, 13, 11}, 40);
  const Tensor w = mul(randn_on_cpu({8, 3, 3, 3}, 41), 0.3), b = randn_on_cpu({8}, 42);
  for (int64_t stride : {int64_t{1}, int64_t{2}})
    for (int64_t padding : {int64_t{0}, int64_t{1}}) {
      CAPTURE(stride);
      CAPTURE(padding);
      check_op_and_grads(
          {x, w, b}, [&](const auto& in) { return conv2d(in[0], in[1], in[2], stride, padding); }, 1e-5, 1e-4,
          "conv2d");
    }
  check_op_and_grads(
      {x}, [](const auto& in) { return max_pool2d(in[0], 2); }, 0, 0, "max_pool2d 2x2");
  // Overlapping windows (stride < kernel) with padding: gradients add where windows share a maximum.
  check_op_and_grads(
      {x}, [](const auto& in) { return max_pool2d(in[0], 3, 2, 1); }, 1e-6, 1e-6, "max_pool2d 3x3 stride 2 padding 1");
  // On the GPU autograd pools through cuDNN (Note [Max pooling on cuDNN]), in the tensor's own dtype:
  // f16 maxima are exact; overlapping gradients add in f16 there and in f32 on the CPU. Distinct
  // values f16 holds exactly (k / 64, shuffled), so no window has a tie, where the two may pick
  // different elements. bf16 keeps the argmax kernel on the GPU.
  std::vector<double> distinct(static_cast<size_t>(x.numel()));
  for (size_t k = 0; k < distinct.size(); ++k) distinct[k] = static_cast<double>(k) / 64.0 - 10.0;
  std::shuffle(distinct.begin(), distinct.end(), std::mt19937(7));
  const Tensor untied = from_vector(distinct, x.shape());
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    check_op_and_grads(
        {untied.to(dtype)}, [](const auto& in) { return max_pool2d(in[0], 3, 2, 1); }, 1e-2, 1e-2,
        "max_pool2d 16-bit 3x3 stride 2 padding 1");
  }
  // A NaN wins its window on both devices; the other windows are untouched.
  Tensor with_nan = full({1, 1, 4, 4}, 1.0);
  with_nan.select(2, 1).select(2, 2).fill_(std::nan(""));
  const std::vector<double> pooled = max_pool2d(with_nan.to(kGpu), 2).to(Device::cpu()).to_vector();
  REQUIRE(pooled.size() == 4);
  CHECK(pooled[0] == 1.0);
  CHECK(std::isnan(pooled[1]));
  CHECK(pooled[2] == 1.0);
  CHECK(pooled[3] == 1.0);
  // native::max_pool2d with an argmax output keeps its own kernel: the CPU's positions exactly.
  Tensor idx_cpu, idx_gpu;
  native::max_pool2d(x, 3, 2, 1, &idx_cpu);
  native::max_pool2d(x.to(kGpu), 3, 2, 1, &idx_gpu);
  CHECK(idx_gpu.to(Device::cpu()).to_vector() == idx_cpu.to_vector());
}

TEST_CASE("dropout draws its mask on the GPU, the CPU's mask exactly, forward and backward") {
  const Tensor x = randn_on_cpu({37, 129}, 60);
  for (DType dtype : {DType::f32, DType::f16}) {
    CAPTURE(dtype_name(dtype));
    check_op_and_grads(
        {x.to(dtype)},
        [](const auto& in) {
          Generator gen(21);  // the same (seed, offset) on both devices
          gen.advance(5);
          return nn::F::dropout(in[0], 0.4, /*training=*/true, gen);
        },
        0, 0, "dropout");
  }
}

TEST_CASE("fused SGD and Adam updates match the CPU, f16 master weights included") {
  for (DType dtype : {DType::f32, DType::f16}) {
    CAPTURE(dtype_name(dtype));
    for (int which : {0, 1}) {
      const Tensor start = randn_on_cpu({1000}, 50, dtype);
      Tensor p_cpu = start.clone().requires_grad_(), p_gpu = start.to(kGpu).requires_grad_();
      std::unique_ptr<optim::Optimizer> o_cpu, o_gpu;
      if (which == 0) {
        const optim::SGDOptions opt{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3};
        o_cpu = std::make_unique<optim::SGD>(std::vector<Tensor>{p_cpu}, opt);
        o_gpu = std::make_unique<optim::SGD>(std::vector<Tensor>{p_gpu}, opt);
      } else {
        const optim::AdamWOptions opt{.lr = 1e-2, .weight_decay = 0.1};
        o_cpu = std::make_unique<optim::AdamW>(std::vector<Tensor>{p_cpu}, opt);
        o_gpu = std::make_unique<optim::AdamW>(std::vector<Tensor>{p_gpu}, opt);
      }
      for (int step = 0; step < 3; ++step) {
        const Tensor g = randn_on_cpu({1000}, 60 + step, dtype);
        p_cpu.set_grad(g.clone());
        p_gpu.set_grad(g.to(kGpu));
        o_cpu->step();
        o_gpu->step();
      }
      // Same functor, same order of operations; only CUDA's sqrt / FMA contraction may differ.
      check_close(p_gpu, p_cpu, dtype == DType::f16 ? 1e-3 : 1e-6, 1e-6, which == 0 ? "SGD" : "AdamW");
    }
  }
}

TEST_CASE("multi-tensor updates: many parameters of mixed sizes, dtypes and groups match the CPU") {
  // Note [Multi-tensor updates]: one launch covers up to a few dozen parameters, each over whole
  // blocks of 1024 elements. 130 parameters (more than one launch's list for every optimizer and
  // dtype), sizes around the block size and empty ones, f32 and f16 mixed (so one step launches per
  // dtype), two parameter groups with their own learning rates, and a parameter without a gradient
  // (left alone).
  const std::vector<int64_t> sizes = {0, 1, 7, 1023, 1024, 1025, 4096, 70000};
  for (int which : {0, 1}) {
    CAPTURE(which);
    std::vector<Tensor> cpu_a, cpu_b, gpu_a, gpu_b;
    for (int i = 0; i < 130; ++i) {
      const DType dtype = i % 3 == 0 ? DType::f16 : DType::f32;
      const Tensor start = randn_on_cpu({sizes[i % sizes.size()]}, 200 + i, dtype);
      (i % 2 ? cpu_a : cpu_b).push_back(start.clone().requires_grad_());
      (i % 2 ? gpu_a : gpu_b).push_back(start.to(kGpu).requires_grad_());
    }
    auto groups = [](std::vector<Tensor> a, std::vector<Tensor> b) {
      return std::vector<optim::ParamGroup>{{std::move(a), 0.05, 1e-3}, {std::move(b), 0.01, 0.0}};
    };
    std::unique_ptr<optim::Optimizer> o_cpu, o_gpu;
    if (which == 0) {
      const optim::SGDOptions opt{.momentum = 0.9, .nesterov = true};
      o_cpu = std::make_unique<optim::SGD>(groups(cpu_a, cpu_b), opt);
      o_gpu = std::make_unique<optim::SGD>(groups(gpu_a, gpu_b), opt);
    } else {
      o_cpu = std::make_unique<optim::AdamW>(groups(cpu_a, cpu_b), optim::AdamWOptions{});
      o_gpu = std::make_unique<optim::AdamW>(groups(gpu_a, gpu_b), optim::AdamWOptions{});
    }
    std::vector<Tensor> cpu = cpu_a, gpu = gpu_a;
    cpu.insert(cpu.end(), cpu_b.begin(), cpu_b.end());
    gpu.insert(gpu.end(), gpu_b.begin(), gpu_b.end());
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < cpu.size(); ++i) {
        if (i == 5) continue;  // 1023 elements (original index 11) that never get a gradient
        const Tensor g = randn_on_cpu(cpu[i].shape(), 1000 * step + i, cpu[i].dtype());
        cpu[i].set_grad(g.clone());
        gpu[i].set_grad(g.to(kGpu));
      }
      o_cpu->step();
      o_gpu->step();
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(i);
      check_close(gpu[i], cpu[i], cpu[i].dtype() == DType::f16 ? 1e-3 : 1e-6, 1e-6, which == 0 ? "SGD" : "AdamW");
    }
  }
}

TEST_CASE("multi-tensor updates: a parameter listed twice is updated twice, one after the other") {
  // Both updates would land in one launch and race; FusedUpdates puts the second in a later one.
  const Tensor start = randn_on_cpu({3000}, 77);
  Tensor p_cpu = start.clone().requires_grad_(), p_gpu = start.to(kGpu).requires_grad_();
  optim::SGD o_cpu(std::vector<Tensor>{p_cpu, p_cpu}, {.lr = 0.1});
  optim::SGD o_gpu(std::vector<Tensor>{p_gpu, p_gpu}, {.lr = 0.1});
  const Tensor g = randn_on_cpu({3000}, 78);
  p_cpu.set_grad(g.clone());
  p_gpu.set_grad(g.to(kGpu));
  o_cpu.step();
  o_gpu.step();
  check_close(p_gpu, p_cpu, 1e-6, 1e-6, "SGD, parameter listed twice");
}

TEST_CASE("GradScaler unscales CUDA gradients and finds an inf") {
  Tensor p = zeros({4}, {.device = kGpu}).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::GradScaler scaler({.init_scale = 4.0});
  p.set_grad(from_vector(std::vector<float>{4, 8, -4, 0}, {4}).to(kGpu));
  CHECK(scaler.step(opt));
  CHECK(p.to(Device::cpu()).to_vector() == std::vector<double>{-1, -2, 1, 0});
  scaler.update();
  p.set_grad(from_vector(std::vector<float>{1, INFINITY, 0, 0}, {4}).to(kGpu));
  CHECK_FALSE(scaler.step(opt));  // skipped
  CHECK(p.to(Device::cpu()).to_vector() == std::vector<double>{-1, -2, 1, 0});
  scaler.update();
  // f16 gradients whose sum exceeds f16's range (1000 x 400 > 65504) are finite: not an overflow.
  Tensor h = zeros({1000}, {.dtype = DType::f16, .device = kGpu}).requires_grad_();
  optim::SGD opt16({h}, {.lr = 1e-3});
  optim::GradScaler scaler16({.init_scale = 4.0});
  h.set_grad(full({1000}, 1600.0, {.dtype = DType::f16, .device = kGpu}));
  CHECK(scaler16.step(opt16));
}

TEST_CASE("a GPT-mini training step on CUDA matches the CPU") {
  nn::GPTConfig config{.vocab_size = 40, .block_size = 24, .n_layer = 2, .n_head = 2, .n_embd = 32};
  Generator g1(1), g2(1);
  auto on_cpu = std::make_shared<nn::GPT>(config, &g1);
  auto on_gpu = std::make_shared<nn::GPT>(config, &g2);
  on_gpu->to(kGpu);
  optim::AdamW o_cpu(on_cpu->parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  optim::AdamW o_gpu(on_gpu->parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  Generator data(5);
  const Tensor idx = mul(rand({3, 24}, data), 40.0).to(DType::i64);
  const Tensor targets = mul(rand({3 * 24}, data), 40.0).to(DType::i64);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    // Steady state: from the third step on, the caching allocator serves every request from blocks
    // the earlier steps freed -- no cudaMalloc / cudaFree in a step.
    if (step == 2) reset_peak_memory_stats(kGpu);
    o_cpu.zero_grad();
    o_gpu.zero_grad();
    const Tensor loss_cpu = cross_entropy(on_cpu->forward(idx).view({3 * 24, 40}), targets);
    const Tensor loss_gpu = cross_entropy(on_gpu->forward(idx.to(kGpu)).view({3 * 24, 40}), targets.to(kGpu));
    CHECK(loss_gpu.item() == doctest::Approx(loss_cpu.item()).epsilon(1e-5));
    loss_cpu.backward();
    loss_gpu.backward();
    check_gradients_match(*on_cpu, *on_gpu, "GPT gradient");
    o_cpu.step();
    o_gpu.step();
  }
  CHECK(memory_stats(kGpu).os_allocations == 0);
  CHECK(memory_stats(kGpu).os_frees == 0);
}

TEST_CASE("a CNN training step on CUDA matches the CPU") {
  auto make = [] {
    Generator gen(3);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1, .generator = &gen}),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(4 * 7 * 7, 10, nn::LinearOptions{.generator = &gen})});
  };
  auto on_cpu = make(), on_gpu = make();
  on_gpu->to(kGpu);
  const Tensor x = randn_on_cpu({8, 1, 14, 14}, 70);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  const Tensor loss_cpu = cross_entropy(on_cpu->forward(x), y);
  const Tensor loss_gpu = cross_entropy(on_gpu->forward(x.to(kGpu)), y.to(kGpu));
  CHECK(loss_gpu.item() == doctest::Approx(loss_cpu.item()).epsilon(1e-5));
  loss_cpu.backward();
  loss_gpu.backward();
  check_gradients_match(*on_cpu, *on_gpu, "CNN gradient");
}

TEST_CASE("pinned memory: asynchronous copies land intact, freed blocks wait for their copy, the loader pins") {
  const Tensor values = randn_on_cpu({256, 1024}, 80);  // 1 MiB
  const Tensor pinned = values.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK_FALSE(values.is_pinned());
  CHECK(pinned.pin_memory().is_same(pinned));  // already pinned
  CHECK(equal(pinned, values));
  Tensor on_gpu;
  {
    const Tensor staging = values.pin_memory();
    on_gpu = staging.to(kGpu, /*non_blocking=*/true);
  }  // freed while its copy may still be running: its block must not be handed out yet
  const Tensor reuse = full({256, 1024}, 7.0).pin_memory();  // same size class
  CHECK(equal(on_gpu.to(Device::cpu()), values));
  CHECK(equal(reuse, full({256, 1024}, 7.0)));
  // Strided and converting copies from pinned memory take the synchronous path and are right too.
  check_close(pinned.t().to(kGpu, true), pinned.t(), 0, 0, "transposed pinned copy");

  auto dataset = std::make_shared<data::TensorDataset>(randn_on_cpu({10, 3}, 81), zeros({10}, {.dtype = DType::i64}));
  auto sampler =
      std::make_shared<data::DistributedSampler>(10,
                                                 data::SamplerOptions{.num_replicas = 1, .rank = 0, .shuffle = false});
  data::DataLoader loader(dataset, sampler, {.batch_size = 4, .prefetch = 2, .pin_memory = true});
  int batches = 0;
  for (const data::Example& batch : loader) {
    CHECK(batch.input.is_pinned());
    CHECK(batch.target.is_pinned());
    CHECK(equal(batch.input.to(kGpu, true).to(Device::cpu()), batch.input));
    ++batches;
  }
  CHECK(batches == 3);
}

TEST_CASE("TF32 is opt-in: f32 products are f32 by default, TF32-rounded only after set_allow_tf32(true)") {
  const Tensor a = randn_on_cpu({128, 512}, 90), b = randn_on_cpu({512, 64}, 91);
  const Tensor exact = matmul(a, b);
  const double f32_error = max_abs_diff(matmul(a.to(kGpu), b.to(kGpu)).to(Device::cpu()), exact);
  set_allow_tf32(true);
  const double tf32_error = max_abs_diff(matmul(a.to(kGpu), b.to(kGpu)).to(Device::cpu()), exact);
  set_allow_tf32(false);
  CHECK(f32_error < 1e-3);   // 512 products of size ~1, f32 rounding only
  CHECK(tf32_error > 1e-3);  // 10-bit mantissas: errors of ~1e-2 on sums of size ~20
  CHECK(tf32_error < 0.5);
  CHECK(max_abs_diff(matmul(a.to(kGpu), b.to(kGpu)).to(Device::cpu()), exact) == doctest::Approx(f32_error));
}
