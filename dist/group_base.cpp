#include "dist/group_base.h"

#include <atomic>
#include <climits>
#include <cstdio>
#include <exception>
#include <mutex>
#include <regex>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/trace.h"
#include "dist/group_agreement.h"
#include "dist/mpi_comms.h"

namespace ringgrad::dist::detail {

void check_tensor(const char* op, const char* what, const Tensor& t, int rank, int size) {
  RG_CHECK(t.defined(), op, what, " is an undefined tensor (rank ", rank, "/", size, ")");
  // An empty tensor has no layout to get wrong (core's is_contiguous says false for e.g. (2, 0)).
  RG_CHECK(t.numel() == 0 || t.is_contiguous(), op, what, " ", t.desc(), " must be contiguous (rank ", rank, "/", size,
           "); pass t.contiguous() and copy the result back");
}

int checked_count(const char* op, int64_t n, int rank) {
  RG_CHECK(n <= INT_MAX, op, "count ", n, " exceeds MPI's int count limit ", INT_MAX, " (rank ", rank,
           "); split the tensor");
  return static_cast<int>(n);
}

namespace {

int next_group_id() {
  static std::atomic<int> id{0};
  return id++;
}

}  // namespace

GroupBase::GroupBase(std::string backend, const GroupOptions& options)
    : backend_(std::move(backend)),
      timeout_seconds_(options.timeout_seconds ? *options.timeout_seconds : default_collective_timeout()) {
  RG_CHECK(timeout_seconds_ > 0, "dist.new_group", "timeout must be positive, got ", timeout_seconds_, " s");
  RG_CHECK(options.max_poll_sleep_us >= 0, "dist.new_group", "max_poll_sleep_us must be >= 0, got ",
           options.max_poll_sleep_us);
  RG_CHECK(options.ring_segment_bytes >= 64, "dist.new_group", "ring_segment_bytes must be >= 64, got ",
           options.ring_segment_bytes);
  debug_check_ =
      options.debug_check ? *options.debug_check : env::flag("RINGGRAD_DIST_DEBUG", "dist.new_group").value_or(false);
  const int id = next_group_id();
  const auto trace_prefix = env::text("RINGGRAD_DIST_TRACE");
  const bool trace = options.trace ? *options.trace : trace_prefix.has_value();
  comms_ = std::make_unique<MpiComms>(timeout_seconds_, str_cat("process group #", id, " (backend '", backend_, "')"));
  rank_ = comms_->rank();
  size_ = comms_->size();
  // Host staging (Note [Host staging without a GPU]): agreed in the creation record below, where a
  // malformed RINGGRAD_DIST_HOST_STAGING is a vote of -1, raised after it.
  std::exception_ptr host_staging_error;
  const int host_staging = switch_vote(options.host_staging, "RINGGRAD_DIST_HOST_STAGING", false, host_staging_error);
  staging_ = Staging(static_cast<const ProcessGroup*>(this), backend_, rank_, size_, host_staging == 1);
  if (trace && trace_prefix) trace_path_ = str_cat(*trace_prefix, ".rank", rank_, ".g", id, "-", backend_, ".json");
  // Note [Agreed at creation]: before anything else runs over the group.
  peers_ = agree_on_creation(*comms_, this_process_record(backend_, debug_check_, host_staging, timeout_seconds_, id));
  if (host_staging_error) std::rethrow_exception(host_staging_error);
  // Note [Machines by MPI, not by name]: said once per process, by the group's rank 0.
  static std::once_flag layout_noted;
  if (rank_ == 0)
    std::call_once(layout_noted, [this] {
      if (const std::string note = layout_note(peers_); !note.empty()) fputs(note.c_str(), stderr);
    });
  link_ = SimulatedLink(simulated_network_from(options));
  comm_thread_ =
      std::make_shared<CommThread>(backend_, rank_, size_, timeout_seconds_, options.max_poll_sleep_us, trace);
  comm_thread_->set_peer_report([peers = peers_, rank = rank_] { return peer_liveness(peers, rank); });
}

GroupBase::~GroupBase() {
  comm_thread_->shutdown();
  if (!trace_path_.empty()) {
    try {
      write_chrome_trace(trace_path_, comm_thread_->trace_events());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ringgrad: warning: %s\n", e.what());  // a destructor must not throw
    }
  }
  // A broken group may still have requests MPI is working on: leave its communicators alone rather
  // than free them under MPI. See Note [After a timeout].
  if (comm_thread_->broken()) return;
  comms_->free();
}

// A world of one reduces or broadcasts a tensor to itself: the result is the tensor, whatever the
// op. For a staged tensor (a GPU tensor on an MPI backend, a CPU one on nccl) the backend would
// still copy it there and back -- a synchronous copy, inside DDP's backward -- so the op completes
// here instead, untouched and unsent. (Tensors the backend works on in place still take the
// communication thread: there it costs a queue hand-off, and their single-rank ops keep their
// sequence numbers for the debug checks.)
std::shared_ptr<Work> GroupBase::completed_alone(OpInfo info) {
  auto work = std::make_shared<Work>(std::move(info), backend_, rank_, size_);
  const double now = trace_clock_us();
  work->finish_unobserved(nullptr, now, now);
  return work;
}

std::shared_ptr<Work> GroupBase::submit_decorated(OpInfo info,
                                                  std::function<std::unique_ptr<PendingOp>(int tag)> start) {
  // Without device indices: ranks that each drive their own GPU ("cuda:0", "cuda:1") issue the same
  // collective.
  std::string fingerprint;
  if (debug_check_)
    fingerprint = std::regex_replace(str_cat(info.name, " (", info.detail(info.operands), ")"),
                                     std::regex("cuda:[0-9]+"), "cuda");
  const size_t bytes = info.bytes;
  return comm_thread_->submit(std::move(info), [this, start = std::move(start), fingerprint, bytes](uint64_t seq) {
    std::function<std::unique_ptr<PendingOp>()> real = [start, seq] { return start(collective_tag(seq)); };
    if (debug_check_) {  // Note [Debug mode]
      const std::string where = str_cat("collective #", seq, " of backend '", backend_, "'");
      real = [this, fingerprint, where, real] { return comms_->start_checked(fingerprint, where, real); };
    }
    return link_.on() ? link_.start(bytes, real) : real();  // Note [Simulated network]
  });
}

std::shared_ptr<Work> GroupBase::submit_p2p(OpInfo info, std::function<std::unique_ptr<PendingOp>()> start) {
  info.p2p = true;
  const size_t bytes = info.bytes;
  return comm_thread_->submit(std::move(info), [this, start = std::move(start), bytes](uint64_t) {
    return link_.on() ? link_.start(bytes, start) : start();  // Note [Simulated network]
  });
}

void GroupBase::check_peer(const char* op, int peer, int tag, const Tensor& t) const {
  check_tensor(op, "tensor", t, rank_, size_);
  RG_CHECK(peer >= 0 && peer < size_ && peer != rank_, op, "peer rank ", peer,
           " must be another rank of this group of ", size_, " (rank ", rank_, ")");
  RG_CHECK(tag >= 0 && tag <= 32767, op, "tag ", tag, " must be in [0, 32767] (rank ", rank_, "/", size_, ")");
  checked_count(op, static_cast<int64_t>(t.nbytes()), rank_);
}

// Point-to-point runs over MPI on host memory whatever the group's backend (nccl's too), so a GPU
// tensor is staged through pinned host memory (Note [CUDA tensors through host staging]).
std::shared_ptr<Work> GroupBase::send(const Tensor& t, int dst, int tag) {
  check_peer("dist.send", dst, tag, t);
  const Tensor host = staging_.host_side(t, /*copy_in=*/true);
  auto detail = [](const OpInfo::Operands& o) {
    return str_cat("to rank ", o.argument, ", tag ", o.tag, ", ", o.tensor.desc());
  };
  return submit_p2p(
      {.name = "send", .detail = detail, .operands = {.tensor = t, .argument = dst, .tag = tag}, .bytes = t.nbytes()},
      [this, host, dst, tag] { return comms_->start_send(host, dst, tag); });
}

std::shared_ptr<Work> GroupBase::recv(const Tensor& t, int src, int tag) {
  check_peer("dist.recv", src, tag, t);
  auto detail = [](const OpInfo::Operands& o) {
    return str_cat("from rank ", o.argument, ", tag ", o.tag, ", ", o.tensor.desc());
  };
  return submit_p2p(
      {.name = "recv", .detail = detail, .operands = {.tensor = t, .argument = src, .tag = tag}, .bytes = t.nbytes()},
      [this, t, host = staging_.host_side(t, /*copy_in=*/false), src, tag] {
        return Staging::staged(comms_->start_recv(host, src, tag), t, host);
      });
}

std::shared_ptr<Work> GroupBase::allreduce(const Tensor& t, ReduceOp op) {
  check_tensor("dist.allreduce", "tensor", t, rank_, size_);
  const DType dt = t.dtype();
  RG_CHECK(dt != DType::u8, "dist.allreduce", "dtype u8 is not supported (", t.desc(), ", rank ", rank_, "/", size_,
           "); use f32, f64, f16, bf16, i32 or i64");
  checked_count("dist.allreduce", t.numel(), rank_);
  auto detail = [](const OpInfo::Operands& o) {
    return str_cat(reduce_op_name(static_cast<ReduceOp>(o.argument)), ", ", o.tensor.desc());
  };
  const OpInfo info{.name = "allreduce",
                    .detail = detail,
                    .operands = {.tensor = t, .argument = static_cast<int>(op)},
                    .bytes = t.nbytes()};
  // The route, chosen by what the tensor and the group can do: a buffer that reduces itself (Note
  // [Buffers that reduce themselves]), a world of one, or the backend's AllReduce on t or its
  // staged copy (Note [CUDA tensors through host staging]).
  if (InPlaceBuffer* buffer = staging_.in_place_buffer(t))
    return submit_collective(info, [buffer, t, op](int tag) { return buffer->allreduce(t, op, tag); });
  if (size_ == 1 && staging_.stages(t.device())) return completed_alone(info);
  return submit_collective(info, [start = &collectives_.allreduce, t, host = staging_.in("dist.allreduce", t),
                                  op](int tag) { return Staging::staged((*start)(host, op, tag), t, host); });
}

namespace {

// What allreduce_low_precision and reduce_scatter_low_precision both ask of their input and
// settings (`input`: the tensor whose elements are encoded, and the error feedback's shape).
void check_low_precision(const char* name, const Tensor& input, ReduceOp op, const LowPrecisionAllreduce& how, int rank,
                         int size) {
  const DType dt = input.dtype();
  RG_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16, name, "needs f32, f16 or bf16, got ",
           input.desc(), " (rank ", rank, "/", size, ")");
  RG_CHECK(op == ReduceOp::sum || op == ReduceOp::avg, name, "reduces with sum or avg, not ", reduce_op_name(op), " (",
           input.desc(), ", rank ", rank, "/", size, ")");
  RG_CHECK(input.device().is_cpu(), name, "takes CPU tensors, got ", input.desc(), " (rank ", rank, "/", size,
           "); copy it to the CPU first");
  RG_CHECK(how.scale_block > 0 && how.scale_block <= INT_MAX, name, "scale_block must be in [1, INT_MAX], got ",
           how.scale_block, " (rank ", rank, "/", size, ")");
  if (how.error_feedback.defined()) {
    const Tensor& e = how.error_feedback;
    RG_CHECK(e.is_contiguous() && e.dtype() == DType::f32 && e.device().is_cpu() && e.numel() == input.numel(), name,
             "error_feedback ", e.desc(), " must be ", input.numel(),
             " contiguous f32 elements on the CPU, one per element of ", input.desc(), " (rank ", rank, "/", size, ")");
  }
  checked_count(name, static_cast<int64_t>(input.numel()) * 2, rank);
}

// The detail names every setting the ranks must share -- Note [Debug mode] compares it across
// ranks: the op, the wire format (bits 8-15 of argument), error feedback (bit 16) and the scale
// block (in tag, which a collective does not otherwise use).
std::string low_precision_detail(const OpInfo::Operands& o) {
  return str_cat(reduce_op_name(static_cast<ReduceOp>(o.argument & 0xff)), ", ", o.tensor.desc(),
                 o.output.defined() ? " -> " + o.output.desc() : std::string(), ", ",
                 wire_format_name(static_cast<WireFormat>((o.argument >> 8) & 0xff)), " on the wire, scale block ",
                 o.tag, (o.argument >> 16) & 1 ? ", error feedback" : "");
}

int pack_low_precision(ReduceOp op, const LowPrecisionAllreduce& how) {
  return static_cast<int>(op) | (static_cast<int>(how.wire) << 8) | (how.error_feedback.defined() ? 1 << 16 : 0);
}

}  // namespace

