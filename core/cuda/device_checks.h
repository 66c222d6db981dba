// Index checks inside CUDA kernels, reported at the next synchronisation (internal to core/cuda/).
//
// Note [Device-side index checks]
// An index tensor on a GPU (embedding token ids, cross-entropy targets, gather positions) cannot be
// checked on the host without copying it there, and a copy to the host waits for every kernel
// queued before it: a synchronisation per forward, which leaves the GPU idle while the host catches
// up. So on CUDA the kernels check their own indices. A kernel that meets one out of range does not
// use it (index_select and gather write 0, index_add and scatter_add skip it, cross-entropy counts
// the row as ignored) and records the first such index -- which op, the value, its position, the
// bound -- in a per-device record. The host looks at the record whenever it synchronises with the
// device anyway (every copy to the host: `.item()`, `.to(Device::cpu())`, a loss printed) and then
// throws the error the CPU would have thrown at once, saying that the op ran earlier than the line
// that raised it. RINGGRAD_CUDA_SYNC_CHECKS=1 synchronises after every checking kernel instead, so
// the error is raised by the op itself (slow; for finding the line).
//
// The record lives in device memory, claimed with atomicCAS by the first failing thread, which then
// copies it into mapped host memory with plain stores (device atomics on host memory are not
// portable); reading that copy costs the host nothing, so every synchronisation can look at it.
#pragma once

#include <cstdint>

namespace ringgrad::cuda {

// Which op found the bad index (the op names of the CPU's errors).
enum class IndexCheck : int { none = 0, index_select, index_add, gather, scatter_add, one_hot, cross_entropy };

struct BadIndexRecord {
  int op = 0;  // an IndexCheck; 0 while nothing was found
  int64_t value = 0, position = 0, bound = 0;
};

// Where a kernel reports to: both copies of the record of `device`.
struct BadIndexSink {
  BadIndexRecord* on_device;  // claimed by atomicCAS on .op
  BadIndexRecord* on_host;    // mapped host memory the host reads
};

// The sink of `device` (created at first use; the calling thread's current device must be `device`).
BadIndexSink bad_index_sink(int device);

// Throws the recorded error of `device`, if any, and clears the record. Call only where the kernels
// queued so far on the device have finished (after a synchronous copy to the host).
void raise_bad_index(int device);

// After a checking kernel: with RINGGRAD_CUDA_SYNC_CHECKS=1, waits for it and raises what it found.
void sync_check_if_asked(int device);

#ifdef __CUDACC__
// True when 0 <= value < bound; otherwise records (op, value, position, bound), the first time only.
__device__ __forceinline__ bool index_ok(const BadIndexSink& sink, IndexCheck op, int64_t value, int64_t position,
                                         int64_t bound) {
  if (value >= 0 && value < bound) return true;
  if (atomicCAS(&sink.on_device->op, 0, static_cast<int>(op)) == 0) {
    volatile BadIndexRecord* host = sink.on_host;
    host->value = value;
    host->position = position;
    host->bound = bound;
    __threadfence_system();  // the fields before the op that announces them
    host->op = static_cast<int>(op);
    __threadfence_system();
  }
  return false;
}
#endif

}  // namespace ringgrad::cuda
