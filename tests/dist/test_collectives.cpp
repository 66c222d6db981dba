// Every collective x backend x dtype x size against closed-form expectations.
//
// Rank r (of N) fills element i with (r + 1) + (i % 7): small integers, exact in every dtype, so
// sum = N(N+1)/2 + N (i % 7), max = N + (i % 7), min = 1 + (i % 7), avg = sum / N (exact halves in
// floats; truncated toward zero for integers, Note [Where AVG divides]).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "dist/consistency.h"
#include "dist/ddp/comm_hook.h"
#include "dist/group_agreement.h"
#include "dist_test_util.h"

namespace {

const std::vector<rg::DType> kDtypes = {rg::DType::f32,  rg::DType::f64, rg::DType::f16,
                                        rg::DType::bf16, rg::DType::i32, rg::DType::i64};
// "ring/small-segments" is the ring with 256-byte segments, so that moderate sizes run many
// pipeline segments per chunk; "hierarchical" declares nodes of 2 ranks (at np 4: 2 fake nodes of 2).
// The tests run on one machine, so "tree" and "auto" reduce small tensors through shared memory;
// "tree/p2p" and "auto/p2p" switch that off to test their MPI point-to-point path too.
const std::vector<std::string> kBackends = {"mpi",      "ring",     "ring/small-segments", "tree", "auto",
                                            "tree/p2p", "auto/p2p", "hierarchical"};

std::shared_ptr<dist::ProcessGroup> make_group(const std::string& name) {
  dist::GroupOptions options = test_options();
  if (name == "ring/small-segments") {
    options.ring_segment_bytes = 256;
    return dist::new_group("ring", options);
  }
  if (name == "hierarchical") options.ranks_per_node = 2;
  const size_t slash = name.find('/');
  if (slash != std::string::npos && name.substr(slash) == "/p2p") {
    options.shared_memory = false;
    return dist::new_group(name.substr(0, slash), options);
  }
  return dist::new_group(name, options);
}
const std::vector<dist::ReduceOp> kOps = {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max,
                                          dist::ReduceOp::min};

// A shared-memory slot holds 64 KiB in the accumulation type: exactly 16384 f32 / i32 / f16 / bf16
// (summed in f32) or 8192 f64 / i64; one element more goes over MPI.
std::vector<int64_t> sizes() {
  const int64_t N = dist::world().size;
  return {0, 1, N - 1, N + 1, 1000, 1001, 8192, 8193, 16384, 16385, int64_t{1} << 20};
}

double expected_reduce(dist::ReduceOp op, rg::DType dt, int64_t i) {
  const int64_t N = dist::world().size, k = i % 7;
  const int64_t sum = N * (N + 1) / 2 + N * k;
  switch (op) {
    case dist::ReduceOp::sum: return static_cast<double>(sum);
    case dist::ReduceOp::max: return static_cast<double>(N + k);
    case dist::ReduceOp::min: return static_cast<double>(1 + k);
    case dist::ReduceOp::avg: return rg::is_floating(dt) ? static_cast<double>(sum) / N : static_cast<double>(sum / N);
  }
  return 0;
}

// Calls body(backend, group, dtype, op, n) for every backend x dtype x reduce op x n in `ns`, each
// call labelled with all five on failure; on_group(backend, group) runs once per backend first.
void for_each_reduction(
    const std::vector<int64_t>& ns, const std::function<void(const std::string&, dist::ProcessGroup&)>& on_group,
    const std::function<void(const std::string&, dist::ProcessGroup&, rg::DType, dist::ReduceOp, int64_t)>& body) {
  for (const auto& backend : kBackends) {
    auto pg = make_group(backend);
    on_group(backend, *pg);
    for (rg::DType dt : kDtypes)
      for (dist::ReduceOp op : kOps)
        for (int64_t n : ns) {
          CAPTURE(backend);
          const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
          const std::string reduce = dist::reduce_op_name(op);
          CAPTURE(reduce);
          CAPTURE(n);
          body(backend, *pg, dt, op, n);
        }
  }
}

// Rank q's random input for the rank-order tests: randn(n) seeded by seed + q.
rg::Tensor random_input(int64_t n, uint64_t seed, int q) {
  rg::Generator gen(seed + q);
  return rg::randn({n}, gen);
}

// Elements of got (f32) that differ from the f32 sum of every rank's random_input added in rank
// order 0, 1, ..., N-1.
int64_t differ_from_rank_order_sum(const rg::Tensor& got, uint64_t seed) {
  const int64_t n = got.numel();
  std::vector<float> want(n, 0.0f);
  for (int q = 0; q < dist::world().size; ++q) {
    const std::vector<double> v = random_input(n, seed, q).to_vector();
    for (int64_t i = 0; i < n; ++i) want[i] = q == 0 ? static_cast<float>(v[i]) : want[i] + static_cast<float>(v[i]);
  }
  const std::vector<double> g = got.to_vector();
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += static_cast<float>(g[i]) != want[i];
  return differ;
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
  // Layers below dist/ (CUDA errors) name the rank through this label.
  CHECK(rg::rank_label() == rg::str_cat("rank ", w.rank, "/", w.size));
}

TEST_CASE("finalize with a live group is an error naming it, and leaves MPI usable") {
  auto group = dist::new_group("ring", test_options());
  const std::vector<std::string> live = dist::live_groups();
  CHECK(std::find(live.begin(), live.end(), "'ring'") != live.end());
  CHECK_THROWS_WITH_AS(dist::finalize(), doctest::Contains("process group(s) still alive: 'ring'"), rg::Error);
  CHECK(dist::is_initialized());
  // MPI still works: the group completes a collective after the refused finalize.
  rg::Tensor t = rg::ones({4});
  group->allreduce(t)->wait();
  CHECK(t.sum().item() == 4.0 * dist::world().size);
  const size_t before = dist::live_groups().size();
  group.reset();
  CHECK(dist::live_groups().size() == before - 1);
}

TEST_CASE("allreduce: every backend x op x dtype x size") {
  const int r = dist::world().rank;
  for_each_reduction(
      sizes(),
      [](const std::string& backend, dist::ProcessGroup& pg) {
        CHECK(pg.backend() == backend.substr(0, backend.find('/')));
        CHECK(pg.size() == dist::world().size);
      },
      [&](const std::string&, dist::ProcessGroup& pg, rg::DType dt, dist::ReduceOp op, int64_t n) {
        // The large size only for sum (the ring's arithmetic is the same for every op).
        if (n > 100000 && op != dist::ReduceOp::sum && op != dist::ReduceOp::avg) return;
        rg::Tensor t = filled(n, dt, [&](int64_t i) { return (r + 1) + (i % 7); });
        pg.allreduce(t, op)->wait();
        CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(op, dt, i); }) == "");
      });
}

