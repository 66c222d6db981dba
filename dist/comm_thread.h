// CommThread: the one thread that runs a process group's collectives, in submission order.
//
// A collective is a PendingOp: start() (called on this thread) posts nonblocking MPI calls, poll()
// advances it and says whether it finished. The thread polls the running op until it finishes or
// its deadline passes, then completes its Work and takes the next op. See Note [Collective order]
// in dist/process_group.h for why ops never overlap or reorder.
//
// Note [Polling, not spinning]: the thread calls MPI_Test (inside poll()), and between unsuccessful
// polls it first yields, then sleeps (up to max_poll_sleep_us). A blocking MPI_Wait would busy-poll
// the network inside MPI, and on a two-core machine with two ranks that spinning thread takes the
// core the rank's compute thread (or the other rank) needs, so compute and communication would slow
// each other instead of overlapping. Sleeping costs up to one sleep of latency per ring step, which
// is why the first few polls only yield.
//
// Note [After a timeout]: MPI cannot cancel a collective another rank never joined. The timed-out op
// is kept (it owns its tensors and buffers, which MPI may still write into if the late rank ever
// arrives), the group is marked broken, and every later op fails at once with a message naming the
// op that timed out. Receive requests of point-to-point ops are cancelled.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/work.h"

namespace ringgrad::dist {

class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool poll() = 0;      // true once finished (may throw ringgrad::Error)
  virtual void abandon() {}     // after a timeout: cancel what can be cancelled
};

// What a collective is, for error messages.
struct OpInfo {
  std::string name;    // "allreduce"
  std::string detail;  // "sum, 1000 x f32"
  uint64_t seq = 0;    // 0, 1, 2, ... per group, the same on every rank
  size_t bytes = 0;    // this rank's tensor bytes
};

class CommThread {
 public:
  // rank / size / backend only label error messages.
  CommThread(std::string backend, int rank, int size, double timeout_seconds, int max_poll_sleep_us);
  ~CommThread();  // runs the ops already queued (each bounded by the timeout), then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  using StartFn = std::function<std::unique_ptr<PendingOp>(uint64_t seq)>;  // called with info.seq
  // Queues an op; its sequence number is assigned here, in call order. Thread-safe.
  std::shared_ptr<Work> submit(OpInfo info, StartFn start);
  void shutdown();  // the destructor's work; callable earlier (derived groups call it first)
  // After shutdown: whether an op timed out or failed (its MPI requests may still be live).
  bool broken() const { return !broken_.empty(); }

 private:
  struct Task {
    OpInfo info;
    StartFn start;
    std::shared_ptr<Work> work;
  };
  void loop();
  void run(Task& task);
  std::string label(const OpInfo& info) const;

  const std::string backend_;
  const int rank_, size_;
  const std::chrono::duration<double> timeout_;
  const std::chrono::microseconds max_sleep_;

  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;

  // Touched only by the thread.
  std::string broken_;  // why the group is unusable; empty while healthy
  std::vector<std::unique_ptr<PendingOp>> abandoned_;  // See Note [After a timeout]

  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace ringgrad::dist
