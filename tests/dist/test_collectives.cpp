// Every collective x backend x dtype x size against closed-form expectations.
//
// Rank r (of N) fills element i with (r + 1) + (i % 7): small integers, exact in every dtype, so
// sum = N(N+1)/2 + N (i % 7), max = N + (i % 7), min = 1 + (i % 7), avg = sum / N (exact halves in
// floats; truncated toward zero for integers, Note [Where AVG divides]).
#include <mpi.h>

#include <cmath>

#include "dist_test_util.h"

namespace {

const std::vector<rg::DType> kDtypes = {rg::DType::f32, rg::DType::f64, rg::DType::f16,
                                        rg::DType::bf16, rg::DType::i32, rg::DType::i64};
const std::vector<std::string> kBackends = {"mpi", "ring", "tree"};
const std::vector<dist::ReduceOp> kOps = {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max,
                                          dist::ReduceOp::min};

std::vector<int64_t> sizes() {
  const int64_t N = dist::world().size;
  return {0, 1, N - 1, N + 1, 1000, 1001, int64_t{1} << 20};
}

double expected_reduce(dist::ReduceOp op, rg::DType dt, int64_t i) {
  const int64_t N = dist::world().size, k = i % 7;
  const int64_t sum = N * (N + 1) / 2 + N * k;
  switch (op) {
    case dist::ReduceOp::sum: return static_cast<double>(sum);
    case dist::ReduceOp::max: return static_cast<double>(N + k);
    case dist::ReduceOp::min: return static_cast<double>(1 + k);
    case dist::ReduceOp::avg:
      return rg::is_floating(dt) ? static_cast<double>(sum) / N : static_cast<double>(sum / N);
  }
  return 0;
}

}  // namespace

TEST_CASE("world: rank, size, local rank and local size") {
  const dist::World& w = dist::world();
  int mpi_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  CHECK(w.size == mpi_size);
  CHECK(w.rank >= 0);
  CHECK(w.rank < w.size);
  // The tests run on one machine: every rank is local.
  CHECK(w.local_size == w.size);
  CHECK(w.local_rank == w.rank);
  CHECK(w.thread_multiple);
}

TEST_CASE("allreduce: every backend x op x dtype x size") {
  const int r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = dist::new_group(backend, test_options());
    CHECK(pg->backend() == backend);
    CHECK(pg->size() == dist::world().size);
    for (rg::DType dt : kDtypes)
      for (dist::ReduceOp op : kOps)
        for (int64_t n : sizes()) {
          // The large size only for sum (the ring's arithmetic is the same for every op).
          if (n > 100000 && op != dist::ReduceOp::sum && op != dist::ReduceOp::avg) continue;
          CAPTURE(backend);
          const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
          const std::string reduce = dist::reduce_op_name(op);
          CAPTURE(reduce);
          CAPTURE(n);
          rg::Tensor t = filled(n, dt, [&](int64_t i) { return (r + 1) + (i % 7); });
          pg->allreduce(t, op)->wait();
          CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(op, dt, i); }) == "");
        }
  }
}

TEST_CASE("allreduce: f16 and bf16 are summed in f32 and rounded once") {
  // Rank 0 holds 2048, every other rank 1. In f16 2048 + 1 rounds back to 2048, so rounding after
  // each addition would give 2048; summing in f32 gives 2048 + N - 1, rounded once.
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = dist::new_group(backend, test_options());
    for (rg::DType dt : {rg::DType::f16, rg::DType::bf16}) {
      CAPTURE(backend);
      const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
      const double big = dt == rg::DType::f16 ? 2048 : 256;  // 1 is half an ulp there
      rg::Tensor t = filled(5, dt, [&](int64_t) { return r == 0 ? big : 1.0; });
      pg->allreduce(t)->wait();
      const double once = rg::from_vector(std::vector<double>{big + N - 1}, {1}, {.dtype = dt}).item();
      CHECK(mismatch(t, [&](int64_t) { return once; }) == "");
    }
  }
}

