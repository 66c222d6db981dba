// test_dist_timeout: rank 0 skips one collective; every other rank's wait() must throw, within
// the group's 2 s timeout, an error naming the rank, the op, its sequence number, the byte count
// and the backend -- instead of hanging. A separate executable because the timed-out groups stay
// broken (Note [After a timeout] in dist/comm_thread.h).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>

#include "data/data.h"
#include "dist/ddp/ddp.h"
#include "dist_test_util.h"
#include "nn/nn.h"

TEST_CASE("a skipped collective times out with a message instead of hanging") {
  const int N = dist::world().size, r = dist::world().rank;
  // "tree" waits on shared memory (every rank is on this machine), "tree/p2p" in MPI point-to-point.
  // 1000 elements start on the caller's thread and are handed over; 100000 (400 KB) queue, and a
  // wait() that comes first runs them on the waiting thread (Note [A waiting caller runs its op] in
  // dist/comm_thread.cpp): the deadline holds on every thread that can run an op.
  for (const std::string variant : {"mpi", "ring", "tree", "tree/p2p"}) {
    for (const int64_t n : {int64_t{1000}, int64_t{100000}}) {
      CAPTURE(variant);
      CAPTURE(n);
      const std::string backend = variant.substr(0, variant.find('/'));
      dist::GroupOptions options = test_options(/*timeout_seconds=*/2);
      options.shared_memory = variant != "tree/p2p";
      auto pg = dist::new_group(backend, options);
      rg::Tensor t = filled(n, rg::DType::f32, [&](int64_t) { return 1.0; });
      pg->allreduce(t)->wait();  // #0: everyone
      if (r != 0) {
        const auto start = std::chrono::steady_clock::now();
        const std::string expected =
            rg::str_cat("[dist.allreduce] allreduce #1 (sum, (", n, ",) f32 cpu, ", 4 * n, " bytes) on backend '",
                        backend, "', rank ", r, "/", N, " timed out after 2 s");
        auto work = pg->allreduce(t);  // #1: rank 0 never issues it
        if (n == 1000) CHECK_FALSE(work->wait(std::chrono::milliseconds(100)));
        CHECK_THROWS_WITH_AS(work->wait(), doctest::Contains(expected.c_str()), rg::Error);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        CHECK(seconds >= 1.9);
        CHECK(seconds < 10);
        CHECK(work->is_completed());
        CHECK_FALSE(work->is_success());
        CHECK(work->error() != nullptr);
        CHECK_THROWS_WITH_AS(work->wait_on_device(), doctest::Contains(expected.c_str()), rg::Error);
        // The group is now unusable, and says why.
        CHECK_THROWS_WITH_AS(pg->barrier()->wait(), doctest::Contains("unusable: allreduce #1 timed out"), rg::Error);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

TEST_CASE("ddp: one rank with one batch fewer ends every rank with the timeout diagnosis, not a hang") {
  namespace data = ringgrad::data;
  namespace nn = ringgrad::nn;
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  // "ring" waits in messages, "auto" in the shared gradient buffer's flags (Note [Shared gradient
  // buffers] in dist/shm/reduction_buffer.h): both must end in the diagnosis.
  for (const std::string backend : {"ring", "auto"}) {
    CAPTURE(backend);
    // 2 batches of 4 per rank, plus one example: with padding off, rank 0 gets a third batch.
    const int64_t B = 4, size = N * B * 2 + 1;
    rg::Generator gen(5);
    auto dataset =
        std::make_shared<data::TensorDataset>(rg::randn({size, 8}, gen), rg::zeros({size}, {.dtype = rg::DType::i64}));
    auto sampler =
        std::make_shared<data::DistributedSampler>(size, data::SamplerOptions{.shuffle = false, .pad = false});
    data::DataLoader loader(dataset, sampler, {.batch_size = B});
    rg::manual_seed(1);
    auto model = std::make_shared<nn::Linear>(8, 3);
    auto group = dist::new_group(backend, test_options(/*timeout_seconds=*/3));
    dist::DistributedDataParallel ddp(model, group);
    const auto start = std::chrono::steady_clock::now();
    int steps = 0;
    try {
      for (const data::Example& batch : loader) {
        rg::cross_entropy(ddp(batch.input), batch.target).backward();
        ++steps;
      }
      group->barrier()->wait();  // the end-of-epoch synchronisation the short ranks reach early
      FAIL("rank ", r, " finished although the ranks ran different numbers of steps");
    } catch (const rg::Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("timed out after 3 s") != std::string::npos);
      CHECK(what.find(rg::str_cat("rank ", r, "/", N)) != std::string::npos);
      CHECK(what.find(r == 0 ? "allreduce #" : "barrier #") != std::string::npos);
    }
    CHECK(steps == 2);  // every rank completed two steps; rank 0's third is the one that timed out
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  const dist::World world = dist::init(&argc, &argv);
  doctest::Context context(argc, argv);
  int rc = context.run();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  dist::finalize();
  (void)world;
  return context.shouldExit() ? rc : worst;
}