TEST_CASE("allreduce: f16 and bf16 are summed in f32 and rounded once") {
  // Rank 0 holds 2048, every other rank 1. In f16 2048 + 1 rounds back to 2048, so rounding after
  // each addition would give 2048; summing in f32 gives 2048 + N - 1, rounded once.
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = make_group(backend);
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

// Round to nearest, ties to even, onto a float format with `mantissa_bits` stored bits (f16: 10,
// bf16: 7), for normal results -- written here, independently of the library's conversions.
static double round_to_format(double x, int mantissa_bits) {
  if (x == 0) return x;
  const double ulp = std::ldexp(1.0, std::ilogb(x) - mantissa_bits);
  return std::nearbyint(x / ulp) * ulp;  // the default rounding mode: to nearest, ties to even
}

TEST_CASE("allreduce: f16 and bf16 results round to nearest even, in vector-wide runs and their tails") {
  // Element i of rank r is 1 + ((5i + 3r) mod 2^m) ulps of 1: exact in the format, and the sums of N
  // of them land on every remainder of the result's ulp, ties included, so a truncating or
  // ties-away conversion fails. n = 37 and 4099 cover runs of 8 (the F16C path) and tails, and
  // chunks split across ranks. AVG divides the f32 sum once, in f32, then rounds (Note [Where AVG
  // divides]).
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = make_group(backend);
    for (rg::DType dt : {rg::DType::f16, rg::DType::bf16})
      for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg})
        for (int64_t n : {int64_t{37}, int64_t{4099}}) {
          CAPTURE(backend);
          const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
          CAPTURE(n);
          const int m = dt == rg::DType::f16 ? 10 : 7;
          auto value = [&](int64_t i, int rank) { return 1.0 + std::ldexp(double((5 * i + 3 * rank) % (1 << m)), -m); };
          rg::Tensor t = filled(n, dt, [&](int64_t i) { return value(i, r); });
          pg->allreduce(t, op)->wait();
          CHECK(mismatch(t, [&](int64_t i) {
                  double sum = 0;  // exact: N terms of at most m + 2 significant bits
                  for (int q = 0; q < N; ++q) sum += value(i, q);
                  const double reduced = op == dist::ReduceOp::avg ? double(float(sum) / float(N)) : sum;
                  return round_to_format(reduced, m);
                }) == "");
        }
  }
}

TEST_CASE("broadcast: every backend x root x dtype x size") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = make_group(backend);
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
    auto pg = make_group(backend);
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
        CHECK(mismatch(output, [&](int64_t j) {
                return (j / std::max<int64_t>(n, 1) + 1) + (j % std::max<int64_t>(n, 1)) % 5;
              }) == "");
      }
  }
}

TEST_CASE("allgather: the output may also be the inputs concatenated along dim 0, as all_gather_into_tensor's") {
  const int N = dist::world().size, r = dist::world().rank;
  for (const std::string backend : {"mpi", "ring", "auto"}) {
    CAPTURE(backend);
    auto pg = make_group(backend);
    // input (3, 2), output (3N, 2): rows 3q .. 3q+2 are rank q's.
    rg::Tensor input = filled(6, rg::DType::f32, [&](int64_t i) { return 10 * r + i; }).view({3, 2});
    rg::Tensor output = rg::full({3 * N, 2}, -1.0);
    pg->allgather(output, input)->wait();
    CHECK(mismatch(output, [&](int64_t j) { return 10 * (j / 6) + j % 6; }) == "");
    // 1-D: (k) into (N k).
    rg::Tensor flat_out = rg::full({5 * N}, -1.0);
    pg->allgather(flat_out, filled(5, rg::DType::f32, [&](int64_t i) { return 10 * r + i; }))->wait();
    CHECK(mismatch(flat_out, [&](int64_t j) { return 10 * (j / 5) + j % 5; }) == "");
    // Any other shape of N * numel elements is still refused, naming both forms.
    CHECK_THROWS_WITH_AS(pg->allgather(rg::zeros({6 * N}), input),
                         doctest::Contains(rg::str_cat("must be (N, *input.shape) = (", N,
                                                       ", 3, 2) or (N * "
                                                       "input.shape[0], ...) = (",
                                                       3 * N, ", 2)")
                                               .c_str()),
                         rg::Error);
  }
}

TEST_CASE("host staging: results are written back into a parameter that requires grad, on every path") {
  // Note [Host staging without a GPU]: the copy-back of a staged collective runs on whichever
  // thread finishes it. Queued behind a large AllReduce, the broadcasts below finish on the
  // communication thread, where grad mode is on; Tensor::copy_ refused them there.
  const int N = dist::world().size, r = dist::world().rank;
  for (const std::string backend : {"mpi", "ring", "tree", "auto", "hierarchical"}) {
    CAPTURE(backend);
    dist::GroupOptions options = test_options();
    options.host_staging = true;
    if (backend == "hierarchical") options.ranks_per_node = 2;
    auto pg = dist::new_group(backend, options);
    rg::Tensor big = rg::full({1 << 20}, static_cast<double>(r + 1));
    std::vector<rg::Tensor> params;
    for (int i = 0; i < 8; ++i) params.push_back(rg::full({32}, 100.0 * r + i).requires_grad_());
    std::vector<std::shared_ptr<dist::Work>> works{pg->allreduce(big)};
    for (rg::Tensor& p : params) works.push_back(pg->broadcast(p, 0));
    for (auto& w : works) w->wait();
    CHECK(big.to_vector()[12345] == N * (N + 1) / 2);
    for (int i = 0; i < 8; ++i) CHECK(mismatch(params[i], [&](int64_t) { return i; }) == "");
    CHECK(params[0].requires_grad());
    // A staged buffer is never shared memory, so it is never reduced in place.
    rg::Tensor buffer = pg->new_reduction_buffer(100, rg::DType::f32);
    CHECK_FALSE(pg->reduces_in_place(buffer));
    CHECK_FALSE(pg->reserve_reduce_scatter_staging(1 << 16));
    // recv into a parameter, and allgather / reduce_scatter results, come back the same way.
    if (N > 1) {
      rg::Tensor p = rg::full({16}, -1.0).requires_grad_();
      rg::Tensor msg = rg::full({16}, 7.0 + r);
      if (r == 0) pg->send(msg, 1, 3)->wait();
      if (r == 1) pg->recv(p, 0, 3)->wait();
      if (r == 1) CHECK(mismatch(p, [](int64_t) { return 7.0; }) == "");
    }
    rg::Tensor gathered = rg::full({N, 4}, -1.0);
    pg->allgather(gathered, rg::full({4}, static_cast<double>(r)))->wait();
    CHECK(mismatch(gathered, [](int64_t j) { return static_cast<double>(j / 4); }) == "");
    rg::Tensor scattered = rg::full({3}, -1.0);
    pg->reduce_scatter(scattered, rg::full({3 * N}, 1.0))->wait();
    CHECK(mismatch(scattered, [&](int64_t) { return static_cast<double>(N); }) == "");
  }
}

TEST_CASE("allgather in place: input is output's block of this rank, in an ordinary tensor and a reduction buffer") {
  // As PyTorch's all_gather_into_tensor allows. In a buffer from new_reduction_buffer on "tree" and
  // "auto" the ranks copy between their buffers (Note [Allgather in a shared buffer]); anywhere
  // else the block travels as a copy. Other ranks' blocks start as a sentinel in every rank's copy.
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = make_group(backend);
    for (rg::DType dt : {rg::DType::f32, rg::DType::f16, rg::DType::f64, rg::DType::i64})
      for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{16385}, int64_t{1} << 18})
        for (bool buffer : {false, true}) {
          if (m > 100000 && dt != rg::DType::f32) continue;
          CAPTURE(backend);
          const std::string dtype = rg::dtype_name(dt);
          CAPTURE(dtype);
          CAPTURE(m);
          CAPTURE(buffer);
          rg::Tensor flat = buffer ? pg->new_reduction_buffer(N * m, dt) : rg::zeros({N * m}, {.dtype = dt});
          flat.fill_(-3.0);
          flat.narrow(0, r * m, m).copy_(filled(m, dt, [&](int64_t i) { return (r + 1) + (i % 5); }));
          pg->allgather(flat.view({N, m}), flat.narrow(0, r * m, m))->wait();
          CHECK(mismatch(flat, [&](int64_t j) { return (j / m + 1) + (j % m) % 5; }) == "");
        }
  }
}

