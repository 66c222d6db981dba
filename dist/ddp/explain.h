// StepNarrator: RINGGRAD_EXPLAIN's narration of one synchronising backward (internal; the Reducer
// owns one while it narrates -- DDPOptions::explain_steps).
//
// A student reading the Reducer sees hooks, buckets and Works; this prints what they do, in the
// order they do it, so that one gradient can be followed from loss.backward() to the AllReduce
// (docs/learn/walk-a-gradient.md walks such a log):
//
//   [explain rank 0] step 1: backward began; 3 buckets, launched in index order
//   [explain rank 0]   bucket 0: fc3.bias fc3.weight (650 f32, 2.5 KiB)
//   [explain rank 0] +0.04 ms  gradient ready: fc3.bias (10) -> bucket 0 [0, 10), 1 more to come
//   [explain rank 0] +0.09 ms  bucket 0 complete -> reduction launched (2.5 KiB)
//   [explain rank 0] +0.71 ms  backward computed: waiting for 3 reductions
//   [explain rank 0]   bucket 0 reduced on the communication thread, +0.10 -> +0.18 ms
//
// Times are from the backward's first gradient, on this rank's trace clock (core/trace.h).
#pragma once

#include <string>
#include <vector>

namespace ringgrad::dist {

class StepNarrator {
 public:
  StepNarrator(int rank, int world, int step);
  void begin(const std::vector<std::string>& bucket_lines);  // one line per bucket
  void gradient_ready(const std::string& name, const std::string& shape, int bucket, int64_t offset, int64_t numel,
                      int still_to_come);
  void bucket_waits(int bucket, int blocker);                        // complete, but a lower index has not launched
  void bucket_launched(int bucket, size_t bytes, double launch_us);  // when the hook was called
  void unused(const std::string& name, int bucket);                  // find_unused_parameters: reduced as zeros
  void backward_computed(size_t reductions);
  void reduced(int bucket, double start_us, double end_us);  // trace_clock_us of the reduction
  void done(double exposed_ms);

 private:
  void say(const std::string& line) const;
  std::string at() const;  // "+1.23 ms", since begin()
  std::string offset(double us) const;
  int rank_, world_, step_;
  double start_us_ = 0;
};

}  // namespace ringgrad::dist
