#include "dist/algorithms/network_model.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "dist/mpi_check.h"
#include "dist/process_group.h"

namespace ringgrad::dist::detail {

NetworkModel parse_network_model(const std::string& text, const char* what) {
  std::vector<double> v;
  std::stringstream in(text);
  for (std::string field; std::getline(in, field, ',');) {
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(field, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    RG_CHECK(used == field.size() && !field.empty() && std::isfinite(x), what, "'", text,
             "' is not RANKS_PER_NODE,INTRA_GBPS,INTRA_US,INTER_GBPS,INTER_US (e.g. 2,10,5,1,50): '", field,
             "' is not a number");
    v.push_back(x);
  }
  RG_CHECK(v.size() == 5, what, "'", text, "' has ", v.size(),
           " fields, not 5: RANKS_PER_NODE,INTRA_GBPS,INTRA_US,INTER_GBPS,INTER_US (e.g. 2,10,5,1,50)");
  RG_CHECK(v[0] >= 1 && v[0] == std::floor(v[0]) && v[1] > 0 && v[3] > 0 && v[2] >= 0 && v[4] >= 0, what, "'", text,
           "': ranks per node must be a whole number >= 1, bandwidths > 0 and latencies >= 0");
  return NetworkModel{static_cast<int>(v[0]), {v[1], v[2]}, {v[3], v[4]}};
}

const std::optional<NetworkModel>& network_model() {
  static const std::optional<NetworkModel> model = []() -> std::optional<NetworkModel> {
    const auto text = env::text("RINGGRAD_NETWORK_MODEL");
    if (!text) return std::nullopt;
    return parse_network_model(*text, "RINGGRAD_NETWORK_MODEL");
  }();
  return model;
}

namespace {

void hold_for(double seconds) {
  // Sleep most of it (the other ranks sharing this core run meanwhile), spin the last stretch: a
  // sleep overshoots by the scheduler's granularity.
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  constexpr auto kSpin = std::chrono::microseconds(60);
  if (until - Clock::now() > kSpin) std::this_thread::sleep_until(until - kSpin);
  while (Clock::now() < until) std::this_thread::yield();
}

// The world rank of rank `peer` of `comm` (communicators are few; the answer is kept per pair).
int world_rank(MPI_Comm comm, int peer) {
  thread_local std::map<std::pair<MPI_Comm, int>, int> known;
  const auto key = std::make_pair(comm, peer);
  if (auto it = known.find(key); it != known.end()) return it->second;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  RG_MPI_CHECK(MPI_Comm_group(comm, &group));
  RG_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int out = MPI_UNDEFINED;
  RG_MPI_CHECK(MPI_Group_translate_ranks(group, 1, &peer, world, &out));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return known[key] = out;
}

}  // namespace

namespace {

// Note [Bytes by transport]. The layout is written once by dist::init, before any group exists.
std::vector<int> g_machine_of;  // world rank -> World::node
std::atomic<uint64_t> g_same_machine{0}, g_other_machines{0};

void count_by_transport(MPI_Comm comm, int peer, size_t bytes) {
  if (g_machine_of.empty()) return;
  int me = 0;
  RG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  const int to = world_rank(comm, peer);
  if (to < 0 || static_cast<size_t>(to) >= g_machine_of.size()) return;
  auto& counter = g_machine_of[static_cast<size_t>(to)] == g_machine_of[static_cast<size_t>(me)] ? g_same_machine
                                                                                                 : g_other_machines;
  counter.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace

void set_machine_layout(std::vector<int> machine_of_world_rank) { g_machine_of = std::move(machine_of_world_rank); }

void pay_for_message(MPI_Comm comm, int peer, size_t bytes) {
  count_by_transport(comm, peer, bytes);
  const auto& model = network_model();
  if (!model) return;
  int me = 0;
  RG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  const bool same_node = me / model->ranks_per_node == world_rank(comm, peer) / model->ranks_per_node;
  hold_for((same_node ? model->intra : model->inter).seconds(bytes));
}

}  // namespace ringgrad::dist::detail

namespace ringgrad::dist {

TransportBytes transport_bytes() {
  return TransportBytes{.same_machine = detail::g_same_machine.load(std::memory_order_relaxed),
                        .other_machines = detail::g_other_machines.load(std::memory_order_relaxed)};
}

}  // namespace ringgrad::dist