TEST_CASE("broadcast: every backend x root x dtype x size") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = dist::new_group(backend, test_options());
    for (int root : {0, N - 1})
      for (rg::DType dt : kDtypes)
        for (int64_t n : sizes()) {
          CAPTURE(backend);
          CAPTURE(root);
          const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
          CAPTURE(n);
          rg::Tensor t = filled(n, dt, [&](int64_t i) { return r == root ? (root + 1) + (i % 13) : -1.0; });
          pg->broadcast(t, root)->wait();
          CHECK(mismatch(t, [&](int64_t i) { return (root + 1) + (i % 13); }) == "");
        }
  }
}

TEST_CASE("allgather: every backend x dtype x size") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = dist::new_group(backend, test_options());
    for (rg::DType dt : kDtypes)
      for (int64_t n : sizes()) {
        if (n > 100000 && dt != rg::DType::f32 && dt != rg::DType::f16) continue;
        CAPTURE(backend);
        const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
        CAPTURE(n);
        rg::Tensor input = filled(n, dt, [&](int64_t i) { return (r + 1) + (i % 5); });
        rg::Tensor output = rg::full({N, n}, -1.0, {.dtype = dt});
        pg->allgather(output, input)->wait();
        // output[q][i] = (q + 1) + (i % 5), flattened row-major.
        CHECK(mismatch(output, [&](int64_t j) { return (j / std::max<int64_t>(n, 1) + 1) + (j % std::max<int64_t>(n, 1)) % 5; }) == "");
      }
  }
}

TEST_CASE("many outstanding async ops complete in submission order") {
  const int r = dist::world().rank;
  for (const auto& backend : kBackends) {
    CAPTURE(backend);
    auto pg = dist::new_group(backend, test_options());
    std::vector<rg::Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 64; ++k) {
      tensors.push_back(filled(1001 + k, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); }));
      works.push_back(k % 8 == 7 ? pg->barrier() : pg->allreduce(tensors.back(), dist::ReduceOp::sum));
    }
    // While they run: a completed op implies every earlier one completed.
    for (int poll = 0; poll < 200 && !works.back()->is_completed(); ++poll)
      for (int k = 1; k < 64; ++k)
        if (works[k]->is_completed()) CHECK(works[k - 1]->is_completed());
    works.back()->wait();
    for (int k = 0; k < 64; ++k) {
      CHECK(works[k]->is_completed());
      CHECK(works[k]->is_success());
      CHECK(works[k]->wait(std::chrono::milliseconds(0)));
      if (k % 8 != 7)
        CHECK(mismatch(tensors[k], [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
    }
  }
}

TEST_CASE("argument errors name the op, the tensor and the rank") {
  auto pg = dist::new_group("ring", test_options());
  const std::string rank = rg::str_cat("rank ", dist::world().rank, "/", dist::world().size);
  rg::Tensor m = rg::zeros({4, 6});
  CHECK_THROWS_WITH_AS(pg->allreduce(m.t()), doctest::Contains("[dist.allreduce] tensor (6, 4) f32 cpu must be contiguous"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->allreduce(rg::zeros({3}, {.dtype = rg::DType::u8})), doctest::Contains("u8 is not supported"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->broadcast(m, dist::world().size), doctest::Contains("[dist.broadcast] root"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->allgather(rg::zeros({7}), m), doctest::Contains("must be (N, *input.shape)"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->allgather(rg::zeros({7}), m), doctest::Contains(rank.c_str()), rg::Error);
  CHECK_THROWS_WITH_AS(dist::new_group("carrier-pigeon"), doctest::Contains("unknown backend 'carrier-pigeon'"), rg::Error);
}

TEST_CASE("collective timeout comes from RINGGRAD_COLLECTIVE_TIMEOUT") {
  setenv("RINGGRAD_COLLECTIVE_TIMEOUT", "12.5", 1);
  CHECK(dist::default_collective_timeout() == 12.5);
  auto pg = dist::new_group("mpi");
  CHECK(pg->timeout_seconds() == 12.5);
  setenv("RINGGRAD_COLLECTIVE_TIMEOUT", "soon", 1);
  CHECK_THROWS_WITH_AS(dist::default_collective_timeout(), doctest::Contains("RINGGRAD_COLLECTIVE_TIMEOUT='soon'"), rg::Error);
  unsetenv("RINGGRAD_COLLECTIVE_TIMEOUT");
  CHECK(dist::default_collective_timeout() == 300.0);
}