TEST_CASE("allgather in a shared buffer: a rank on another view fails every rank at once") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;
  auto pg = dist::new_group("auto", options);
  const int64_t m = 1 << 16;
  rg::Tensor flat = pg->new_reduction_buffer(N * m + 1, rg::DType::f32);
  REQUIRE(pg->reduces_in_place(flat));
  // The last rank's view starts one element further in: the headers disagree, which only the
  // shared-buffer path sees, so a failure within seconds (not the 60 s timeout) shows it took it.
  const rg::Tensor mine = flat.narrow(0, r == N - 1 ? 1 : 0, N * m);
  const auto start = std::chrono::steady_clock::now();
  try {
    pg->allgather(mine.view({N, m}), mine.narrow(0, r * m, m))->wait();
    FAIL("the mismatch went unnoticed");
  } catch (const rg::Error& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("dist.allgather") != std::string::npos, what);
    CHECK_MESSAGE(what.find("f32 allgather, " + std::to_string(N * m) + " elements at byte 0") != std::string::npos,
                  what);
    CHECK_MESSAGE(what.find("f32 allgather, " + std::to_string(N * m) + " elements at byte 4") != std::string::npos,
                  what);
  }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);
}

TEST_CASE("many outstanding async ops complete in submission order") {
  const int r = dist::world().rank;
  for (const auto& backend : kBackends) {
    CAPTURE(backend);
    auto pg = make_group(backend);
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
        CHECK(mismatch(tensors[k],
                       [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
    }
    // An op that completes on the host has no device event: wait_on_device() is wait() (Note
    // [Waiting on the device]), so the last op's result is in place when it returns.
    rg::Tensor last = filled(5000, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); });
    pg->allreduce(last, dist::ReduceOp::sum)->wait_on_device();
    CHECK(mismatch(last, [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
    // Descriptions are built on demand (after the op, here), from what the op was given.
    const std::string d = works[3]->description();
    CHECK_MESSAGE(d.find("allreduce #3 (sum, (1004,) f32") != std::string::npos, d);
    CHECK_MESSAGE(d.find("4016 bytes) on backend '" + pg->backend() + "', rank " + std::to_string(r)) !=
                      std::string::npos,
                  d);
    CHECK_MESSAGE(works[7]->description().find("barrier #7 (no data, 0 bytes)") != std::string::npos,
                  works[7]->description());
  }
}

TEST_CASE("argument errors name the op, the tensor and the rank") {
  auto pg = dist::new_group("ring", test_options());
  const std::string rank = rg::str_cat("rank ", dist::world().rank, "/", dist::world().size);
  rg::Tensor m = rg::zeros({4, 6});
  CHECK_THROWS_WITH_AS(pg->allreduce(m.t()),
                       doctest::Contains("[dist.allreduce] tensor (6, 4) f32 cpu must be contiguous"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->allreduce(rg::zeros({3}, {.dtype = rg::DType::u8})),
                       doctest::Contains("u8 is not supported"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->broadcast(m, dist::world().size), doctest::Contains("[dist.broadcast] root"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->allgather(rg::zeros({7}), m), doctest::Contains("must be (N, *input.shape)"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->allgather(rg::zeros({7}), m), doctest::Contains(rank.c_str()), rg::Error);
  CHECK_THROWS_WITH_AS(dist::new_group("carrier-pigeon"), doctest::Contains("unknown backend 'carrier-pigeon'"),
                       rg::Error);
}

TEST_CASE("collective timeout comes from RINGGRAD_COLLECTIVE_TIMEOUT") {
  setenv("RINGGRAD_COLLECTIVE_TIMEOUT", "12.5", 1);
  CHECK(dist::default_collective_timeout() == 12.5);
  auto pg = dist::new_group("mpi");
  CHECK(pg->timeout_seconds() == 12.5);
  setenv("RINGGRAD_COLLECTIVE_TIMEOUT", "soon", 1);
  CHECK_THROWS_WITH_AS(dist::default_collective_timeout(), doctest::Contains("RINGGRAD_COLLECTIVE_TIMEOUT='soon'"),
                       rg::Error);
  unsetenv("RINGGRAD_COLLECTIVE_TIMEOUT");
  CHECK(dist::default_collective_timeout() == 300.0);
}

namespace {

// "rank 1" or "ranks 1,2,3": how an error lists every rank but 0.
std::string other_ranks(int N) {
  std::string out = N == 2 ? "rank " : "ranks ";
  for (int r = 1; r < N; ++r) out += (r > 1 ? "," : "") + std::to_string(r);
  return out;
}

}  // namespace

TEST_CASE("ranks that create a group differently fail at creation, every rank naming each difference") {
  const int r = dist::world().rank, N = dist::world().size;
  if (N == 1) return;
  const std::string others = other_ranks(N);
  // Backend: one rank on 'ring', the others on 'tree' would exchange different messages and hang.
  CHECK_THROWS_WITH_AS(dist::new_group(r == 0 ? "ring" : "tree", test_options()),
                       doctest::Contains(("backend: rank 0 'ring'; " + others + " 'tree'").c_str()), rg::Error);
  // Debug mode on one rank only: its fingerprint all-gather would wait for peers that never send one.
  dist::GroupOptions debug_on_rank_0 = test_options();
  debug_on_rank_0.debug_check = r == 0;
  CHECK_THROWS_WITH_AS(dist::new_group("ring", debug_on_rank_0),
                       doctest::Contains(("debug mode: " + others + " 'off'; rank 0 'on'").c_str()), rg::Error);
  // Host staging on one rank only: the others would map shared buffers it never maps.
  dist::GroupOptions staged_on_rank_0 = test_options();
  staged_on_rank_0.host_staging = r == 0;
  CHECK_THROWS_WITH_AS(dist::new_group("tree", staged_on_rank_0),
                       doctest::Contains(("host staging: " + others + " 'off'; rank 0 'on'").c_str()), rg::Error);
  // Different timeouts: one rank would give up while the others still wait.
  CHECK_THROWS_WITH_AS(dist::new_group("mpi", test_options(r == 0 ? 30 : 60)),
                       doctest::Contains(("collective timeout (s): rank 0 '30'; " + others + " '60'").c_str()),
                       rg::Error);
  // The ranks are still in step: the next group works.
  auto pg = dist::new_group("ring", test_options());
  rg::Tensor t = rg::ones({4});
  pg->allreduce(t)->wait();
  CHECK(t.to_vector()[0] == N);
}

TEST_CASE("check_same_settings names each setting that differs and which ranks hold which value") {
  const int r = dist::world().rank, N = dist::world().size;
  auto pg = dist::new_group("ring", test_options());
  dist::check_same_settings(*pg, "flags", {{"--seed", "1"}, {"--batch-size", "64"}});  // equal: no error
  if (N == 1) return;
  const std::string others = other_ranks(N);
  CHECK_THROWS_WITH_AS(
      dist::check_same_settings(*pg, "flags", {{"--seed", r == 0 ? "1" : "2"}, {"--batch-size", "64"}}),
      doctest::Contains(("flags differ between ranks (seen by rank " + std::to_string(r) + "/" + std::to_string(N) +
                         "):\n  rank 0 --seed=1; " + others + " --seed=2\nEvery rank")
                            .c_str()),
      rg::Error);
}

TEST_CASE("RINGGRAD_DIST_SHM malformed on one rank fails group creation on every rank, without a hang") {
  const int r = dist::world().rank;
  if (r == 0) setenv("RINGGRAD_DIST_SHM", "maybe", 1);
  const std::string expected = r == 0 ? "RINGGRAD_DIST_SHM='maybe' is not 0/1/true/false/on/off"
                                      : "RINGGRAD_DIST_SHM is malformed on another rank than " + std::to_string(r);
  CHECK_THROWS_WITH_AS(dist::new_group("tree", test_options()), doctest::Contains(expected.c_str()), rg::Error);
  unsetenv("RINGGRAD_DIST_SHM");
  auto pg = dist::new_group("tree", test_options());  // the ranks are still in step
  rg::Tensor t = rg::ones({10});
  pg->allreduce(t)->wait();
  CHECK(t.to_vector()[0] == dist::world().size);
}

TEST_CASE("RINGGRAD_DIST_HOST_STAGING malformed on one rank fails group creation on every rank, without a hang") {
  const int r = dist::world().rank, N = dist::world().size;
  if (r == 0) setenv("RINGGRAD_DIST_HOST_STAGING", "maybe", 1);
  // Alone, rank 0 raises its setting's error; with peers, every rank names rank 0's malformed vote
  // (without the vote, the peers would wait in the creation agreement until the timeout).
  const std::string expected =
      N == 1 ? "RINGGRAD_DIST_HOST_STAGING='maybe' is not 0/1/true/false/on/off" : "host staging: rank 0 'malformed'";
  CHECK_THROWS_WITH_AS(dist::new_group("ring", test_options()), doctest::Contains(expected.c_str()), rg::Error);
  unsetenv("RINGGRAD_DIST_HOST_STAGING");
  auto pg = dist::new_group("ring", test_options());  // the ranks are still in step
  rg::Tensor t = rg::ones({10});
  pg->allreduce(t)->wait();
  CHECK(t.to_vector()[0] == N);
}

TEST_CASE("reduce_scatter: every backend x op x dtype x size, without and with a staging reservation") {
  // The second pass reserves staging for rounds of 1000 f64 elements of each block: on "tree" and
  // "auto" on one machine every size goes through shared memory (Note [Reduce-scatter through a
  // shared buffer]), the larger ones in rounds (2^18 f64 elements: 262 rounds of 1000 and one of
  // 144; 4567, every op: 4 of 1000 and one of 567 in f64); elsewhere the reservation is refused
  // and nothing changes. The rounds' widths (1000, 2000, 4000 elements) are not multiples of the
  // data's period 7, so a round that read another round's slice would fail.
  const int N = dist::world().size, r = dist::world().rank;
  for (const auto& backend : kBackends) {
    auto pg = make_group(backend);
    for (bool reserved : {false, true}) {
      if (reserved) {
        const bool shared = N > 1 && (backend == "tree" || backend == "auto");
        CHECK(pg->reserve_reduce_scatter_staging(N * 1000 * 8) == shared);
        CHECK(pg->reserve_reduce_scatter_staging(16) == shared);  // a smaller one keeps the larger
      }
      for (rg::DType dt : kDtypes)
        for (dist::ReduceOp op : kOps)
          for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{N - 1}, int64_t{1001}, int64_t{4567}, int64_t{1} << 18}) {
            if (m > 100000 && op != dist::ReduceOp::sum) continue;
            CAPTURE(reserved);
            CAPTURE(backend);
            const std::string dtype = rg::dtype_name(dt);
            CAPTURE(dtype);
            const std::string reduce = dist::reduce_op_name(op);
            CAPTURE(reduce);
            CAPTURE(m);
            // input (N, m): element j of the flat input is (r + 1) + (j % 7), so rank q's output
            // element i is the closed form at j = q m + i.
            rg::Tensor input = filled(N * m, dt, [&](int64_t j) { return (r + 1) + (j % 7); }).view({N, m});
            rg::Tensor before = input.clone();
            rg::Tensor output = rg::full({m}, -1.0, {.dtype = dt});
            pg->reduce_scatter(output, input, op)->wait();
            CHECK(mismatch(output, [&](int64_t i) { return expected_reduce(op, dt, r * m + i); }) == "");
            CHECK(rg::equal(input, before));  // the input is left alone
          }
    }
  }
}

TEST_CASE("reduce_scatter through shared staging: another reduce op on one rank fails every rank at once") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;
  const int64_t m = 1 << 16;
  // Staging for the whole input: one op of N m elements. Staging for 1024 elements of each block:
  // rounds of N x 1024, the first of which the headers already tell apart.
  for (int64_t round : {m, int64_t{1024}}) {
    CAPTURE(round);
    auto pg = dist::new_group("auto", options);
    REQUIRE(pg->reserve_reduce_scatter_staging(N * round * 4));
    rg::Tensor input = rg::ones({N * m}), output = rg::zeros({m});
    // Only the staged path compares the ranks' headers: a failure within seconds, not the timeout.
    const auto start = std::chrono::steady_clock::now();
    try {
      pg->reduce_scatter(output, input, r == N - 1 ? dist::ReduceOp::max : dist::ReduceOp::sum)->wait();
      FAIL("the mismatch went unnoticed");
    } catch (const rg::Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find("dist.reduce_scatter") != std::string::npos, what);
      CHECK_MESSAGE(what.find("f32 reduce-scatter sum, " + std::to_string(N * round) + " elements") !=
                        std::string::npos,
                    what);
      CHECK_MESSAGE(what.find("f32 reduce-scatter max, " + std::to_string(N * round) + " elements") !=
                        std::string::npos,
                    what);
    }
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);
  }
}

TEST_CASE("send / recv: a ring of large messages posted send-first on every rank does not deadlock") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  for (const auto& backend : {"mpi", "ring"}) {
    auto pg = dist::new_group(backend, test_options());
    const int64_t n = int64_t{1} << 20;  // 4 MiB: beyond any eager limit, so a send needs its receive
    rg::Tensor out = filled(n, rg::DType::f32, [&](int64_t i) { return r * 1000 + (i % 11); });
    rg::Tensor in = rg::zeros({n});
    rg::Tensor small_out = filled(3, rg::DType::i64, [&](int64_t i) { return -r - i; });
    rg::Tensor small_in = rg::zeros({3}, {.dtype = rg::DType::i64});
    const int right = (r + 1) % N, left = (r - 1 + N) % N;
    // Two tags, received in the other order than sent: tags keep them apart.
    auto s1 = pg->send(out, right, /*tag=*/1);
    auto s2 = pg->send(small_out, right, /*tag=*/2);
    auto r2 = pg->recv(small_in, left, /*tag=*/2);
    auto r1 = pg->recv(in, left, /*tag=*/1);
    for (auto& w : {s1, s2, r2, r1}) w->wait();
    CHECK(mismatch(in, [&](int64_t i) { return left * 1000 + (i % 11); }) == "");
    CHECK(mismatch(small_in, [&](int64_t i) { return -left - i; }) == "");
    // Point-to-point ops do not disturb the collective order.
    rg::Tensor t = filled(1001, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); });
    pg->allreduce(t)->wait();
    CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
  }
}

