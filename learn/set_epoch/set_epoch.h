// Exercise: how a DistributedSampler shards an epoch, and what forgetting set_epoch does
// (docs/learn/04-sampler-and-set-epoch.md).
#pragma once

#include <cstdint>
#include <vector>

namespace learn {

// Rank `rank`'s examples of one epoch, given the epoch's permutation of the dataset (the same on
// every rank: it depends on the seed and the epoch only) and the number of ranks N: every N-th
// index starting at `rank`, after padding the permutation with its own head until N divides it --
// so that every rank gets the same number of examples, and no rank runs out of batches first.
std::vector<int64_t> my_shard(const std::vector<int64_t>& permutation, int64_t N, int64_t rank);

}  // namespace learn
