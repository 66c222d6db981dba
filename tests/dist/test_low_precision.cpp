// The low-precision ring (ProcessGroup::allreduce_low_precision and reduce_scatter_low_precision,
// Note [Low-precision ring]): every rank ends with the same bits, within the format's bound of the
// exact reduction; error feedback loses nothing over steps (Note [Error feedback]); the bytes it
// sends are what low_precision_ring_sends says; what it refuses.
#include <cmath>
#include <vector>

#include "dist_test_util.h"

namespace {

const dist::WireFormat kWires[] = {dist::WireFormat::bf16, dist::WireFormat::fp8_e4m3, dist::WireFormat::fp8_e5m2};

// Half an ulp, relative: the most one rounding to the format loses.
double unit_roundoff(dist::WireFormat w) {
  return w == dist::WireFormat::bf16 ? 0x1p-8 : w == dist::WireFormat::fp8_e4m3 ? 0x1p-4 : 0x1p-3;
}

// Rank r's element i: the same sign on every rank (no cancellation), magnitudes spanning 2^-4 .. 2
// within each block, far from the scaled formats' subnormals.
double value(int rank, int64_t i, int step = 0) {
  const double mantissa = 1 + static_cast<double>((i * 7 + rank * 3 + step * 5) % 13) / 13;
  return (i % 2 ? 1 : -1) * mantissa * std::exp2(-static_cast<double>((i + step) % 5));
}

// Every rank's copy of t, as f32 (exact: the values are f32, f16 or bf16).
std::vector<std::vector<double>> gather_all(dist::ProcessGroup& group, const rg::Tensor& t) {
  const rg::Tensor mine = t.to(rg::DType::f32);
  rg::Tensor all = rg::zeros({group.size(), t.numel()});
  group.allgather(all, mine)->wait();
  std::vector<std::vector<double>> out;
  for (int r = 0; r < group.size(); ++r) out.push_back(all.select(0, r).to_vector());
  return out;
}

}  // namespace

TEST_CASE("low-precision ring: identical bits on every rank, within N roundings of the exact reduction") {
  const int N = dist::world().size;
  for (const std::string backend : {"ring", "auto", "mpi"}) {
    auto group = dist::new_group(backend, test_options());
    for (dist::WireFormat w : kWires) {
      for (rg::DType dt : {rg::DType::f32, rg::DType::f16, rg::DType::bf16}) {
        for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg}) {
          for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{N + 1}, int64_t{3000}}) {
            CAPTURE(backend);
            CAPTURE(dist::wire_format_name(w));
            CAPTURE(rg::dtype_name(dt));
            CAPTURE(dist::reduce_op_name(op));
            CAPTURE(n);
            const int rank = group->rank();
            rg::Tensor t = filled(n, dt, [&](int64_t i) { return value(rank, i); });
            group->allreduce_low_precision(t, op, {.wire = w, .scale_block = 256})->wait();
            const auto all = gather_all(*group, t);
            const std::vector<double>& got = all[static_cast<size_t>(rank)];
            for (int r = 0; r < N; ++r) REQUIRE(all[static_cast<size_t>(r)] == got);
            // Each of the N-1 hops and the final encoding rounds a value no larger than the sum of
            // magnitudes A (same signs: |partial| <= A), by at most u of it; the store to f16 /
            // bf16 once more.
            const double u = unit_roundoff(w), store = dt == rg::DType::f32   ? 0x1p-24
                                                       : dt == rg::DType::f16 ? 0x1p-11
                                                                              : 0x1p-8;
            std::vector<std::vector<double>> inputs;  // every rank's, as it filled them in dt
            for (int r = 0; r < N; ++r)
              inputs.push_back(filled(n, dt, [&](int64_t i) { return value(r, i); }).to_vector());
            double worst = 0;
            for (int64_t i = 0; i < n; ++i) {
              double exact = 0, magnitude = 0;
              for (int r = 0; r < N; ++r) {
                const double v = inputs[static_cast<size_t>(r)][static_cast<size_t>(i)];
                exact += v;
                magnitude += std::fabs(v);
              }
              if (op == dist::ReduceOp::avg) exact /= N, magnitude /= N;
              const double error = std::fabs(got[static_cast<size_t>(i)] - exact);
              REQUIRE(error <= (N * u + store) * magnitude * (1 + 1e-6));
              worst = std::max(worst, error / magnitude);
            }
            // The wire really carried the low format: something was rounded by more than f32
            // rounding could (u / 64 is far above f32's 2^-24).
            if (N > 1 && n >= 3000 && dt == rg::DType::f32) CHECK(worst > u / 64);
          }
        }
      }
    }
  }
}

