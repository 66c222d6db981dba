// learn_schedules: the messages ringgrad's ring, tree and hierarchical AllReduce really send, round
// by round, recorded through MPI's profiling interface (message_log.h) -- the data behind the
// schedule pictures of docs/learn/07-ring-tree-hierarchical.md.
//
//   mpiexec -n 4 learn/learn_schedules [--ranks-per-node K] [--tsv FILE] [--check] [--help]
//
// Each rank AllReduces a tensor of S = N x 256 bytes (f32, every chunk the same size) once per
// backend, on MPI point-to-point only: shared memory is switched off (GroupOptions::shared_memory)
// so that every byte is a message. K ranks form a "node" (default 2 from N = 3): hierarchical's
// nodes, and for every backend the mark of a message that crosses between nodes.
//
// A message's round is how many messages must have arrived, one after another, before it could
// be sent: 1 + the largest round among the messages its sender had received when it posted it.
// That is the schedule's depth as the code runs it, which a per-rank step count can overstate
// (the tree's extra ranks, a node without peers).
//
// --check compares the recorded schedule with the textbook one derived here, independently of
// dist/algorithms/: the ring's chunk at every round, recursive doubling's partners, the
// hierarchical stages. It fails (exit 1) on any difference.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "dist/init.h"
#include "dist/process_group.h"
#include "examples/common/command_line.h"
#include "examples/common/flags.h"
#include "learn/schedules/message_log.h"

namespace rg = ringgrad;

namespace {

// One recorded message with its round, as rank 0 assembles them.
struct Message {
  int round = 0;
  int from = 0, to = 0;
  int64_t bytes = 0, offset = -1;
  bool operator<(const Message& o) const {
    return std::tie(round, from, to, bytes, offset) < std::tie(o.round, o.from, o.to, o.bytes, o.offset);
  }
  bool operator==(const Message& o) const = default;
};

// Every rank's log, gathered on rank 0 as flat int64 rows.
std::vector<std::vector<int64_t>> gather_rows(const std::vector<int64_t>& mine, int size) {
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(size), displs(size);
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) displs[r] = std::exchange(total, total + counts[r]);
  std::vector<int64_t> all(total);
  MPI_Gatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, 0,
              MPI_COMM_WORLD);
  std::vector<std::vector<int64_t>> rows(size);
  for (int r = 0; r < size; ++r) rows[r].assign(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  return rows;
}

// Rounds from the logs (rank 0): the k-th receive of rank a from rank b with tag t is the k-th send
// of b to a with tag t (MPI delivers in order between two ranks on one tag).
std::vector<Message> with_rounds(const std::vector<learn::MessageLog>& logs) {
  const int N = static_cast<int>(logs.size());
  // round[rank][i]: the round of rank's i-th send; 0 = not known yet.
  std::vector<std::vector<int>> round(N);
  for (int r = 0; r < N; ++r) round[r].assign(logs[r].sent.size(), 0);
  // sends_to[{from, to, tag}]: indices into logs[from].sent, in posting order.
  std::map<std::tuple<int, int, int>, std::vector<size_t>> sends_to;
  for (int r = 0; r < N; ++r)
    for (size_t i = 0; i < logs[r].sent.size(); ++i)
      sends_to[{r, logs[r].sent[i].to, logs[r].sent[i].tag}].push_back(i);
  // source[a][j]: the (rank, send index) of rank a's j-th completed receive.
  std::vector<std::vector<std::pair<int, size_t>>> source(N);
  for (int a = 0; a < N; ++a) {
    std::map<std::tuple<int, int, int>, size_t> seen;
    for (const auto& m : logs[a].received) {
      const auto key = std::make_tuple(m.from, a, m.tag);
      const size_t k = seen[key]++;
      const auto& list = sends_to[key];
      if (k >= list.size()) {
        std::fprintf(stderr, "learn_schedules: rank %d received a message from %d that was never sent\n", a, m.from);
        std::exit(1);
      }
      source[a].emplace_back(m.from, list[k]);
    }
  }
  // Causality makes the dependencies acyclic; sweep until every round is known.
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < N; ++r)
      for (size_t i = 0; i < logs[r].sent.size(); ++i) {
        if (round[r][i]) continue;
        int deepest = 0;
        bool known = true;
        for (int64_t j = 0; j < logs[r].sent[i].received_before && known; ++j) {
          const auto [from, idx] = source[r][j];
          known = round[from][idx] > 0;
          deepest = std::max(deepest, round[from][idx]);
        }
        if (known) round[r][i] = deepest + 1, changed = true;
      }
  }
  std::vector<Message> out;
  for (int r = 0; r < N; ++r)
    for (size_t i = 0; i < logs[r].sent.size(); ++i)
      out.push_back({round[r][i], r, logs[r].sent[i].to, logs[r].sent[i].bytes, logs[r].sent[i].offset});
  std::sort(out.begin(), out.end());
  return out;
}

