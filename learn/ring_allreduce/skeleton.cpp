// Your part of the ring exercise. Fill in ring_allreduce, then build and run
// learn_ring_allreduce_yours (learn/CMakeLists.txt says how).
#include <cstdio>

#include "learn/ring_allreduce/ring_allreduce.h"

namespace learn {

int64_t ring_allreduce(std::vector<float>& data, MPI_Comm comm, bool verbose) {
  int N = 1, r = 0;
  MPI_Comm_size(comm, &N);
  MPI_Comm_rank(comm, &r);
  int64_t sent = 0;
  // TODO(you): cut `data` into N chunks (chunk c: elements [S c / N, S (c + 1) / N)), then
  //  1. reduce-scatter, steps s = 0 .. N-2: send chunk (r - s) mod N to rank r + 1 and receive
  //     chunk (r - s - 1) mod N from rank r - 1 (one MPI_Sendrecv), adding what arrives into your
  //     copy of that chunk. Afterwards you hold the full sum of chunk (r + 1) mod N.
  //  2. all-gather, steps s = 0 .. N-2: send chunk (r + 1 - s) mod N to the right and store the
  //     chunk (r - s) mod N that arrives from the left.
  // Count the bytes you send in `sent`, and print each step when `verbose`. The harness compares
  // your sums with backend "ring" and checks 2(N-1) S bytes in all.
  (void)data, (void)verbose;
  if (r == 0) std::printf("missing: ring_allreduce does not send anything yet (learn/ring_allreduce/skeleton.cpp)\n");
  return sent;
}

}  // namespace learn