TEST_CASE("a send queued behind a waited-for collective still runs beside it") {
  // Rank 1 receives before it joins the AllReduce, and rank 0 sends after submitting it: the
  // AllReduce can only finish once the send has run. A wait() that ran the AllReduce on its own
  // thread and kept the send behind it would deadlock (Note [A waiting caller runs its op] in
  // dist/comm_thread.cpp); the 10 s timeout turns that into a failure here. Second round: the send
  // comes from another thread while rank 0's main thread is already waiting.
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  for (const auto& backend : {"mpi", "ring", "auto"}) {
    for (const bool from_another_thread : {false, true}) {
      CAPTURE(backend);
      CAPTURE(from_another_thread);
      auto pg = dist::new_group(backend, test_options(/*timeout_seconds=*/10));
      const int64_t n = 100000;  // 400 KB: queued, not started on the submitting thread
      rg::Tensor t = filled(n, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); });
      rg::Tensor message = filled(5, rg::DType::i64, [&](int64_t i) { return 40 + i; });
      rg::Tensor received = rg::zeros({5}, {.dtype = rg::DType::i64});
      if (r == 0) {
        auto reduced = pg->allreduce(t);
        if (from_another_thread) {
          std::thread sender([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            pg->send(message, 1, /*tag=*/3)->wait();
          });
          CHECK_NOTHROW(reduced->wait());
          sender.join();
        } else {
          auto sent = pg->send(message, 1, /*tag=*/3);
          CHECK_NOTHROW(reduced->wait());
          CHECK_NOTHROW(sent->wait());
        }
      } else {
        if (r == 1) pg->recv(received, 0, /*tag=*/3)->wait();
        CHECK_NOTHROW(pg->allreduce(t)->wait());
      }
      if (r == 1) CHECK(mismatch(received, [](int64_t i) { return 40.0 + i; }) == "");
      CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
    }
  }
}