// Runs one AllReduce on `backend` with recording on; rank 0 gets every rank's messages.
std::vector<Message> record(const std::string& backend, int ranks_per_node, int64_t n, int N, int r) {
  rg::dist::GroupOptions options;
  options.shared_memory = false;
  options.ranks_per_node = ranks_per_node;
  auto group = rg::dist::new_group(backend, options);
  rg::Tensor t = rg::zeros({n});
  float* x = static_cast<float*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7 + r);
  MPI_Barrier(MPI_COMM_WORLD);
  learn::start_message_log(t.raw_data(), static_cast<int64_t>(t.nbytes()));
  group->allreduce(t, rg::dist::ReduceOp::sum)->wait();
  const learn::MessageLog log = learn::stop_message_log();
  for (int64_t i = 0; i < n; ++i)  // small integers: exact in f32
    if (x[i] != static_cast<float>(N * (i % 7) + N * (N - 1) / 2)) {
      std::fprintf(stderr, "learn_schedules: %s: rank %d: wrong sum at %lld\n", backend.c_str(), r,
                   static_cast<long long>(i));
      std::exit(1);
    }
  // Flatten: #sent, then 5 per send, then 2 per receive.
  std::vector<int64_t> mine{static_cast<int64_t>(log.sent.size())};
  for (const auto& s : log.sent) mine.insert(mine.end(), {s.to, s.tag, s.bytes, s.offset, s.received_before});
  for (const auto& m : log.received) mine.insert(mine.end(), {m.from, m.tag});
  const auto rows = gather_rows(mine, N);
  if (r != 0) return {};
  std::vector<learn::MessageLog> logs(N);
  for (int k = 0; k < N; ++k) {
    const auto& v = rows[k];
    const auto sends = static_cast<size_t>(v[0]);
    for (size_t i = 0; i < sends; ++i) {
      const int64_t* s = &v[1 + 5 * i];
      logs[k].sent.push_back({static_cast<int>(s[0]), static_cast<int>(s[1]), s[2], s[3], s[4]});
    }
    for (size_t j = 1 + 5 * sends; j + 1 < v.size(); j += 2)
      logs[k].received.push_back({static_cast<int>(v[j]), static_cast<int>(v[j + 1])});
  }
  return with_rounds(logs);
}

// ---- the textbook schedules ---------------------------------------------------------------------

int mod(int a, int n) { return ((a % n) + n) % n; }

// Ring: reduce-scatter round g+1 (g = 0 .. N-2), rank r sends chunk r-g; all-gather round N+g,
// chunk r+1-g -- the chunk it completed last. Each chunk S/N.
std::vector<Message> textbook_ring(int N, int64_t S) {
  std::vector<Message> m;
  for (int g = 0; g < N - 1; ++g)
    for (int r = 0; r < N; ++r) {
      m.push_back({g + 1, r, mod(r + 1, N), S / N, mod(r - g, N) * (S / N)});
      m.push_back({N + g, r, mod(r + 1, N), S / N, mod(r + 1 - g, N) * (S / N)});
    }
  std::sort(m.begin(), m.end());
  return m;
}

// Recursive doubling at a power of two: in round k+1, r and r XOR 2^k swap the whole tensor.
std::vector<Message> textbook_tree(int N, int64_t S) {
  std::vector<Message> m;
  for (int k = 0; (1 << k) < N; ++k)
    for (int r = 0; r < N; ++r) m.push_back({k + 1, r, r ^ (1 << k), S, 0});
  std::sort(m.begin(), m.end());
  return m;
}

// Hierarchical, nodes of 2 ranks, N even: 1. the node's second rank sends its tensor to the leader;
// 2. the leaders' ring (M = N/2 ranks, leader of node j = 2j) in 2(M-1) rounds of S/M;
// 3. each leader sends the result to its second rank.
std::vector<Message> textbook_hierarchical_pairs(int N, int64_t S) {
  const int M = N / 2;
  std::vector<Message> m;
  for (int j = 0; j < M; ++j) {
    m.push_back({1, 2 * j + 1, 2 * j, S, 0});
    m.push_back({2 * M, 2 * j, 2 * j + 1, S, 0});
  }
  for (const Message& leader : textbook_ring(M, S))
    if (M > 1) m.push_back({leader.round + 1, 2 * leader.from, 2 * leader.to, leader.bytes, leader.offset});
  std::sort(m.begin(), m.end());
  return m;
}

