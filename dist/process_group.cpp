#include "dist/process_group.h"

#include <cstdlib>
#include <string>

#include "core/env.h"
#include "core/ops.h"
#include "dist/backends/backends.h"
#include "dist/init.h"

namespace ringgrad::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

Tensor ProcessGroup::new_reduction_buffer(int64_t numel, DType dtype, Device device) {
  return zeros({numel}, {.dtype = dtype, .device = device});
}

double default_collective_timeout() {
  return env::number_above("RINGGRAD_COLLECTIVE_TIMEOUT", "dist", 0.0).value_or(300.0);
}

// The one place a backend is chosen.
std::unique_ptr<ProcessGroup> new_group(const std::string& backend, const GroupOptions& options) {
  RG_CHECK(is_initialized(), "dist.new_group", "call dist::init(&argc, &argv) first");
  if (backend == "mpi") return detail::new_mpi_group(options);
  if (backend == "ring") return detail::new_ring_group(options);
  if (backend == "tree") return detail::new_tree_group(options);
  if (backend == "auto") return detail::new_auto_group(options);
  if (backend == "hierarchical") return detail::new_hierarchical_group(options);
  if (backend == "nccl") {
#ifdef RINGGRAD_WITH_CUDA
    return detail::new_nccl_group(options);
#else
    RG_FAIL("dist.new_group", "backend 'nccl' needs the CUDA backend, which this build does not have (rank ",
            world().rank, "/", world().size, "); configure with RINGGRAD_CUDA=ON, or use mpi, ring, tree, auto");
#endif
  }
  RG_FAIL("dist.new_group", "unknown backend '", backend, "' (rank ", world().rank, "/", world().size,
          "); available: mpi, ring, tree, auto, hierarchical, nccl (CUDA builds)");
}

}  // namespace ringgrad::dist