TEST_CASE(
    "low-precision ring: with error feedback, results over steps plus the last residuals sum to the exact "
    "reductions") {
  const int N = dist::world().size;
  auto group = dist::new_group("ring", test_options());
  const int rank = group->rank(), steps = 6;
  const int64_t n = 2000;
  for (dist::WireFormat w : kWires) {
    for (dist::ReduceOp op : {dist::ReduceOp::avg, dist::ReduceOp::sum}) {
      CAPTURE(dist::wire_format_name(w));
      CAPTURE(dist::reduce_op_name(op));
      rg::Tensor residual = rg::zeros({n});
      std::vector<double> results(n, 0.0), results_without(n, 0.0), exact(n, 0.0);
      for (int step = 0; step < steps; ++step) {
        rg::Tensor t = filled(n, rg::DType::f32, [&](int64_t i) { return value(rank, i, step) / (1 + step); });
        rg::Tensor plain = t.clone();
        group->allreduce_low_precision(t, op, {.wire = w, .scale_block = 128, .error_feedback = residual})->wait();
        group->allreduce_low_precision(plain, op, {.wire = w, .scale_block = 128})->wait();
        const auto with = t.to_vector(), without = plain.to_vector();
        for (int64_t i = 0; i < n; ++i) {
          results[i] += with[i];
          results_without[i] += without[i];
          double sum = 0;
          for (int r = 0; r < N; ++r) sum += static_cast<double>(static_cast<float>(value(r, i, step) / (1 + step)));
          exact[i] += op == dist::ReduceOp::avg ? sum / N : sum;
        }
      }
      // What the ranks still hold back, reduced exactly (the f32 ring: these are f32 values whose
      // sum is exact enough for the tolerance below).
      group->allreduce(residual, op)->wait();
      const auto held = residual.to_vector();
      double worst = 0, worst_without = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::fabs(results[i] + held[i] - exact[i]));
        worst_without = std::max(worst_without, std::fabs(results_without[i] - exact[i]));
        scale = std::max(scale, std::fabs(exact[i]));
      }
      const double tolerance = 1e-5 * scale;  // f32 rounding of the steps' additions
      CHECK(worst <= tolerance);
      if (N > 1) CHECK(worst_without > 10 * tolerance);  // without the residuals the sum is visibly off
    }
  }
}

TEST_CASE("low-precision ring: this rank sends what low_precision_ring_sends says, scales apart") {
  auto group = dist::new_group("ring", test_options());
  const int N = group->size();
  for (dist::WireFormat w : kWires) {
    const int64_t n = 10007;
    rg::Tensor t = filled(n, rg::DType::f32, [&](int64_t i) { return value(group->rank(), i); });
    const dist::TransportBytes before = dist::transport_bytes();
    group->allreduce_low_precision(t, dist::ReduceOp::avg, {.wire = w, .scale_block = 1000})->wait();
    const dist::TransportBytes after = dist::transport_bytes();
    const dist::WireBytes expected = dist::low_precision_ring_sends(w, n, N, group->rank(), 1000);
    CHECK((after.same_machine + after.other_machines) - (before.same_machine + before.other_machines) ==
          expected.total());
    // 2(N-1)/N of the encoded tensor; chunk boundaries move the payload by at most an element per
    // chunk, and each chunk's scales round up to whole blocks.
    const dist::WireBytes whole = dist::wire_bytes(w, n, 1000);
    const double share = 2.0 * (N - 1) / N;
    CHECK(std::fabs(static_cast<double>(expected.payload) - share * static_cast<double>(whole.payload)) <= 4.0 * N);
    CHECK(static_cast<double>(expected.scales) <= share * static_cast<double>(whole.scales) + 8.0 * N);
  }
}

