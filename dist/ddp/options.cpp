#include "dist/ddp/options.h"

#include <cstdio>

namespace ringgrad::dist {

std::string DDPStats::summary() const {
  const double n = steps > 0 ? static_cast<double>(steps) : 1.0;
  char line[256];
  std::snprintf(line, sizeof line,
                "ddp: %lld steps, %lld bucket reductions; per step: compute %.2f ms, comm %.2f ms, exposed comm "
                "%.2f ms, overlap %.0f%%",
                static_cast<long long>(steps), static_cast<long long>(bucket_reductions), total.compute_ms / n,
                total.comm_ms / n, total.exposed_comm_ms / n, total.overlap_percent());
  return line;
}

}  // namespace ringgrad::dist
