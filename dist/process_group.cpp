#include "dist/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
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

namespace {

struct LiveGroup {
  const ProcessGroup* group;
  std::string backend;  // filled in by new_group once the group is built
};
std::mutex g_live_mutex;
std::vector<LiveGroup> g_live;  // in creation order

}  // namespace

ProcessGroup::ProcessGroup() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.push_back({this, ""});
}

ProcessGroup::~ProcessGroup() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.erase(std::find_if(g_live.begin(), g_live.end(), [this](const LiveGroup& l) { return l.group == this; }));
}

std::vector<std::string> live_groups() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  std::vector<std::string> names;
  for (const LiveGroup& l : g_live) names.push_back(l.backend.empty() ? "(made by a backend or a test)" : l.backend);
  return names;
}

Tensor ProcessGroup::new_reduction_buffer(int64_t numel, DType dtype, Device device) {
  return zeros({numel}, {.dtype = dtype, .device = device});
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_low_precision(const Tensor& output, const Tensor& input, ReduceOp op,
                                                                 const LowPrecisionAllreduce& how) {
  (void)op, (void)output;
  RG_FAIL("dist.reduce_scatter_low_precision", "backend '", backend(), "' has no low-precision ring (", input.desc(),
          ", ", wire_format_name(how.wire), " on the wire, rank ", rank(), "/", size(),
          "); use an MPI backend: ring, auto, tree, mpi or hierarchical");
}

std::shared_ptr<Work> ProcessGroup::allreduce_low_precision(const Tensor& t, ReduceOp op,
                                                            const LowPrecisionAllreduce& how) {
  (void)op;
  RG_FAIL("dist.allreduce_low_precision", "backend '", backend(), "' has no low-precision ring (", t.desc(), ", ",
          wire_format_name(how.wire), " on the wire, rank ", rank(), "/", size(),
          "); use an MPI backend: ring, auto, tree, mpi or hierarchical");
}

double default_collective_timeout() {
  return env::number_above("RINGGRAD_COLLECTIVE_TIMEOUT", "dist", 0.0).value_or(300.0);
}

namespace {

// The one place a backend is chosen.
std::unique_ptr<ProcessGroup> make_group(const std::string& backend, const GroupOptions& options) {
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

}  // namespace

std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const GroupOptions& options) {
  std::shared_ptr<ProcessGroup> group = make_group(backend, options);
  std::lock_guard<std::mutex> lock(g_live_mutex);
  for (LiveGroup& l : g_live)
    if (l.group == group.get()) l.backend = "'" + backend + "'";
  return group;
}

}  // namespace ringgrad::dist