std::shared_ptr<Work> GroupBase::allreduce_low_precision(const Tensor& t, ReduceOp op,
                                                         const LowPrecisionAllreduce& how) {
  const char* name = "dist.allreduce_low_precision";
  if (!collectives_.allreduce_low_precision) return ProcessGroup::allreduce_low_precision(t, op, how);
  check_tensor(name, "tensor", t, rank_, size_);
  check_low_precision(name, t, op, how, rank_, size_);
  // bytes: what this rank's tensor takes on the wire, which a simulated network charges for.
  const OpInfo info{.name = "allreduce_low_precision",
                    .detail = low_precision_detail,
                    .operands = {.tensor = t,
                                 .argument = pack_low_precision(op, how),
                                 .tag = static_cast<int>(how.scale_block)},
                    .bytes = wire_bytes(how.wire, t.numel(), how.scale_block).total()};
  return submit_collective(info, [start = &collectives_.allreduce_low_precision, t, op, how](int tag) {
    return (*start)(t, op, how, tag);
  });
}

std::shared_ptr<Work> GroupBase::reduce_scatter_low_precision(const Tensor& output, const Tensor& input, ReduceOp op,
                                                              const LowPrecisionAllreduce& how) {
  const char* name = "dist.reduce_scatter_low_precision";
  if (!collectives_.reduce_scatter_low_precision)
    return ProcessGroup::reduce_scatter_low_precision(output, input, op, how);
  check_tensor(name, "input", input, rank_, size_);
  check_tensor(name, "output", output, rank_, size_);
  check_low_precision(name, input, op, how, rank_, size_);
  RG_CHECK(input.numel() == output.numel() * size_, name, "input ", input.desc(), " must hold N = ", size_,
           " blocks of output ", output.desc(), " (N * output.numel() elements) (rank ", rank_, "/", size_, ")");
  RG_CHECK(output.dtype() == input.dtype() && output.device().is_cpu(), name, "output ", output.desc(),
           " must be a CPU tensor of the input's dtype, ", dtype_name(input.dtype()), " (rank ", rank_, "/", size_,
           ")");
  const OpInfo info{.name = "reduce_scatter_low_precision",
                    .detail = low_precision_detail,
                    .operands = {.tensor = input,
                                 .output = output,
                                 .argument = pack_low_precision(op, how),
                                 .tag = static_cast<int>(how.scale_block)},
                    .bytes = wire_bytes(how.wire, input.numel(), how.scale_block).total()};
  return submit_collective(info, [start = &collectives_.reduce_scatter_low_precision, output, input, op, how](int tag) {
    return (*start)(output, input, op, how, tag);
  });
}

