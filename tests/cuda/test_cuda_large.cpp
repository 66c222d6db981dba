// The GPU at sizes the small cases never reach, and its per-step synchronisations:
//   * grid-stride loops that wrap: more elements (or rows) than one grid's threads (or warps) --
//     65535 blocks x 256 threads = 16.8M elements, 65535 x 8 = 524k rows (core/cuda/launch.h);
//   * offsets past 2^31 elements, where int32 arithmetic would wrap (skipped when memory is short);
//   * cuBLAS and cuDNN on large problems (4096^3 GEMM, ResNet-sized convolutions) in f32 with TF32
//     off, f16 and bf16;
//   * a bf16 GPT-mini step against the CPU's bf16 step;
//   * index checks inside the kernels (Note [Device-side index checks]): a bad index is raised at the
//     next copy to the host and the device stays usable, and cross-entropy and embedding, forward and
//     backward, do not wait for the GPU.
// main() is in test_cuda_ops.cpp (skips without a device).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "ringgrad.h"

using namespace ringgrad;

namespace {

const Device kGpu = Device::cuda(0);
constexpr int64_t kWrapping = 20'000'000;   // elements: more than one grid's 16.8M threads
constexpr int64_t kWrappingRows = 625'000;  // rows of 32: more than one grid's 524k warps

Tensor randn_on_cpu(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return randn(shape, gen).to(dtype);
}

void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol, const char* what) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  const Tensor back = gpu.to(Device::cpu());
  CHECK_MESSAGE(allclose(back, cpu, rtol, atol), what, ": max |cuda - cpu| = ", max_abs_diff(back, cpu), " over ",
                shape_str(cpu.shape()), " ", dtype_name(cpu.dtype()));
}

size_t free_device_bytes() {
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  return free_bytes;
}

// The largest |t| (t on the CPU).
double max_abs(const Tensor& t) { return max_abs_diff(t, zeros_like(t)); }

}  // namespace

