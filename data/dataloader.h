// DataLoader: batches of a Dataset in the order a DistributedSampler gives, collated into contiguous
// tensors by a background thread that stays up to `prefetch` batches ahead (a bounded queue), so the
// next batch is ready when the training step asks for it. Batch order is deterministic.
//
//   auto sampler = std::make_shared<data::DistributedSampler>(dataset->size(), data::SamplerOptions{.seed = 1});
//   data::DataLoader loader(dataset, sampler, {.batch_size = 128});
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler->set_epoch(epoch);
//     for (const data::Example& batch : loader) { ... }
//   }
//
// The loader shares ownership of its dataset and sampler, as PyTorch's DataLoader keeps both alive:
// the caller keeps a handle to the sampler to call set_epoch. One iteration at a time.
// Seam for CUDA: batches will be collated into pinned host memory and copied asynchronously.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "data/dataset.h"
#include "data/sampler.h"

namespace ringgrad::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool drop_last = false;  // drop a last, smaller batch
  int64_t prefetch = 2;    // batches prepared ahead; 0 collates on the calling thread
  // Batches in page-locked memory (CUDA builds), so that batch.input.to(gpu, /*non_blocking=*/true)
  // is an asynchronous copy. With prefetch, the pinning happens on the loader's thread.
  bool pin_memory = false;
  // Warn (once) when the ranks' shards give different numbers of batches: under DDP the ranks with
  // more would wait in an AllReduce the others never join, until the collective timeout. Switch it
  // off for loops that run no collective per batch (evaluation).
  bool warn_uneven_batches = true;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, std::shared_ptr<DistributedSampler> sampler,
             DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;                    // per epoch, for this rank
  std::vector<int64_t> batches_per_rank() const;  // every rank's num_batches(), from the sampler's shards
  bool warned_uneven_batches() const { return warned_uneven_; }
  // Batches of the current pass handed out so far, the one in hand included; a pass resumed by
  // load_state_dict counts from the loaded position.
  int64_t batches_taken() const { return next_to_take_; }
  DistributedSampler& sampler() const { return *sampler_; }

  // Where the loader stands, for resuming mid-epoch: the sampler's state under "sampler.", and
  // "position" (batches of the sampler's epoch handed out so far; 0 when that epoch's pass has not
  // begun), "batch_size", "drop_last". Loading sets the sampler's epoch and makes the next pass over
  // that epoch skip the first `position` batches without collating them, so a run saved after
  // batch k of epoch e continues with batch k + 1. A position inside an epoch is refused when the
  // batch size, drop_last or world size differ (the batches would not be the same ones). A first
  // pass that begins at another epoch warns and starts from its first batch.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  class Iterator {
   public:
    const Example& operator*() const { return *current_; }
    const Example* operator->() const { return &*current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return loader_ != other.loader_; }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    DataLoader* loader_;  // null at the end
    std::optional<Example> current_;
  };
  Iterator begin();  // starts an epoch with the sampler's current indices
  Iterator end() { return Iterator(nullptr); }

 private:
  std::optional<Example> next_batch();
  Example collate(int64_t batch) const;
  void stop_worker();
  void warn_if_uneven();
  int64_t batches_of(int64_t samples) const;  // batches of one rank holding `samples`

  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<DistributedSampler> sampler_;
  DataLoaderOptions options_;
  std::vector<int64_t> indices_;  // this epoch's
  bool warned_uneven_ = false;
  int64_t batches_ = 0, next_to_make_ = 0, next_to_take_ = 0;
  int64_t pass_epoch_ = -1;  // the sampler epoch of the pass next_to_take_ counts in (-1: none yet)
  // Set by load_state_dict: the next pass at resume_epoch_ starts at batch resume_position_.
  int64_t resume_epoch_ = -1, resume_position_ = 0;

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Example> ready_;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace ringgrad::data
