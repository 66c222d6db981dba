#include "core/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/error.h"

namespace ringgrad {
namespace {

thread_local bool t_inside_parallel_region = false;

// A fixed set of workers that sleep until a parallel_for hands them chunks. The calling thread works
// too, so a pool of n threads has n - 1 workers.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return threads_; }

  // Runs fn over `chunks` chunks of `chunk` items; returns false (doing nothing) when another thread
  // is already using the pool, so the caller runs serially instead of waiting.
  bool run(int64_t n, int64_t chunk, int chunks, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &fn;
      n_ = n;
      chunk_ = chunk;
      chunks_ = chunks;
      next_chunk_ = 0;
      unfinished_ = chunks;
      error_ = nullptr;
      generation = ++generation_;
    }
    wake_.notify_all();
    work_on_chunks(generation);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return unfinished_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work_on_chunks(seen);
    }
  }

  // Claims chunks of job `generation` until none are left. A claim happens under the mutex and only
  // while that job is still the current one: a worker that wakes late, after its job ended and the
  // next one began, must not take a chunk of the next job through the old job's state.
  void work_on_chunks(uint64_t generation) {
    t_inside_parallel_region = true;
    for (;;) {
      const std::function<void(int64_t, int64_t)>* job;
      int64_t begin, end;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (generation_ != generation || next_chunk_ >= chunks_) break;
        const int c = next_chunk_++;
        job = job_;
        begin = c * chunk_;
        end = std::min(n_, begin + chunk_);
      }
      try {
        (*job)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (--unfinished_ == 0) done_.notify_all();
    }
    t_inside_parallel_region = false;
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex busy_;   // held by the thread running a parallel_for
  std::mutex mutex_;  // guards the job fields below
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  int chunks_ = 0;
  int next_chunk_ = 0;
  int unfinished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// A thread count from the environment; more than this is a typo or a runaway script, and would only
// exhaust the process's thread limit.
constexpr int64_t kMaxThreads = 1024;

int env_count(const char* name) { return static_cast<int>(env::integer(name, "threads", 1, kMaxThreads).value_or(0)); }

std::mutex g_pool_mutex;
std::unique_ptr<ThreadPool> g_pool;  // created on first use with default_num_threads()

ThreadPool& pool() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool) {
    const int n = default_num_threads();
    g_pool = std::make_unique<ThreadPool>(n);
    openblas_set_num_threads(1);  // See Note [GEMMs split over the pool] in core/cpu/gemm.cpp
  }
  return *g_pool;
}

}  // namespace

int default_num_threads() {
  if (int n = env_count("RINGGRAD_NUM_THREADS"); n > 0) return n;
  int ranks_on_node = env_count("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (ranks_on_node <= 0) ranks_on_node = env_count("MPI_LOCALNRANKS");
  if (ranks_on_node <= 0) ranks_on_node = env_count("SLURM_NTASKS_PER_NODE");
  if (ranks_on_node <= 0) ranks_on_node = 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / ranks_on_node);
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  RG_CHECK(n >= 1, "set_num_threads", "thread count must be >= 1, got ", n);
  // More threads than a few per core only contend; tens of thousands exhaust the process's (and the
  // machine's) thread limit, and other programs then fail to start threads of their own.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  RG_CHECK(n <= kMaxThreadsPerCore * cores, "set_num_threads", "thread count ", n, " is more than ", kMaxThreadsPerCore,
           " per core (this machine has ", cores, " cores)");
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_pool && g_pool->size() == n) return;
  g_pool.reset();
  g_pool = std::make_unique<ThreadPool>(n);
  openblas_set_num_threads(1);  // See Note [GEMMs split over the pool] in core/cpu/gemm.cpp
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  ThreadPool& p = pool();
  const int64_t max_chunks = std::min<int64_t>(p.size(), n / grain);
  if (max_chunks < 2 || t_inside_parallel_region) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + max_chunks - 1) / max_chunks;
  const int chunks = static_cast<int>((n + chunk - 1) / chunk);
  if (!p.run(n, chunk, chunks, fn)) fn(0, n);
}

}  // namespace ringgrad
