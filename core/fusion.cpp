#include "core/fusion.h"

#include <atomic>

#include "core/env.h"

namespace ringgrad {
namespace {

// Read on every fusable op call, hence an atomic; relaxed, as for the CPU ISA (core/cpu_isa.cpp).
std::atomic<bool>& enabled() {
  static std::atomic<bool> on{env::flag("RINGGRAD_FUSION", "fusion").value_or(true)};
  return on;
}

}  // namespace

bool fusion_enabled() { return enabled().load(std::memory_order_relaxed); }

void set_fusion(bool on) { enabled().store(on, std::memory_order_relaxed); }

}  // namespace ringgrad
