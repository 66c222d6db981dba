#include "dist/ddp/ddp.h"

#include <cstdio>
#include <sstream>
#include <unordered_set>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "dist/consistency.h"
#include "dist/ddp/reducer.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/training_checkpoint.h"

namespace ringgrad::dist {

namespace {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Construction check: the same parameters (name, shape, dtype, kind of device) in the same order on
// every rank. The kind, not the index: ranks that each drive their own GPU hold "cuda:0" and
// "cuda:1". A rank on the CPU beside one on a GPU would otherwise issue other collectives (the
// CPU's shared-memory buckets, ZeRO's staging) and hang its peers.
void check_same_parameters(ProcessGroup& group, const std::vector<std::pair<std::string, Tensor>>& params) {
  std::string mine;
  for (const auto& [name, t] : params)
    mine += str_cat(name, " ", shape_str(t.shape()), " ", dtype_name(t.dtype()), " ", t.device().kind(), "\n");
  const std::vector<std::string> all = allgather_strings(group, mine);
  if (std::all_of(all.begin(), all.end(), [&](const std::string& s) { return s == all[0]; })) return;
  std::vector<std::vector<std::string>> lines;
  size_t most = 0;
  for (const auto& s : all) {
    lines.push_back(split_lines(s));
    most = std::max(most, lines.back().size());
  }
  auto line_of = [&](size_t r, size_t i) {
    return i < lines[r].size() ? "'" + lines[r][i] + "'"
                               : std::string("no such parameter (it has ") + std::to_string(lines[r].size()) + ")";
  };
  for (size_t i = 0; i < most; ++i) {
    std::string differ;
    for (size_t r = 1; r < lines.size(); ++r)
      if (line_of(r, i) != line_of(0, i)) differ += str_cat("\n  rank ", r, " has ", line_of(r, i));
    if (differ.empty()) continue;
    RG_FAIL("dist.DistributedDataParallel", "the ranks hold different models (seen by rank ", group.rank(), "/",
            group.size(), "). First difference, parameter #", i, ":\n  rank 0 has ", line_of(0, i), differ,
            "\nEvery rank must build the same model (names, shapes, dtypes, registration order) on the same kind of "
            "device before wrapping it.");
  }
}

// Trace events as text lines (tab-separated), to gather them to rank 0.
std::string encode_events(const std::vector<TraceEvent>& events) {
  std::string out;
  for (const TraceEvent& e : events) {
    // Microseconds since boot need ~12 significant digits: print them in full, not as "1.23e+11".
    char times[64];
    std::snprintf(times, sizeof times, "%.3f\t%.3f", e.start_us, e.duration_us);
    out += str_cat(e.name, "\t", e.category, "\t", e.pid, "\t", e.thread, "\t", times, "\t", e.args_json, "\n");
  }
  return out;
}

std::vector<TraceEvent> decode_events(const std::string& text) {
  std::vector<TraceEvent> events;
  for (const std::string& line : split_lines(text)) {
    std::vector<std::string> f;
    std::istringstream in(line);
    for (std::string field; std::getline(in, field, '\t');) f.push_back(field);
    if (f.size() < 6) continue;
    events.push_back(
        TraceEvent{f[0], f[1], std::stoi(f[2]), f[3], std::stod(f[4]), std::stod(f[5]), f.size() > 6 ? f[6] : ""});
  }
  return events;
}

}  // namespace

// ---- DistributedDataParallel -------------------------------------------------------------------

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(std::move(options)) {
  RG_CHECK(module_ != nullptr && group_ != nullptr, "dist.DistributedDataParallel", "module and group must be set");
  const auto params = module_->named_parameters();
  check_same_parameters(*group_, params);
  // Options that change what each rank sends: ranks that differ would wait on different buckets.
  // A comm hook is told apart by its type only (two plain functions of one signature look alike).
  check_same_settings(*group_, "DistributedDataParallel options",
                      {{"bucket_cap_mb", str_cat(options_.bucket_cap_mb)},
                       {"first_bucket_mb", str_cat(options_.first_bucket_mb)},
                       {"find_unused_parameters", str_cat(options_.find_unused_parameters)},
                       {"broadcast_buffers", str_cat(options_.broadcast_buffers)},
                       {"rebuild_buckets", str_cat(options_.rebuild_buckets)},
                       {"comm_hook", options_.comm_hook ? options_.comm_hook.target_type().name() : "(default)"}});
  // All replicas start from rank 0's weights and buffers.
  {
    autograd::NoGradGuard no_grad;
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& [name, t] : params) works.push_back(group_->broadcast(t, 0));
    for (auto& w : works) w->wait();
  }
  // The buffers are listed once (as PyTorch's DDP does): a forward should not rebuild every
  // buffer's dotted name just to find that a model has none.
  if (options_.broadcast_buffers && group_->size() > 1)
    for (const auto& [name, t] : module_->named_buffers()) buffers_.push_back(t);
  sync_buffers();
  reducer_ = std::make_unique<Reducer>(params, group_, options_);
  install_step_check(params);
}

