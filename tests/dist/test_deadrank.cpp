// test_dist_deadrank: rank 1 dies (_exit(1), no MPI_Finalize) after the first collective; the others
// enter a second one. Run by tests/dist/check_deadrank.cmake in two ways (docs/dist.md, "When a rank
// dies"):
//   - plain mpirun: mpirun notices the death and tears the job down (SIGTERM ~1 s later); the
//     survivors never reach their timeout, mpirun exits non-zero.
//   - mpirun --mca orte_abort_on_non_zero_status 0: nobody tears the job down, so the survivors'
//     own collective timeout (3 s here) must end them with its diagnosis. They print it and call
//     MPI_Abort, so that mpirun reports the failure (without it, mpirun would exit 0).
// Open MPI 4.1 reports no error for a dead peer (no ULFM): the timeout is the survivors' only way out,
// and its message names the rank that is gone (dist/group_agreement.h). With a third argument
// "train-sigkill", rank 1 is killed by SIGKILL in the middle of DDP training instead; with
// "skip-group", only rank 0 creates a group.
#define DOCTEST_CONFIG_IMPLEMENT  // dist_test_util.h includes doctest; no test cases here
#include <mpi.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "ringgrad.h"

#include "dist_test_util.h"

namespace {

// A survivor prints its error (what check_deadrank.cmake reads) and ends the job: without
// MPI_Abort, mpirun would report success.
[[noreturn]] void abort_as_survivor(int rank, const rg::Error& e) {
  std::fprintf(stderr, "rank %d: SURVIVOR ERROR: %s\n", rank, e.what());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();  // MPI_Abort does not return
}

// Mode "train-sigkill": DDP training of a small MLP; rank 1 is killed by SIGKILL (no cleanup, no
// message, no MPI_Finalize) at the start of step 3. The survivors' step-3 gradient reduction must
// time out with a diagnosis that names rank 1 as gone (Note [Who is gone] in dist/group_agreement.h).
int train_until_rank_1_is_killed(const dist::World& w, const std::string& backend) {
  auto pg = dist::new_group(backend, test_options(/*timeout_seconds=*/3));
  auto model = std::make_shared<rg::nn::Sequential>(
      std::initializer_list<std::shared_ptr<rg::nn::Module>>{std::make_shared<rg::nn::Linear>(8, 16),
                                                             std::make_shared<rg::nn::ReLU>(),
                                                             std::make_shared<rg::nn::Linear>(16, 1)});
  dist::DistributedDataParallel ddp(model, pg);
  rg::optim::SGD opt(model->parameters(), rg::optim::SGDOptions{.lr = 0.01});
  try {
    for (int step = 0; step < 10; ++step) {
      if (step == 3 && w.rank == 1) {
        std::fprintf(stderr, "rank 1: killing itself (SIGKILL) at step 3\n");
        std::fflush(stderr);
        raise(SIGKILL);
      }
      opt.zero_grad();
      rg::Tensor x = rg::full({4, 8}, 0.1 * (w.rank + 1));
      ddp(x).sum().backward();
      opt.step();
    }
    std::fprintf(stderr, "rank %d: trained 10 steps without rank 1 (impossible)\n", w.rank);
    return 0;
  } catch (const rg::Error& e) {
    abort_as_survivor(w.rank, e);
  }
}

// Mode "skip-group": only rank 0 creates a process group; the others wait in a world barrier (as a
// rank busy elsewhere would). Rank 0's creation must fail after its timeout, not block forever.
int create_group_alone(const dist::World& w, const std::string& backend) {
  if (w.rank != 0) {
    MPI_Barrier(MPI_COMM_WORLD);  // ended by rank 0's MPI_Abort
    return 3;
  }
  try {
    auto pg = dist::new_group(backend, test_options(/*timeout_seconds=*/3));
    std::fprintf(stderr, "rank 0: created a group the other ranks never created (impossible)\n");
    return 0;
  } catch (const rg::Error& e) {
    abort_as_survivor(w.rank, e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const dist::World w = dist::init(&argc, &argv);
  const std::string backend = argc > 1 ? argv[1] : "ring";
  const std::string mode = argc > 2 ? argv[2] : "";
  if (mode == "train-sigkill") return train_until_rank_1_is_killed(w, backend);
  if (mode == "skip-group") return create_group_alone(w, backend);
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
    abort_as_survivor(w.rank, e);
  }
}
