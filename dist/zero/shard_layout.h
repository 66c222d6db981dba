// Which elements of which parameters each rank owns under ZeRO (dist::ZeroOptimizer; internal).
//
// Dimension letters: N world size, m the elements of one rank's block of a bucket.
//
// Note [Shards cut across parameters]: every bucket of the DDP model (dist/ddp/reducer.h), padded
// to N m elements (Note [Buckets for sharding]), is cut into N contiguous blocks of m elements, and
// rank r owns block r of every bucket. A block boundary may fall inside a parameter: rank r then
// owns the first part of it and rank r + 1 the rest, as FSDP's flat parameters are cut. So the
// shards are balanced to the element (up to the padding, less than N elements per bucket),
// whatever the parameters' sizes -- a layout that kept parameters whole could leave one rank with
// GPT's embedding and the others with little. A *piece* is the part of one parameter inside one
// block: a contiguous range of the parameter's elements in row-major order, because a bucket lays
// out its parameters one after another.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dist/ddp/options.h"

namespace ringgrad::dist {

struct ShardPiece {
  int param = 0;             // index in the optimizer's parameters()
  int bucket = 0;            // the bucket holding the parameter
  int64_t param_offset = 0;  // first element of the piece in the flattened parameter
  int64_t block_offset = 0;  // where it lies in its rank's block of the bucket
  int64_t numel = 0;
};

class ShardLayout {
 public:
  ShardLayout() = default;
  // buckets: the DDP model's buckets, each padded to a multiple of `world` elements;
  // params: name -> (index in the optimizer's parameters(), numel), for every parameter in a bucket.
  ShardLayout(const std::vector<BucketInfo>& buckets, const std::map<std::string, std::pair<int, int64_t>>& params,
              int world);

  int world() const { return static_cast<int>(pieces_.size()); }
  int num_buckets() const { return static_cast<int>(block_numel_.size()); }
  int64_t block_numel(int bucket) const { return block_numel_.at(bucket); }  // m
  // Rank r's pieces, bucket by bucket, in buffer order.
  const std::vector<ShardPiece>& pieces(int rank) const { return pieces_.at(rank); }
  // Elements rank r owns (its pieces; the padding not counted).
  int64_t owned_numel(int rank) const;
  // Where each of `num_params` parameters lies: {bucket, its first element in the bucket}, from any
  // piece of it and its owner's block; {-1, -1} for a parameter without elements (no piece).
  std::vector<std::pair<int, int64_t>> places(int num_params) const;

 private:
  std::vector<int64_t> block_numel_;
  std::vector<std::vector<ShardPiece>> pieces_;  // [rank]
};

}  // namespace ringgrad::dist