TEST_CASE("send / recv: a message that does not fit the receiving tensor is an error naming both sizes") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  auto pg = dist::new_group("ring", test_options());
  CHECK_THROWS_WITH_AS(pg->send(rg::zeros({4}), r), doctest::Contains("must be another rank"), rg::Error);
  CHECK_THROWS_WITH_AS(pg->send(rg::zeros({4}), (r + 1) % N, 40000), doctest::Contains("tag 40000"), rg::Error);
  // Each case on a group of its own: a failed receive leaves its group unusable (on rank 1 only).
  auto bigger = dist::new_group("ring", test_options());
  auto smaller = dist::new_group("mpi", test_options());
  if (r == 0) {
    bigger->send(rg::zeros({5}), 1, 7)->wait();
    smaller->send(rg::zeros({3}), 1, 8)->wait();
  } else if (r == 1) {
    CHECK_THROWS_WITH_AS(bigger->recv(rg::zeros({4}), 0, 7)->wait(),
                         doctest::Contains(
                             "the message from rank 0 (tag 7) is larger than the receiving tensor (4,) f32"),
                         rg::Error);
    CHECK_THROWS_WITH_AS(
        smaller->recv(rg::zeros({4}), 0, 8)->wait(),
        doctest::Contains("the message from rank 0 (tag 8) has 12 bytes but the receiving tensor (4,) f32 cpu has 16"),
        rg::Error);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("hierarchical: any node size gives the flat result") {
  const int N = dist::world().size, r = dist::world().rank;
  for (int k : {1, 2, 3, N}) {
    CAPTURE(k);
    dist::GroupOptions options = test_options();
    options.ranks_per_node = k;
    auto pg = dist::new_group("hierarchical", options);
    for (rg::DType dt : {rg::DType::f32, rg::DType::bf16, rg::DType::i64})
      for (dist::ReduceOp op : kOps) {
        rg::Tensor t = filled(5003, dt, [&](int64_t i) { return (r + 1) + (i % 7); });
        pg->allreduce(t, op)->wait();
        CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(op, dt, i); }) == "");
      }
  }
}

TEST_CASE("tree on shared memory: every rank ends with the rank-order sum; a mismatch fails at once") {
  // Note [Shared-memory AllReduce]: every rank adds the slots in rank order 0, 1, ..., N-1, so the
  // result is that f32 sum bit for bit on every rank, for any inputs.
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;  // whatever RINGGRAD_DIST_SHM says
  auto pg = dist::new_group("tree", options);
  rg::Tensor t = random_input(3000, 100, r);
  pg->allreduce(t)->wait();
  CHECK(differ_from_rank_order_sum(t, 100) == 0);

  // The last rank is off by one element. Over shared memory every rank sees the other's header at
  // once and fails, naming both byte counts, instead of waiting out the 60 s timeout.
  rg::Tensor u = rg::ones({r == N - 1 ? 999 : 1000});
  const auto start = std::chrono::steady_clock::now();
  try {
    pg->allreduce(u)->wait();
    FAIL("the mismatch went unnoticed");
  } catch (const rg::Error& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("is at another collective") != std::string::npos, what);
    CHECK_MESSAGE(what.find("f32 sum, 3996 bytes") != std::string::npos, what);
    CHECK_MESSAGE(what.find("f32 sum, 4000 bytes") != std::string::npos, what);
    CHECK_MESSAGE(what.find("allreduce #1") != std::string::npos, what);
  }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);
}

TEST_CASE("tree on shared memory: same byte count but another dtype or reduce op fails at once") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;
  for (int mismatch_kind : {0, 1}) {
    CAPTURE(mismatch_kind);
    auto pg = dist::new_group("tree", options);
    const bool odd_one = r == N - 1;
    // 1000 f32 and 1000 i32 are 4000 bytes each; sum and max move the same bytes.
    rg::Tensor t = rg::ones({1000}, {.dtype = mismatch_kind == 0 && odd_one ? rg::DType::i32 : rg::DType::f32});
    const dist::ReduceOp op = mismatch_kind == 1 && odd_one ? dist::ReduceOp::max : dist::ReduceOp::sum;
    CHECK_THROWS_WITH_AS(pg->allreduce(t, op)->wait(), doctest::Contains("is at another collective"), rg::Error);
  }
}

TEST_CASE("new_reduction_buffer: every backend x op x dtype, the whole buffer and a view into it") {
  // Note [Shared gradient buffers]: on "tree" and "auto" (one machine) the buffer is memory every
  // rank maps and the AllReduce sums it in place; elsewhere it is an ordinary tensor. The results
  // must be the same closed forms as for any tensor.
  const int r = dist::world().rank;
  for_each_reduction(
      {1, 37, 5000, 300001}, [](const std::string&, dist::ProcessGroup&) {},
      [&](const std::string& backend, dist::ProcessGroup& pg, rg::DType dt, dist::ReduceOp op, int64_t n) {
        rg::Tensor buffer = pg.new_reduction_buffer(n, dt);
        REQUIRE(buffer.shape() == rg::Shape{n});
        CHECK(buffer.dtype() == dt);
        const bool in_place = dist::world().size > 1 && (backend == "tree" || backend == "auto");
        CHECK(pg.reduces_in_place(buffer) == in_place);
        CHECK(mismatch(buffer, [](int64_t) { return 0.0; }) == "");  // zero-filled
        buffer.copy_(filled(n, dt, [&](int64_t i) { return (r + 1) + (i % 7); }));
        pg.allreduce(buffer, op)->wait();
        CHECK(mismatch(buffer, [&](int64_t i) { return expected_reduce(op, dt, i); }) == "");
        if (n < 10) return;
        // A view that starts off a cache line and ends before the buffer does; the rest stays.
        rg::Tensor view = buffer.narrow(0, 3, n - 7);
        CHECK(pg.reduces_in_place(view) == in_place);
        // Element j of the buffer now holds (r + 1) + ((j + 1) % 7) inside the view.
        view.copy_(filled(n - 7, dt, [&](int64_t i) { return (r + 1) + ((i + 4) % 7); }));
        pg.allreduce(view, op)->wait();
        CHECK(mismatch(buffer, [&](int64_t j) {
                const bool inside = j >= 3 && j < n - 4;
                // Outside: the first reduction's result, not reduced again.
                return inside ? expected_reduce(op, dt, j + 1) : expected_reduce(op, dt, j);
              }) == "");
      });
}

