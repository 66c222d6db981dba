#include "dist/group_base.h"

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "core/storage.h"
#include "dist/mpi_check.h"
#include "dist/requests.h"

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

// RINGGRAD_DIST_DEBUG and friends: unset / "" / 0 / false / off are false; 1 / true / on are true.
bool env_flag(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr) return false;
  const std::string v = env;
  if (v.empty() || v == "0" || v == "false" || v == "off") return false;
  RG_CHECK(v == "1" || v == "true" || v == "on", "dist.new_group", name, "='", v, "' is not 0/1/true/false/on/off");
  return true;
}

SimulatedNetwork simulated_network_from(const GroupOptions& options) {
  if (options.simulated_network) return *options.simulated_network;
  const char* env = std::getenv("RINGGRAD_SIMULATED_NETWORK");
  if (env == nullptr || *env == '\0') return {};
  SimulatedNetwork net;
  char comma = 0;
  std::istringstream in(env);
  const bool ok = (in >> net.bandwidth_gbps >> comma >> net.latency_us) && comma == ',' && in.peek() == EOF &&
                  net.bandwidth_gbps >= 0 && net.latency_us >= 0;
  RG_CHECK(ok, "dist.new_group", "RINGGRAD_SIMULATED_NETWORK='", env,
           "' is not 'GBPS,LATENCY_US' (e.g. '1,50': 1 GB/s, 50 us)");
  return net;
}

// Note [CUDA tensors through host staging]: the MPI backends move host memory, so a collective on a
// GPU tensor copies it to a pinned host tensor when it is submitted (on the caller's thread, which is
// the moment its data must be final), runs on the copy, and copies the result back to the GPU on the
// communication thread before its Work completes -- so after wait() the GPU tensor holds the result,
// as for a CPU tensor. Every copy is a synchronous cudaMemcpy on the legacy default stream, ordered
// with the kernels that produced and will read the tensor. It costs two copies per collective; the
// nccl backend (GPU-resident) avoids them, and stages CPU tensors the other way, through its GPU.
// This is what lets several ranks share one GPU in tests.

// An op on staged tensors: when it finishes, copies each staged result back to the caller's tensor.
class StagedOp : public PendingOp {
 public:
  StagedOp(std::unique_ptr<PendingOp> inner, std::vector<std::pair<Tensor, Tensor>> copy_back)
      : inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}
  bool poll() override {
    if (!inner_->poll()) return false;
    for (auto& [destination, result] : copy_back_) destination.copy_(result);
    return true;
  }
  void abandon() override { inner_->abandon(); }

 private:
  std::unique_ptr<PendingOp> inner_;
  std::vector<std::pair<Tensor, Tensor>> copy_back_;  // (the caller's tensor, the staged result)
};

// `inner` itself when nothing was staged.
std::unique_ptr<PendingOp> staged(std::unique_ptr<PendingOp> inner, const Tensor& device_out, const Tensor& host_out) {
  if (device_out.device() == host_out.device()) return inner;
  return std::make_unique<StagedOp>(std::move(inner), std::vector<std::pair<Tensor, Tensor>>{{device_out, host_out}});
}

int next_group_id() {
  static std::atomic<int> id{0};
  return id++;
}

// The debug fingerprint: fixed size, so one MPI_Iallgather exchanges every rank's.
constexpr int kFingerprintBytes = 192;

// Note [Debug mode]: all-gathers the fingerprints, compares, then runs the real collective.
class CheckedOp : public PendingOp {
 public:
  CheckedOp(const std::string& fingerprint, const std::string& where, MPI_Comm comm, int rank, int size,
            std::function<std::unique_ptr<PendingOp>()> start_real)
      : where_(where), rank_(rank), size_(size), mine_(kFingerprintBytes, '\0'),
        all_(static_cast<size_t>(kFingerprintBytes) * size, '\0'), start_real_(std::move(start_real)) {
    fingerprint.copy(mine_.data(), kFingerprintBytes - 1);
    RG_MPI_CHECK(MPI_Iallgather(mine_.data(), kFingerprintBytes, MPI_CHAR, all_.data(), kFingerprintBytes, MPI_CHAR,
                                comm, &request_));
  }

