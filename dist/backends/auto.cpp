// Backend "auto": AllReduce by the tree below a size threshold and by the ring above it; the
// ring's reduce-scatter, all-gather and chain broadcast for the other collectives.
//
// Why a threshold: the tree (recursive doubling) costs log2(N) message latencies but sends the
// whole tensor at every step; the ring costs 2(N-1) latencies but sends only 2(N-1)/N of it. Small
// tensors are latency-bound and want the tree, large ones bandwidth-bound and want the ring. The
// default threshold, kAutoThresholdBytes, is the crossover measured with examples/allreduce_bench
// on one machine (docs/dist.md, "auto"); a network with other latency and bandwidth has another
// crossover: measure it with the benchmark and set RINGGRAD_AUTO_THRESHOLD or
// GroupOptions::auto_threshold_bytes.
//
// Every rank decides from the byte count alone, which Note [Collective order] makes equal on every
// rank, so all ranks always pick the same algorithm.
#include <cstdlib>
#include <string>

#include "core/env.h"
#include "dist/algorithms/algorithms.h"
#include "dist/backends/backends.h"
#include "dist/backends/ring.h"

namespace ringgrad::dist::detail {
namespace {

size_t threshold_from(const GroupOptions& options) {
  if (options.auto_threshold_bytes) return *options.auto_threshold_bytes;
  const auto bytes = env::bytes("RINGGRAD_AUTO_THRESHOLD", "dist.new_group");
  return bytes ? static_cast<size_t>(*bytes) : kAutoThresholdBytes;
}

class AutoGroup final : public RingFamilyGroup {
 public:
  explicit AutoGroup(const GroupOptions& options)
      : RingFamilyGroup("auto", options), threshold_(threshold_from(options)) {
    use_shared_memory(options);
  }
  ~AutoGroup() override { shutdown(); }

 protected:
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) override {
    if (t.nbytes() < threshold_) return tree_allreduce(t, op, channel(tag), scratch_, shared_slots_.get());
    return RingFamilyGroup::start_allreduce(t, op, tag);
  }

 private:
  const size_t threshold_;
};

}  // namespace

std::unique_ptr<ProcessGroup> new_auto_group(const GroupOptions& options) {
  return std::make_unique<AutoGroup>(options);
}

}  // namespace ringgrad::dist::detail