TEST_CASE("new_reduction_buffer on shared memory: identical rank-order sums everywhere; another view fails at once") {
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;  // whatever RINGGRAD_DIST_SHM says
  auto pg = dist::new_group("auto", options);
  // Large enough that an ordinary tensor would take the ring.
  const int64_t n = 1 << 20;
  rg::Tensor buffer = pg->new_reduction_buffer(n, rg::DType::f32);
  REQUIRE(pg->reduces_in_place(buffer));
  CHECK_FALSE(pg->reduces_in_place(rg::zeros({n})));  // an ordinary tensor takes the ring
  buffer.copy_(random_input(n, 200, r));
  pg->allreduce(buffer)->wait();
  CHECK(differ_from_rank_order_sum(buffer, 200) == 0);

  // The last rank reduces a view one element further in. The ranks see each other's headers and
  // fail at once, naming both views, instead of waiting out the 60 s timeout -- which also shows
  // that this 4 MiB AllReduce went through the shared buffer, not the ring.
  const auto start = std::chrono::steady_clock::now();
  try {
    pg->allreduce(buffer.narrow(0, r == N - 1 ? 1 : 0, 1000))->wait();
    FAIL("the mismatch went unnoticed");
  } catch (const rg::Error& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("on a shared reduction buffer") != std::string::npos, what);
    CHECK_MESSAGE(what.find("f32 sum, 1000 elements at byte 0") != std::string::npos, what);
    CHECK_MESSAGE(what.find("f32 sum, 1000 elements at byte 4") != std::string::npos, what);
  }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);

  // Ranks that ask for different sizes are told so, every one of them, and the group still works.
  auto another = dist::new_group("auto", options);
  CHECK_THROWS_WITH_AS(another->new_reduction_buffer(r == N - 1 ? 999 : 1000, rg::DType::f32),
                       doctest::Contains("the ranks asked for buffers of different sizes"), rg::Error);
  rg::Tensor t = filled(10, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); });
  another->allreduce(t)->wait();
  CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
}

TEST_CASE(
    "new_reduction_buffer on shared memory: 300 AllReduces and allgathers of any size and place, whichever rank is "
    "late or busy") {
  // Note [Shared gradient buffers]: the ranks claim the chunks of an op between them, so how much
  // each rank reduces depends on who arrives when -- and each op's chunks are counted from where the
  // previous op's ended. Random sizes, view offsets, dtypes and ops (the same on every rank, from
  // one seed), with a random rank arriving up to 2 ms late and the others either blocked in wait()
  // or busy (sleeping) meanwhile: every result is the closed form, and what lies outside the
  // view is untouched.
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;
  auto pg = dist::new_group("auto", options);
  const int64_t capacity = 300000;
  std::map<rg::DType, rg::Tensor> buffers;
  for (rg::DType dt : {rg::DType::f32, rg::DType::f64}) {
    buffers[dt] = pg->new_reduction_buffer(capacity, dt);
    REQUIRE(pg->reduces_in_place(buffers[dt]));
  }
  std::mt19937_64 same_everywhere(42);
  auto below = [&](int64_t n) { return static_cast<int64_t>(same_everywhere() % static_cast<uint64_t>(n)); };
  for (int op_index = 0; op_index < 300; ++op_index) {
    const rg::DType dt = below(2) == 0 ? rg::DType::f32 : rg::DType::f64;
    const dist::ReduceOp op = kOps[static_cast<size_t>(below(4))];
    // One op in four an allgather in place (Note [Allgather in a shared buffer]): its chunks are
    // counted on the same segment as the AllReduces'.
    const bool gather = below(4) == 0;
    // Mostly below one 32 KiB chunk or a few; now and then many.
    int64_t n = 1 + (below(8) == 0 ? below(capacity - 1000) : below(40000));
    if (gather) n = N * (1 + n / N);
    const int64_t m = n / N;  // a gather's block
    const int64_t offset = below(capacity - n + 1);
    const int late = static_cast<int>(below(N));
    const auto late_by = std::chrono::microseconds(below(2000));
    const bool others_block = below(2) == 0;
    CAPTURE(op_index);
    CAPTURE(n);
    CAPTURE(offset);
    const std::string dtype = rg::dtype_name(dt);
    CAPTURE(dtype);
    const std::string reduce = gather ? std::string("allgather") : dist::reduce_op_name(op);
    CAPTURE(reduce);

    rg::Tensor& buffer = buffers[dt];
    // -1 outside the view: a sentinel no reduction of (r + 1) + (i % 7) produces.
    buffer.fill_(-1.0);
    rg::Tensor view = buffer.narrow(0, offset, n);
    if (gather)  // this rank's block; the others' blocks -2 until gathered
      view.copy_(filled(n, dt, [&](int64_t i) { return i / m == r ? (r + 1) + (i % m) % 7 : -2.0; }));
    else view.copy_(filled(n, dt, [&](int64_t i) { return (r + 1) + (i % 7); }));
    if (r == late) std::this_thread::sleep_for(late_by);
    auto work = gather ? pg->allgather(view.view({N, m}), view.narrow(0, r * m, m)) : pg->allreduce(view, op);
    if (r != late && !others_block) std::this_thread::sleep_for(late_by);  // busy, not waiting
    work->wait();
    if (gather) REQUIRE(mismatch(view, [&](int64_t i) { return (i / m + 1) + (i % m) % 7; }) == "");
    else REQUIRE(mismatch(view, [&](int64_t i) { return expected_reduce(op, dt, i); }) == "");
    const std::vector<double> all = buffer.to_vector();
    int64_t touched = 0;
    for (int64_t i = 0; i < capacity; ++i) touched += (i < offset || i >= offset + n) && all[i] != -1.0;
    REQUIRE(touched == 0);
  }
}

TEST_CASE("new_reduction_buffer with shared memory off is an ordinary tensor with the same results") {
  const int r = dist::world().rank;
  dist::GroupOptions options = test_options();
  options.shared_memory = false;
  auto pg = dist::new_group("auto", options);
  rg::Tensor buffer = pg->new_reduction_buffer(100000, rg::DType::f32);
  CHECK_FALSE(pg->reduces_in_place(buffer));
  buffer.copy_(filled(100000, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); }));
  pg->allreduce(buffer, dist::ReduceOp::avg)->wait();
  CHECK(mismatch(buffer, [&](int64_t i) { return expected_reduce(dist::ReduceOp::avg, rg::DType::f32, i); }) == "");
  CHECK_THROWS_WITH_AS(pg->new_reduction_buffer(-1, rg::DType::f32), doctest::Contains("numel must be >= 0"),
                       rg::Error);
}

TEST_CASE("debug mode: a size mismatch is reported with every rank's view") {
  const int N = dist::world().size, r = dist::world().rank;
  dist::GroupOptions options = test_options();
  options.debug_check = true;
  {  // matching collectives pass the check
    auto pg = dist::new_group("ring", options);
    rg::Tensor t = filled(1000, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); });
    pg->allreduce(t)->wait();
    pg->barrier()->wait();
    CHECK(mismatch(t, [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
  }
  if (N == 1) return;
  auto pg = dist::new_group("ring", options);
  rg::Tensor t = rg::ones({r == N - 1 ? 999 : 1000});  // the last rank is off by one
  const std::string view0 = "rank 0: allreduce (sum, (1000,) f32 cpu)";
  const std::string view_last = rg::str_cat("rank ", N - 1, ": allreduce (sum, (999,) f32 cpu)");
  const auto start = std::chrono::steady_clock::now();
  try {
    pg->allreduce(t)->wait();
    FAIL("the mismatch went unnoticed");
  } catch (const rg::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("[dist.debug] ranks disagree on collective #0 of backend 'ring'") != std::string::npos);
    CHECK(what.find(view0) != std::string::npos);
    CHECK(what.find(view_last + "   <-- first to differ from rank 0") != std::string::npos);
  }
  // Found at once, not after the 60 s timeout.
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 30);
}