  bool poll() override {
    if (!real_) {
      int done = 0;
      RG_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
      if (!done) return false;
      compare();
      real_ = start_real_();
    }
    return real_->poll();
  }
  void abandon() override {
    if (real_) real_->abandon();  // an unfinished MPI_Iallgather cannot be cancelled; it is leaked
  }

 private:
  std::string view(int r) const { return std::string(all_.data() + static_cast<size_t>(r) * kFingerprintBytes); }

  void compare() const {
    int first = -1;
    for (int r = 1; r < size_ && first < 0; ++r)
      if (view(r) != view(0)) first = r;
    if (first < 0) return;
    std::string views;
    for (int r = 0; r < size_; ++r) {
      if (r == 16 && size_ > 17) {
        views += str_cat("\n  ... (", size_ - 17, " more ranks)");
        r = size_ - 1;
      }
      views += str_cat("\n  rank ", r, ": ", view(r), r == first ? "   <-- first to differ from rank 0" : "");
    }
    RG_FAIL("dist.debug", "ranks disagree on ", where_, " (seen by rank ", rank_, "/", size_, "):", views,
            "\nEvery rank must issue the same collectives, with the same shapes and dtypes, in the same order "
            "(Note [Collective order] in dist/process_group.h).");
  }

  std::string where_;
  int rank_, size_;
  std::vector<char> mine_, all_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::function<std::unique_ptr<PendingOp>()> start_real_;
  std::unique_ptr<PendingOp> real_;
};

// A receive that checks the message filled the tensor exactly.
class RecvOp : public PendingOp {
 public:
  RecvOp(const Tensor& t, int src, int tag, MPI_Comm comm) : tensor_(t), src_(src), tag_(tag) {
    RG_MPI_CHECK(MPI_Irecv(t.raw_data(), static_cast<int>(t.nbytes()), MPI_BYTE, src, tag, comm, &request_));
  }
  bool poll() override {
    int done = 0;
    MPI_Status status{};
    // A single-request MPI_Test reports errors in its return value only (status.MPI_ERROR is not
    // set); the communicator returns errors (MPI_ERRORS_RETURN) rather than aborting.
    const int rc = MPI_Test(&request_, &done, &status);
    if (rc != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      RG_CHECK(cls != MPI_ERR_TRUNCATE, "dist.recv", "the message from rank ", src_, " (tag ", tag_,
               ") is larger than the receiving tensor ", tensor_.desc(), " of ", tensor_.nbytes(), " bytes");
      RG_MPI_CHECK(rc);
    }
    if (!done) return false;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    RG_CHECK(static_cast<size_t>(count) == tensor_.nbytes(), "dist.recv", "the message from rank ", src_, " (tag ",
             tag_, ") has ", count, " bytes but the receiving tensor ", tensor_.desc(), " has ", tensor_.nbytes());
    return true;
  }
  void abandon() override { abandon_request(request_, true); }

 private:
  Tensor tensor_;
  int src_, tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

GroupBase::GroupBase(std::string backend, const GroupOptions& options)
    : backend_(std::move(backend)),
      timeout_seconds_(options.timeout_seconds ? *options.timeout_seconds : default_collective_timeout()) {
  RG_CHECK(timeout_seconds_ > 0, "dist.new_group", "timeout must be positive, got ", timeout_seconds_, " s");
  RG_CHECK(options.max_poll_sleep_us >= 0, "dist.new_group", "max_poll_sleep_us must be >= 0, got ",
           options.max_poll_sleep_us);
  RG_CHECK(options.ring_segment_bytes >= 64, "dist.new_group", "ring_segment_bytes must be >= 64, got ",
           options.ring_segment_bytes);
  ring_tuning_.segment_bytes = options.ring_segment_bytes;
  debug_check_ = options.debug_check ? *options.debug_check : env_flag("RINGGRAD_DIST_DEBUG");
  const int id = next_group_id();
  const char* trace_prefix = std::getenv("RINGGRAD_DIST_TRACE");
  const bool trace = options.trace ? *options.trace : (trace_prefix != nullptr && *trace_prefix != '\0');
  for (MPI_Comm* c : {&comm_, &p2p_comm_, &debug_comm_}) {
    RG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, c));
    RG_MPI_CHECK(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN));
  }
  RG_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  RG_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  if (trace && trace_prefix != nullptr && *trace_prefix != '\0')
    trace_path_ = str_cat(trace_prefix, ".rank", rank_, ".g", id, "-", backend_, ".json");
  comm_thread_ = std::make_shared<CommThread>(backend_, rank_, size_, timeout_seconds_, options.max_poll_sleep_us,
                                              trace, simulated_network_from(options));
}

