#include "dist/ddp/reducer.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/ops.h"

namespace ringgrad::dist {

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> named_params, std::shared_ptr<ProcessGroup> group,
                 const DDPOptions& options)
    : group_(std::move(group)),
      options_(options),
      hook_(options.comm_hook),
      recorder_(*group_, options.trace, options.explain_steps) {
  RG_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_mb > 0, "dist.DistributedDataParallel",
           "bucket_cap_mb and first_bucket_mb must be positive, got ", options.bucket_cap_mb, " and ",
           options.first_bucket_mb);
  for (auto& [name, tensor] : named_params) {
    if (!tensor.requires_grad()) continue;  // frozen parameters take no part
    params_.push_back(Param{name, tensor});
  }
  // Note [Bucket assignment]: reverse registration order approximates backward's order.
  std::vector<int> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(order.size() - 1 - i);
  build_buckets(order);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook_handle = params_[i].tensor.register_post_accumulate_grad_hook(
        [this, i](Tensor&) { on_gradient_ready(static_cast<int>(i)); });
  }
}

Reducer::~Reducer() {
  for (Param& p : params_) {
    p.tensor.remove_post_accumulate_grad_hook(p.hook_handle);
    autograd::set_grad_destination(p.tensor, Tensor());
  }
}

void Reducer::build_buckets(const std::vector<int>& order) {
  const double MiB = 1024.0 * 1024.0;
  std::vector<std::vector<int>> members;
  std::vector<double> bytes;
  // The bucket being filled, per (dtype, device): a bucket is one buffer, so it holds one of each.
  std::map<std::pair<DType, std::string>, int> open;
  for (int idx : order) {
    const Tensor& t = params_[idx].tensor;
    const double nbytes = static_cast<double>(t.nbytes());
    const auto key = std::make_pair(t.dtype(), t.device().str());
    auto it = open.find(key);
    if (it != open.end()) {
      const int b = it->second;
      const double cap = (b == 0 ? options_.first_bucket_mb : options_.bucket_cap_mb) * MiB;
      if (bytes[b] + nbytes > cap) open.erase(it);  // full: the next parameter opens a new bucket
    }
    if (open.find(key) == open.end()) {
      open[key] = static_cast<int>(members.size());
      members.emplace_back();
      bytes.push_back(0);
    }
    const int b = open[key];
    members[b].push_back(idx);
    bytes[b] += nbytes;
  }
  lay_out_buckets(members);
}

void Reducer::lay_out_buckets(const std::vector<std::vector<int>>& members) {
  std::vector<DType> dtypes;
  std::vector<Device> devices;
  for (const std::vector<int>& m : members) {
    const Tensor& first = params_.at(m.at(0)).tensor;
    for (int idx : m)
      RG_CHECK(params_[idx].tensor.dtype() == first.dtype() && params_[idx].tensor.device() == first.device(),
               "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(), ": parameter '",
               params_[idx].name, "' (", params_[idx].tensor.desc(), ") cannot share a bucket with '",
               params_[m[0]].name, "' (", first.desc(), "): a bucket is one buffer of one dtype on one device");
    dtypes.push_back(first.dtype());
    devices.push_back(first.device());
  }

  // One reduction buffer per (dtype, device), each bucket a view of it starting on a cache line.
  // Collective (every rank builds the same buckets): on one machine it is memory every rank maps,
  // which the AllReduce sums in place (Note [Shared gradient buffers] in
  // dist/shm/reduction_buffer.h) -- one such buffer per dtype rather than per bucket, since each
  // costs two small collectives.
  using Key = std::pair<DType, std::string>;  // (dtype, device)
  std::map<Key, int> arena_of;
  std::vector<Arena> arenas;
  std::vector<Bucket> buckets(members.size());
  for (size_t b = 0; b < members.size(); ++b) {
    Bucket& bucket = buckets[b];
    for (int idx : members[b]) bucket.numel += params_[idx].tensor.numel();
    bucket.numel =
        (bucket.numel + bucket_multiple_ - 1) / bucket_multiple_ * bucket_multiple_;  // Note [Buckets for sharding]
    bucket.dtype = dtypes[b];
    bucket.device = devices[b];
    const Key key = std::make_pair(dtypes[b], devices[b].str());
    if (!arena_of.count(key)) {
      arena_of[key] = static_cast<int>(arenas.size());
      arenas.push_back(Arena{0, dtypes[b], devices[b]});
    }
    bucket.arena = arena_of[key];
    const int64_t line = std::max<int64_t>(1, 64 / static_cast<int64_t>(dtype_size(dtypes[b])));
    int64_t& used = arenas[bucket.arena].numel;
    bucket.start = (used + line - 1) / line * line;
    used = bucket.start + bucket.numel;
    bucket.grad.index = static_cast<int>(b);
    bucket.params = members[b];
    for (int idx : members[b]) {
      bucket.grad.parameter_names.push_back(params_[idx].name);
      bucket.grad.parameter_shapes.push_back(params_[idx].tensor.shape());
    }
  }
  // Allocated before any bucket or parameter changes, so that a collective failing here leaves the
  // old buckets intact.
  const std::vector<Tensor> buffers = release_after_sync_ ? std::vector<Tensor>{} : new_arenas(arenas);
  buckets_ = std::move(buckets);
  for (size_t b = 0; b < members.size(); ++b) {
    int64_t offset = 0;
    for (int idx : members[b]) {
      params_[idx].bucket = static_cast<int>(b);
      params_[idx].offset = offset;
      offset += params_[idx].tensor.numel();
    }
  }
  if (release_after_sync_) {
    // Note [Gradient buffers released after the reduction]: nothing allocated until a backward; a
    // gradient that exists now stays as it is, and is copied into its slot then.
    for (Param& p : params_) autograd::set_grad_destination(p.tensor, Tensor());
    return;
  }
  attach_buffers(buffers);  // gradients keep their values: each old one is copied into its new slot
}

