// Entry point of test_dist: doctest inside dist::init / dist::finalize. Every rank runs every test
// case in the same order (doctest's order is deterministic), so collectives line up; see
// Note [Collective order]. The exit status is the worst over all ranks.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include "dist/init.h"

int main(int argc, char** argv) {
  const ringgrad::dist::World world = ringgrad::dist::init(&argc, &argv);
  doctest::Context context(argc, argv);
  // Only rank 0 prints the summary; failures print on whichever rank they happen.
  if (world.rank != 0) context.setOption("no-version", true);
  int rc = context.run();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ringgrad::dist::finalize();
  return context.shouldExit() ? rc : worst;
}