void GroupBase::use_shared_memory(const GroupOptions& options) {
  // Every rank must take the same path (create() is collective): the least willing rank decides.
  // A malformed RINGGRAD_DIST_SHM votes -1 rather than throwing here, which would leave the other
  // ranks waiting in the vote; after it, every rank throws.
  const char* env = std::getenv("RINGGRAD_DIST_SHM");
  std::exception_ptr env_error;
  int mine = 1;
  if (options.shared_memory) {
    mine = *options.shared_memory;
  } else if (env != nullptr && *env != '\0') {
    try {
      mine = env_flag("RINGGRAD_DIST_SHM");
    } catch (const Error&) {
      env_error = std::current_exception();
      mine = -1;
    }
  }
  int all = 0;
  RG_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm_));
  if (env_error) std::rethrow_exception(env_error);
  RG_CHECK(all >= 0, "dist.new_group", "RINGGRAD_DIST_SHM is malformed on another rank than ", rank_);
  if (all == 1) shared_slots_ = SharedSlots::create(comm_, rank_, size_);
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
  // A broken group may still have requests MPI is working on: leave its communicators (and scratch,
  // which they may write into) alone rather than free them under MPI. See Note [After a timeout].
  if (comm_thread_->broken()) {
    scratch_.leak();
    return;
  }
  for (MPI_Comm* c : {&comm_, &p2p_comm_, &debug_comm_}) MPI_Comm_free(c);  // no throw from a destructor
}

std::shared_ptr<Work> GroupBase::submit_checked(OpInfo info,
                                                std::function<std::unique_ptr<PendingOp>(int tag)> start) {
  // Without device indices: ranks that each drive their own GPU ("cuda:0", "cuda:1") issue the same
  // collective.
  std::string fingerprint = std::regex_replace(str_cat(info.name, " (", info.detail(info.operands), ")"),
                                               std::regex("cuda:[0-9]+"), "cuda");
  return comm_thread_->submit(std::move(info), [this, start = std::move(start), fingerprint](uint64_t seq) {
    const std::string where = str_cat("collective #", seq, " of backend '", backend_, "'");
    return std::make_unique<CheckedOp>(fingerprint, where, debug_comm_, rank_, size_,
                                       [start, seq] { return start(collective_tag(seq)); });
  });
}

std::shared_ptr<Work> GroupBase::submit_p2p(OpInfo info, std::function<std::unique_ptr<PendingOp>()> start) {
  info.p2p = true;
  return comm_thread_->submit(std::move(info), [start = std::move(start)](uint64_t) { return start(); });
}

// The device the backend's start_* works on: the host, or the group's GPU (nccl). Tensors elsewhere
// are staged there and back -- for nccl that is the reverse trip: small CPU tensors (DDP's parameter
// check, bucket order and found-inf flag) go to the GPU and back.
Device GroupBase::work_device() const { return native_device_ ? *native_device_ : Device::cpu(); }

// Staging crosses between the host and one GPU, never between two GPUs.
void GroupBase::check_stageable(const char* op, const Tensor& t) const {
  const Device target = work_device();
  RG_CHECK(t.device().is_cpu() || target.is_cpu(), op, "tensor ", t.desc(), " is on another GPU than this group's ",
           target.str(), " (backend '", backend_, "', rank ", rank_, "/", size_, ")");
}

