#include "core/cpu_isa.h"

#include <atomic>

#include "core/env.h"
#include "core/error.h"

namespace ringgrad {
namespace {

CpuIsa default_isa() {
  if (const auto forced = env::choice("RINGGRAD_ISA", "cpu_isa", {"avx2", "avx512"})) {
    const CpuIsa isa = *forced == "avx512" ? CpuIsa::avx512 : CpuIsa::avx2;
    RG_CHECK(cpu_supports(isa), "cpu_isa", "RINGGRAD_ISA=", *forced, " but this CPU does not support ",
             cpu_isa_name(isa));
    return isa;
  }
  return cpu_supports(CpuIsa::avx512) ? CpuIsa::avx512 : CpuIsa::avx2;
}

// Read on every kernel call, hence an atomic rather than a lock; relaxed is enough because a kernel
// only needs some valid ISA, and set_cpu_isa is for tests and start-up.
std::atomic<CpuIsa>& selected() {
  static std::atomic<CpuIsa> isa{default_isa()};
  return isa;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::avx512 ? "avx512" : "avx2"; }

bool cpu_supports(CpuIsa isa) {
  if (isa == CpuIsa::avx512) return __builtin_cpu_supports("avx512f");
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool cpu_has_bf16_dot() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && cpu_supports(CpuIsa::avx512);
  return has && cpu_isa() == CpuIsa::avx512;
}

std::string cpu_kernels_description() {
  return std::string(cpu_isa_name(cpu_isa())) + (cpu_has_bf16_dot() ? ", bf16 dot products" : "");
}

CpuIsa cpu_isa() { return selected().load(std::memory_order_relaxed); }

void set_cpu_isa(CpuIsa isa) {
  RG_CHECK(cpu_supports(isa), "set_cpu_isa", "this CPU does not support ", cpu_isa_name(isa));
  selected().store(isa, std::memory_order_relaxed);
}

}  // namespace ringgrad
