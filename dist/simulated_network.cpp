#include "dist/simulated_network.h"

#include <sstream>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "core/trace.h"

namespace ringgrad::dist::detail {

SimulatedNetwork simulated_network_from(const GroupOptions& options) {
  if (options.simulated_network) return *options.simulated_network;
  const auto env = env::text("RINGGRAD_SIMULATED_NETWORK");
  if (!env) return {};
  SimulatedNetwork net;
  char comma = 0;
  std::istringstream in(*env);
  const bool ok = (in >> net.bandwidth_gbps >> comma >> net.latency_us) && comma == ',' && in.peek() == EOF &&
                  net.bandwidth_gbps >= 0 && net.latency_us >= 0;
  RG_CHECK(ok, "dist.new_group", "RINGGRAD_SIMULATED_NETWORK='", *env,
           "' is not 'GBPS,LATENCY_US' (e.g. '1,50': 1 GB/s, 50 us)");
  return net;
}

namespace {

// Note [Simulated network]: the inner op, finished once it is and the link's time has passed.
class DelayedOp final : public PendingOp {
 public:
  DelayedOp(std::unique_ptr<PendingOp> inner, double done_us) : inner_(std::move(inner)), done_us_(done_us) {}
  bool poll() override { return inner_->poll() && trace_clock_us() >= done_us_; }
  void abandon() override { inner_->abandon(); }
  // No device_wait: the delay is on the host, so the host waits.
  bool ordered_on_device() const override { return inner_->ordered_on_device(); }

 private:
  std::unique_ptr<PendingOp> inner_;
  double done_us_;  // trace_clock_us
};

}  // namespace

std::unique_ptr<PendingOp> SimulatedLink::start(size_t bytes,
                                                const std::function<std::unique_ptr<PendingOp>()>& start) const {
  const double started_us = trace_clock_us();
  double modelled_us = network_.latency_us;
  if (network_.bandwidth_gbps > 0) modelled_us += static_cast<double>(bytes) / (network_.bandwidth_gbps * 1e3);
  return std::make_unique<DelayedOp>(start(), started_us + modelled_us);
}

}  // namespace ringgrad::dist::detail