// A GPU tensor's host side lives in pinned memory: both copies are then DMA transfers, without the
// driver's bounce buffer.
Tensor GroupBase::stage_in(const char* op, const Tensor& t) const {
  if (t.device() == work_device()) return t;
  check_stageable(op, t);
  if (!work_device().is_cpu()) return t.to(work_device());
  Tensor host = native::empty_pinned(t.shape(), t.dtype());
  native::copy_(host, t);
  return host;
}

Tensor GroupBase::stage_out(const char* op, const Tensor& t) const {
  if (t.device() == work_device()) return t;
  check_stageable(op, t);
  if (!work_device().is_cpu()) return empty(t.shape(), {.dtype = t.dtype(), .device = work_device()});
  return native::empty_pinned(t.shape(), t.dtype());
}

namespace {
// Point-to-point runs over MPI on host memory whatever the group's backend (nccl's too), so a GPU
// tensor is staged through pinned host memory: a send copies it in when submitted, a receive copies
// the message back before its Work completes (Note [CUDA tensors through host staging]).
Tensor p2p_host_side(const Tensor& t, bool copy_in) {
  if (t.device().is_cpu()) return t;
  Tensor host = native::empty_pinned(t.shape(), t.dtype());
  if (copy_in) native::copy_(host, t);
  return host;
}
}  // namespace

void GroupBase::check_peer(const char* op, int peer, int tag, const Tensor& t) const {
  check_tensor(op, "tensor", t, rank_, size_);
  RG_CHECK(peer >= 0 && peer < size_ && peer != rank_, op, "peer rank ", peer, " must be another rank of this group of ",
           size_, " (rank ", rank_, ")");
  RG_CHECK(tag >= 0 && tag <= 32767, op, "tag ", tag, " must be in [0, 32767] (rank ", rank_, "/", size_, ")");
  checked_count(op, static_cast<int64_t>(t.nbytes()), rank_);
}

std::shared_ptr<Work> GroupBase::send(const Tensor& t, int dst, int tag) {
  check_peer("dist.send", dst, tag, t);
  const Tensor host = p2p_host_side(t, /*copy_in=*/true);
  auto detail = [](const OpInfo::Operands& o) { return str_cat("to rank ", o.x, ", tag ", o.y, ", ", o.a.desc()); };
  return submit_p2p({.name = "send", .detail = detail, .operands = {.a = t, .x = dst, .y = tag}, .bytes = t.nbytes()},
                    [this, host, dst, tag] {
                      MPI_Request request;
                      RG_MPI_CHECK(MPI_Isend(host.raw_data(), static_cast<int>(host.nbytes()), MPI_BYTE, dst, tag,
                                             p2p_comm_, &request));
                      return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr,
                                                          std::vector<Tensor>{host});
                    });
}

std::shared_ptr<Work> GroupBase::recv(const Tensor& t, int src, int tag) {
  check_peer("dist.recv", src, tag, t);
  auto detail = [](const OpInfo::Operands& o) { return str_cat("from rank ", o.x, ", tag ", o.y, ", ", o.a.desc()); };
  return submit_p2p({.name = "recv", .detail = detail, .operands = {.a = t, .x = src, .y = tag}, .bytes = t.nbytes()},
                    [this, t, host = p2p_host_side(t, /*copy_in=*/false), src, tag] {
                      return staged(std::make_unique<RecvOp>(host, src, tag, p2p_comm_), t, host);
                    });
}

std::shared_ptr<Work> GroupBase::allreduce(const Tensor& t, ReduceOp op) {
  check_tensor("dist.allreduce", "tensor", t, rank_, size_);
  const DType dt = t.dtype();
  RG_CHECK(dt != DType::u8, "dist.allreduce", "dtype u8 is not supported (", t.desc(), ", rank ", rank_, "/",
           size_, "); use f32, f64, f16, bf16, i32 or i64");
  checked_count("dist.allreduce", t.numel(), rank_);
  auto detail = [](const OpInfo::Operands& o) {
    return str_cat(reduce_op_name(static_cast<ReduceOp>(o.x)), ", ", o.a.desc());
  };
  const OpInfo info{
      .name = "allreduce", .detail = detail, .operands = {.a = t, .x = static_cast<int>(op)}, .bytes = t.nbytes()};
  if (std::shared_ptr<SharedBuffer> shared = shared_buffer_of(t))  // Note [Shared gradient buffers]
    return submit_collective(info, [shared = std::move(shared), t, op](int tag) { return shared->allreduce(t, op, tag); });
  // See Note [CUDA tensors through host staging].
  return submit_collective(info, [this, t, host = stage_in("dist.allreduce", t), op](int tag) {
    return staged(start_allreduce(host, op, tag), t, host);
  });
}

