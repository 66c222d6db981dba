#include "data/dataloader.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "autograd/engine.h"
#include "core/ops.h"
#include "core/profiler.h"

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
  pass_epoch_ = sampler_->epoch();
  if (resume_epoch_ >= 0) {
    if (pass_epoch_ == resume_epoch_) {
      next_to_make_ = next_to_take_ = std::min(resume_position_, batches_);
    } else {
      std::fprintf(stderr,
                   "ringgrad: warning: DataLoader (rank %lld): the loaded state stands at batch %lld of epoch %lld, "
                   "but the first pass began at epoch %lld; it starts from its first batch. Loop from "
                   "sampler().epoch() after loading.\n",
                   static_cast<long long>(sampler_->rank()), static_cast<long long>(resume_position_),
                   static_cast<long long>(resume_epoch_), static_cast<long long>(pass_epoch_));
    }
    resume_epoch_ = -1;
  }
  error_ = nullptr;
  if (options_.prefetch > 0 && next_to_make_ < batches_) {
    worker_ = std::thread([this] {
      profiler::PhaseGuard phase(profiler::Phase::data);  // its batches' ops are no training step's
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

StateDict DataLoader::state_dict() const {
  auto value = [](int64_t v) { return scalar_tensor(static_cast<double>(v), {.dtype = DType::i64}); };
  StateDict out;
  for (auto& [name, t] : sampler_->state_dict()) out.emplace_back("sampler." + name, t);
  // A pass that began at another epoch than the sampler's now says nothing about the sampler's epoch.
  const int64_t position = pass_epoch_ == sampler_->epoch() ? next_to_take_ : 0;
  out.emplace_back("position", value(position));
  out.emplace_back("batch_size", value(options_.batch_size));
  out.emplace_back("drop_last", value(options_.drop_last ? 1 : 0));
  return out;
}

void DataLoader::load_state_dict(const StateDict& state) {
  const std::string who = "DataLoader::load_state_dict";
  StateDict sampler_state;
  for (const auto& [name, t] : state)
    if (name.rfind("sampler.", 0) == 0) sampler_state.emplace_back(name.substr(8), t);
  const int64_t position = state_int(state, "position", who);
  const int64_t batch_size = state_int(state, "batch_size", who);
  const bool drop_last = state_int(state, "drop_last", who) != 0;
  const int64_t replicas = state_int(sampler_state, "num_replicas", who);
  RG_CHECK(position >= 0, who, "position ", position, " is negative");
  // batch_size x ranks below must be a number: a file's values are checked before they multiply.
  RG_CHECK(batch_size >= 1 && replicas >= 1 && batch_size <= INT64_MAX / replicas, who, "batch_size ", batch_size,
           " and num_replicas ", replicas, " must be positive with a product that fits 64 bits");
  if (position > 0) {
    // Note [Resuming at another world size]: the sampler deals the epoch's permutation out
    // round-robin (index i to rank i mod N), so global batch k -- every rank's k-th batch together --
    // holds positions [k*G, (k+1)*G) of the permutation, G = batch_size * ranks, whatever N is. A
    // run that keeps G (2 ranks x 6 -> 3 ranks x 4) therefore continues with the very samples the
    // saved run had not taken: only which rank holds which changes, and the averaged gradient does
    // not see that. Another G would begin elsewhere in the epoch: refused.
    const int64_t saved_global = batch_size * replicas;
    const int64_t global = options_.batch_size * sampler_->num_replicas();
    RG_CHECK(saved_global == global && drop_last == options_.drop_last, who, "the state stands at batch ", position,
             " inside an epoch, saved with batch_size ", batch_size, ", drop_last ", drop_last, " and ", replicas,
             " ranks (global batch ", saved_global, "); this loader has batch_size ", options_.batch_size,
             ", drop_last ", options_.drop_last, " and ", sampler_->num_replicas(), " ranks (global batch ", global,
             "), so its batches are not the saved ones (keep batch_size x ranks, or resume at an epoch boundary)");
  }
  sampler_->load_state_dict(sampler_state);  // checks seed and shuffle, sets the epoch
  resume_epoch_ = sampler_->epoch();
  resume_position_ = position;
}

}  // namespace ringgrad::data
