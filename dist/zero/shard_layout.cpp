#include "dist/zero/shard_layout.h"

#include <algorithm>

#include "core/error.h"

namespace ringgrad::dist {

ShardLayout::ShardLayout(const std::vector<BucketInfo>& buckets,
                         const std::map<std::string, std::pair<int, int64_t>>& params, int world) {
  RG_CHECK(world >= 1, "dist.ZeroOptimizer", "world size must be >= 1, got ", world);
  pieces_.resize(static_cast<size_t>(world));
  for (const BucketInfo& bucket : buckets) {
    RG_CHECK(bucket.numel % world == 0, "dist.ZeroOptimizer", "bucket ", bucket.index, " holds ", bucket.numel,
             " elements, not a multiple of the world size ", world, " (Note [Buckets for sharding])");
    const int64_t m = bucket.numel / world;
    block_numel_.push_back(m);
    // The parameters lie one after another from the bucket's start (dist/ddp/reducer.cpp).
    int64_t offset = 0;
    for (const std::string& name : bucket.parameter_names) {
      auto it = params.find(name);
      RG_CHECK(it != params.end(), "dist.ZeroOptimizer", "parameter '", name, "' of bucket ", bucket.index,
               " is not one of the optimizer's parameters: a ZeroOptimizer must hold every trainable parameter of "
               "the DDP model, since each rank steps a block of every bucket");
      const auto [index, numel] = it->second;
      // The blocks this parameter [offset, offset + numel) overlaps.
      for (int64_t r = offset / std::max<int64_t>(m, 1); m > 0 && r < world && r * m < offset + numel; ++r) {
        const int64_t lo = std::max(offset, r * m), hi = std::min(offset + numel, (r + 1) * m);
        if (hi > lo) pieces_[r].push_back(ShardPiece{index, bucket.index, lo - offset, lo - r * m, hi - lo});
      }
      offset += numel;
    }
    RG_CHECK(offset <= bucket.numel, "dist.ZeroOptimizer", "bucket ", bucket.index, " holds ", bucket.numel,
             " elements, fewer than its parameters' ", offset);
  }
}

int64_t ShardLayout::owned_numel(int rank) const {
  int64_t n = 0;
  for (const ShardPiece& p : pieces(rank)) n += p.numel;
  return n;
}

std::vector<std::pair<int, int64_t>> ShardLayout::places(int num_params) const {
  std::vector<std::pair<int, int64_t>> out(num_params, {-1, -1});
  for (int r = 0; r < world(); ++r)
    for (const ShardPiece& piece : pieces_[r])
      out.at(piece.param) = {piece.bucket, r * block_numel_[piece.bucket] + piece.block_offset - piece.param_offset};
  return out;
}

}  // namespace ringgrad::dist
