#include "data/sampler.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "core/env.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/random.h"

namespace ringgrad::data {
namespace {

// data/ sits below dist/ and must not depend on it, so the defaults come from the launcher's
// environment, the same place MPI itself learns the world from (OpenMPI's mpirun sets these for every
// rank; dist::init's world has the same size and ranks). A sampler in a program that builds its own
// groups passes num_replicas and rank explicitly.
int64_t launcher_value(const char* name, int64_t fallback, int64_t min) {
  return env::integer(name, "DistributedSampler", min, int64_t(1) << 31).value_or(fallback);
}

}  // namespace

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  // Word k of the stream is word k % 4 of Philox(counter k / 4, key seed).
  uint64_t k = 0;
  Philox4x32 block{};
  for (int64_t i = n - 1; i > 0; --i, ++k) {
    if (k % 4 == 0) block = philox4x32(k / 4, 0, seed);
    const uint32_t word = block.v[k % 4];
    // j uniform in [0, i]: the high half of word * (i + 1) (Lemire's multiply; bias < (i+1) / 2^32).
    const int64_t j = static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(i + 1)) >> 32);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size),
      num_replicas_(options.num_replicas > 0 ? options.num_replicas : launcher_value("OMPI_COMM_WORLD_SIZE", 1, 1)),
      rank_(options.rank >= 0 ? options.rank : launcher_value("OMPI_COMM_WORLD_RANK", 0, 0)),
      options_(options) {
  RG_CHECK(dataset_size >= 0, "DistributedSampler", "dataset size must be >= 0, got ", dataset_size);
  RG_CHECK(rank_ >= 0 && rank_ < num_replicas_, "DistributedSampler", "rank ", rank_, " is not in [0, ", num_replicas_,
           ")");
  num_samples_ = num_samples_of(rank_);
}

int64_t DistributedSampler::num_samples_of(int64_t rank) const {
  RG_CHECK(rank >= 0 && rank < num_replicas_, "DistributedSampler", "rank ", rank, " is not in [0, ", num_replicas_,
           ")");
  if (options_.drop_last) return size_ / num_replicas_;
  if (!options_.pad) return (size_ - rank + num_replicas_ - 1) / num_replicas_;  // uneven shards
  return (size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::begin_epoch() {
  if (options_.shuffle && epoch_ == last_begun_epoch_ && !warned_) {
    warned_ = true;
    std::fprintf(stderr,
                 "ringgrad: warning: DistributedSampler (rank %lld of %lld): a new pass over the data began at epoch "
                 "%lld, like the previous one -- set_epoch() was not called, so this epoch repeats the previous "
                 "epoch's order. Call set_epoch(epoch) on the sampler before each epoch.\n",
                 static_cast<long long>(rank_), static_cast<long long>(num_replicas_), static_cast<long long>(epoch_));
  }
  last_begun_epoch_ = epoch_;
  return indices();
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // PyTorch seeds with seed + epoch; so do we.
    order = seeded_permutation(size_, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    order.resize(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), 0);
  }
  if (!options_.drop_last && !options_.pad) {  // uneven shards: every num_replicas-th, no padding
    std::vector<int64_t> mine;
    for (int64_t i = rank_; i < size_; i += num_replicas_) mine.push_back(order[static_cast<size_t>(i)]);
    return mine;
  }
  const int64_t total = total_size();
  if (static_cast<int64_t>(order.size()) < total && !order.empty()) {
    // Pad by repeating the head (several times if the dataset is smaller than the world).
    const size_t n = order.size();
    for (size_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i % n]);
  }
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

StateDict DistributedSampler::state_dict() const {
  auto value = [](int64_t v) { return scalar_tensor(static_cast<double>(v), {.dtype = DType::i64}); };
  StateDict out{{"epoch", value(epoch_)},
                {"num_replicas", value(num_replicas_)},
                {"shuffle", value(options_.shuffle ? 1 : 0)}};
  // The seed uses all 64 bits, which a double does not hold: its bits go into the i64 unchanged.
  Tensor seed = scalar_tensor(0, {.dtype = DType::i64});
  *seed.data<int64_t>() = static_cast<int64_t>(options_.seed);
  out.emplace_back("seed", seed);
  return out;
}

void DistributedSampler::load_state_dict(const StateDict& state) {
  const std::string who = "DistributedSampler::load_state_dict";
  const auto seed = static_cast<uint64_t>(state_int(state, "seed", who));
  const bool shuffle = state_int(state, "shuffle", who) != 0;
  const int64_t epoch = state_int(state, "epoch", who);
  RG_CHECK(seed == options_.seed, who, "the state was saved with seed ", seed, ", this sampler has seed ",
           options_.seed, ": the resumed run would see another data order");
  RG_CHECK(shuffle == options_.shuffle, who, "the state was saved with shuffle = ", shuffle, ", this sampler has ",
           options_.shuffle);
  // num_replicas is not checked: another world size is fine at an epoch's start (each rank takes
  // its new shard of the same permutation); the DataLoader refuses it for a position inside an epoch.
  RG_CHECK(epoch >= 0, who, "epoch ", epoch, " is negative");
  epoch_ = epoch;
  last_begun_epoch_ = -1;
}

}  // namespace ringgrad::data