// Note [A step after no_sync]: with no_sync() around every micro-batch, the last included, no
// backward reduces anything; each rank's .grad holds its own micro-batches only, each replica
// takes its own step, and the replicas drift apart with nothing to say so (the stats merely count
// no bucket reductions). So an optimizer step over this model's parameters right after such a
// backward is refused. The check costs a flag read per step; the parameters are compared only when
// the flag is set.
void DistributedDataParallel::install_step_check(const std::vector<std::pair<std::string, Tensor>>& params) {
  std::unordered_set<const TensorImpl*> mine;
  for (const auto& [name, t] : params) mine.insert(t.impl());
  Reducer* reducer = reducer_.get();
  ProcessGroup* group = group_.get();
  step_check_ = std::make_unique<optim::StepCheckHandle>([reducer, group, mine](const optim::Optimizer& opt) {
    if (!reducer->gradients_unsynchronised()) return;
    for (const Tensor& p : opt.parameters()) {
      if (!mine.count(p.impl())) continue;
      RG_FAIL("dist.DistributedDataParallel", "rank ", group->rank(), "/", group->size(), ": optimizer ", opt.name(),
              " was asked to step after a backward that did not synchronise: the last backward ran under "
              "no_sync(), so every rank's gradients hold only its own micro-batches and the replicas would "
              "drift apart. Run the last micro-batch's backward outside no_sync(): it reduces the sum of all "
              "of them once");
    }
  });
}

void DistributedDataParallel::sync_buffers(int root) {
  if (buffers_.empty()) return;
  autograd::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (const Tensor& t : buffers_) works.push_back(group_->broadcast(t, root));
  for (auto& w : works) w->wait();
}

DistributedDataParallel::StepAgreement DistributedDataParallel::agree_on_step(bool active, bool sync) {
  const int N = group_->size();
  Tensor mine = from_vector(std::vector<double>{active ? 1.0 : 0.0, sync ? 1.0 : 0.0}, {2}, {.dtype = DType::i32});
  Tensor all = zeros({N, 2}, {.dtype = DType::i32});
  group_->allgather(all, mine)->wait();
  const std::vector<double> flags = all.to_vector();
  StepAgreement out;
  out.root = -1;
  std::string syncing, accumulating;
  for (int r = 0; r < N; ++r) {
    if (flags[2 * r] == 0) continue;
    ++out.active;
    if (out.root < 0) out.root = r;
    std::string& list = flags[2 * r + 1] != 0 ? syncing : accumulating;
    list += str_cat(list.empty() ? "" : ", ", r);
  }
  if (out.root < 0) out.root = 0;
  out.sync = !syncing.empty();
  RG_CHECK(syncing.empty() || accumulating.empty(), "dist.Join",
           "the ranks still training disagree on whether this step synchronises (seen by rank ", group_->rank(), "/", N,
           "): ranks ", syncing, " run a synchronising forward, ranks ", accumulating,
           " run theirs under no_sync(). Every rank must accumulate the same number of micro-batches per step");
  return out;
}

DistributedDataParallel::~DistributedDataParallel() = default;

double DistributedDataParallel::begin_forward() {
  reducer_->before_forward();
  int root = 0;
  if (join_ != nullptr) {  // Note [Join's agreement] in dist/ddp/join.h
    const bool sync = reducer_->require_sync() && autograd::grad_enabled();
    const StepAgreement agreed = agree_on_step(/*active=*/true, sync);
    reducer_->expect_backward(agreed.active, sync);
    root = agreed.root;
  }
  sync_buffers(root);  // DDPOptions::broadcast_buffers
  if (before_forward_) before_forward_();
  return trace_clock_us();
}