Tensor GroupBase::new_reduction_buffer(int64_t numel, DType dtype, Device device) {
  RG_CHECK(numel >= 0, "dist.new_reduction_buffer", "numel must be >= 0, got ", numel, " (rank ", rank_, "/", size_,
           ")");
  // Every rank takes the same branch: shared_slots_ is set on all ranks or on none, and the
  // arguments are the same everywhere.
  if (shared_slots_ == nullptr || !device.is_cpu() || numel == 0 || dtype == DType::u8)
    return ProcessGroup::new_reduction_buffer(numel, dtype, device);
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  std::shared_ptr<SharedBuffer> shared = SharedBuffer::create(*this, bytes);
  if (shared == nullptr) return ProcessGroup::new_reduction_buffer(numel, dtype, device);
  {
    std::lock_guard<std::mutex> lock(shared_buffers_mutex_);
    std::erase_if(shared_buffers_, [](const std::weak_ptr<SharedBuffer>& b) { return b.expired(); });
    shared_buffers_.push_back(shared);
    any_shared_buffers_.store(true, std::memory_order_relaxed);
  }
  // The storage owns the mapping: it is unmapped when the last view of the buffer goes away.
  auto storage = std::make_shared<Storage>(shared->mine(), bytes, Device::cpu(), [shared](void*) mutable { shared.reset(); });
  return make_view(storage, {numel}, {1}, 0, dtype);  // zero: a new segment is zero-filled
}

std::shared_ptr<SharedBuffer> GroupBase::shared_buffer_of(const Tensor& t) const {
  if (!any_shared_buffers_.load(std::memory_order_relaxed) || !t.device().is_cpu()) return nullptr;
  std::lock_guard<std::mutex> lock(shared_buffers_mutex_);
  for (const std::weak_ptr<SharedBuffer>& weak : shared_buffers_)
    if (std::shared_ptr<SharedBuffer> b = weak.lock(); b != nullptr && b->contains(t)) return b;
  return nullptr;
}

std::shared_ptr<Work> GroupBase::broadcast(const Tensor& t, int root) {
  check_tensor("dist.broadcast", "tensor", t, rank_, size_);
  RG_CHECK(root >= 0 && root < size_, "dist.broadcast", "root ", root, " is not a rank of this group of ",
           size_, " (rank ", rank_, ")");
  checked_count("dist.broadcast", static_cast<int64_t>(t.nbytes()), rank_);
  auto detail = [](const OpInfo::Operands& o) { return str_cat("root ", o.x, ", ", o.a.desc()); };
  return submit_collective({.name = "broadcast", .detail = detail, .operands = {.a = t, .x = root}, .bytes = t.nbytes()},
                           // See Note [CUDA tensors through host staging].
                           [this, t, host = stage_in("dist.broadcast", t), root](int tag) {
                             return staged(start_broadcast(host, root, tag), t, host);
                           });
}

std::shared_ptr<Work> GroupBase::allgather(const Tensor& output, const Tensor& input) {
  check_tensor("dist.allgather", "input", input, rank_, size_);
  check_tensor("dist.allgather", "output", output, rank_, size_);
  Shape expected{size_};
  expected.insert(expected.end(), input.shape().begin(), input.shape().end());
  RG_CHECK(output.shape() == expected && output.dtype() == input.dtype(), "dist.allgather", "output ",
           output.desc(), " must be (N, *input.shape) = ", shape_str(expected), " ", dtype_name(input.dtype()),
           " for input ", input.desc(), " (rank ", rank_, "/", size_, ")");
  checked_count("dist.allgather", static_cast<int64_t>(output.nbytes()), rank_);
  // See Note [CUDA tensors through host staging].
  const Tensor host_in = stage_in("dist.allgather", input), host_out = stage_out("dist.allgather", output);
  auto detail = [](const OpInfo::Operands& o) { return o.a.desc(); };
  return submit_collective({.name = "allgather", .detail = detail, .operands = {.a = input}, .bytes = input.nbytes()},
                           [this, output, host_in, host_out](int tag) {
                             return staged(start_allgather(host_out, host_in, tag), output, host_out);
                           });
}

