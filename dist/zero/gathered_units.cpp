#include "dist/zero/gathered_units.h"

#include <algorithm>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/trace.h"

namespace ringgrad::dist {

GatheredUnits::GatheredUnits(ProcessGroup& group, std::vector<Unit> units, bool has_root)
    : group_(group), units_(std::move(units)), has_root_(has_root) {
  for (size_t u = 0; u < units_.size(); ++u) {
    const int b = units_[u].bucket;
    if (static_cast<int>(unit_of_bucket_.size()) <= b) unit_of_bucket_.resize(b + 1, -1);
    unit_of_bucket_[b] = static_cast<int>(u);
    if (gathered(static_cast<int>(u))) gathered_bytes_ += units_[u].full.nbytes();
  }
  peak_gathered_bytes_ = gathered_bytes_;
}

GatheredUnits::~GatheredUnits() {
  for (Unit& unit : units_) {
    if (!unit.pending) continue;
    try {
      unit.pending->wait();  // times out with a diagnosis if a rank is gone: nothing to do about it here
    } catch (const Error&) {}
  }
}

void GatheredUnits::materialize(Unit& unit) {
  unit.full.storage()->materialize();
  gathered_bytes_ += unit.full.nbytes();
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
}

void GatheredUnits::prefetch(int u) {
  Unit& unit = units_.at(u);
  if (gathered(u)) return;  // gathered, or in flight
  materialize(unit);
  NoGradGuard no_grad;
  const int N = group_.size();
  ++stats_.allgathers;
  stats_.bytes += static_cast<int64_t>(unit.full.nbytes());
  if (N == 1) {
    unit.full.copy_(unit.shard);
    return;
  }
  unit.pending = group_.allgather(unit.full.view({N, unit.shard.numel()}), unit.shard);
}

void GatheredUnits::finish_pending(Unit& unit, bool count_as_exposed) {
  if (!unit.pending) return;
  std::shared_ptr<Work> work = std::move(unit.pending);
  unit.pending = nullptr;
  const double start_us = trace_clock_us();
  try {
    work->wait();  // throws the timeout's diagnosis if a rank never joins
  } catch (...) {
    unit.full.storage()->release(unit.released_why);
    gathered_bytes_ -= unit.full.nbytes();
    throw;
  }
  if (count_as_exposed) stats_.exposed_ms += (trace_clock_us() - start_us) / 1000.0;
}

void GatheredUnits::gather(int u) {
  prefetch(u);
  finish_pending(units_.at(u), /*count_as_exposed=*/true);
}

void GatheredUnits::release(int u) {
  Unit& unit = units_.at(u);
  unit.held = false;
  finish_pending(unit, /*count_as_exposed=*/false);
  if (!gathered(u)) return;
  unit.full.storage()->release(unit.released_why);
  gathered_bytes_ -= unit.full.nbytes();
}

void GatheredUnits::backward_event() {
  if (!autograd::detail::claim_in_this_backward(this)) return;  // not the first in this backward
  for (Unit& unit : units_) unit.params_left = unit.num_params;
  autograd::queue_callback([weak = weak_from_this()] {
    if (auto units = weak.lock()) units->release_all();
  });
}

void GatheredUnits::parameter_ready(int u) {
  backward_event();
  Unit& unit = units_.at(u);
  if (--unit.params_left == 0) release(u);
}

void GatheredUnits::release_all() {
  for (int u = 0; u < size(); ++u) release(u);
}

void GatheredUnits::gather_all() {
  for (int u = 0; u < size(); ++u) prefetch(u);  // every allgather in flight at once
  for (int u = 0; u < size(); ++u) gather(u);
}

void GatheredUnits::write_back() {
  NoGradGuard no_grad;
  const int rank = group_.rank();
  for (int u = 0; u < size(); ++u) {
    Unit& unit = units_[u];
    if (!gathered(u) || unit.pending) continue;
    const int64_t m = unit.shard.numel();
    unit.shard.copy_(unit.full.narrow(0, rank * m, m));
  }
}

size_t GatheredUnits::shard_bytes() const {
  size_t n = 0;
  for (const Unit& unit : units_) n += unit.shard.nbytes();
  return n;
}

}  // namespace ringgrad::dist
