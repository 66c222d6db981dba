// Backend "nccl": collectives on GPU tensors with NVIDIA's NCCL, behind the same ProcessGroup
// interface and the same communication thread as the MPI backends -- so submission order, Work
// handles, timeouts with a diagnosis, stats, traces and the debug mode (Note [Debug mode]) are the
// ones documented in dist/process_group.h and dist/comm_thread.h. Built only with the CUDA backend.
// It derives from GroupBase (dist/group_base.h) alone, not from the MPI backends' MpiGroupBase: MPI
// carries only its bootstrap below and, as for every backend, send / recv, the barrier and the debug
// check (dist/mpi_comms.h).
//
// Bootstrap: rank 0 makes an ncclUniqueId, MPI_Bcast hands it to every rank, and each calls
// ncclCommInitRank on its own GPU -- the GPU of its local rank (parse_device("cuda", local_rank)),
// one per rank. Two ranks on one GPU would hang or fail inside NCCL with an opaque message, so the
// ranks first all-gather (host name, GPU UUID) and a duplicate is an error naming both ranks. (The
// MPI backends accept GPU tensors through host staging, which is how several ranks may share a GPU.)
//
// Note [NCCL stream ordering]: ringgrad's kernels run on the legacy default stream; NCCL runs on this
// group's own communication stream, so a reduction overlaps the kernels launched after it (the rest
// of backward). Each op records an event on the default stream when it starts (every kernel issued
// so far, including the ones that produced its tensor) and makes the communication stream wait on
// it -- a device-side wait, the host never blocks -- then records a second event after the NCCL
// call. Work::wait() returns once that event has passed, so kernels the caller launches after
// wait() run after the reduction; Work::wait_on_device() (DDP's end of backward) instead makes the
// default stream wait for that event and returns at once (Note [Waiting on the device], dist/work.h).
// Each op says it is ordered on the device (PendingOp::ordered_on_device), so the communication
// thread enqueues the next one as soon as this one is launched, without waiting on the host for it
// to finish (Note [Collectives ordered on the device], dist/comm_thread.cpp): DDP's buckets follow
// each other on the stream back to back.
// The op records the communication stream's use of its tensors with the caching allocator
// (cuda::record_stream, Note [Streams and block reuse]), so their memory is not handed to anyone
// else before that stream is done with it, even if the host frees them first.
//
// Faults: polling queries the done event and ncclCommGetAsyncError; an NCCL error fails the op with
// NCCL's message. When the op's timeout passes (a rank never joined), the communicator is aborted
// (ncclCommAbort: the NCCL kernel stops instead of spinning forever) and, as for every backend, the
// group becomes unusable (Note [After a timeout] in dist/comm_thread.h).
//
// Precision: NCCL adds f16 / bf16 in their own type at each step (the MPI backends accumulate in f32
// and round once); AVG is ncclAvg, one division on every rank.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/cuda/streams.h"
#include "core/kernels.h"
#include "dist/backends/backends.h"
#include "dist/group_base.h"
#include "dist/init.h"
#include "dist/mpi_check.h"
#include "dist/mpi_comms.h"