TEST_CASE("low-precision ring: an overflowed step decodes as NaN and leaves no NaN in the residual") {
  auto group = dist::new_group("ring", test_options());
  const int64_t n = 600;
  for (dist::WireFormat w : kWires) {
    CAPTURE(dist::wire_format_name(w));
    rg::Tensor residual = rg::zeros({n});
    rg::Tensor t = filled(n, rg::DType::f32, [&](int64_t i) { return i == 5 ? INFINITY : value(group->rank(), i); });
    group->allreduce_low_precision(t, dist::ReduceOp::avg, {.wire = w, .scale_block = 100, .error_feedback = residual})
        ->wait();
    CHECK(!std::isfinite(t.to_vector()[5]));  // the overflow is seen (GradScaler skips the step)
    for (double e : residual.to_vector()) REQUIRE(std::isfinite(e));
    rg::Tensor next = filled(n, rg::DType::f32, [&](int64_t i) { return value(group->rank(), i); });
    group
        ->allreduce_low_precision(next, dist::ReduceOp::avg,
                                  {.wire = w, .scale_block = 100, .error_feedback = residual})
        ->wait();
    for (double v : next.to_vector()) REQUIRE(std::isfinite(v));  // the next step is clean
  }
}

TEST_CASE("low-precision ring: refuses max, f64 and a residual of the wrong size") {
  auto group = dist::new_group("ring", test_options());
  rg::Tensor t = rg::zeros({10});
  CHECK_THROWS_WITH_AS(group->allreduce_low_precision(t, dist::ReduceOp::max, {}),
                       doctest::Contains("sum or avg, not max"), std::exception);
  CHECK_THROWS_WITH_AS(group->allreduce_low_precision(rg::zeros({10}, {.dtype = rg::DType::f64}), dist::ReduceOp::sum,
                                                      {}),
                       doctest::Contains("f32, f16 or bf16"), std::exception);
  CHECK_THROWS_WITH_AS(group->allreduce_low_precision(t, dist::ReduceOp::sum, {.error_feedback = rg::zeros({9})}),
                       doctest::Contains("error_feedback (9,) f32"), std::exception);
}

TEST_CASE("low-precision reduce-scatter: rank r holds block r's reduction within N-1 roundings; input unchanged") {
  const int N = dist::world().size;
  for (const std::string backend : {"ring", "auto", "mpi"}) {
    auto group = dist::new_group(backend, test_options());
    const int rank = group->rank();
    for (dist::WireFormat w : kWires) {
      for (rg::DType dt : {rg::DType::f32, rg::DType::bf16}) {
        for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg}) {
          for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
            CAPTURE(backend);
            CAPTURE(dist::wire_format_name(w));
            CAPTURE(rg::dtype_name(dt));
            CAPTURE(dist::reduce_op_name(op));
            CAPTURE(m);
            rg::Tensor input = filled(N * m, dt, [&](int64_t i) { return value(rank, i); });
            const std::vector<double> before = input.to_vector();
            rg::Tensor output = rg::zeros({m}, {.dtype = dt});
            group->reduce_scatter_low_precision(output, input, op, {.wire = w, .scale_block = 128})->wait();
            CHECK(input.to_vector() == before);
            const std::vector<double> got = output.to_vector();
            // N-1 hops round a partial sum no larger than the sum of magnitudes; the owner's sum is
            // not encoded again; the store to bf16 rounds once more.
            const double u = unit_roundoff(w), store = dt == rg::DType::f32 ? 0x1p-24 : 0x1p-8;
            std::vector<std::vector<double>> inputs;  // every rank's, as it filled them in dt
            for (int r = 0; r < N; ++r)
              inputs.push_back(filled(N * m, dt, [&](int64_t i) { return value(r, i); }).to_vector());
            double worst = 0;
            for (int64_t i = 0; i < m; ++i) {
              const auto at = static_cast<size_t>(rank * m + i);  // this rank's block
              double exact = 0, magnitude = 0;
              for (int r = 0; r < N; ++r) {
                const double v = inputs[static_cast<size_t>(r)][at];
                exact += v;
                magnitude += std::fabs(v);
              }
              if (op == dist::ReduceOp::avg) exact /= N, magnitude /= N;
              const double error = std::fabs(got[static_cast<size_t>(i)] - exact);
              REQUIRE(error <= ((N - 1) * u + store + 0x1p-22) * magnitude);
              worst = std::max(worst, error / magnitude);
            }
            if (N > 1 && m >= 1000 && dt == rg::DType::f32) CHECK(worst > u / 64);  // the wire was low
          }
        }
      }
    }
  }
}