std::vector<Tensor> Reducer::new_arenas(const std::vector<Arena>& arenas) const {
  std::vector<Tensor> out;  // in the order of each arena's first bucket, the same on every rank
  for (const Arena& a : arenas) out.push_back(group_->new_reduction_buffer(a.numel, a.dtype, a.device));
  return out;
}

void Reducer::attach_buffers(const std::vector<Tensor>& arenas) {
  for (Bucket& bucket : buckets_) {
    bucket.grad.buffer = arenas.at(bucket.arena).narrow(0, bucket.start, bucket.numel);
    int64_t used = 0;
    for (int idx : bucket.params) used += params_[idx].tensor.numel();
    // The padding takes part in the reductions and must stay zero (Note [Buckets for sharding]).
    if (used < bucket.numel) bucket.grad.buffer.narrow(0, used, bucket.numel - used).zero_();
  }
  for (Param& p : params_) {
    // A gradient that exists is copied into its slot; one that does not is written there by the
    // next backward (Note [Gradient destinations], autograd/accumulate_grad.h), or copied there by
    // on_gradient_ready (attach_view), or zeroed if it never comes (mark_unused_parameters).
    if (p.tensor.grad().defined()) attach_view(p);
    autograd::set_grad_destination(p.tensor, slot(p));
  }
}

void Reducer::allocate_bucket(int index) {
  Bucket& bucket = buckets_[index];
  bucket.grad.buffer = empty({bucket.numel}, {.dtype = bucket.dtype, .device = bucket.device});
  int64_t used = 0;
  for (int idx : bucket.params) used += params_[idx].tensor.numel();
  if (used < bucket.numel) bucket.grad.buffer.narrow(0, used, bucket.numel - used).zero_();  // the padding
  for (int idx : bucket.params) {
    Param& p = params_[idx];
    if (p.tensor.grad().defined()) attach_view(p);
    autograd::set_grad_destination(p.tensor, slot(p));
  }
}

void Reducer::release_buffers() {
  for (Param& p : params_) {
    p.tensor.set_grad(Tensor());
    autograd::set_grad_destination(p.tensor, Tensor());
  }
  for (Bucket& b : buckets_) b.grad.buffer = Tensor();
}

Tensor Reducer::slot(const Param& p) const {
  return buckets_[p.bucket].grad.buffer.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
}

bool Reducer::is_bucket_view(const Param& p) const {
  const Tensor g = p.tensor.grad();
  const Tensor& buffer = buckets_[p.bucket].grad.buffer;
  return g.defined() && g.storage() == buffer.storage() && g.offset() == buffer.offset() + p.offset &&
         g.shape() == p.tensor.shape() && g.is_contiguous();
}

void Reducer::attach_view(Param& p) {
  if (is_bucket_view(p)) return;
  const Tensor g = p.tensor.grad();
  Tensor s = slot(p);
  if (g.defined()) s.copy_(g);
  else s.zero_();
  p.tensor.set_grad(s);
}

