#include "data/dataloader.h"

#include <algorithm>
#include <cstdio>

#include "autograd/engine.h"

namespace ringgrad::data {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, std::shared_ptr<DistributedSampler> sampler,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  RG_CHECK(dataset_ != nullptr, "DataLoader", "dataset is null");
  RG_CHECK(sampler_ != nullptr, "DataLoader", "sampler is null");
  RG_CHECK(options.batch_size > 0 && options.prefetch >= 0, "DataLoader",
           "batch_size must be > 0 and prefetch >= 0, "
           "got ",
           options.batch_size, " and ", options.prefetch);
}

DataLoader::~DataLoader() { stop_worker(); }

int64_t DataLoader::batches_of(int64_t samples) const {
  return options_.drop_last ? samples / options_.batch_size : (samples + options_.batch_size - 1) / options_.batch_size;
}

int64_t DataLoader::num_batches() const { return batches_of(sampler_->num_samples()); }

std::vector<int64_t> DataLoader::batches_per_rank() const {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < sampler_->num_replicas(); ++r) out.push_back(batches_of(sampler_->num_samples_of(r)));
  return out;
}

Example DataLoader::collate(int64_t batch) const {
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(indices_.size()));
  std::vector<int64_t> ids(indices_.begin() + begin, indices_.begin() + end);
  NoGradGuard no_grad;
  Example e = dataset_->get_batch(ids);
  if (options_.pin_memory) {
    e.input = e.input.pin_memory();
    e.target = e.target.pin_memory();
  }
  return e;
}

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  ready_.clear();
  stop_ = false;
}

// Every rank computes every rank's batch count from the same sampler formula, so this costs no
// communication and the ranks warn alike.
void DataLoader::warn_if_uneven() {
  if (!options_.warn_uneven_batches || warned_uneven_) return;
  const std::vector<int64_t> counts = batches_per_rank();
  const auto [fewest, most] = std::minmax_element(counts.begin(), counts.end());
  if (*fewest == *most) return;
  warned_uneven_ = true;
  std::fprintf(stderr,
               "ringgrad: warning: DataLoader (rank %lld of %lld): the ranks get different numbers of batches per "
               "epoch (rank %lld: %lld, rank %lld: %lld; DistributedSampler pad = false). Under DDP the ranks with "
               "more batches wait in an AllReduce the others never join, until the collective timeout. Keep pad = "
               "true (the default) or set drop_last; set DataLoaderOptions::warn_uneven_batches = false where no "
               "collective runs per batch.\n",
               static_cast<long long>(sampler_->rank()), static_cast<long long>(counts.size()),
               static_cast<long long>(fewest - counts.begin()), static_cast<long long>(*fewest),
               static_cast<long long>(most - counts.begin()), static_cast<long long>(*most));
}

DataLoader::Iterator DataLoader::begin() {
  warn_if_uneven();
  stop_worker();
  indices_ = sampler_->begin_epoch();
  batches_ = num_batches();
  next_to_make_ = next_to_take_ = 0;
  error_ = nullptr;
  if (options_.prefetch > 0 && batches_ > 0) {
    worker_ = std::thread([this] {
      for (;;) {
        int64_t batch;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return stop_ || static_cast<int64_t>(ready_.size()) < options_.prefetch; });
          if (stop_ || next_to_make_ == batches_) return;
          batch = next_to_make_++;
        }
        try {
          Example e = collate(batch);
          std::lock_guard<std::mutex> lock(mutex_);
          ready_.push_back(std::move(e));
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          error_ = std::current_exception();
          changed_.notify_all();
          return;
        }
        changed_.notify_all();
      }
    });
  }
  return Iterator(this);
}

std::optional<Example> DataLoader::next_batch() {
  if (next_to_take_ == batches_) return std::nullopt;
  if (options_.prefetch == 0) return collate(next_to_take_++);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (ready_.empty() && error_) std::rethrow_exception(error_);
  Example e = std::move(ready_.front());
  ready_.pop_front();
  ++next_to_take_;
  lock.unlock();
  changed_.notify_all();
  return e;
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader) {
  if (loader_) {
    current_ = loader_->next_batch();
    if (!current_) loader_ = nullptr;
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_ = loader_->next_batch();
  if (!current_) loader_ = nullptr;
  return *this;
}

}  // namespace ringgrad::data
