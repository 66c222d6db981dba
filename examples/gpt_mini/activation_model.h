// What a GPT forward keeps for its backward, tensor by tensor: the model that --memory-report sets
// beside the allocator's measurement, and a map of where a transformer's activation memory goes.
//
// Per block (B sequences of T tokens, width C, H heads; `es` bytes per activation element, the
// parameters' dtype; layer norm and attention keep their statistics in f32):
//   x              the block's input: ln_1's input and the residual's          (B, T, C)
//   mean, rstd     ln_1's statistics                                          2 x (B, T) f32
//   ln_1(x)        c_attn's input                                             (B, T, C)
//   qkv            attention's input                                          (B, T, 3C)
//   attention      fused (Note [Fused causal attention]): each row's log-sum-exp (B, H, T) f32,
//                  and y in f32 when y itself is not f32; plain: the probabilities (B, H, T, T) f32
//   y              the attention's output, c_proj's input                     (B, T, C)
//   x + attn       ln_2's input                                               (B, T, C)
//   mean, rstd     ln_2's statistics                                          2 x (B, T) f32
//   ln_2(x1)       c_fc's input                                               (B, T, C)
//   h              GELU's input                                               (B, T, 4C)
//   GELU(h)        the MLP's c_proj's input                                   (B, T, 4C)
// A checkpointed block keeps only x (Note [Recompute inside backward]). Outside the blocks: ln_f's
// input, statistics and output (the head's input), and the f32 logits cross_entropy keeps.
// Everything else the forward makes (c_proj's outputs, the f16 logits) is freed before backward.
// Each tensor is counted as the allocator rounds it (allocation_size_class), so the model predicts
// the allocator's bytes, not only the tensors'. Dropout (none in gpt_mini) is left out.
#pragma once

#include <cstdint>

#include "ringgrad.h"

namespace ringgrad::examples {

inline size_t modelled_activation_bytes(const nn::GPTConfig& g, int64_t batch, DType dtype, Device device,
                                        bool checkpointed) {
  const int64_t B = batch, T = g.block_size, C = g.n_embd, H = g.n_head, V = g.vocab_size, BT = B * T;
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  const int64_t stat = dtype == DType::f64 ? 8 : 4;  // the statistics' dtype: f32, or f64 for f64
  const auto bytes = [](int64_t n) { return allocation_size_class(static_cast<size_t>(n)); };
  const size_t act = bytes(BT * C * es);           // one (B, T, C) activation
  const size_t statistics = 2 * bytes(BT * stat);  // layer norm's mean and rstd
  // The fused attention runs where core/native/transformer.cpp chooses it: the CPU with fusion on,
  // AVX-512 selected, f32 compute and heads a multiple of 32 wide.
  const bool fused =
      device.is_cpu() && fusion_enabled() && cpu_isa() == CpuIsa::avx512 && dtype != DType::f64 && (C / H) % 32 == 0;
  const size_t attention =
      fused ? bytes(B * H * T * stat) + (es == stat ? 0 : bytes(BT * C * stat)) : bytes(B * H * T * T * stat);
  const size_t block = act + statistics + act + bytes(BT * 3 * C * es) + attention + act + act + statistics + act +
                       2 * bytes(BT * 4 * C * es);
  const size_t outside = act + statistics + act + bytes(BT * V * 4);
  return static_cast<size_t>(g.n_layer) * (checkpointed ? act : block) + outside;
}

}  // namespace ringgrad::examples
