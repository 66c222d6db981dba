// DistributedSampler: which examples this rank sees in an epoch.
//
// Every rank computes the same permutation of [0, size) from (seed, epoch) alone — an explicit
// Fisher-Yates shuffle driven by our Philox generator, not std::shuffle, whose output differs between
// standard libraries — then takes every num_replicas-th index starting at its rank.
//
// Equal shard lengths are what keep data parallelism from hanging: a rank with one batch fewer would
// skip an AllReduce the others wait in forever. So without drop_last the permuted list is padded by
// repeating its head until it divides evenly; with drop_last its tail is cut instead.
//
// Call set_epoch(e) before each epoch: without it every epoch repeats the same order. Because that
// is the most-forgotten line of data-parallel code, a shuffling sampler whose second pass (through
// DataLoader, or begin_epoch()) starts at the epoch of the previous pass prints a warning, once.
//
// pad = false (with drop_last = false) turns padding off: shards then differ in length by up to
// one example, so one rank may get one batch fewer -- the classic data-parallel hang, which the
// process group's timeout turns into an error. For tests and demonstrations of exactly that.
#pragma once

#include <cstdint>
#include <vector>

#include "core/state_dict.h"

namespace ringgrad::data {

struct SamplerOptions {
  int64_t num_replicas = -1;  // -1: the world size of the launcher (mpirun), else 1
  int64_t rank = -1;          // -1: this process's rank under the launcher, else 0
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool pad = true;  // see above: false makes uneven shards
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, SamplerOptions options = {});

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // This rank's indices for the current epoch, in order.
  std::vector<int64_t> indices() const;
  // indices() for a new pass over the data; warns (once) when set_epoch was not called since the
  // previous pass of a shuffling sampler.
  std::vector<int64_t> begin_epoch();
  bool warned_missing_set_epoch() const { return warned_; }
  int64_t num_samples() const { return num_samples_; }  // per rank, the same on every rank (unless !pad)
  int64_t num_samples_of(int64_t rank) const;           // another rank's count, from the same formula
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

  // {"epoch", "num_replicas", "shuffle", "seed"} as 0-dim i64 tensors. Loading sets the epoch and
  // checks the seed and shuffle: either differing would give the resumed run another data order, an
  // error naming both values. Another num_replicas is accepted (a resume on another world size).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  int64_t size_, num_replicas_, rank_;
  SamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
  int64_t last_begun_epoch_ = -1;
  bool warned_ = false;
};

// The permutation of [0, n) for `seed` (Fisher-Yates over Philox words); exposed for tests.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace ringgrad::data