void DistributedDataParallel::end_forward(double start_us) {
  if (after_forward_) after_forward_();
  if (options_.trace)
    reducer_->recorder().add_trace_event(
        TraceEvent{"forward", "compute", group_->rank(), "compute", start_us, trace_clock_us() - start_us, ""});
}

void DistributedDataParallel::wrong_module_type(const char* requested) const {
  RG_FAIL("dist.DistributedDataParallel", "forward_as: the wrapped module is a ", module_->type_name(),
          ", not the requested type (", requested, ")");
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  return call([&](nn::Module& m) { return m(x); });
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.reducer_->require_sync()) {
  ddp_.reducer_->set_require_sync(false);
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->set_require_sync(previous_); }

void DistributedDataParallel::set_comm_hook(CommHook hook) { reducer_->set_comm_hook(std::move(hook)); }
void DistributedDataParallel::shard_buckets(int parts, const void* owner, bool release_gradients,
                                            const std::vector<std::vector<std::string>>& units) {
  RG_CHECK(join_ == nullptr, "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
           ": the buckets cannot be sharded inside a dist::Join");
  RG_CHECK(shard_owner_ == nullptr, "dist.DistributedDataParallel", "rank ", group_->rank(), "/", group_->size(),
           ": another optimizer already shards this model's buckets (a dist::ZeroOptimizer is alive); destroy it "
           "before building the next one");
  RG_CHECK(owner != nullptr, "dist.DistributedDataParallel", "shard_buckets needs an owner");
  reducer_->shard_buckets(parts, release_gradients, units);
  shard_owner_ = owner;
}

void DistributedDataParallel::set_forward_callbacks(const void* owner, std::function<void()> before,
                                                    std::function<void()> after) {
  RG_CHECK(owner != nullptr && owner == shard_owner_, "dist.DistributedDataParallel",
           "set_forward_callbacks: only the optimizer sharding the buckets sets them");
  before_forward_ = std::move(before);
  after_forward_ = std::move(after);
}

void DistributedDataParallel::release_shard_owner(const void* owner) {
  if (owner == nullptr || owner != shard_owner_) return;
  shard_owner_ = nullptr;
  before_forward_ = nullptr;
  after_forward_ = nullptr;
  reducer_->set_comm_hook(options_.comm_hook);
  reducer_->keep_gradients();
}
const DDPStats& DistributedDataParallel::stats() const { return reducer_->recorder().stats(); }
void DistributedDataParallel::reset_stats() { reducer_->recorder().reset_stats(); }
std::vector<BucketInfo> DistributedDataParallel::buckets() const { return reducer_->buckets(); }
std::vector<TraceEvent> DistributedDataParallel::trace_events() const { return reducer_->recorder().trace_events(); }

void DistributedDataParallel::write_trace(const std::string& path) {
  // With the profiler's op events (profiler::Options::trace_events), which nest inside the forward
  // and backward intervals on the same row.
  std::vector<TraceEvent> mine = reducer_->recorder().trace_events();
  for (TraceEvent& e : profiler::trace_events()) {
    e.pid = group_->rank();
    mine.push_back(std::move(e));
  }
  const std::vector<std::string> all = allgather_strings(*group_, encode_events(mine));
  if (group_->rank() != 0) return;
  std::vector<TraceEvent> events;
  for (const std::string& text : all) {
    std::vector<TraceEvent> rank_events = decode_events(text);
    events.insert(events.end(), rank_events.begin(), rank_events.end());
  }
  write_chrome_trace(path, events);
}

void sync_found_inf(optim::GradScaler& scaler, std::shared_ptr<ProcessGroup> group) {
  scaler.set_found_inf_reducer([group](bool local) {
    Tensor flag = full({1}, local ? 1.0 : 0.0, {.dtype = DType::i32});
    group->allreduce(flag, ReduceOp::max)->wait();
    return flag.item() != 0;
  });
}

void sync_checkpoint(optim::TrainingCheckpoint& checkpoint, std::shared_ptr<ProcessGroup> group) {
  RG_CHECK(group != nullptr, "sync_checkpoint", "group is null");
  checkpoint.set_writer(group->rank(), group->size(), [group](bool ok) {
    Tensor flag = full({1}, ok ? 1.0 : 0.0, {.dtype = DType::i32});
    group->allreduce(flag, ReduceOp::min)->wait();
    return flag.item() != 0;
  });
}

}  // namespace ringgrad::dist