Tensor GroupBase::new_reduction_buffer(int64_t numel, DType dtype, Device device) {
  RG_CHECK(numel >= 0, "dist.new_reduction_buffer", "numel must be >= 0, got ", numel, " (rank ", rank_, "/", size_,
           ")");
  Tensor buffer = new_in_place_buffer(numel, dtype, device);
  if (buffer.defined()) return buffer;
  return ProcessGroup::new_reduction_buffer(numel, dtype, device);
}

std::shared_ptr<Work> GroupBase::broadcast(const Tensor& t, int root) {
  check_tensor("dist.broadcast", "tensor", t, rank_, size_);
  RG_CHECK(root >= 0 && root < size_, "dist.broadcast", "root ", root, " is not a rank of this group of ", size_,
           " (rank ", rank_, ")");
  checked_count("dist.broadcast", static_cast<int64_t>(t.nbytes()), rank_);
  auto detail = [](const OpInfo::Operands& o) { return str_cat("root ", o.argument, ", ", o.tensor.desc()); };
  OpInfo info{.name = "broadcast", .detail = detail, .operands = {.tensor = t, .argument = root}, .bytes = t.nbytes()};
  if (size_ == 1 && staging_.stages(t.device())) return completed_alone(info);
  return submit_collective(std::move(info),
                           // See Note [CUDA tensors through host staging].
                           [start = &collectives_.broadcast, t, host = staging_.in("dist.broadcast", t),
                            root](int tag) { return Staging::staged((*start)(host, root, tag), t, host); });
}