std::shared_ptr<Work> GroupBase::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("dist.reduce_scatter", "input", input, rank_, size_);
  check_tensor("dist.reduce_scatter", "output", output, rank_, size_);
  RG_CHECK(input.dtype() != DType::u8, "dist.reduce_scatter", "dtype u8 is not supported (", input.desc(), ", rank ",
           rank_, "/", size_, "); use f32, f64, f16, bf16, i32 or i64");
  RG_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(), "dist.reduce_scatter",
           "input ", input.desc(), " must hold N = ", size_, " blocks of output ", output.desc(),
           " (N * output.numel() elements of output's dtype) (rank ", rank_, "/", size_, ")");
  checked_count("dist.reduce_scatter", input.numel(), rank_);
  auto detail = [](const OpInfo::Operands& o) {
    return str_cat(reduce_op_name(static_cast<ReduceOp>(o.x)), ", ", o.a.desc(), " -> ", o.b.desc());
  };
  return submit_collective({.name = "reduce_scatter",
                            .detail = detail,
                            .operands = {.a = input, .b = output, .x = static_cast<int>(op)},
                            .bytes = input.nbytes()},
                           [this, output, host_in = stage_in("dist.reduce_scatter", input),
                            host_out = stage_out("dist.reduce_scatter", output), op](int tag) {
                             // See Note [CUDA tensors through host staging].
                             return staged(start_reduce_scatter(host_out, host_in, op, tag), output, host_out);
                           });
}

std::shared_ptr<Work> GroupBase::barrier() {
  return submit_collective({.name = "barrier", .detail = [](const OpInfo::Operands&) { return std::string("no data"); }},
                           [this](int tag) { return start_barrier(tag); });
}

std::unique_ptr<PendingOp> GroupBase::start_barrier(int /*tag*/) {
  MPI_Request request;
  RG_MPI_CHECK(MPI_Ibarrier(comm_, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{});
}

std::unique_ptr<PendingOp> GroupBase::start_broadcast(const Tensor& t, int root, int /*tag*/) {
  MPI_Request request;
  RG_MPI_CHECK(MPI_Ibcast(t.raw_data(), static_cast<int>(t.nbytes()), MPI_BYTE, root, comm_, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{t});
}

std::unique_ptr<PendingOp> GroupBase::start_allgather(const Tensor& output, const Tensor& input, int /*tag*/) {
  MPI_Request request;
  const int bytes = static_cast<int>(input.nbytes());
  RG_MPI_CHECK(MPI_Iallgather(input.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, comm_,
                              &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{output, input});
}

}  // namespace ringgrad::dist::detail

namespace ringgrad::dist::detail {

std::unique_ptr<PendingOp> GroupBase::start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                           int /*tag*/) {
  const int64_t m = output.numel();
  return with_accumulator(scratch_, input, std::max<int64_t>(m, 1), [&](auto zero, auto* work, auto* recv)
                                                                          -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    using Acc = std::remove_pointer_t<decltype(work)>;
    MPI_Request request;
    RG_MPI_CHECK(MPI_Ireduce_scatter_block(work, recv, static_cast<int>(m), mpi_type<Acc>(), mpi_op(op), comm_,
                                           &request));
    auto on_done = [out = static_cast<T*>(output.raw_data()), recv, m, op, N = size_] {
      finish_into(out, recv, m, op, N);
    };
    return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, on_done,
                                        std::vector<Tensor>{output, input});
  });
}

}  // namespace ringgrad::dist::detail
