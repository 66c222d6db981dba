#include "dist/backends/mpi_group.h"

#include <algorithm>
#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/storage.h"
#include "dist/algorithms/network_model.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/mpi_check.h"
#include "dist/mpi_comms.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

MpiGroupBase::MpiGroupBase(std::string backend, const GroupOptions& options)
    : GroupBase(std::move(backend), options), comm_(comms().comm()) {
  ring_tuning_.segment_bytes = options.ring_segment_bytes;  // checked by GroupBase
}

MpiGroupBase::~MpiGroupBase() {
  shutdown();
  // A broken group may still have requests MPI is working on: leave its scratch, which they may
  // write into, alone rather than free it under MPI (GroupBase leaves the communicators). See Note
  // [After a timeout].
  if (broken()) scratch_.leak();
}

void MpiGroupBase::use_shared_memory(const GroupOptions& options) {
  // Every rank must take the same path (create() is collective): the least willing rank decides.
  // A malformed RINGGRAD_DIST_SHM votes -1 rather than throwing here, which would leave the other
  // ranks waiting in the vote; after it, every rank throws.
  std::exception_ptr env_error;
  int mine = switch_vote(options.shared_memory, "RINGGRAD_DIST_SHM", true, env_error);
  // Under the per-message network model shared memory would bypass the modelled links (Note [A
  // price per message] in dist/algorithms/network_model.h).
  try {
    if (mine == 1 && network_model()) mine = 0;
  } catch (const Error&) {
    if (!env_error) env_error = std::current_exception();
    mine = -1;
  }
  int all = 0;
  RG_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm_));
  if (env_error) std::rethrow_exception(env_error);
  RG_CHECK(all >= 0, "dist.new_group", "RINGGRAD_DIST_SHM is malformed on another rank than ", rank_);
  if (all == 1) shared_slots_ = SharedSlots::create(comm_, rank_, size_);
}

Tensor MpiGroupBase::new_in_place_buffer(int64_t numel, DType dtype, Device device) {
  // Every rank takes the same branch: shared_slots_ is set on all ranks or on none, and the
  // arguments are the same everywhere.
  // A staged buffer is never reduced where it lies (Note [CUDA tensors through host staging]).
  if (shared_slots_ == nullptr || staging().stages(device) || numel == 0 || dtype == DType::u8) return Tensor();
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  std::shared_ptr<SharedBuffer> shared = SharedBuffer::create(*this, bytes);
  if (shared == nullptr) return Tensor();
  {
    std::lock_guard<std::mutex> lock(shared_buffers_mutex_);
    std::erase_if(shared_buffers_, [](const std::weak_ptr<SharedBuffer>& b) { return b.expired(); });
    shared_buffers_.push_back(shared);
    any_shared_buffers_.store(true, std::memory_order_relaxed);
  }
  // The storage owns the mapping: it is unmapped when the last view of the buffer goes away.
  auto storage =
      std::make_shared<Storage>(shared->mine(), bytes, Device::cpu(), [shared](void*) mutable { shared.reset(); });
  return make_view(storage, {numel}, {1}, 0, dtype);  // zero: a new segment is zero-filled
}

std::shared_ptr<Work> MpiGroupBase::allreduce_in_place(const OpInfo& info, const Tensor& t, ReduceOp op) {
  std::shared_ptr<SharedBuffer> shared = shared_buffer_of(t);
  if (shared == nullptr) return nullptr;
  return submit_collective(info,
                           [shared = std::move(shared), t, op](int tag) { return shared->allreduce(t, op, tag); });
}

std::shared_ptr<Work> MpiGroupBase::allgather_in_place(const OpInfo& info, const Tensor& output, const Tensor& input) {
  if (input.numel() == 0) return nullptr;
  // Only the in-place form: the block this rank contributes already sits where every rank reads it.
  const auto* block = static_cast<const std::byte*>(output.raw_data()) + static_cast<size_t>(rank_) * input.nbytes();
  if (input.raw_data() != block) return nullptr;
  std::shared_ptr<SharedBuffer> shared = shared_buffer_of(output);
  if (shared == nullptr) return nullptr;
  const Tensor flat = output.view({-1});
  return submit_collective(info, [shared = std::move(shared), flat](int tag) { return shared->allgather(flat, tag); });
}