namespace ringgrad::dist::detail {
namespace {

[[noreturn]] void throw_nccl_error(const char* stmt, ncclResult_t result, const char* file, int line) {
  throw Error(str_cat("[nccl] ", stmt, " failed: ", ncclGetErrorString(result),
                      cuda::detail::error_location(file, line)));  // names the device and the rank
}

#define RG_NCCL_CHECK(stmt)                                                                           \
  do {                                                                                                \
    const ncclResult_t rg_nccl_result_ = (stmt);                                                      \
    if (rg_nccl_result_ != ncclSuccess) throw_nccl_error(#stmt, rg_nccl_result_, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: RG_FAIL(op, "the nccl backend has no type for ", dtype_name(t), " (rank ", world().rank, ")");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// The two events of one op, destroyed however the op ends (even when its launch throws).
struct OpEvents {
  explicit OpEvents(int device) : device(device) {
    cuda::DeviceGuard guard(device);
    RG_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    RG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~OpEvents() {
    cuda::DeviceGuard guard(device);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (done != nullptr) cudaEventDestroy(done);
  }
  OpEvents(const OpEvents&) = delete;
  OpEvents& operator=(const OpEvents&) = delete;
  int device;
  cudaEvent_t ready = nullptr, done = nullptr;
};

// The communicator, shared by the group and its ops: the first timeout aborts it (once), and the
// group then must not destroy it again -- ncclCommAbort already freed it.
struct Communicator {
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};
  void abort() {
    if (!aborted.exchange(true)) (void)ncclCommAbort(comm);
  }
};

// One NCCL call, ordered after the default stream's work (See Note [NCCL stream ordering]).
class NcclOp final : public PendingOp {
 public:
  using Launch = std::function<void(cudaStream_t)>;
  NcclOp(std::shared_ptr<Communicator> comm, cudaStream_t stream, int device, const std::vector<Tensor>& tensors,
         const Launch& launch)
      : comm_(std::move(comm)), events_(std::make_shared<OpEvents>(device)) {
    cuda::DeviceGuard guard(device);
    RG_CUDA_CHECK(cudaEventRecord(events_->ready, cudaStreamLegacy));
    RG_CUDA_CHECK(cudaStreamWaitEvent(stream, events_->ready, 0));
    launch(stream);
    // Their memory is not reused before this stream is done with it, whenever the host frees it.
    for (const Tensor& t : tensors) cuda::record_stream(t, stream);
    RG_CUDA_CHECK(cudaEventRecord(events_->done, stream));
  }

  // The default stream waits for the done event. The closure shares the events, so they outlive this
  // op if the Work is waited on after it finished (destroying an event a stream still waits for is
  // allowed: CUDA releases it once the wait is over).
  std::function<void()> device_wait() const override {
    return [events = events_] {
      cuda::DeviceGuard guard(events->device);
      RG_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, events->done, 0));
    };
  }

  bool poll() override {
    cuda::DeviceGuard guard(events_->device);
    const cudaError_t state = cudaEventQuery(events_->done);
    if (state == cudaSuccess) return true;
    if (state != cudaErrorNotReady) RG_CUDA_CHECK(state);
    ncclResult_t async = ncclSuccess;
    RG_NCCL_CHECK(ncclCommGetAsyncError(comm_->comm, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      RG_FAIL("dist.nccl", "NCCL reported ", ncclGetErrorString(async), " while the collective ran (rank ",
              world().rank, "/", world().size, ")");
    return false;
  }
  // After a timeout or an error: stop the NCCL kernel, which would otherwise wait for the missing
  // rank forever.
  void abandon() override { comm_->abort(); }
  // One communication stream per group: this op finishes after every op the group launched before it.
  bool ordered_on_device() const override { return true; }

 private:
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<OpEvents> events_;
};

class NcclGroup final : public GroupBase {
 public:
  explicit NcclGroup(const GroupOptions& options) : GroupBase("nccl", options) {
    device_ = choose_gpu();
    cuda::DeviceGuard guard(device_.index);
    ncclUniqueId id;
    if (rank_ == 0) RG_NCCL_CHECK(ncclGetUniqueId(&id));
    RG_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_));
    RG_NCCL_CHECK(ncclCommInitRank(&comm_state_->comm, size_, id, rank_));
    RG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    set_native_device(device_);
    set_collectives({
        .allreduce =
            [this](const Tensor& t, ReduceOp op, int /*tag*/) {
              const ncclDataType_t type = nccl_type(t.dtype(), "dist.allreduce");
              return op_on({t}, [&](cudaStream_t s) {
                RG_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), type, nccl_op(op), comm(), s));
              });
            },
        .broadcast =
            [this](const Tensor& t, int root, int /*tag*/) {
              return op_on({t}, [&](cudaStream_t s) {
                RG_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm(), s));
              });
            },
        .allgather =
            [this](const Tensor& output, const Tensor& input, int /*tag*/) {
              return op_on({output, input}, [&](cudaStream_t s) {
                RG_NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclUint8, comm(), s));
              });
            },
        .reduce_scatter =
            [this](const Tensor& output, const Tensor& input, ReduceOp op, int /*tag*/) {
              const ncclDataType_t type = nccl_type(input.dtype(), "dist.reduce_scatter");
              return op_on({output, input}, [&](cudaStream_t s) {
                RG_NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(), output.numel(), type, nccl_op(op),
                                                comm(), s));
              });
            },
    });
  }
  ~NcclGroup() override {
    shutdown();  // queued ops still run (each bounded by the timeout)
    cuda::DeviceGuard guard(device_.index);
    // After an abort the communicator is gone; destroying it again would free it twice.
    if (comm_state_->comm != nullptr && !comm_state_->aborted) (void)ncclCommDestroy(comm_state_->comm);
    if (stream_ != nullptr) {
      // Tensors this group reduced may outlive it (a model's parameters): the allocator must not
      // record events on the stream once it is gone (Note [Streams and block reuse]).
      try {
        cuda::forget_stream(device_.index, stream_);
      } catch (const Error&) {  // a failed device: nothing sensible to add in a destructor
      }
      cudaStreamDestroy(stream_);
    }
  }

  // NCCL adds f16 and bf16 in their own precision (Note [Averaging half precision]).
  bool adds_in_dtype(DType dtype) const override { return dtype == DType::f16 || dtype == DType::bf16; }

 private:
  ncclComm_t comm() const { return comm_state_->comm; }
  std::unique_ptr<PendingOp> op_on(const std::vector<Tensor>& tensors, const NcclOp::Launch& launch) {
    return std::make_unique<NcclOp>(comm_state_, stream_, device_.index, tensors, launch);
  }

  // This rank's GPU: its local rank's. Every rank learns every other's answer first, so a rank
  // without a GPU, or two ranks on one GPU, fail every rank alike -- none is left waiting in a
  // collective the others never reach.
  Device choose_gpu() const {
    const int count = cuda::device_count();
    std::vector<int> counts(static_cast<size_t>(size_));
    RG_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_));
    for (int r = 0; r < size_; ++r)
      RG_CHECK(counts[r] > 0, "dist.new_group", "backend 'nccl' needs a GPU on every rank, but rank ", r,
               " sees none (rank ", rank_, "/", size_, "). Use an MPI backend (ring, tree, auto, mpi) for CPU tensors");
    const Device device = parse_device("cuda", world().local_rank);
    check_one_rank_per_gpu(device);
    return device;
  }

  // Every rank's (host, GPU UUID); two equal ones mean two ranks would drive one GPU.
  void check_one_rank_per_gpu(Device device) const {
    constexpr size_t kHost = 64;
    std::array<char, kHost + 16> mine{};
    gethostname(mine.data(), kHost - 1);
    cudaDeviceProp props{};
    RG_CUDA_CHECK(cudaGetDeviceProperties(&props, device.index));
    std::memcpy(mine.data() + kHost, props.uuid.bytes, 16);
    std::vector<char> all(mine.size() * static_cast<size_t>(size_));
    RG_MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                               static_cast<int>(mine.size()), MPI_BYTE, comm_));
    // Every rank scans every pair, so all of them fail alike (none is left waiting in MPI_Bcast).
    const size_t stride = mine.size();
    for (int i = 0; i < size_; ++i)
      for (int j = i + 1; j < size_; ++j) {
        if (std::memcmp(all.data() + i * stride, all.data() + j * stride, stride) != 0) continue;
        RG_FAIL("dist.new_group", "backend 'nccl' needs one GPU per rank, but ranks ", i, " and ", j,
                " would both drive one GPU (GPUs are assigned by local rank; host '", all.data() + i * stride,
                "'). Start at most as many ranks per machine as it has GPUs, or use an MPI backend (ring, tree, "
                "auto, mpi), which stages GPU tensors through the host (rank ",
                rank_, "/", size_, ")");
      }
  }

  const MPI_Comm comm_ = comms().comm();  // the bootstrap's: NCCL moves the data
  Device device_;
  std::shared_ptr<Communicator> comm_state_ = std::make_shared<Communicator>();
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<ProcessGroup> new_nccl_group(const GroupOptions& options) {
  return std::make_unique<NcclGroup>(options);
}

}  // namespace ringgrad::dist::detail
