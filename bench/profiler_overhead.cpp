// profiler_overhead: what the per-op profiler (core/profiler.h) costs a training step, off and on.
// One process, one thread, synthetic batches of W2's CNN (batch 64) and W3's GPT-mini (16 x 128).
//
//   build/bench/profiler_overhead [--steps N] [--scopes N]
//
// Off, each op's OpScope is its arguments (sizes multiplied) and one relaxed atomic load with a
// branch: the benchmark times --scopes disabled scopes alone for the nanoseconds of one, counts the
// ops of a step with the profiler on, and prints their product as a share of the step. It also
// times the steps themselves off and on (medians of --steps, interleaved), so the share can be
// checked against what a step shows -- within the machine's noise, which is larger.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "examples/common/command_line.h"
#include "examples/common/flags.h"
#include "examples/mnist/models.h"
#include "ringgrad.h"

using namespace ringgrad;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Nanoseconds of one OpScope while the profiler is off: with constant arguments (the load and the
// branch alone), and with its FLOP count computed from the operands' sizes as mm's is (2 M K N).
struct ScopeCost {
  double bare_ns, with_sizes_ns;
};
ScopeCost disabled_scope_ns(int64_t scopes, const Tensor& a, const Tensor& b) {
  profiler::disable();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < scopes; ++i) {
    profiler::OpScope op("off", 1.0, 1.0);
    asm volatile("" ::: "memory");  // one scope per iteration: the load is not hoisted out
  }
  const double bare = ms_since(t0) * 1e6 / static_cast<double>(scopes);
  t0 = Clock::now();
  for (int64_t i = 0; i < scopes; ++i) {
    profiler::OpScope op("off", 2.0 * static_cast<double>(a.size(0)) * static_cast<double>(a.size(1)) *
                                    static_cast<double>(b.size(1)));
    asm volatile("" ::: "memory");  // nor are the sizes
  }
  return {bare, ms_since(t0) * 1e6 / static_cast<double>(scopes)};
}

struct Workload {
  std::string name;
  std::function<void()> step;
};

void measure(const Workload& w, int steps, double scope_ns) {
  for (int i = 0; i < 2; ++i) w.step();  // warm the allocator's caches
  std::vector<double> off_ms, on_ms;
  profiler::reset();
  for (int i = 0; i < steps; ++i) {  // interleaved, so that drift falls on both alike
    auto t0 = Clock::now();
    w.step();
    off_ms.push_back(ms_since(t0));
    profiler::enable();
    t0 = Clock::now();
    w.step();
    on_ms.push_back(ms_since(t0));
    profiler::disable();
  }
  int64_t calls = 0;
  for (const profiler::OpStats& row : profiler::op_table()) calls += row.calls;
  const double ops_per_step = static_cast<double>(calls) / steps;
  const double off = median(off_ms), on = median(on_ms);
  const double off_share = ops_per_step * scope_ns * 1e-6 / off;
  std::printf(
      "%-8s step %8.2f ms off, %8.2f ms on (%+.1f%%); %6.0f ops per step x %.2f ns off = %.5f ms, %.4f%% "
      "of the step\n",
      w.name.c_str(), off, on, 100.0 * (on - off) / off, ops_per_step, scope_ns, ops_per_step * scope_ns * 1e-6,
      100.0 * off_share);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  int64_t scopes = 100'000'000;
  CLI::App app{"What the per-op profiler costs a training step of W2 and W3, off and on (one thread)"};
  app.add_option("--steps", steps, "timed steps per setting (medians)")->check(flags::int_in(1, 100'000));
  app.add_option("--scopes", scopes, "disabled scopes timed for the cost of one")
      ->check(flags::int_in(1, 10'000'000'000));
  if (const auto code = flags::parse_command_line(app, argc, argv)) return *code;
  set_num_threads(1);

  Generator gen(1);
  // W2: the CNN on a batch of 64 28x28 images, SGD with momentum.
  auto cnn = mnist::make_model("cnn");
  optim::SGD sgd(cnn->parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor images = randn({64, 1, 28, 28}, gen);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 64; ++i) labels.push_back(i % 10);
  const Tensor y2 = from_vector(labels, {64}, {.dtype = DType::i64});
  const Workload w2{"W2 cnn", [&] {
                      sgd.zero_grad();
                      nn::F::cross_entropy(cnn->forward(images), y2).backward();
                      sgd.step();
                    }};

  // W3: GPT-mini (4 blocks, 4 heads, 128 wide), 16 sequences of 128, AdamW.
  const int64_t B = 16, T = 128, V = 114;
  auto gpt = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab_size = V, .block_size = T, .n_layer = 4, .n_head = 4, .n_embd = 128}, &gen);
  optim::AdamW adamw(gpt->parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  std::vector<int64_t> ids, targets;
  for (int64_t i = 0; i < B * T; ++i) {
    ids.push_back((i * 7) % V);
    targets.push_back((i * 5) % V);
  }
  const Tensor x3 = from_vector(ids, {B, T}, {.dtype = DType::i64});
  const Tensor y3 = from_vector(targets, {B * T}, {.dtype = DType::i64});
  const Workload w3{"W3 gpt", [&] {
                      adamw.zero_grad();
                      cross_entropy(gpt->forward(x3).reshape({B * T, V}), y3).backward();
                      adamw.step();
                    }};

  const ScopeCost cost = disabled_scope_ns(scopes, images.reshape({64, -1}), images.reshape({-1, 64}));
  const double scope_ns = cost.with_sizes_ns;
  std::printf("a disabled OpScope: %.3f ns with mm's FLOP count from the sizes, %.3f ns with constants (%lld timed)\n",
              cost.with_sizes_ns, cost.bare_ns, static_cast<long long>(scopes));
  measure(w2, steps, scope_ns);
  measure(w3, steps, scope_ns);
  return 0;
}