bool MpiGroupBase::reserve_reduce_scatter_staging(int64_t bytes) {
  RG_CHECK(bytes >= 0, "dist.reserve_reduce_scatter_staging", "bytes must be >= 0, got ", bytes, " (rank ", rank_, "/",
           size_, ")");
  // Every rank takes the same branch: shared_slots_ and scatter_staging_ are alike everywhere.
  if (shared_slots_ == nullptr || bytes == 0 || staging().stages(Device::cpu())) return false;
  if (scatter_staging_ != nullptr && scatter_staging_->bytes() >= static_cast<size_t>(bytes)) return true;
  std::shared_ptr<SharedBuffer> staging = SharedBuffer::create(*this, static_cast<size_t>(bytes));
  if (staging == nullptr) return false;
  // A queued reduce-scatter keeps the old segment alive through its own reference.
  scatter_staging_ = std::move(staging);
  return true;
}

std::shared_ptr<Work> MpiGroupBase::reduce_scatter_staged(const OpInfo& info, const Tensor& output, const Tensor& input,
                                                          ReduceOp op) {
  // The same branch on every rank for the same arguments (what a correct program passes).
  if (scatter_staging_ == nullptr || staging().stages(input.device()) || input.numel() == 0 ||
      !output.is_contiguous() || !scatter_staging_->rounds_fit(input.element_size()))
    return nullptr;
  return submit_collective(info, [staging = scatter_staging_, output = output.view({-1}), input, op](int tag) {
    return staging->reduce_scatter(output, input, op, tag);
  });
}

std::shared_ptr<SharedBuffer> MpiGroupBase::shared_buffer_of(const Tensor& t) const {
  if (!any_shared_buffers_.load(std::memory_order_relaxed) || !t.device().is_cpu()) return nullptr;
  std::lock_guard<std::mutex> lock(shared_buffers_mutex_);
  for (const std::weak_ptr<SharedBuffer>& weak : shared_buffers_)
    if (std::shared_ptr<SharedBuffer> b = weak.lock(); b != nullptr && b->contains(t)) return b;
  return nullptr;
}

std::unique_ptr<PendingOp> MpiGroupBase::start_broadcast(const Tensor& t, int root, int /*tag*/) {
  MPI_Request request;
  RG_MPI_CHECK(MPI_Ibcast(t.raw_data(), static_cast<int>(t.nbytes()), MPI_BYTE, root, comm_, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{t});
}

std::unique_ptr<PendingOp> MpiGroupBase::start_allgather(const Tensor& output, const Tensor& input, int /*tag*/) {
  MPI_Request request;
  const int bytes = static_cast<int>(input.nbytes());
  RG_MPI_CHECK(MPI_Iallgather(input.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, comm_, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{output, input});
}

std::unique_ptr<PendingOp> MpiGroupBase::start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                              int /*tag*/) {
  const int64_t m = output.numel();
  return with_accumulator(scratch_, input, std::max<int64_t>(m, 1),
                          [&](auto zero, auto* work, auto* recv) -> std::unique_ptr<PendingOp> {
                            using T = decltype(zero);
                            using Acc = std::remove_pointer_t<decltype(work)>;
                            MPI_Request request;
                            RG_MPI_CHECK(MPI_Ireduce_scatter_block(work, recv, static_cast<int>(m), mpi_type<Acc>(),
                                                                   mpi_op(op), comm_, &request));
                            auto on_done = [out = static_cast<T*>(output.raw_data()), recv, m, op, N = size_] {
                              finish_into(out, recv, m, op, N);
                            };
                            return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, on_done,
                                                                std::vector<Tensor>{output, input});
                          });
}

}  // namespace ringgrad::dist::detail