std::shared_ptr<Work> GroupBase::allgather(const Tensor& output, const Tensor& input) {
  check_tensor("dist.allgather", "input", input, rank_, size_);
  check_tensor("dist.allgather", "output", output, rank_, size_);
  // (N, *S), or the inputs concatenated along dim 0: (N * S0, S1, ...).
  Shape stacked{size_};
  stacked.insert(stacked.end(), input.shape().begin(), input.shape().end());
  Shape concatenated = input.shape();
  if (!concatenated.empty()) concatenated[0] *= size_;
  const bool shape_fits = output.shape() == stacked || (!input.shape().empty() && output.shape() == concatenated);
  const std::string or_concatenated =
      input.shape().empty() ? "" : str_cat(" or (N * input.shape[0], ...) = ", shape_str(concatenated));
  RG_CHECK(shape_fits && output.dtype() == input.dtype(), "dist.allgather", "output ", output.desc(),
           " must be (N, *input.shape) = ", shape_str(stacked), or_concatenated, " ", dtype_name(input.dtype()),
           " for input ", input.desc(), " (rank ", rank_, "/", size_, ")");
  checked_count("dist.allgather", static_cast<int64_t>(output.nbytes()), rank_);
  auto detail = [](const OpInfo::Operands& o) { return o.tensor.desc(); };
  const OpInfo info{.name = "allgather", .detail = detail, .operands = {.tensor = input}, .bytes = input.nbytes()};
  // Note [Allgather in a shared buffer]: only the in-place form, whose block of this rank already
  // sits where every rank reads it.
  const auto* block = static_cast<const std::byte*>(output.raw_data()) + static_cast<size_t>(rank_) * input.nbytes();
  if (InPlaceBuffer* buffer = input.raw_data() == block ? staging_.in_place_buffer(output) : nullptr) {
    return submit_collective(info,
                             [buffer, flat = output.view({-1})](int tag) { return buffer->allgather(flat, tag); });
  }
  // In place (input is output's block of this rank, as PyTorch's all_gather_into_tensor allows)
  // anywhere else: MPI and the algorithms take distinct buffers, so the block travels as a copy.
  const auto* in_begin = static_cast<const std::byte*>(input.raw_data());
  const auto* out_begin = static_cast<const std::byte*>(output.raw_data());
  const bool overlaps = input.numel() > 0 && input.storage() == output.storage() &&
                        in_begin < out_begin + output.nbytes() && out_begin < in_begin + input.nbytes();
  const Tensor source = overlaps ? input.clone() : input;
  // See Note [CUDA tensors through host staging].
  const Tensor host_in = staging_.in("dist.allgather", source), host_out = staging_.out("dist.allgather", output);
  return submit_collective(info, [start = &collectives_.allgather, output, host_in, host_out](int tag) {
    return Staging::staged((*start)(host_out, host_in, tag), output, host_out);
  });
}

