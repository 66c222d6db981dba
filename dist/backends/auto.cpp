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
#include <utility>

#include "core/env.h"
#include "dist/algorithms/algorithms.h"
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"

namespace ringgrad::dist::detail {
namespace {

size_t threshold_from(const GroupOptions& options) {
  if (options.auto_threshold_bytes) return *options.auto_threshold_bytes;
  const auto bytes = env::bytes("RINGGRAD_AUTO_THRESHOLD", "dist.new_group");
  return bytes ? static_cast<size_t>(*bytes) : kAutoThresholdBytes;
}

class AutoGroup final : public MpiGroupBase {
 public:
  explicit AutoGroup(const GroupOptions& options) : MpiGroupBase("auto", options), threshold_(threshold_from(options)) {
    use_shared_memory(options);
    // The ring's table, but for small AllReduces: Note [One table per backend].
    Collectives table = ring_collectives();
    table.allreduce = [this](const Tensor& t, ReduceOp op, int tag) {
      if (t.nbytes() < threshold_) return small_allreduce(t, op, tag);
      return ring_allreduce(t, op, channel(tag), scratch_, ring_tuning_);
    };
    set_collectives(std::move(table));
  }
  ~AutoGroup() override { shutdown(); }

 private:
  const size_t threshold_;
};

}  // namespace

std::unique_ptr<ProcessGroup> new_auto_group(const GroupOptions& options) {
  return std::make_unique<AutoGroup>(options);
}

}  // namespace ringgrad::dist::detail
