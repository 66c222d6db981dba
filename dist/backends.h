// The backend constructors new_group chooses among (internal; see dist/process_group.cpp).
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace ringgrad::dist::detail {

std::unique_ptr<ProcessGroup> new_mpi_group(const GroupOptions& options);   // dist/mpi_backend.cpp
std::unique_ptr<ProcessGroup> new_ring_group(const GroupOptions& options);  // dist/ring.cpp
std::unique_ptr<ProcessGroup> new_tree_group(const GroupOptions& options);  // dist/tree.cpp
std::unique_ptr<ProcessGroup> new_auto_group(const GroupOptions& options);  // dist/auto_backend.cpp
std::unique_ptr<ProcessGroup> new_hierarchical_group(const GroupOptions& options);  // dist/hierarchical.cpp
#ifdef RINGGRAD_WITH_CUDA
std::unique_ptr<ProcessGroup> new_nccl_group(const GroupOptions& options);  // dist/nccl_backend.cpp
#endif

}  // namespace ringgrad::dist::detail