TEST_CASE("elementwise, sum, max / argmax, index_select and softmax rows wrap their grid-stride loops") {
  const Tensor x = randn_on_cpu({kWrapping}, 1);
  const Tensor xg = x.to(kGpu);
  check_close(add(mul(xg, xg), 1.5), add(mul(x, x), 1.5), 0, 0, "x * x + 1.5");
  check_close(sum(xg), sum(x), 1e-6, 1e-6, "sum of 20M");
  const Tensor rows = x.view({kWrappingRows, 32}), rows_g = xg.view({kWrappingRows, 32});
  check_close(max(rows_g, 1), max(rows, 1), 0, 0, "max over 625k rows");
  check_close(argmax(rows_g, 1), argmax(rows, 1), 0, 0, "argmax over 625k rows");
  check_close(sum(rows_g, {0}), sum(rows, {0}), 1e-6, 1e-5, "sum down 625k rows");
  check_close(softmax(rows_g, -1), softmax(rows, -1), 1e-5, 1e-6, "softmax of 625k rows");
  check_close(log_softmax(rows_g, -1), log_softmax(rows, -1), 1e-5, 1e-5, "log_softmax of 625k rows");
  // An embedding lookup whose output has 20M elements: 200k rows of 100 picked from 50k.
  const Tensor table = randn_on_cpu({50'000, 100}, 2);
  Generator g3(3);
  const Tensor picks = uniform({200'000}, 0, 49'999, g3).to(DType::i64);
  check_close(index_select(table.to(kGpu), 0, picks.to(kGpu)), index_select(table, 0, picks), 0, 0,
              "index_select, 20M elements out");
}

TEST_CASE("offsets past 2^31 elements: elementwise, sum, max / argmax and index_select reach the far end") {
  const int64_t n = (int64_t{1} << 31) + 1000;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (free_device_bytes() < 4 * bytes) {
    MESSAGE("skipped: needs ", 4 * bytes, " bytes free on the GPU");
    return;
  }
  Tensor x = zeros({n}, {.device = kGpu});
  x.select(0, n - 7).fill_(3.0);
  const Tensor y = add(x, 1.0);  // every element, the far end included
  CHECK(y.select(0, n - 7).item() == 4.0);
  CHECK(y.select(0, n - 1).item() == 1.0);
  CHECK(y.select(0, 0).item() == 1.0);
  // f32 sums accumulate in double and round once: the rounded exact total.
  CHECK(sum(y).item() == static_cast<double>(static_cast<float>(n + 3)));
  CHECK(max(y, 0).item() == 4.0);
  CHECK(argmax(y, 0).item() == static_cast<double>(n - 7));
  const Tensor far = from_vector(std::vector<int64_t>{n - 7, 0, n - 1}, {3}).to(kGpu);
  CHECK(index_select(x, 0, far).to(Device::cpu()).to_vector() == std::vector<double>{3, 0, 0});
}

TEST_CASE("a 4096^3 f32 GEMM on cuBLAS matches f64 on the CPU (TF32 off)") {
  const int64_t n = 4096;
  const Tensor a = randn_on_cpu({n, n}, 10), b = randn_on_cpu({n, n}, 11);
  const Tensor c = matmul(a.to(kGpu), b.to(kGpu)).to(Device::cpu());
  // Rows at the edges and the middle of cuBLAS's tiles, computed in f64 on the CPU.
  const Tensor rows = from_vector(std::vector<int64_t>{0, 1, 127, 128, 2047, 2048, 4094, 4095}, {8});
  const Tensor expected = matmul(index_select(a, 0, rows).to(DType::f64), b.to(DType::f64));
  const double error = max_abs_diff(index_select(c, 0, rows).to(DType::f64), expected);
  // Sums of 4096 products of size ~1 (|c| ~ 64): f32 rounding gives ~1e-4; TF32's 10-bit mantissas
  // would give ~1e-1.
  CHECK_MESSAGE(error < 1e-2, "max |cuBLAS - f64| = ", error);
}

TEST_CASE("ResNet-sized convolutions match the CPU: f32 (TF32 off), f16 and bf16, gradients included") {
  const Tensor x = randn_on_cpu({8, 64, 56, 56}, 20);
  const Tensor w = mul(randn_on_cpu({64, 64, 3, 3}, 21), 0.05), bias = randn_on_cpu({64}, 22);
  {
    Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
    Tensor xg = x.to(kGpu).requires_grad_(), wg = w.to(kGpu).requires_grad_();
    const Tensor yc = conv2d(xc, wc, bias, 1, 1), yg = conv2d(xg, wg, bias.to(kGpu), 1, 1);
    // 576 products of size ~0.05 per output: f32 errors ~1e-6, TF32's ~1e-3.
    check_close(yg, yc, 1e-4, 1e-4, "conv2d 3x3 f32");
    const Tensor g = randn_on_cpu(yc.shape(), 23);
    yc.backward(g);
    yg.backward(g.to(kGpu));
    check_close(xg.grad(), xc.grad(), 1e-4, 1e-4, "conv2d 3x3 f32 dx");
    // dW sums 8 x 56 x 56 = 25088 products of size ~1 (|dW| ~ 160).
    check_close(wg.grad(), wc.grad(), 1e-4, 1e-2, "conv2d 3x3 f32 dW");
  }
  const Tensor shortcut_w = mul(randn_on_cpu({128, 64, 1, 1}, 24), 0.1);
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    // The CPU reference: the same rounded inputs in f32. The GPU adds in f32 and rounds its output
    // once to the dtype (half an ulp: 2^-11 for f16, 2^-8 for bf16, relative).
    const double rtol = dtype == DType::f16 ? 2e-3 : 1e-2;
    const Tensor xh = x.to(dtype), wh = w.to(dtype), sh = shortcut_w.to(dtype);
    const Tensor y = conv2d(xh.to(kGpu), wh.to(kGpu), Tensor(), 1, 1);
    CHECK(y.dtype() == dtype);
    check_close(y.to(DType::f32), conv2d(xh.to(DType::f32), wh.to(DType::f32), Tensor(), 1, 1), rtol, 1e-2,
                "conv2d 3x3 16-bit");
    const Tensor down = conv2d(xh.to(kGpu), sh.to(kGpu), Tensor(), 2, 0);  // a strided 1x1 shortcut
    check_close(down.to(DType::f32), conv2d(xh.to(DType::f32), sh.to(DType::f32), Tensor(), 2, 0), rtol, 1e-2,
                "conv2d 1x1 stride 2 16-bit");
  }
}

TEST_CASE("a bf16 GPT-mini training step on CUDA matches the CPU's bf16 step") {
  nn::GPTConfig config{.vocab_size = 64, .block_size = 64, .n_layer = 2, .n_head = 4, .n_embd = 128};
  Generator g1(1), g2(1);
  auto on_cpu = std::make_shared<nn::GPT>(config, &g1);
  auto on_gpu = std::make_shared<nn::GPT>(config, &g2);
  on_cpu->to(DType::bf16);
  on_gpu->to(DType::bf16);
  on_gpu->to(kGpu);
  optim::AdamW o_cpu(on_cpu->parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  optim::AdamW o_gpu(on_gpu->parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  Generator data(5);
  const Tensor idx = mul(rand({4, 64}, data), 64.0).to(DType::i64);
  const Tensor targets = mul(rand({4 * 64}, data), 64.0).to(DType::i64);
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    o_cpu.zero_grad();
    o_gpu.zero_grad();
    const Tensor loss_cpu = cross_entropy(on_cpu->forward(idx).view({4 * 64, 64}), targets);
    const Tensor loss_gpu = cross_entropy(on_gpu->forward(idx.to(kGpu)).view({4 * 64, 64}), targets.to(kGpu));
    CHECK(loss_gpu.dtype() == DType::bf16);
    // Both round every activation to bf16 (8 bits), in different summation orders.
    CHECK(loss_gpu.item() == doctest::Approx(loss_cpu.item()).epsilon(2e-2));
    loss_cpu.backward();
    loss_gpu.backward();
    const auto named_cpu = on_cpu->named_parameters(), named_gpu = on_gpu->named_parameters();
    REQUIRE(named_cpu.size() == named_gpu.size());
    for (size_t i = 0; i < named_cpu.size(); ++i) {
      CAPTURE(named_cpu[i].first);
      const Tensor gc = named_cpu[i].second.grad().to(DType::f32);
      const Tensor gg = named_gpu[i].second.grad().to(Device::cpu()).to(DType::f32);
      const double scale = max_abs(gc);
      CHECK_MESSAGE(max_abs_diff(gg, gc) <= 0.1 * scale + 1e-4, "max |cuda - cpu| = ", max_abs_diff(gg, gc),
                    " against max |grad| = ", scale);
    }
    o_cpu.step();
    o_gpu.step();
  }
}

TEST_CASE("index checks on the GPU: a bad index is raised at the next copy to the host, and the device stays usable") {
  const Tensor weight = randn_on_cpu({50, 24}, 30);
  const Tensor wg = weight.to(kGpu);
  const Tensor bad = from_vector(std::vector<int64_t>{3, 50, 7}, {3}).to(kGpu);
  const Tensor looked_up = embedding(wg, bad);  // launched; nothing checked on the host
  CHECK_THROWS_WITH(looked_up.to(Device::cpu()),
                    doctest::Contains("[index_select] index value 50 at position 1 is out of range [0, 50)"));
  // Reported once; the good rows were looked up, the bad one is zeros; later ops run normally.
  const std::vector<double> rows = looked_up.to(Device::cpu()).to_vector();
  CHECK(std::vector<double>(rows.begin() + 24, rows.begin() + 48) == std::vector<double>(24, 0.0));
  const Tensor good = from_vector(std::vector<int64_t>{3, 49, 0}, {3});
  check_close(embedding(wg, good.to(kGpu)), embedding(weight, good), 0, 0, "embedding after a reported error");

  const Tensor logits = randn_on_cpu({4, 10}, 31).to(kGpu);
  const Tensor loss = cross_entropy(logits, from_vector(std::vector<int64_t>{0, 10, -100, 2}, {4}).to(kGpu));
  CHECK_THROWS_WITH(loss.item(), doctest::Contains("[cross_entropy] target value 10 at position 1 is not a class index "
                                                   "in [0, 10)"));
  const Tensor gidx = from_vector(std::vector<int64_t>{0, -1}, {1, 2}).to(kGpu);
  const Tensor gathered = gather(logits, 1, gidx);
  CHECK_THROWS_WITH(gathered.to(Device::cpu()), doctest::Contains("[gather] index value -1 at position 1"));
  const Tensor hot = one_hot(from_vector(std::vector<int64_t>{1, 5}, {2}).to(kGpu), 5);
  CHECK_THROWS_WITH(hot.to(Device::cpu()), doctest::Contains("[one_hot] index value 5 at position 1"));
  CHECK(equal(one_hot(from_vector(std::vector<int64_t>{1, 4}, {2}).to(kGpu), 5).to(Device::cpu()),
              one_hot(from_vector(std::vector<int64_t>{1, 4}, {2}), 5)));
}

TEST_CASE("cross-entropy and embedding, forward and backward, do not wait for the GPU") {
  // The default stream is held by a host function until `release` (or 20 s); if any op below waited
  // for the GPU, it would return only after that, with `gave_up` set.
  const Tensor weight = randn_on_cpu({100, 32}, 40).to(kGpu).requires_grad_();
  const Tensor ids = from_vector(std::vector<int64_t>{1, 5, 99, 5, 0, 42}, {6}).to(kGpu);
  const Tensor targets = from_vector(std::vector<int64_t>{3, -100, 31, 0, 7, 1}, {6}).to(kGpu);
  auto step = [&] {
    const Tensor loss = cross_entropy(embedding(weight, ids), targets);
    loss.backward();
    return loss;
  };
  const double expected = step().item();  // warms the caches: no cudaMalloc below
  weight.grad().zero_();
  struct Hold {
    std::atomic<bool> release{false}, gave_up{false};
  } hold;
  REQUIRE(cudaLaunchHostFunc(
              cudaStreamLegacy,
              [](void* p) {
                auto* h = static_cast<Hold*>(p);
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
                while (!h->release) {
                  if (std::chrono::steady_clock::now() > until) {
                    h->gave_up = true;
                    return;
                  }
                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
              },
              &hold) == cudaSuccess);
  const Tensor loss = step();
  const bool waited = hold.gave_up;
  hold.release = true;
  CHECK_FALSE(waited);
  CHECK(loss.item() == expected);
}