TEST_CASE("counters and trace events") {
  const int r = dist::world().rank;
  dist::GroupOptions options = test_options();
  options.trace = true;
  auto pg = dist::new_group("ring", options);
  const auto start = std::chrono::steady_clock::now();
  rg::Tensor t = rg::ones({1000});
  for (int i = 0; i < 3; ++i) pg->allreduce(t)->wait();
  pg->barrier()->wait();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const dist::GroupStats stats = pg->stats();
  CHECK(stats.ops == 4);
  CHECK(stats.failed == 0);
  CHECK(stats.bytes == 3 * 4000);
  CHECK(stats.busy_seconds > 0);
  CHECK(stats.busy_seconds <= wall);
  const std::vector<rg::TraceEvent> events = pg->trace_events();
  REQUIRE(events.size() == 4);
  CHECK(events[0].name == "allreduce #0");
  CHECK(events[3].name == "barrier #3");
  for (size_t i = 0; i < events.size(); ++i) {
    CHECK(events[i].pid == r);
    CHECK(events[i].thread == "comm:ring");
    CHECK(events[i].duration_us >= 0);
    if (i > 0) CHECK(events[i].start_us >= events[i - 1].start_us + events[i - 1].duration_us);
  }
  CHECK(events[0].args_json == "\"bytes\": 4000, \"ok\": true");
  // Untraced groups record nothing but still count.
  auto quiet = dist::new_group("tree", test_options());
  quiet->allreduce(t)->wait();
  CHECK(quiet->trace_events().empty());
  CHECK(quiet->stats().ops == 1);
}

TEST_CASE("a small collective started on the caller's thread is handed over when a peer is late") {
  // Rank 0 arrives 50 ms late, so every other rank's caller-started AllReduce cannot finish within
  // its few microseconds and goes to the communication thread (Note [Small collectives start on
  // the caller's thread]); a second one, submitted at once, must queue behind it and finish after.
  const int r = dist::world().rank;
  for (const std::string backend : {"tree", "ring", "mpi"}) {
    CAPTURE(backend);
    auto pg = dist::new_group(backend, test_options());
    rg::Tensor a = filled(100, rg::DType::f32, [&](int64_t i) { return (r + 1) + (i % 7); });
    rg::Tensor b = filled(100, rg::DType::i64, [&](int64_t i) { return (r + 1) + (i % 7); });
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto wa = pg->allreduce(a);
    auto wb = pg->allreduce(b, dist::ReduceOp::max);
    if (r != 0) CHECK_FALSE(wa->is_completed());  // rank 0 is still asleep: it was handed over
    wb->wait();
    CHECK(wa->is_completed());
    CHECK(mismatch(a, [&](int64_t i) { return expected_reduce(dist::ReduceOp::sum, rg::DType::f32, i); }) == "");
    CHECK(mismatch(b, [&](int64_t i) { return expected_reduce(dist::ReduceOp::max, rg::DType::i64, i); }) == "");
  }
}

TEST_CASE("a shared reduction buffer reduces itself only on the group that made it") {
  // Note [Buffers that reduce themselves]: the buffer's storage carries its collectives, for the
  // group that made it. Another group sees an ordinary tensor and reduces it over messages.
  const int N = dist::world().size, r = dist::world().rank;
  if (N == 1) return;
  dist::GroupOptions options = test_options();
  options.shared_memory = true;  // whatever RINGGRAD_DIST_SHM says
  auto maker = dist::new_group("tree", options);
  auto other = dist::new_group("tree", options);
  const int64_t n = 3000;
  rg::Tensor buffer = maker->new_reduction_buffer(n, rg::DType::f32);
  REQUIRE(maker->reduces_in_place(buffer));
  CHECK(maker->reduces_in_place(buffer.narrow(0, 64, 100)));      // a view of it too
  CHECK_FALSE(maker->reduces_in_place(buffer.narrow(0, 64, 0)));  // nothing to reduce
  CHECK_FALSE(other->reduces_in_place(buffer));
  CHECK_FALSE(maker->reduces_in_place(rg::zeros({n})));
  auto fill = [&] { buffer.copy_(rg::full({n}, r + 1.0)); };
  fill();
  other->allreduce(buffer)->wait();
  CHECK(mismatch(buffer, [&](int64_t) { return N * (N + 1) / 2.0; }) == "");
  fill();
  maker->allreduce(buffer, dist::ReduceOp::avg)->wait();
  CHECK(mismatch(buffer, [&](int64_t) { return (N + 1) / 2.0; }) == "");
  // Another group's collectives leave the maker's in-place op order intact: one more in place.
  fill();
  maker->allreduce(buffer.narrow(0, 1000, 1000), dist::ReduceOp::max)->wait();
  CHECK(mismatch(buffer.narrow(0, 1000, 1000), [&](int64_t) { return static_cast<double>(N); }) == "");
}

