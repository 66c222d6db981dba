// The examples' --comm-hook: the hook chosen by name (dist::make_comm_hook), and a line on what it
// sent and keeps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "core/error.h"
#include "dist/ddp/comm_hook.h"

namespace ringgrad::examples {

// The examples' PowerSGD settings where they differ from PyTorch's defaults (rank 1, start 1000):
// rank 4, and compression from step 10, since an example trains a few hundred steps.
inline dist::PowerSgdOptions example_powersgd_options() { return {.rank = 4, .start_iteration = 10}; }

// Whether --comm-hook is plain AllReduce.
inline bool comm_hook_is_default(const std::string& name) { return name == "allreduce" || name == "none"; }

// --zero 2 and 3 reduce-scatter each bucket with ZeRO's own hook, so --comm-hook applies there only
// as the wire format of that reduce-scatter (dist::ZeroOptions::reduce_scatter_wire): bf16 and the
// FP8 hooks without error feedback. Nothing below stage 2 or for the default; the others refused,
// with the reason, naming `example`.
inline std::optional<dist::WireFormat> zero_reduce_scatter_wire(const char* example, const std::string& name,
                                                                int zero) {
  if (zero < 2 || comm_hook_is_default(name)) return std::nullopt;
  if (name == "bf16") return dist::WireFormat::bf16;
  for (dist::WireFormat wire : {dist::WireFormat::fp8_e4m3, dist::WireFormat::fp8_e5m2})
    if (name == std::string(dist::wire_format_name(wire)) + "-noef") return wire;
  const bool error_feedback = name == "bf16-ef" || name == "fp8-e4m3" || name == "fp8-e5m2";
  RG_FAIL(example, "--zero ", zero, " reduce-scatters each bucket; --comm-hook ", name,
          error_feedback   ? " keeps an f32 residual of every gradient on every rank (error feedback), the memory "
                             "stage 2 shards away: use its -noef variant, or bf16"
          : name == "fp16" ? " is an f16 AllReduce: use bf16, the low-precision ring's 16-bit wire"
                           : " compresses whole matrices, which ZeRO's blocks cut: use bf16 or fp8-e4m3-noef",
          " (docs/compression.md, \"Combinations\")");
}

// The hook DDP itself gets: at --zero 2 and 3 ZeRO's reduce-scatter replaces it, and --comm-hook is
// its wire (zero_reduce_scatter_wire).
inline std::string ddp_comm_hook_name(const std::string& name, int zero) { return zero >= 2 ? "allreduce" : name; }

// "comm hook fp8-e4m3: 0.70 MB per step on the wire from this rank (payload 0.69 + scales 0.0027),
// residuals 2.60 MiB" -- or "" for a hook that counts nothing (allreduce, fp16).
inline std::string comm_hook_summary(const std::string& name, const dist::CommHookState* state, int64_t steps) {
  if (state == nullptr || state->calls == 0) return "";
  const double n = static_cast<double>(std::max<int64_t>(steps, 1)), mb = 1e6;
  char line[256];
  std::snprintf(line, sizeof line,
                "comm hook %s: %.3f MB per step on the wire from this rank (payload %.3f + scales %.4f), "
                "hook state %.2f MiB\n",
                name.c_str(), static_cast<double>(state->sent.total()) / mb / n,
                static_cast<double>(state->sent.payload) / mb / n, static_cast<double>(state->sent.scales) / mb / n,
                static_cast<double>(state->state_bytes()) / (1024.0 * 1024.0));
  return line;
}

}  // namespace ringgrad::examples
