// memory_trace: where one GPT-mini training step's memory peak is, node by node. One process, W3's
// model (4 blocks, 4 heads, 128 wide, block 128, batch 16, vocabulary 114: Ψ = 824,320), one
// forward and backward after a warm-up step. Prints the allocator's peak during the forward, then for
// every backward node the allocator's peak while it ran and what it left allocated, in MiB above
// what was allocated before the step (the model and the batch).
//
//   build/bench/memory_trace [--precision fp32|fp16|bf16] [--checkpoint-activations 0|1] [--nodes N]
//
// docs/zero.md uses it to say what the peak of a checkpointed step is made of.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "examples/common/command_line.h"
#include "examples/common/flags.h"
#include "ringgrad.h"

using namespace ringgrad;

int main(int argc, char** argv) {
  std::string precision = "fp16";
  bool checkpoint = true;
  size_t nodes = 30;
  int checkpoint_flag = 1;
  CLI::App app{"Where one GPT-mini training step's memory peak is, backward node by node"};
  app.add_option("--precision", precision, "the parameters' dtype")->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--checkpoint-activations", checkpoint_flag, "1: recompute each block's activations in backward")
      ->check(flags::int_in(0, 1));
  app.add_option("--nodes", nodes, "backward nodes to print")->check(flags::int_in(0, 1'000'000));
  if (const auto code = flags::parse_command_line(app, argc, argv)) return *code;
  checkpoint = checkpoint_flag != 0;
  const DType dtype = precision == "fp16" ? DType::f16 : precision == "bf16" ? DType::bf16 : DType::f32;
  set_num_threads(1);
  const int64_t B = 16, T = 128, V = 114;
  Generator gen(1);
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab_size = V, .block_size = T, .n_layer = 4, .n_head = 4, .n_embd = 128}, &gen);
  if (checkpoint)
    for (const auto& block : *model->h) block->checkpoint_activations();
  model->to(dtype);
  std::vector<int64_t> ids, targets;
  for (int64_t i = 0; i < B * T; ++i) {
    ids.push_back((i * 7) % V);
    targets.push_back((i * 5) % V);
  }
  const Tensor x = from_vector(ids, {B, T}, {.dtype = DType::i64});
  const Tensor y = from_vector(targets, {B * T}, {.dtype = DType::i64});
  const Device cpu = Device::cpu();
  auto mib = [](size_t bytes, size_t base) {
    return (static_cast<double>(bytes) - static_cast<double>(base)) / 1048576.0;
  };

  for (int step = 0; step < 2; ++step) {  // the first warms the allocator's caches
    for (Tensor& p : model->parameters()) p.set_grad(Tensor());
    const size_t base = memory_stats(cpu).allocated;
    reset_peak_memory_stats(cpu);
    Tensor loss = cross_entropy((*model)(x).to(DType::f32).reshape({B * T, V}), y);
    const size_t forward_peak = memory_stats(cpu).peak_allocated, after_forward = memory_stats(cpu).allocated;
    reset_peak_memory_stats(cpu);
    struct Row {
      std::string node;
      double peak, left;
    };
    std::vector<Row> rows;
    autograd::set_node_observer([&](const std::string& name, double, double) {
      const MemoryStats s = memory_stats(cpu);
      rows.push_back({name, mib(s.peak_allocated, base), mib(s.allocated, base)});
      reset_peak_memory_stats(cpu);
    });
    loss.backward();
    autograd::set_node_observer(nullptr);
    if (step == 0) continue;
    std::printf(
        "GPT-mini %s, batch %lld x %lld, checkpointed blocks: %s; MiB above the %.2f MiB allocated before the step\n",
        precision.c_str(), (long long)B, (long long)T, checkpoint ? "yes" : "no", base / 1048576.0);
    std::printf("forward: peak %.2f, left for backward %.2f\n", mib(forward_peak, base), mib(after_forward, base));
    double worst = 0;
    std::string worst_node;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].peak > worst) {
        worst = rows[i].peak;
        worst_node = str_cat(rows[i].node, " (backward node ", i, ")");
      }
      if (i < nodes)
        std::printf("  %3zu %-24s peak %6.2f  left %6.2f\n", i, rows[i].node.c_str(), rows[i].peak, rows[i].left);
    }
    std::printf("backward: peak %.2f inside %s; %zu nodes\n", worst, worst_node.c_str(), rows.size());
  }
  return 0;
}