namespace {

// A group that adds in the tensor's own dtype (as nccl does f16 and bf16), for the averaging
// policy; it runs no collective.
class AddsInDtype final : public dist::ProcessGroup {
 public:
  explicit AddsInDtype(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  const std::string& backend() const override { return name_; }
  double timeout_seconds() const override { return 1; }
  bool adds_in_dtype(rg::DType dtype) const override { return dtype == rg::DType::f16 || dtype == rg::DType::bf16; }
  std::shared_ptr<dist::Work> allreduce(const rg::Tensor&, dist::ReduceOp) override { return none(); }
  std::shared_ptr<dist::Work> broadcast(const rg::Tensor&, int) override { return none(); }
  std::shared_ptr<dist::Work> allgather(const rg::Tensor&, const rg::Tensor&) override { return none(); }
  std::shared_ptr<dist::Work> reduce_scatter(const rg::Tensor&, const rg::Tensor&, dist::ReduceOp) override {
    return none();
  }
  std::shared_ptr<dist::Work> barrier() override { return none(); }
  std::shared_ptr<dist::Work> send(const rg::Tensor&, int, int) override { return none(); }
  std::shared_ptr<dist::Work> recv(const rg::Tensor&, int, int) override { return none(); }
  dist::GroupStats stats() const override { return {}; }
  std::vector<rg::TraceEvent> trace_events() const override { return {}; }

 private:
  static std::shared_ptr<dist::Work> none() { throw std::logic_error("AddsInDtype runs no collective"); }
  int size_;
  std::string name_ = "adds-in-dtype";
};

}  // namespace

TEST_CASE("averaging half precision: pre-scaled only where the group adds f16 in f16") {
  // Note [Averaging half precision]: the one policy of DDP's buckets and ZeRO's reduce-scatter.
  const AddsInDtype four(4), one(1);
  const dist::Averaging f16_on_four = dist::average_over(four, rg::DType::f16);
  CHECK(f16_on_four.pre_scale == 0.25);
  CHECK(f16_on_four.op == dist::ReduceOp::sum);
  for (const rg::DType dt : {rg::DType::f32, rg::DType::bf16, rg::DType::f64}) {
    CAPTURE(rg::dtype_name(dt));
    CHECK(dist::average_over(four, dt).pre_scale == 1);  // bf16 has f32's range: no overflow to avoid
    CHECK(dist::average_over(four, dt).op == dist::ReduceOp::avg);
  }
  CHECK(dist::average_over(one, rg::DType::f16).op == dist::ReduceOp::avg);  // nothing is added
  // Every MPI backend adds in the accumulation type, so it averages with one division.
  for (const std::string backend : {"mpi", "ring", "tree", "auto", "hierarchical"}) {
    CAPTURE(backend);
    dist::GroupOptions options = test_options();
    if (backend == "hierarchical") options.ranks_per_node = 2;
    auto pg = dist::new_group(backend, options);
    CHECK_FALSE(pg->adds_in_dtype(rg::DType::f16));
    CHECK(dist::average_over(*pg, rg::DType::f16).op == dist::ReduceOp::avg);
    // DDP's default hook then averages an f16 bucket with one avg AllReduce: (N + 1) / 2, exact in f16.
    const int N = pg->size(), r = pg->rank();
    dist::GradBucket bucket{.index = 0,
                            .buffer = rg::full({64}, r + 1.0, {.dtype = rg::DType::f16}),
                            .parameter_names = {}};
    dist::HookWork work = dist::allreduce_hook(*pg, bucket);
    work.work->wait();
    CHECK(mismatch(bucket.buffer, [&](int64_t) { return (N + 1) / 2.0; }) == "");
  }
}

TEST_CASE("a simulated network holds each op, and the ops queued behind it, for its latency") {
  // Note [Simulated network]: an op counts as finished no earlier than latency + bytes / bandwidth
  // after it started, and the group runs one collective at a time. A lower bound on the modelled
  // time, which a slow machine only makes longer.
  dist::GroupOptions options = test_options();
  options.simulated_network = dist::SimulatedNetwork{.bandwidth_gbps = 0, .latency_us = 20000};
  auto pg = dist::new_group("ring", options);
  const int N = pg->size(), r = pg->rank();
  rg::Tensor a = rg::full({100}, r + 1.0), b = rg::full({100}, 2.0 * (r + 1));
  auto wa = pg->allreduce(a);
  auto wb = pg->allreduce(b);
  wb->wait();
  wa->wait();
  CHECK(mismatch(a, [&](int64_t) { return N * (N + 1) / 2.0; }) == "");
  CHECK(mismatch(b, [&](int64_t) { return N * (N + 1.0); }) == "");
  CHECK(wa->end_us() - wa->start_us() >= 20000);
  CHECK(wb->start_us() >= wa->end_us());  // b waited behind a
  CHECK(wb->end_us() - wb->start_us() >= 20000);
  // Bandwidth: 1000 bytes at 0.0001 GB/s (100 KB/s) take 10 ms.
  options.simulated_network = dist::SimulatedNetwork{.bandwidth_gbps = 0.0001, .latency_us = 0};
  auto slow = dist::new_group("mpi", options);
  rg::Tensor c = rg::full({250}, 1.0);  // 1000 bytes
  auto wc = slow->allreduce(c);
  wc->wait();
  CHECK(wc->end_us() - wc->start_us() >= 10000);
  CHECK(mismatch(c, [&](int64_t) { return static_cast<double>(N); }) == "");
}

// Note [Machines by MPI, not by name]: MPI's layout decides, a hostname only labels. Two machines
// with one name (containers on host networking) are legal and get a note, never a refusal; the real
// case runs on the namespace cluster (cluster_same_hostname in tests/cluster).
TEST_CASE("world layout: machines are what MPI says, hostnames only label them") {
  using dist::detail::CreationRecord;
  auto record = [](const std::string& host, int node, int local_rank, int local_size) {
    return CreationRecord{.host = host, .local_rank = local_rank, .local_size = local_size, .node = node};
  };
  // Two machines, two names: nothing to say.
  CHECK(dist::detail::layout_note({record("a", 0, 0, 2), record("a", 0, 1, 2), record("b", 2, 0, 1)}).empty());
  // Two machines, one name: said, with how MPI's layout is followed.
  const std::string same_name = dist::detail::layout_note({record("vm", 0, 0, 1), record("vm", 1, 0, 1)});
  CHECK(same_name.find("hostname 'vm' is reported from 2 machines") != std::string::npos);
  CHECK(same_name.find("RINGGRAD_RANKS_PER_NODE") != std::string::npos);
  // One machine, two names (a UTS namespace per rank): said too.
  const std::string two_names = dist::detail::layout_note({record("x", 0, 0, 2), record("y", 0, 1, 2)});
  CHECK(two_names.find("the machine of rank 0 reports 2 hostnames") != std::string::npos);
}

// Note [Bytes by transport]: the ring's messages, each counted where its receiver runs. A ring
// AllReduce of n elements sends 2(N-1) chunks of n/N to the right neighbour; the tree at N = 2 one
// whole tensor to the other rank. On one machine every byte stays on it; on the namespace cluster
// (cluster_bytes_by_transport_*) the ranks whose right neighbour is on another host send over the
// network, the others through shared memory.
TEST_CASE("bytes by transport: every message counted by where its receiver runs") {
  const dist::World& w = dist::world();
  const int N = w.size, r = w.rank;
  if (N < 2) return;
  std::vector<int> machine(static_cast<size_t>(N));
  MPI_Allgather(&w.node, 1, MPI_INT, machine.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const bool right_is_here = machine[static_cast<size_t>((r + 1) % N)] == machine[static_cast<size_t>(r)];

  auto ring = dist::new_group("ring", test_options());
  const int64_t n = 1000 * N;
  rg::Tensor t = rg::full({n}, r + 1.0);
  const dist::TransportBytes before = dist::transport_bytes();
  ring->allreduce(t)->wait();
  const dist::TransportBytes after = dist::transport_bytes();
  CHECK(mismatch(t, [&](int64_t) { return N * (N + 1) / 2.0; }) == "");
  const uint64_t ring_bytes = static_cast<uint64_t>(2 * (N - 1) * (n / N)) * sizeof(float);
  const uint64_t here = after.same_machine - before.same_machine;
  const uint64_t away = after.other_machines - before.other_machines;
  INFO("rank ", r, "/", N, " on machine ", w.node, ", right neighbour here: ", right_is_here);
  CHECK(here == (right_is_here ? ring_bytes : 0));
  CHECK(away == (right_is_here ? 0 : ring_bytes));

  if ((N & (N - 1)) == 0) {
    // Recursive doubling sends the whole tensor once per step: log2(N) S per rank -- not the
    // 2 log2(N) S of a reduce to a root and a broadcast back (docs/learn/07, "Misconceptions").
    auto tree = dist::new_group("tree", [] {
      dist::GroupOptions o = test_options();
      o.shared_memory = false;  // messages, not the shared-memory slots
      return o;
    }());
    rg::Tensor small = rg::full({256}, 1.0);
    const dist::TransportBytes b0 = dist::transport_bytes();
    tree->allreduce(small)->wait();
    const dist::TransportBytes b1 = dist::transport_bytes();
    const uint64_t sent = (b1.same_machine - b0.same_machine) + (b1.other_machines - b0.other_machines);
    const auto steps = static_cast<uint64_t>(std::log2(N));
    CHECK(sent == steps * 256 * sizeof(float));
    if (N == 2)  // its one partner is its right neighbour
      CHECK((right_is_here ? b1.same_machine - b0.same_machine : b1.other_machines - b0.other_machines) == sent);
  }
}