void Reducer::on_gradient_ready(int index) {
  if (!in_backward_) {  // the first gradient of this backward
    in_backward_ = true;
    sync_this_backward_ = require_sync_;  // Note [no_sync]
    RG_CHECK(!in_join_ || sync_this_backward_ == announced_sync_, "dist.Join", "rank ", group_->rank(), "/",
             group_->size(), ": this backward ", sync_this_backward_ ? "synchronises" : "runs under no_sync()",
             " but its forward ran ", announced_sync_ ? "outside no_sync()" : "under no_sync()",
             ". Under Join the ranks out of data learn at each forward whether a reduction follows, so "
             "no_sync() must be in force at the forward as well as the backward");
    autograd::queue_callback([this] { finish_backward(); });
    next_to_launch_ = 0;
    for (Bucket& b : buckets_) {
      b.pending = static_cast<int>(b.params.size());
      b.launched = false;
      b.work = HookWork{};
    }
    for (Param& p : params_) p.ready = false;
    if (sync_this_backward_) recorder_.synchronising_backward_begins([this] { return bucket_lines(); });
  }
  Param& p = params_[index];
  // Note [Gradient buffers released after the reduction]: the bucket's first gradient was computed
  // into memory of its own; attach_view below copies it in.
  if (!buckets_[p.bucket].grad.buffer.defined()) allocate_bucket(p.bucket);
  attach_view(p);  // no-op when backward accumulated into the view, as it normally does
  if (!sync_this_backward_) return;
  if (options_.rebuild_buckets && !rebuilt_) observed_order_.push_back(index);
  p.ready = true;
  const int still_to_come = --buckets_[p.bucket].pending;
  StepNarrator* narrator = recorder_.narrator();
  if (narrator)
    narrator->gradient_ready(p.name, shape_str(p.tensor.shape()), p.bucket, p.offset, p.tensor.numel(), still_to_come);
  if (still_to_come == 0) {
    launch_ready_buckets();
    if (narrator && p.bucket >= next_to_launch_) narrator->bucket_waits(p.bucket, next_to_launch_);
  }
}

std::vector<std::string> Reducer::bucket_lines() const {
  std::vector<std::string> lines;
  for (const Bucket& b : buckets_) {
    std::string names;
    for (const std::string& n : b.grad.parameter_names) names += n + " ";
    lines.push_back(
        str_cat(names, "(", b.numel, " ", dtype_name(b.dtype), ", ", b.numel * dtype_size(b.dtype), " bytes)"));
  }
  return lines;
}

// Note [Buckets launch in index order].
void Reducer::launch_ready_buckets() {
  while (next_to_launch_ < static_cast<int>(buckets_.size()) && buckets_[next_to_launch_].pending == 0) {
    Bucket& b = buckets_[next_to_launch_++];
    const double launch_us = recorder_.narrator() ? trace_clock_us() : 0;
    b.work = hook_ ? hook_(*group_, b.grad) : allreduce_hook(*group_, b.grad);
    RG_CHECK(b.work.work != nullptr, "dist.DistributedDataParallel",
             "the communication hook returned no Work for bucket ", b.grad.index);
    b.launched = true;
    recorder_.bucket_launched(b.grad.index, b.grad.buffer.nbytes(), launch_us);
  }
}

void Reducer::mark_unused_parameters() {
  std::vector<int> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].ready) unused.push_back(static_cast<int>(i));
  if (unused.empty()) return;
  if (!options_.find_unused_parameters) {
    // Let the buckets already launched finish first: every rank launched them, and the group
    // stays usable for whatever the caller does next.
    for (Bucket& b : buckets_)
      if (b.launched) {
        try {
          b.work.work->wait();
        } catch (const Error&) {}
      }
    std::string names;
    for (size_t k = 0; k < unused.size() && k < 8; ++k)
      names += str_cat(k ? ", " : "", "'", params_[unused[k]].name, "'");
    if (unused.size() > 8) names += str_cat(" and ", unused.size() - 8, " more");
    RG_FAIL("dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(), ": ", unused.size(),
            " parameter(s) received no gradient in this backward: ", names,
            ". Their buckets could not be reduced. If the model legitimately leaves parameters out of the loss "
            "(a conditional branch, an unused head), construct DistributedDataParallel with "
            "DDPOptions::find_unused_parameters = true; otherwise make every parameter take part in the loss.");
  }
  for (int i : unused) {
    Param& p = params_[i];
    if (StepNarrator* narrator = recorder_.narrator()) narrator->unused(p.name, p.bucket);
    if (!buckets_[p.bucket].grad.buffer.defined()) allocate_bucket(p.bucket);
    attach_view(p);  // zero unless earlier no_sync backwards accumulated into it
    p.ready = true;
    --buckets_[p.bucket].pending;
  }
  launch_ready_buckets();
}

