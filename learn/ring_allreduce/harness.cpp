// The harness of the ring exercise. Every rank holds its own vector; your ring_allreduce sums them
// in place. The check: the result equals what ringgrad's production ring (backend "ring":
// dist/algorithms/ring_pipeline.cpp) computes from the same vectors, and the bytes every rank sent
// add up to 2(N-1) S -- each rank sends 2(N-1)/N S, the ring's bandwidth optimum.
#include <mpi.h>

#include <cmath>
#include <cstdio>

#include "core/ops.h"
#include "dist/init.h"
#include "dist/process_group.h"
#include "examples/common/command_line.h"
#include "learn/ring_allreduce/ring_allreduce.h"

namespace rg = ringgrad;

int main(int argc, char** argv) {
  if (const auto code = ringgrad::flags::parse_no_flags(
          argc, argv, "The ring exercise: your ring AllReduce against backend ring, and its bytes (run under mpirun)"))
    return *code;
  const rg::dist::World world = rg::dist::init(&argc, &argv);
  return rg::dist::run_or_abort([&] {
    const int N = world.size, r = world.rank;
    // 1003 elements: not a multiple of N, so the chunks are uneven, as real buckets' are.
    constexpr int64_t S = 1003;
    rg::Generator gen(100 + r);
    const rg::Tensor mine = rg::randn({S}, gen);
    std::vector<float> data;
    for (double v : mine.to_vector()) data.push_back(static_cast<float>(v));

    MPI_Barrier(MPI_COMM_WORLD);  // so that the steps print after every rank has started
    const int64_t sent = learn::ring_allreduce(data, MPI_COMM_WORLD, /*verbose=*/S < 2000);

    // The reference: the production ring over the same vectors.
    rg::Tensor reference = mine.clone();
    rg::dist::new_group("ring")->allreduce(reference, rg::dist::ReduceOp::sum)->wait();
    const std::vector<double> want = reference.to_vector();
    double worst = 0;
    for (int64_t i = 0; i < S; ++i)
      worst = std::max(worst, std::abs(data[i] - want[i]) / std::max(1.0, std::abs(want[i])));

    int64_t all_sent = 0;
    MPI_Allreduce(&sent, &all_sent, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    const int64_t bytes = S * static_cast<int64_t>(sizeof(float));
    const double optimum = 2.0 * (N - 1) / N * static_cast<double>(bytes);
    std::printf("rank %d: sent %lld bytes; 2(N-1)/N S = %.1f bytes; largest difference from backend \"ring\": %.2g\n",
                r, static_cast<long long>(sent), optimum, worst);
    // Both rings add each element's N terms, but maybe starting from another rank: f32 rounding.
    const bool ok = worst <= 1e-5 && all_sent == 2 * (N - 1) * bytes;
    if (!ok)
      std::printf("rank %d: FAIL: %s\n", r,
                  worst > 1e-5 ? "the sum differs from the production ring's"
                               : "the ranks together should send each chunk N-1 times per phase: 2(N-1) S bytes");
    int all_ok = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all_ok && r == 0)
      std::printf("OK: the sums agree, and the ranks sent 2(N-1) S = %lld bytes in all\n",
                  static_cast<long long>(2 * (N - 1) * bytes));
    return all_ok ? 0 : 1;
  });
}