TEST_CASE("low-precision reduce-scatter: with error feedback nothing is lost over steps; bytes as counted") {
  const int N = dist::world().size;
  auto group = dist::new_group("ring", test_options());
  const int rank = group->rank(), steps = 5;
  const int64_t m = 700, n = N * m;
  for (dist::WireFormat w : kWires) {
    CAPTURE(dist::wire_format_name(w));
    rg::Tensor residual = rg::zeros({n});
    std::vector<double> results(m, 0.0), exact(m, 0.0);
    const dist::TransportBytes before = dist::transport_bytes();
    for (int step = 0; step < steps; ++step) {
      rg::Tensor input = filled(n, rg::DType::f32, [&](int64_t i) { return value(rank, i, step) / (1 + step); });
      rg::Tensor output = rg::zeros({m});
      group
          ->reduce_scatter_low_precision(output, input, dist::ReduceOp::avg,
                                         {.wire = w, .scale_block = 100, .error_feedback = residual})
          ->wait();
      const auto got = output.to_vector();
      for (int64_t i = 0; i < m; ++i) {
        results[i] += got[i];
        double sum = 0;
        for (int r = 0; r < N; ++r)
          sum += static_cast<double>(static_cast<float>(value(r, rank * m + i, step) / (1 + step)));
        exact[i] += sum / N;
      }
    }
    const dist::TransportBytes after = dist::transport_bytes();
    CHECK((after.same_machine + after.other_machines) - (before.same_machine + before.other_machines) ==
          steps * dist::low_precision_ring_sends(w, n, N, rank, 100, /*reduce_scatter_only=*/true).total());
    // This rank's own block it never encodes: nothing dropped there.
    for (int64_t i = 0; i < m; ++i) REQUIRE(residual.to_vector()[static_cast<size_t>(rank * m + i)] == 0);
    // What every rank still holds back for this block, reduced exactly (f32 reduce-scatter).
    rg::Tensor held = rg::zeros({m});
    group->reduce_scatter(held, residual, dist::ReduceOp::avg)->wait();
    const auto h = held.to_vector();
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < m; ++i) {
      worst = std::max(worst, std::fabs(results[i] + h[i] - exact[i]));
      scale = std::max(scale, std::fabs(exact[i]));
    }
    CHECK(worst <= 1e-5 * scale);
  }
}

TEST_CASE("low-precision reduce-scatter: refuses an output that is not a block of the input") {
  auto group = dist::new_group("ring", test_options());
  const int N = group->size();
  CHECK_THROWS_WITH_AS(group->reduce_scatter_low_precision(rg::zeros({3}), rg::zeros({3 * N + 1}), dist::ReduceOp::avg,
                                                           {}),
                       doctest::Contains("blocks of output (3,) f32"), std::exception);
  CHECK_THROWS_WITH_AS(group->reduce_scatter_low_precision(rg::zeros({3}, {.dtype = rg::DType::bf16}),
                                                           rg::zeros({3 * N}), dist::ReduceOp::avg, {}),
                       doctest::Contains("must be a CPU tensor of the input's dtype, f32"), std::exception);
  CHECK_THROWS_WITH_AS(group->reduce_scatter_low_precision(rg::zeros({3}), rg::zeros({3 * N}), dist::ReduceOp::min, {}),
                       doctest::Contains("sum or avg, not min"), std::exception);
}