void Reducer::finish_backward() {
  in_backward_ = false;
  gradients_unsynchronised_ = !sync_this_backward_;
  if (!sync_this_backward_) return;
  SyncedStep step = recorder_.backward_computed();
  mark_unused_parameters();
  if (StepNarrator* narrator = recorder_.narrator()) narrator->backward_computed(buckets_.size());
  for (Bucket& b : buckets_) {
    // Throws the timeout's diagnosis if a rank never joined. GPU reductions (nccl) are waited for by
    // the GPU: Note [Waiting on the device] in dist/work.h.
    b.work.work->wait_on_device();
    if (b.work.then) b.work.then();
    step.buckets.push_back({b.work.work, b.grad.index, b.grad.buffer.nbytes(), b.params.size(),
                            release_after_sync_ ? b.grad.buffer : Tensor()});
  }
  // Note [Join's divisor] in dist/ddp/join.h: the hook divided by the group's size, but only
  // contributing_ranks_ ranks added gradients (the others added zeros).
  if (in_join_ && !divide_by_group_size_ && contributing_ranks_ < group_->size()) {
    const double factor = static_cast<double>(group_->size()) / contributing_ranks_;
    for (Bucket& b : buckets_) b.grad.buffer.mul_(factor);
  }
  if (release_after_sync_) release_buffers();
  recorder_.synchronised_step_done(std::move(step));
  if (options_.rebuild_buckets && !rebuilt_) rebuild_buckets_from_observed_order();
}

void Reducer::shadow_backward() {
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!buckets_[b].grad.buffer.defined()) allocate_bucket(static_cast<int>(b));
  std::vector<HookWork> works;
  for (Bucket& b : buckets_) {
    b.grad.buffer.zero_();  // this rank's contribution: nothing
    works.push_back(hook_ ? hook_(*group_, b.grad) : allreduce_hook(*group_, b.grad));
    RG_CHECK(works.back().work != nullptr, "dist.Join", "the communication hook returned no Work for bucket ",
             b.grad.index);
  }
  for (HookWork& w : works) {
    w.work->wait();
    if (w.then) w.then();
  }
  // The others rebuild their buckets after their first synchronising backward (a broadcast).
  if (options_.rebuild_buckets && !rebuilt_) rebuild_buckets_from_observed_order();
}

void Reducer::rebuild_buckets_from_observed_order() {
  rebuilt_ = true;
  // Parameters that never reported (unused, find_unused_parameters) go last, in the initial order.
  std::vector<int64_t> order(observed_order_.begin(), observed_order_.end());
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i)
    if (std::find(observed_order_.begin(), observed_order_.end(), i) == observed_order_.end()) order.push_back(i);
  observed_order_.clear();
  // Every rank must build the same buckets: rank 0's order wins.
  Tensor t = from_vector(order, {static_cast<int64_t>(order.size())}, {.dtype = DType::i64});
  group_->broadcast(t, 0)->wait();
  std::vector<int> agreed;
  for (double v : t.to_vector()) agreed.push_back(static_cast<int>(v));
  build_buckets(agreed);
}

void Reducer::shard_buckets(int parts, bool release_gradients, const std::vector<std::vector<std::string>>& units) {
  RG_CHECK(parts >= 1, "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
           ": shard_buckets: parts must be >= 1, got ", parts);
  RG_CHECK(!in_backward_, "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
           ": the buckets cannot be sharded during a backward");
  std::vector<std::vector<int>> members;  // the units' buckets, by parameter index
  if (!units.empty()) {
    std::map<std::string, int> index_of;
    for (size_t i = 0; i < params_.size(); ++i) index_of[params_[i].name] = static_cast<int>(i);
    std::vector<int> times(params_.size(), 0);
    for (const std::vector<std::string>& unit : units) {
      RG_CHECK(!unit.empty(), "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
               ": shard_buckets: a unit holds no parameter");
      members.emplace_back();
      for (const std::string& name : unit) {
        auto it = index_of.find(name);
        RG_CHECK(it != index_of.end(), "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
                 ": shard_buckets: '", name, "' is not a trainable parameter of the model");
        ++times[it->second];
        members.back().push_back(it->second);
      }
    }
    for (size_t i = 0; i < params_.size(); ++i)
      RG_CHECK(times[i] == 1, "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
               ": shard_buckets: parameter '", params_[i].name, "' is in ", times[i],
               " units; every trainable parameter must be in exactly one");
  }
  std::vector<int> order;  // the current layout, bucket by bucket
  for (const Bucket& b : buckets_) order.insert(order.end(), b.params.begin(), b.params.end());
  bucket_multiple_ = parts;
  release_after_sync_ = release_gradients;
  rebuilt_ = true;  // the layout is final
  observed_order_.clear();
  if (members.empty()) build_buckets(order);
  else lay_out_buckets(members);
}

std::vector<BucketInfo> Reducer::buckets() const {
  std::vector<BucketInfo> out;
  for (const Bucket& b : buckets_)
    out.push_back(BucketInfo{b.grad.index, b.dtype, b.numel, b.grad.parameter_names,
                             b.grad.buffer.defined() && group_->reduces_in_place(b.grad.buffer), !release_after_sync_});
  return out;
}

}  // namespace ringgrad::dist
