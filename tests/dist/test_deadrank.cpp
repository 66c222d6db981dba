// test_dist_deadrank: rank 1 dies (_exit(1), no MPI_Finalize) after the first collective; the others
// enter a second one. Run by tests/dist/check_deadrank.cmake in two ways (docs/dist.md, "When a rank
// dies"):
//   - plain mpirun: mpirun notices the death and tears the job down (SIGTERM ~1 s later); the
//     survivors never reach their timeout, mpirun exits non-zero.
//   - mpirun --mca orte_abort_on_non_zero_status 0: nobody tears the job down, so the survivors'
//     own collective timeout (3 s here) must end them with its diagnosis. They print it and call
//     MPI_Abort, so that mpirun reports the failure (without it, mpirun would exit 0).
// Open MPI 4.1 reports no error for a dead peer (no ULFM): the timeout is the survivors' only way out.
#define DOCTEST_CONFIG_IMPLEMENT  // dist_test_util.h includes doctest; no test cases here
#include <mpi.h>
#include <unistd.h>

#include <cstdio>

#include "dist_test_util.h"

int main(int argc, char** argv) {
  const dist::World w = dist::init(&argc, &argv);
  const std::string backend = argc > 1 ? argv[1] : "ring";
  auto pg = dist::new_group(backend, test_options(/*timeout_seconds=*/3));
  rg::Tensor t = rg::ones({1000});
  pg->allreduce(t)->wait();
  if (w.rank == 1) {
    std::fprintf(stderr, "rank 1: dying now\n");
    std::fflush(stderr);
    _exit(1);
  }
  try {
    pg->allreduce(t)->wait();
    std::fprintf(stderr, "rank %d: the collective completed without rank 1 (impossible)\n", w.rank);
    return 0;
  } catch (const rg::Error& e) {
    std::fprintf(stderr, "rank %d: SURVIVOR ERROR: %s\n", w.rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return 3;
}
