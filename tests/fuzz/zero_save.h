// A small valid sharded optimizer checkpoint (Note [Sharded checkpoint files],
// dist/zero/zero_checkpoint.cpp), written by hand in its file format: the fuzz target's starting
// point (fuzz_zero_checkpoint.cpp) and the writer of its seeds (make_seeds.cpp).
//   world size 2, save id 7; "w" (2, 3) cut after element 4 (rank 0: [0, 4), rank 1: [4, 6)),
//   "b" (3) whole on rank 1; Adam's state: exp_avg per element, step per piece.
#pragma once

#include <filesystem>
#include <string>

#include "core/ops.h"
#include "nn/checkpoint.h"

namespace ringgrad::fuzz {

inline constexpr const char* kZeroShard0 = "zero-7-shard-0-of-2.ckpt";
inline constexpr const char* kZeroIndex = "zero-index.ckpt";

inline void write_valid_zero_save(const std::filesystem::path& dir) {
  auto f64 = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  auto range = [](int64_t offset, int64_t numel) { return from_vector(std::vector<int64_t>{offset, numel}, {2}); };
  auto meta = [&](StateDict s, int rank) {
    s.emplace_back("zero.save_id", f64(7));
    s.emplace_back("zero.rank", f64(rank));
    s.emplace_back("zero.world_size", f64(2));
    s.emplace_back("zero.stage", f64(2));
    return s;
  };
  std::filesystem::create_directories(dir);
  nn::save_checkpoint(
      (dir / kZeroShard0).string(),
      meta({{"piece.w.range", range(0, 4)}, {"piece.w.step", f64(3)}, {"piece.w.exp_avg", arange(0, 4, 1)}}, 0));
  nn::save_checkpoint((dir / "zero-7-shard-1-of-2.ckpt").string(), meta({{"piece.w.range", range(4, 2)},
                                                                         {"piece.b.range", range(0, 3)},
                                                                         {"piece.w.step", f64(3)},
                                                                         {"piece.w.exp_avg", arange(4, 6, 1)},
                                                                         {"piece.b.step", f64(3)},
                                                                         {"piece.b.exp_avg", arange(0, 3, 1)}},
                                                                        1));
  const StateDict index{{"zero.format", f64(1)},
                        {"zero.save_id", f64(7)},
                        {"zero.world_size", f64(2)},
                        {"zero.stage", f64(2)},
                        {"shape.w", from_vector(std::vector<int64_t>{2, 3}, {2})},
                        {"shape.b", from_vector(std::vector<int64_t>{3}, {1})},
                        {"param_groups.0.lr", f64(1e-3)},
                        {"param_groups.0.weight_decay", f64(0)}};
  nn::save_checkpoint((dir / "zero-7-index.ckpt").string(), index);
  nn::save_checkpoint((dir / kZeroIndex).string(), index);
}

}  // namespace ringgrad::fuzz
