// A solution of the set_epoch exercise (data/sampler.cpp, DistributedSampler::indices, does this
// and the drop_last variant).
#include "learn/set_epoch/set_epoch.h"

namespace learn {

std::vector<int64_t> my_shard(const std::vector<int64_t>& permutation, int64_t N, int64_t rank) {
  std::vector<int64_t> order = permutation;
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t total = (n + N - 1) / N * N;  // the next multiple of N
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i % n]);
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < total; i += N) mine.push_back(order[i]);
  return mine;
}

}  // namespace learn
