// examples/gpt_mini/activation_model.h, the model of what a GPT forward keeps for its backward that
// --memory-report prints, against the allocator: allocated after a forward and its loss, less before
// them. f32, f16 and bf16; fused attention and plain; blocks checkpointed or not. The model counts
// each saved tensor as the allocator rounds it, so it should be exact; the test allows 1% (the
// memory report's target is 10%) for incidental allocations such as the loss's scalar.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../core/test_util.h"
#include "examples/gpt_mini/activation_model.h"
#include "ringgrad.h"

using namespace ringgrad;

TEST_CASE("GPT activation model: the saved tensors it counts are what the allocator measures") {
  nn::GPTConfig config;
  config.vocab_size = 40, config.block_size = 64, config.n_layer = 2, config.n_head = 2, config.n_embd = 64;
  const int64_t B = 4, T = config.block_size;
  std::vector<int64_t> tokens(static_cast<size_t>(B * T)), next(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int64_t>(i * 7 % 40), next[i] = (tokens[i] + 1) % 40;
  const Tensor idx = from_vector(tokens, {B, T}, {.dtype = DType::i64});
  const Tensor target = from_vector(next, {B * T}, {.dtype = DType::i64});
  const Device cpu = Device::cpu();
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const bool checkpointed : {false, true}) {
      for (const bool fusion : {true, false}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(checkpointed);
        CAPTURE(fusion);
        rgtest::FusionScope fusion_scope(fusion);
        Generator gen(3);
        nn::GPT model(config, &gen);
        if (checkpointed)
          for (const auto& block : *model.h) block->checkpoint_activations();
        model.to(dtype);
        const size_t before = memory_stats(cpu).allocated;
        Tensor logits = model.forward(idx).to(DType::f32);
        Tensor loss = cross_entropy(logits.reshape({B * T, -1}), target);
        const double measured = static_cast<double>(memory_stats(cpu).allocated - before);
        const double modelled =
            static_cast<double>(examples::modelled_activation_bytes(config, B, dtype, cpu, checkpointed));
        CAPTURE(measured);
        CAPTURE(modelled);
        CHECK(std::abs(measured - modelled) <= 0.01 * modelled);
        loss.backward();  // the graph the model describes is the one backward runs through
      }
    }
  }
}
