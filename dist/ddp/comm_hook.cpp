#include "dist/ddp/comm_hook.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops.h"
#include "dist/ddp/powersgd.h"

namespace ringgrad::dist {

Averaging average_over(const ProcessGroup& group, DType dtype) {
  if (group.size() > 1 && dtype == DType::f16 && group.adds_in_dtype(dtype))
    return {.pre_scale = 1.0 / group.size(), .op = ReduceOp::sum};
  return {};
}

HookWork allreduce_hook(ProcessGroup& group, GradBucket& bucket) {
  // Note [Average, not sum] in dist/ddp/ddp.h; Note [Averaging half precision].
  const Averaging averaging = average_over(group, bucket.buffer.dtype());
  if (averaging.pre_scale != 1) bucket.buffer.mul_(averaging.pre_scale);
  return {group.allreduce(bucket.buffer, averaging.op), nullptr};
}

HookWork fp16_compress_hook(ProcessGroup& group, GradBucket& bucket) {
  RG_CHECK(bucket.buffer.dtype() == DType::f32, "dist.fp16_compress_hook", "expects f32 gradients, but bucket ",
           bucket.index, " is ", dtype_name(bucket.buffer.dtype()), " (rank ", group.rank(), "/", group.size(), ")");
  Tensor buffer = bucket.buffer;
  buffer.mul_(1.0 / group.size());  // in f32, so the f16 copy holds the (in-range) average's terms
  Tensor half = buffer.to(DType::f16);
  return {group.allreduce(half, ReduceOp::sum), [buffer, half]() mutable { buffer.copy_(half); }};
}

int64_t ResidualsByParameter::bytes() const {
  int64_t bytes = 0;
  for (const Layout& l : by_bucket_) bytes += l.residual.defined() ? static_cast<int64_t>(l.residual.nbytes()) : 0;
  return bytes;
}

Tensor ResidualsByParameter::for_bucket(const GradBucket& bucket) {
  if (static_cast<size_t>(bucket.index) >= by_bucket_.size()) by_bucket_.resize(static_cast<size_t>(bucket.index) + 1);
  Layout& layout = by_bucket_[static_cast<size_t>(bucket.index)];
  const int64_t numel = bucket.buffer.numel();
  if (layout.names == bucket.parameter_names && layout.residual.defined() && layout.residual.numel() == numel)
    return layout.residual;
  // A new layout (the first step, or DDP rebuilt its buckets): each parameter's residual moves to
  // its place in this bucket, from wherever it was; the old buffer lives while a view of it does.
  RG_CHECK(bucket.parameter_shapes.size() == bucket.parameter_names.size(), "dist.comm_hook", "bucket ", bucket.index,
           " names ", bucket.parameter_names.size(), " parameters but gives ", bucket.parameter_shapes.size(),
           " shapes: error feedback keeps a residual per parameter");
  Tensor residual = zeros({numel});
  int64_t offset = 0;
  for (size_t k = 0; k < bucket.parameter_names.size(); ++k) {
    const std::string& name = bucket.parameter_names[k];
    const int64_t n = shape_numel(bucket.parameter_shapes.at(k));
    Tensor slice = residual.narrow(0, offset, n);
    auto it = std::find_if(slices_.begin(), slices_.end(), [&](const auto& s) { return s.first == name; });
    if (it == slices_.end()) {
      slices_.emplace_back(name, slice);
    } else {
      slice.copy_(it->second);
      it->second = slice;
    }
    offset += n;
  }
  layout = Layout{bucket.parameter_names, residual};
  // A layout that held any of these parameters is stale: its parameters belong to other buckets
  // now (DDP rebuilt them, perhaps into fewer). Forgetting it lets its buffer go once no slice
  // views it, and keeps bytes() from counting it; were it reduced again, it would be laid out anew.
  for (Layout& other : by_bucket_) {
    if (&other == &layout || !other.residual.defined()) continue;
    const bool stale = std::any_of(other.names.begin(), other.names.end(), [&](const std::string& n) {
      return std::find(bucket.parameter_names.begin(), bucket.parameter_names.end(), n) != bucket.parameter_names.end();
    });
    if (stale) other = Layout{};
  }
  return residual;
}

Tensor ResidualsByParameter::of(const std::string& parameter) const {
  for (const auto& [name, slice] : slices_)
    if (name == parameter) return slice;
  return Tensor();
}

StateDict ResidualsByParameter::state(const std::string& prefix) const {
  StateDict out;
  for (const auto& [name, slice] : slices_) out.emplace_back(prefix + name, slice.clone());
  return out;
}

void ResidualsByParameter::load(const StateDict& state, const std::string& prefix) {
  for (auto& [name, slice] : slices_) slice.zero_();
  for (const auto& entry : with_prefix_removed(state, prefix)) {
    const std::string& key = entry.first;  // a plain reference: clang 14 cannot capture a binding
    const Tensor& value = entry.second;
    RG_CHECK(value.dtype() == DType::f32 && value.dim() == 1, "dist.ResidualsByParameter.load", "the residual of ", key,
             " must be flat f32, got ", value.desc());
    auto it = std::find_if(slices_.begin(), slices_.end(), [&](const auto& s) { return s.first == key; });
    if (it == slices_.end()) {
      slices_.emplace_back(key, value.clone());  // placed into its bucket at the bucket's next reduction
    } else {
      RG_CHECK(it->second.numel() == value.numel(), "dist.ResidualsByParameter.load", "the residual of ", key, " has ",
               value.numel(), " elements, the parameter ", it->second.numel());
      it->second.copy_(value);
    }
  }
}

CommHookCheckpoint::CommHookCheckpoint(std::shared_ptr<CommHookState> state, std::shared_ptr<ProcessGroup> group)
    : state_(std::move(state)), group_(std::move(group)) {
  RG_CHECK(state_ != nullptr && group_ != nullptr, "dist.CommHookCheckpoint", "needs a hook state and a group");
}

void CommHookCheckpoint::gather() {
  const int N = group_->size();
  const StateDict local = state_->local_state();
  // Every rank must hold the same entries (the same parameters reduced): checked by count here and
  // by each allgather's shapes below.
  Tensor count = full({1}, static_cast<double>(local.size()), {.dtype = DType::i64}), low = count.clone();
  group_->allreduce(count, ReduceOp::max)->wait();
  group_->allreduce(low, ReduceOp::min)->wait();
  RG_CHECK(count.item() == low.item(), "dist.CommHookCheckpoint.gather",
           "ranks hold different numbers of hook "
           "state entries (",
           low.item(), " to ", count.item(), "; this rank ", local.size(), ", rank ", group_->rank(), "/", N,
           "): gather after the same steps on every rank");
  StateDict gathered{{"world_size", full({}, N, {.dtype = DType::i64})}};
  for (const auto& [key, value] : local) {
    const Tensor mine = value.contiguous();
    Shape stacked{N};
    stacked.insert(stacked.end(), mine.shape().begin(), mine.shape().end());
    Tensor all = zeros(stacked, {.dtype = mine.dtype()});
    group_->allgather(all, mine)->wait();
    for (int r = 0; r < N; ++r) gathered.emplace_back(str_cat("rank", r, ".", key), all.select(0, r).clone());
  }
  gathered_ = std::move(gathered);
  gathered_at_calls_ = state_->calls;
}

StateDict CommHookCheckpoint::state_dict() const {
  if (!gathered_.empty() && gathered_at_calls_ == state_->calls) return gathered_;
  // Not gathered since the hook last ran: this rank's state alone (what a load snapshots to roll
  // back to). Saved like that, the file lacks the other ranks' state, and loading it says so.
  StateDict own{{"world_size", full({}, group_->size(), {.dtype = DType::i64})}};
  for (const auto& [key, value] : state_->local_state())
    own.emplace_back(str_cat("rank", group_->rank(), ".", key), value);
  return own;
}

void CommHookCheckpoint::load_state_dict(const StateDict& state) {
  const int64_t saved = state_int(state, "world_size", "dist.CommHookCheckpoint");
  RG_CHECK(saved == group_->size(), "dist.CommHookCheckpoint", "the communication hook's state was saved by ", saved,
           " ranks and is per rank; this run has ", group_->size(), " (rank ", group_->rank(),
           "). Resume at the same world size, or leave the hook's state out (strict = false)");
  const StateDict mine = with_prefix_removed(state, str_cat("rank", group_->rank(), "."));
  const bool others =
      std::any_of(state.begin(), state.end(), [](const auto& e) { return e.first.rfind("rank", 0) == 0; });
  RG_CHECK(!mine.empty() || !others, "dist.CommHookCheckpoint",
           "the checkpoint holds other ranks' communication hook "
           "state but not rank ",
           group_->rank(), "'s: it was saved without gather() on every rank first");
  state_->load_local_state(mine);
}

CommHook low_precision_hook(std::shared_ptr<LowPrecisionHookState> state) {
  return [state](ProcessGroup& group, GradBucket& bucket) -> HookWork {
    const LowPrecisionHookOptions& o = state->options;
    const LowPrecisionAllreduce how{.wire = o.wire,
                                    .scale_block = o.scale_block,
                                    .error_feedback =
                                        o.error_feedback ? state->residuals.for_bucket(bucket) : Tensor()};
    std::shared_ptr<Work> work = group.allreduce_low_precision(bucket.buffer, ReduceOp::avg, how);
    state->sent += low_precision_ring_sends(o.wire, bucket.buffer.numel(), group.size(), group.rank(), o.scale_block);
    ++state->calls;
    return {std::move(work), nullptr};
  };
}

const char* comm_hook_names() {
  return "allreduce (or none), fp16, bf16, bf16-ef, fp8-e4m3, fp8-e5m2, fp8-e4m3-noef, fp8-e5m2-noef, powersgd";
}

NamedCommHook make_comm_hook(const std::string& name, const PowerSgdOptions& powersgd) {
  if (name == "allreduce" || name == "none") return {allreduce_hook, nullptr};
  if (name == "fp16") return {fp16_compress_hook, nullptr};
  if (name == "powersgd") {
    auto state = std::make_shared<PowerSgdState>(powersgd);
    return {powersgd_hook(state), state};
  }
  auto low_precision = [](WireFormat wire, bool error_feedback) -> NamedCommHook {
    auto state = std::make_shared<LowPrecisionHookState>(
        LowPrecisionHookOptions{.wire = wire, .error_feedback = error_feedback});
    return {low_precision_hook(state), state};
  };
  if (name == "bf16") return low_precision(WireFormat::bf16, false);
  if (name == "bf16-ef") return low_precision(WireFormat::bf16, true);
  for (WireFormat wire : {WireFormat::fp8_e4m3, WireFormat::fp8_e5m2}) {
    if (name == wire_format_name(wire)) return low_precision(wire, true);
    if (name == std::string(wire_format_name(wire)) + "-noef") return low_precision(wire, false);
  }
  RG_FAIL("dist.comm_hook", "unknown communication hook '", name, "'; available: ", comm_hook_names());
}

CommHook comm_hook_by_name(const std::string& name) { return make_comm_hook(name).hook; }

}  // namespace ringgrad::dist