std::shared_ptr<Work> GroupBase::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("dist.reduce_scatter", "input", input, rank_, size_);
  check_tensor("dist.reduce_scatter", "output", output, rank_, size_);
  RG_CHECK(input.dtype() != DType::u8, "dist.reduce_scatter", "dtype u8 is not supported (", input.desc(), ", rank ",
           rank_, "/", size_, "); use f32, f64, f16, bf16, i32 or i64");
  RG_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(), "dist.reduce_scatter", "input ",
           input.desc(), " must hold N = ", size_, " blocks of output ", output.desc(),
           " (N * output.numel() elements of output's dtype) (rank ", rank_, "/", size_, ")");
  checked_count("dist.reduce_scatter", input.numel(), rank_);
  auto detail = [](const OpInfo::Operands& o) {
    return str_cat(reduce_op_name(static_cast<ReduceOp>(o.argument)), ", ", o.tensor.desc(), " -> ", o.output.desc());
  };
  OpInfo info{.name = "reduce_scatter",
              .detail = detail,
              .operands = {.tensor = input, .output = output, .argument = static_cast<int>(op)},
              .bytes = input.nbytes()};
  if (std::shared_ptr<Work> work = reduce_scatter_staged(info, output, input, op)) return work;
  return submit_collective(std::move(info), [start = &collectives_.reduce_scatter, output,
                                             host_in = staging_.in("dist.reduce_scatter", input),
                                             host_out = staging_.out("dist.reduce_scatter", output), op](int tag) {
    // See Note [CUDA tensors through host staging].
    return Staging::staged((*start)(host_out, host_in, op, tag), output, host_out);
  });
}

std::shared_ptr<Work> GroupBase::barrier() {
  return submit_collective({.name = "barrier",
                            .detail = [](const OpInfo::Operands&) { return std::string("no data"); }},
                           [comms = comms_.get()](int /*tag*/) { return comms->start_barrier(); });
}

}  // namespace ringgrad::dist::detail