// ---- output -------------------------------------------------------------------------------------

// "S" for the whole tensor, "c2 S/4" for the third of four chunks.
std::string label(const Message& m, int64_t S) {
  if (m.offset < 0) return "buffer";
  if (m.bytes == S) return "S";
  return "c" + std::to_string(m.offset / m.bytes) + " S/" + std::to_string(S / m.bytes);
}

void print(const std::string& backend, const std::vector<Message>& ms, int64_t S, int k) {
  std::printf("%s: %zu messages, %d rounds (* crosses between nodes of %d ranks)\n", backend.c_str(), ms.size(),
              ms.empty() ? 0 : ms.back().round, k);
  for (size_t i = 0; i < ms.size(); ++i) {
    if (i == 0 || ms[i].round != ms[i - 1].round) std::printf("  round %d:", ms[i].round);
    const bool crosses = ms[i].from / k != ms[i].to / k;
    std::printf("  %d->%d%s %s", ms[i].from, ms[i].to, crosses ? "*" : "", label(ms[i], S).c_str());
    if (i + 1 == ms.size() || ms[i + 1].round != ms[i].round) std::printf("\n");
  }
}

bool same(const std::string& what, const std::vector<Message>& got, const std::vector<Message>& want, int64_t S) {
  if (got == want) {
    std::printf("check: %s matches the textbook schedule\n", what.c_str());
    return true;
  }
  std::printf("check FAILED: %s differs from the textbook schedule; expected:\n", what.c_str());
  print(what, want, S, 1 << 30);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int k = 0;  // 0: 2 from 3 ranks on, else 1 (once the world's size is known)
  std::string tsv;
  bool check = false;
  CLI::App app{
      "Records the messages of ringgrad's ring, tree and hierarchical AllReduce, round by round "
      "(run under mpirun)"};
  app.add_option("--ranks-per-node", k, "ranks per node: hierarchical's nodes, and the red arrows (default 2)")
      ->check(rg::flags::int_in(1, 1 << 20));
  app.add_option("--tsv", tsv, "write the messages as a table to this file (rank 0)");
  app.add_flag("--check", check, "compare with the textbook schedules; exit 1 on a difference");
  if (const auto code = rg::flags::parse_command_line(app, argc, argv)) return *code;  // before MPI starts
  const rg::dist::World world = rg::dist::init(&argc, &argv);
  return rg::dist::run_or_abort([&] {
    const int N = world.size, r = world.rank;
    if (k == 0) k = N >= 3 ? 2 : 1;
    const int64_t n = 64 * N, S = n * static_cast<int64_t>(sizeof(float));
    std::FILE* out = nullptr;
    if (r == 0 && !tsv.empty()) {
      out = std::fopen(tsv.c_str(), "w");
      if (!out) throw rg::Error("learn_schedules: cannot write " + tsv + ": " + std::strerror(errno));
      std::fprintf(out, "backend\tround\tfrom\tto\tbytes\toffset\tcrosses_nodes\tlabel\n");
    }
    if (r == 0) std::printf("N = %d ranks, S = %lld bytes, nodes of %d ranks\n", N, static_cast<long long>(S), k);
    bool ok = true;
    for (const std::string backend : {"ring", "tree", "hierarchical"}) {
      const auto ms = record(backend, k, n, N, r);
      if (r != 0) continue;
      print(backend, ms, S, k);
      for (const Message& m : ms)
        if (out)
          std::fprintf(out, "%s\t%d\t%d\t%d\t%lld\t%lld\t%d\t%s\n", backend.c_str(), m.round, m.from, m.to,
                       static_cast<long long>(m.bytes), static_cast<long long>(m.offset), m.from / k != m.to / k,
                       label(m, S).c_str());
      if (!check) continue;
      const bool power_of_two = (N & (N - 1)) == 0;
      if (backend == "ring") ok &= same("ring", ms, textbook_ring(N, S), S);
      if (backend == "tree" && power_of_two) ok &= same("tree", ms, textbook_tree(N, S), S);
      if (backend == "hierarchical" && k == 2 && N % 2 == 0)
        ok &= same("hierarchical", ms, textbook_hierarchical_pairs(N, S), S);
    }
    if (out) std::fclose(out);
    int all_ok = ok;
    MPI_Bcast(&all_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return all_ok ? 0 : 1;
  });
}
