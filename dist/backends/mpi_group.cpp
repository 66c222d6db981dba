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
  if (!offers_shared_memory(device) || numel == 0 || dtype == DType::u8) return Tensor();
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  std::shared_ptr<SharedBuffer> shared = SharedBuffer::create(*this, bytes);
  if (shared == nullptr) return Tensor();
  // The storage owns the buffer, and carries its collectives (Note [Buffers that reduce themselves]
  // in dist/staging.h): it is unmapped when the last view of it and the last op on it are gone.
  std::byte* mine = shared->mine();
  auto storage = std::make_shared<Storage>(mine, bytes, Device::cpu(), std::move(shared));
  return make_view(storage, {numel}, {1}, 0, dtype);  // zero: a new segment is zero-filled
}

bool MpiGroupBase::reserve_reduce_scatter_staging(int64_t bytes) {
  RG_CHECK(bytes >= 0, "dist.reserve_reduce_scatter_staging", "bytes must be >= 0, got ", bytes, " (rank ", rank_, "/",
           size_, ")");
  // Every rank takes the same branch: shared_slots_ and scatter_staging_ are alike everywhere.
  if (!offers_shared_memory(Device::cpu()) || bytes == 0) return false;
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

Collectives MpiGroupBase::mpi_library_collectives() {
  return {
      .allreduce = [this](const Tensor& t, ReduceOp op,
                          int tag) { return mpi_allreduce(t, op, channel(tag), scratch_); },
      .broadcast = [this](const Tensor& t, int root, int tag) { return mpi_broadcast(t, root, channel(tag)); },
      .allgather = [this](const Tensor& output, const Tensor& input,
                          int tag) { return mpi_allgather(output, input, channel(tag)); },
      .reduce_scatter = [this](const Tensor& output, const Tensor& input, ReduceOp op,
                               int tag) { return mpi_reduce_scatter(output, input, op, channel(tag), scratch_); },
      .allreduce_low_precision =
          [this](const Tensor& t, ReduceOp op, const LowPrecisionAllreduce& how, int tag) {
            return low_precision_ring_allreduce(t, op, how, channel(tag), scratch_);
          },
      .reduce_scatter_low_precision =
          [this](const Tensor& output, const Tensor& input, ReduceOp op, const LowPrecisionAllreduce& how, int tag) {
            return low_precision_ring_reduce_scatter(output, input, op, how, channel(tag), scratch_);
          },
  };
}

Collectives MpiGroupBase::ring_collectives() {
  return {
      .allreduce = [this](const Tensor& t, ReduceOp op,
                          int tag) { return ring_allreduce(t, op, channel(tag), scratch_, ring_tuning_); },
      .broadcast = [this](const Tensor& t, int root, int tag) { return chain_broadcast(t, root, channel(tag)); },
      .allgather = [this](const Tensor& output, const Tensor& input,
                          int tag) { return ring_allgather(output, input, channel(tag)); },
      .reduce_scatter =
          [this](const Tensor& output, const Tensor& input, ReduceOp op, int tag) {
            return ring_reduce_scatter(output, input, op, channel(tag), scratch_, ring_tuning_);
          },
      .allreduce_low_precision =
          [this](const Tensor& t, ReduceOp op, const LowPrecisionAllreduce& how, int tag) {
            return low_precision_ring_allreduce(t, op, how, channel(tag), scratch_);
          },
      .reduce_scatter_low_precision =
          [this](const Tensor& output, const Tensor& input, ReduceOp op, const LowPrecisionAllreduce& how, int tag) {
            return low_precision_ring_reduce_scatter(output, input, op, how, channel(tag), scratch_);
          },
  };
}

std::unique_ptr<PendingOp> MpiGroupBase::small_allreduce(const Tensor& t, ReduceOp op, int tag) {
  if (shared_slots_ != nullptr && SharedSlots::fits(t)) return shared_slots_->allreduce(t, op, tag, scratch_);
  return tree_allreduce(t, op, channel(tag), scratch_);
}

}  // namespace ringgrad::dist::detail
