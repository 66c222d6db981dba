// allreduce_bench: AllReduce bandwidth per backend, in the style of nccl-tests' all_reduce_perf.
//
//   mpirun -np 2 build/examples/allreduce_bench -b 4K -e 256M -f 2 -n 20 -w 5 -c 1 -d f32 \
//       --backends MPI_Allreduce,mpi,ring,tree,auto [--segment 256K]
//
// Backends are the process-group backends by name, plus the peer "MPI_Allreduce": the MPI
// library's blocking MPI_Allreduce on MPI_COMM_WORLD called straight from this thread -- no
// communication thread, no Work -- the figure docs/benchmarks.md compares the backends with.
// (MPI has no f16 type: for f16 the peer is skipped.) --segment sets the ring's segment size.
// "auto/shared" is backend auto on a tensor from new_reduction_buffer, as DDP's buckets are: on one
// machine it is summed in place across the ranks' buffers (Note [Shared gradient buffers]).
//
// Noise: this machine's timings drift by 2-3x over seconds. So the backends are interleaved: for
// each of -r rounds, each size is measured on every backend in turn (the order rotating every
// round), and the tables show each backend's median over the rounds -- a noisy moment hits all
// backends alike instead of one table.
//
// For each size: the mean time of one AllReduce (sum) over -n iterations after -w warm-ups (median
// over -r rounds, see below), algbw =
// bytes / time, busbw = algbw * 2(N-1)/N (the bytes each rank's link actually carries in a ring, so
// figures compare across world sizes), net(B): the most bytes one machine's ranks together sent to
// other machines per AllReduce (dist::transport_bytes(); "-" for the MPI_Allreduce peer, whose
// messages are the MPI library's own) -- what the busiest machine's network link carries, the
// figure hierarchical AllReduce is said to cut (docs/learn/08-cost-model.md) -- and #wrong: elements that differ from
// the closed-form sum when -c 1 (each rank fills rank + 1, so every element must be N(N+1)/2).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ringgrad.h>

#include "examples/common/command_line.h"
#include "examples/common/flags.h"

using namespace ringgrad;
using Clock = std::chrono::steady_clock;

namespace {

int64_t parse_size(const std::string& s) {
  const char unit = s.empty() ? '\0' : static_cast<char>(std::toupper(s.back()));
  const int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
  const std::string number = scale == 1 ? s : s.substr(0, s.size() - 1);
  size_t used = 0;
  const double value = std::stod(number, &used);  // throws when there is no number at all
  if (used != number.size()) throw std::invalid_argument("trailing characters in " + s);
  const double bytes = value * static_cast<double>(scale);
  // Checked as a double: converting NaN or a value past int64's range would be undefined.
  if (!(bytes >= 0 && bytes <= 0x1p62)) throw std::invalid_argument(s + " is not a byte count");
  return static_cast<int64_t>(bytes);
}

// A message size such as 4096, 4K, 256M or 1G: positive, at most 4 GiB.
const CLI::Validator size_flag(
    [](std::string& text) -> std::string {
      try {
        const int64_t bytes = parse_size(text);
        return bytes >= 1 && bytes <= (int64_t{1} << 32) ? "" : "must be 1 byte .. 4G, got " + text;
      } catch (const std::exception&) {
        return "'" + text + "' is not a size (a number with an optional K, M or G)";
      }
    },
    "SIZE");

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// One core's memcpy bandwidth (read + write bytes / s), best of a few: the ceiling for a loopback
// AllReduce, which is memory copies in the end.
double memcpy_bandwidth() {
  const size_t n = 256 << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(n) / s);
  }
  return best;
}

