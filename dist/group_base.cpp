#include "dist/group_base.h"

#include <climits>

#include "core/error.h"
#include "dist/mpi_check.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

void check_tensor(const char* op, const char* what, const Tensor& t, int rank, int size) {
  RG_CHECK(t.defined(), op, what, " is an undefined tensor (rank ", rank, "/", size, ")");
  RG_CHECK(t.device().is_cpu(), op, what, " ", t.desc(), " must be on the cpu (rank ", rank, "/", size,
           "); CUDA tensors need the nccl backend, not in this build");
  // An empty tensor has no layout to get wrong (core's is_contiguous says false for e.g. (2, 0)).
  RG_CHECK(t.numel() == 0 || t.is_contiguous(), op, what, " ", t.desc(), " must be contiguous (rank ", rank, "/", size,
           "); pass t.contiguous() and copy the result back");
}

int checked_count(const char* op, int64_t n, int rank) {
  RG_CHECK(n <= INT_MAX, op, "count ", n, " exceeds MPI's int count limit ", INT_MAX, " (rank ", rank,
           "); split the tensor");
  return static_cast<int>(n);
}

GroupBase::GroupBase(std::string backend, const GroupOptions& options)
    : backend_(std::move(backend)),
      timeout_seconds_(options.timeout_seconds ? *options.timeout_seconds : default_collective_timeout()) {
  RG_CHECK(timeout_seconds_ > 0, "dist.new_group", "timeout must be positive, got ", timeout_seconds_, " s");
  RG_CHECK(options.max_poll_sleep_us >= 0, "dist.new_group", "max_poll_sleep_us must be >= 0, got ",
           options.max_poll_sleep_us);
  RG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  RG_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  RG_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  RG_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  comm_thread_ = std::make_unique<CommThread>(backend_, rank_, size_, timeout_seconds_, options.max_poll_sleep_us);
}

GroupBase::~GroupBase() {
  comm_thread_->shutdown();
  // A broken group may still have requests MPI is working on: leave its communicator (and scratch,
  // which they may write into) alone rather than free them under MPI. See Note [After a timeout].
  if (comm_thread_->broken()) {
    for (auto& s : scratch_) new std::vector<std::byte>(std::move(s));  // deliberate leak
    return;
  }
  MPI_Comm_free(&comm_);  // no throw from a destructor
}

std::byte* GroupBase::scratch(int i, size_t bytes) {
  if (scratch_[i].size() < bytes) {
    scratch_[i].clear();
    scratch_[i].shrink_to_fit();
    scratch_[i].resize(bytes);
  }
  return scratch_[i].data();
}

std::shared_ptr<Work> GroupBase::submit(const std::string& name, std::string detail, size_t bytes,
                                        std::function<std::unique_ptr<PendingOp>(int tag)> start) {
  OpInfo info{name, std::move(detail), 0, bytes};
  // MPI guarantees tags up to 32767; consecutive ops get different tags, so a timed-out op's
  // late messages never match the next op's receives.
  auto work = comm_thread_->submit(std::move(info), [start = std::move(start)](uint64_t seq) {
    return start(static_cast<int>(seq % 32768));
  });
  return work;
}

std::shared_ptr<Work> GroupBase::allreduce(const Tensor& t, ReduceOp op) {
  check_tensor("dist.allreduce", "tensor", t, rank_, size_);
  const DType dt = t.dtype();
  RG_CHECK(dt != DType::u8, "dist.allreduce", "dtype u8 is not supported (", t.desc(), ", rank ", rank_, "/",
           size_, "); use f32, f64, f16, bf16, i32 or i64");
  checked_count("dist.allreduce", t.numel(), rank_);
  return submit("allreduce", str_cat(reduce_op_name(op), ", ", t.desc()), t.nbytes(),
                [this, t, op](int tag) { return start_allreduce(t, op, tag); });
}

std::shared_ptr<Work> GroupBase::broadcast(const Tensor& t, int root) {
  check_tensor("dist.broadcast", "tensor", t, rank_, size_);
  RG_CHECK(root >= 0 && root < size_, "dist.broadcast", "root ", root, " is not a rank of this group of ",
           size_, " (rank ", rank_, ")");
  checked_count("dist.broadcast", static_cast<int64_t>(t.nbytes()), rank_);
  return submit("broadcast", str_cat("root ", root, ", ", t.desc()), t.nbytes(),
                [this, t, root](int tag) { return start_broadcast(t, root, tag); });
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
  return submit("allgather", input.desc(), input.nbytes(),
                [this, output, input](int tag) { return start_allgather(output, input, tag); });
}

std::shared_ptr<Work> GroupBase::barrier() {
  return submit("barrier", "no data", 0, [this](int tag) { return start_barrier(tag); });
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
