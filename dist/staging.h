// Staging: where a group's operations run their data -- the host, or the one GPU a backend drives
// itself (nccl) -- and the copies that bring a caller's tensor there and its result back
// (internal). GroupBase looks at devices only through this unit: it stages every collective's
// tensors in and out, and every send / recv's through the host, and wraps the started op so that
// the results land in the caller's tensors before the Work completes.
//
// Note [CUDA tensors through host staging]: the MPI backends move host memory, so a collective on a
// GPU tensor copies it to a pinned host tensor when it is submitted (on the caller's thread, which is
// the moment its data must be final), runs on the copy, and copies the result back to the GPU on the
// communication thread before its Work completes -- so after wait() the GPU tensor holds the result,
// as for a CPU tensor. Every copy is a synchronous cudaMemcpy on the legacy default stream, ordered
// with the kernels that produced and will read the tensor. It costs two copies per collective; the
// nccl backend (GPU-resident) avoids them, and stages CPU tensors the other way, through its GPU.
// This is what lets several ranks share one GPU in tests.
//
// Note [Host staging without a GPU]: with GroupOptions::host_staging (RINGGRAD_DIST_HOST_STAGING=1)
// an MPI backend stages CPU tensors too: each collective works on a separate host copy and writes
// its result back through the same StagedOp as a GPU tensor's, and the group offers none of its
// in-place shared-memory buffers, as for a GPU model. So a machine without a GPU runs the GPU
// path's staging -- the copies in and back, the write-back into a parameter that requires grad,
// the completion on the communication thread -- under every multi-rank DDP / ZeRO / checkpoint
// test (tests/dist/CMakeLists.txt, dist_staged_np*). What it cannot show is the device side: the
// cudaMemcpy's ordering with kernels, pinned memory, and two ranks sharing one GPU (docs/cuda.md).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "dist/comm_thread.h"
#include "dist/process_group.h"

namespace ringgrad::dist::detail {

// Note [Buffers that reduce themselves]: a buffer from new_reduction_buffer that lives in memory
// every rank of the machine maps (Note [Shared gradient buffers] in dist/shm/reduction_buffer.h)
// carries its own collectives: its storage's owner is an InPlaceBuffer, which sums a view of it in
// place across the ranks' copies. The group asks the tensor for it (Staging::in_place_buffer) rather
// than looking its address up among the buffers it made; a buffer answers only for the group that
// made it, and only where that group works on the tensor where it lies (not staged).
class InPlaceBuffer : public StorageOwner {
 public:
  explicit InPlaceBuffer(const void* group) : group_(group) {}
  const void* group() const { return group_; }  // the group whose collectives it takes part in
  // t: a view inside this rank's buffer, reduced in place over every rank's buffer. `tag` is the
  // collective's (the same on every rank). Called on the thread that runs the group's ops.
  virtual std::unique_ptr<PendingOp> allreduce(const Tensor& t, ReduceOp op, int tag) = 0;
  // t: N blocks of m elements inside this rank's buffer, this rank's block written before the call;
  // every rank's t ends up holding every rank's block (Note [Allgather in a shared buffer]).
  virtual std::unique_ptr<PendingOp> allgather(const Tensor& t, int tag) = 0;

 private:
  const void* group_;
};

class Staging {
 public:
  Staging() = default;
  // group: the group this staging serves (InPlaceBuffer::group). backend / rank / size only label
  // error messages. stage_host_tensors: Note [Host staging without a GPU].
  Staging(const void* group, std::string backend, int rank, int size, bool stage_host_tensors)
      : group_(group),
        backend_(std::move(backend)),
        rank_(rank),
        size_(size),
        stage_host_tensors_(stage_host_tensors) {}

  // A backend that moves GPU memory itself (nccl) sets its device: collectives then take tensors on
  // that device as they are, instead of staging them through the host, and stage CPU tensors
  // through that device instead. Host staging (Note [Host staging without a GPU]) is then moot.
  void set_native_device(Device device) {
    native_device_ = device;
    stage_host_tensors_ = false;
  }

  // Whether a tensor on `device` is worked on through a staged copy rather than in place: every
  // device but the work device, and the host too under Note [Host staging without a GPU]. The
  // backends ask this, not the device, before they offer anything that works in place (shared
  // memory, a world of one).
  bool stages(Device device) const;

  // The buffer t lies in when it reduces itself for this group (Note [Buffers that reduce
  // themselves]), else null: the group then runs its backend's collective, on t or its staged copy.
  InPlaceBuffer* in_place_buffer(const Tensor& t) const;

  // The tensor a backend's collective works on: t itself, or its copy on the work device (inputs:
  // copied now) / a buffer there (outputs: copied back by staged() when the op finishes).
  Tensor in(const char* op, const Tensor& t) const;
  Tensor out(const char* op, const Tensor& t) const;

  // Point-to-point runs over MPI on host memory whatever the backend: t itself when on the host
  // (and not staged), else a host tensor (pinned for a GPU tensor), holding t's data when copy_in.
  Tensor host_side(const Tensor& t, bool copy_in) const;

  // `inner`, which works on `staged_out`; when that is not `out` itself, an op that copies it into
  // `out` once `inner` finished. The copy bypasses autograd's in-place check: `out` may be a
  // parameter that requires grad (DDP's broadcast at construction), and the op may finish on the
  // communication thread, where no caller's NoGradGuard applies.
  static std::unique_ptr<PendingOp> staged(std::unique_ptr<PendingOp> inner, const Tensor& out,
                                           const Tensor& staged_out);

 private:
  Device work_device() const;
  void check_stageable(const char* op, const Tensor& t) const;
  // An uninitialised host tensor shaped as t: pinned when t is on a GPU, so that both copies are DMA.
  static Tensor host_buffer_for(const Tensor& t);

  const void* group_ = nullptr;
  std::string backend_;
  int rank_ = 0, size_ = 1;
  bool stage_host_tensors_ = false;
  std::optional<Device> native_device_;
};

}  // namespace ringgrad::dist::detail