// The most that the ranks of one machine sent together (each rank's `bytes`, summed by w.node).
double busiest_machine(const dist::World& w, double bytes) {
  std::vector<double> all(static_cast<size_t>(w.size));
  std::vector<int> node(static_cast<size_t>(w.size));
  MPI_Allgather(&bytes, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
  MPI_Allgather(&w.node, 1, MPI_INT, node.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<double> per_node(static_cast<size_t>(w.size), 0.0);
  for (size_t r = 0; r < all.size(); ++r) per_node[static_cast<size_t>(node[r])] += all[r];
  return *std::max_element(per_node.begin(), per_node.end());
}

}  // namespace

int main(int argc, char** argv) {
  std::string begin = "4K", end = "256M", backends = "MPI_Allreduce,mpi,ring,tree,auto", type = "f32";
  std::string segment;
  double factor = 2;
  int iters = 20, warmup = 5, check = 1, rounds = 3;
  CLI::App app{"AllReduce bandwidth per backend, in the style of nccl-tests' all_reduce_perf (run under mpirun)"};
  app.add_option("-b", begin, "smallest message, bytes (K, M, G suffixes)")->check(size_flag);
  app.add_option("-e", end, "largest message, bytes (K, M, G suffixes)")->check(size_flag);
  app.add_option("-f", factor, "growth factor between sizes")->check(flags::finite_in(1, 1024, /*open_below=*/true));
  app.add_option("-n", iters, "timed iterations per size")->check(flags::int_in(1, 1'000'000));
  app.add_option("-w", warmup, "warm-up iterations per size")->check(flags::int_in(0, 1'000'000));
  app.add_option("-c", check, "1: count elements that differ from the closed-form sum")->check(flags::int_in(0, 1));
  app.add_option("-r", rounds, "interleaved rounds; the tables show each backend's median")
      ->check(flags::int_in(1, 1000));
  app.add_option("-d", type, "element type")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_option("--backends", backends, "comma-separated: MPI_Allreduce,mpi,ring,tree,auto,hierarchical,auto/shared")
      ->check(flags::non_empty);
  app.add_option("--segment", segment, "the ring's segment size, bytes (K, M, G suffixes)")->check(size_flag);
  if (const auto code = flags::parse_command_line(app, argc, argv)) return *code;
  try {
    const dist::World w = dist::init(&argc, &argv);
    set_num_threads(1);
    const DType dtype = type == "f16" ? DType::f16 : type == "bf16" ? DType::bf16 : DType::f32;
    const double n = w.size;
    if (w.rank == 0) {
      std::printf(
          "# allreduce_bench: %d ranks, %s, sizes %s..%s x%g, %d iterations after %d warm-ups, median of %d "
          "interleaved rounds\n",
          w.size, type.c_str(), begin.c_str(), end.c_str(), factor, iters, warmup, rounds);
      std::printf("# ceiling: one core's memcpy bandwidth %.2f GB/s (read + write)\n", memcpy_bandwidth() / 1e9);
    }
    dist::GroupOptions options;
    if (!segment.empty()) options.ring_segment_bytes = static_cast<size_t>(parse_size(segment));
    std::vector<std::string> names;
    std::vector<std::shared_ptr<dist::ProcessGroup>> groups;  // null: the bare MPI_Allreduce peer
    std::vector<bool> in_shared_buffer;
    for (const std::string& backend : split_list(backends)) {
      const bool bare = backend == "MPI_Allreduce";
      if (bare && dtype != DType::f32) {
        if (w.rank == 0) std::printf("# backend: MPI_Allreduce skipped: MPI has no %s type\n", type.c_str());
        continue;
      }
      names.push_back(backend);
      // "auto/shared": the auto group on a tensor from new_reduction_buffer -- DDP's buckets.
      const bool shared = backend == "auto/shared";
      in_shared_buffer.push_back(shared);
      groups.push_back(bare ? nullptr : dist::new_group(shared ? "auto" : backend, options));
    }
    std::vector<int64_t> counts;
    for (double bytes = static_cast<double>(parse_size(begin)); bytes <= static_cast<double>(parse_size(end));
         bytes *= factor)
      counts.push_back(static_cast<int64_t>(bytes) / static_cast<int64_t>(dtype_size(dtype)));
    // seconds[b][s]: one mean time per round; wrong[b][s]: elements off the closed form.
    std::vector<std::vector<std::vector<double>>> seconds(names.size(),
                                                          std::vector<std::vector<double>>(counts.size()));
    std::vector<std::vector<int64_t>> wrong(names.size(), std::vector<int64_t>(counts.size(), 0));
    // net[b][s]: bytes to other machines per op, the most of any machine's ranks together (the
    // first round's).
    std::vector<std::vector<double>> net(names.size(), std::vector<double>(counts.size(), -1));
    for (int round = 0; round < rounds; ++round)
      for (size_t s = 0; s < counts.size(); ++s) {
        Tensor plain = full({counts[s]}, w.rank + 1.0, {.dtype = dtype});
        for (size_t k = 0; k < names.size(); ++k) {
          const size_t b = (k + static_cast<size_t>(round)) % names.size();  // rotate the order
          dist::ProcessGroup* pg = groups[b].get();
          Tensor t = plain;
          if (in_shared_buffer[b]) {  // collective: every rank rotates alike
            t = pg->new_reduction_buffer(counts[s], dtype);
            t.fill_(w.rank + 1.0);
          }
          auto allreduce = [&](Tensor& x) {
            if (pg == nullptr)
              MPI_Allreduce(MPI_IN_PLACE, x.raw_data(), static_cast<int>(x.numel()), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD);
            else pg->allreduce(x)->wait();
          };
          for (int i = 0; i < warmup; ++i) allreduce(t);
          MPI_Barrier(MPI_COMM_WORLD);
          const uint64_t away_before = dist::transport_bytes().other_machines;
          auto t0 = Clock::now();
          for (int i = 0; i < iters; ++i) allreduce(t);
          double mean = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
          if (round == 0 && pg != nullptr) {
            const double away = static_cast<double>(dist::transport_bytes().other_machines - away_before) / iters;
            net[b][s] = busiest_machine(w, away);
          }
          // The slowest rank's time is the collective's time.
          MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          seconds[b][s].push_back(mean);
          if (check && round == 0) {
            t.fill_(w.rank + 1.0);
            allreduce(t);
            const double expected = n * (n + 1) / 2;
            int64_t bad = 0;
            for (double v : t.to_vector()) bad += v != expected;
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
            wrong[b][s] = bad;
          }
        }
      }
    if (w.rank == 0) {
      for (size_t b = 0; b < names.size(); ++b) {
        std::printf("# backend: %s\n", names[b].c_str());
        std::printf("%12s %12s %6s %12s %10s %10s %12s %7s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
                    "busbw(GB/s)", "net(B)", "#wrong");
        for (size_t s = 0; s < counts.size(); ++s) {
          std::vector<double> v = seconds[b][s];
          std::sort(v.begin(), v.end());
          const double median = v[v.size() / 2];
          const double size = static_cast<double>(counts[s]) * static_cast<double>(dtype_size(dtype));
          const double algbw = size / median / 1e9, busbw = algbw * 2 * (n - 1) / n;
          const std::string away = net[b][s] < 0 ? "-" : std::to_string(std::llround(net[b][s]));
          std::printf("%12.0f %12lld %6s %12.2f %10.2f %10.2f %12s %7lld\n", size, (long long)counts[s], type.c_str(),
                      median * 1e6, algbw, busbw, away.c_str(), (long long)wrong[b][s]);
        }
      }
    }
    groups.clear();
    dist::finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
