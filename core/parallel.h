// The compute thread pool.
//
// One pool per process. Its size defaults to (cores / ranks on this node), read from the launcher's
// environment (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE) or
// RINGGRAD_NUM_THREADS when set, so that N ranks on one machine never run N x cores threads. The BLAS
// has no threads of its own: OpenBLAS runs single-threaded and large GEMMs are split over this pool
// (Note [GEMMs split over the pool] in core/cpu/gemm.cpp).
//
// Idle workers sleep on a condition variable; they never spin. On a two-core machine a spinning
// worker steals the core a BLAS thread or a second rank needs (PyTorch's OpenMP workers spinning next
// to OpenBLAS threads made its 2-thread runs here 1.5-3.5x slower).
//
// parallel_for called from inside a worker runs serially (no nested parallelism).
#pragma once

#include <cstdint>
#include <functional>

namespace ringgrad {

int num_threads();
inline constexpr int kMaxThreadsPerCore = 16;
void set_num_threads(int n);  // 1 <= n <= kMaxThreadsPerCore x hardware threads, else an error
int default_num_threads();    // hardware threads / ranks on this node, at least 1

// Calls fn(begin, end) over disjoint chunks covering [0, n). Chunks hold at least `grain` items; with
// n < 2 * grain (or one thread) fn(0, n) runs on the calling thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ringgrad
