// The backend constructors new_group chooses among (internal; see dist/process_group.cpp): one file
// per backend in dist/backends/, named as new_group names the backend.
#pragma once

#include <memory>

#include "dist/process_group.h"

namespace ringgrad::dist::detail {

std::unique_ptr<ProcessGroup> new_mpi_group(const GroupOptions& options);           // mpi.cpp
std::unique_ptr<ProcessGroup> new_ring_group(const GroupOptions& options);          // ring.cpp
std::unique_ptr<ProcessGroup> new_tree_group(const GroupOptions& options);          // tree.cpp
std::unique_ptr<ProcessGroup> new_auto_group(const GroupOptions& options);          // auto.cpp
std::unique_ptr<ProcessGroup> new_hierarchical_group(const GroupOptions& options);  // hierarchical.cpp
#ifdef RINGGRAD_WITH_CUDA
std::unique_ptr<ProcessGroup> new_nccl_group(const GroupOptions& options);  // nccl.cpp
#endif

}  // namespace ringgrad::dist::detail
