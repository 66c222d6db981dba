// Exercise: a ring AllReduce in a few dozen lines (docs/learn/07-ring-tree-hierarchical.md).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace learn {

// Sums `data` across the ranks of `comm` in place, as a ring: N-1 reduce-scatter steps, then N-1
// all-gather steps, each a blocking MPI_Sendrecv to the right neighbour and from the left one.
// Prints each step's chunk movement when `verbose`. Returns the bytes this rank sent.
int64_t ring_allreduce(std::vector<float>& data, MPI_Comm comm, bool verbose);

}  // namespace learn
