// SimulatedLink: GroupOptions::simulated_network as a decorator around each of a group's operations
// (internal; GroupBase wraps every op it starts when the option is on, and nothing else knows of
// it).
//
// Note [Simulated network]: the op runs as it would, over the real (loopback) transport; its
// decorator counts it finished only once its data has arrived *and* latency + bytes / bandwidth has
// passed since it started. Since a group runs its collectives one at a time, a delayed op also holds
// back the ops queued behind it, as a slow link would -- which is what makes overlap visible on one
// machine. The delay is on the host: a decorated op is waited for on the host, even on a GPU
// backend (it offers no device wait), so the device is not let past it early.
//
// It models a whole operation, whatever its algorithm. The per-message model
// (RINGGRAD_NETWORK_MODEL, dist/algorithms/network_model.h) prices each message an algorithm sends
// instead, so that ring, tree and hierarchical differ as they would between machines: that one
// lives where the messages are sent.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "dist/comm_thread.h"
#include "dist/process_group.h"

namespace ringgrad::dist::detail {

// GroupOptions::simulated_network, else RINGGRAD_SIMULATED_NETWORK="GBPS,LATENCY_US" (an error
// names the variable and the expected form), else none.
SimulatedNetwork simulated_network_from(const GroupOptions& options);

class SimulatedLink {
 public:
  explicit SimulatedLink(SimulatedNetwork network = {}) : network_(network) {}
  bool on() const { return network_.latency_us > 0 || network_.bandwidth_gbps > 0; }
  // The op `start` starts, decorated: finished no earlier than the link's time for `bytes` after now.
  std::unique_ptr<PendingOp> start(size_t bytes, const std::function<std::unique_ptr<PendingOp>()>& start) const;

 private:
  SimulatedNetwork network_;
};

}  // namespace ringgrad::dist::detail
