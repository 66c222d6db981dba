#include "dist/group_agreement.h"

#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "dist/init.h"
#include "dist/mpi_check.h"
#include "dist/mpi_comms.h"

namespace ringgrad::dist::detail {

namespace {

// The record as fixed-size bytes, so that one MPI_Iallgather exchanges every rank's.
struct WireRecord {
  char backend[32];
  char host[64];
  double timeout_seconds;
  int32_t debug_check, host_staging, group_index, world_size, local_rank, local_size, node;
  int64_t pid;
  uint64_t start_time;
};

void copy_text(char* out, size_t capacity, const std::string& text) {
  std::memset(out, 0, capacity);
  text.copy(out, capacity - 1);
}

WireRecord to_wire(const CreationRecord& r) {
  WireRecord w{};
  copy_text(w.backend, sizeof w.backend, r.backend);
  copy_text(w.host, sizeof w.host, r.host);
  w.timeout_seconds = r.timeout_seconds;
  w.debug_check = r.debug_check;
  w.host_staging = r.host_staging;
  w.group_index = r.group_index;
  w.world_size = r.world_size;
  w.local_rank = r.local_rank;
  w.local_size = r.local_size;
  w.node = r.node;
  w.pid = r.pid;
  w.start_time = r.start_time;
  return w;
}

CreationRecord from_wire(const WireRecord& w) {
  return CreationRecord{.backend = std::string(w.backend, strnlen(w.backend, sizeof w.backend)),
                        .debug_check = w.debug_check != 0,
                        .host_staging = w.host_staging,
                        .timeout_seconds = w.timeout_seconds,
                        .group_index = w.group_index,
                        .world_size = w.world_size,
                        .host = std::string(w.host, strnlen(w.host, sizeof w.host)),
                        .local_rank = w.local_rank,
                        .local_size = w.local_size,
                        .node = w.node,
                        .pid = static_cast<long>(w.pid),
                        .start_time = w.start_time};
}

// /proc/<pid>/stat: the state letter (field 3) and the start time (field 22), or nullopt when
// there is no such process. The command name (field 2) may hold spaces: parse after its ')'.
struct ProcState {
  bool exists = false;
  char state = '?';
  unsigned long long start_time = 0;
};

ProcState proc_state(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  ProcState s{.exists = true};
  rest >> s.state;
  std::string field;
  for (int i = 4; i <= 21 && rest >> field; ++i) {}
  rest >> s.start_time;
  return s;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// "backend: rank 0 'ring', ranks 1-2 'tree'": which ranks hold which value of one field.
template <class Value>
std::string who_holds(const char* field, const std::vector<CreationRecord>& all, Value (*get)(const CreationRecord&)) {
  std::map<Value, std::vector<int>> holders;
  for (size_t r = 0; r < all.size(); ++r) holders[get(all[r])].push_back(static_cast<int>(r));
  if (holders.size() <= 1) return {};
  std::string out = str_cat("\n  ", field, ":");
  const char* sep = " ";
  for (const auto& [value, ranks] : holders) {
    out += str_cat(sep, ranks.size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) out += str_cat(i ? "," : "", ranks[i]);
    if (ranks.size() > 8) out += str_cat(",... (", ranks.size(), ")");
    std::ostringstream v;
    v << value;
    out += str_cat(" '", v.str(), "'");
    sep = "; ";
  }
  return out;
}

std::string backend_of(const CreationRecord& r) { return r.backend; }
std::string debug_of(const CreationRecord& r) { return r.debug_check ? "on" : "off"; }
std::string host_staging_of(const CreationRecord& r) {
  return r.host_staging == 1 ? "on" : r.host_staging == 0 ? "off" : "malformed";
}
double timeout_of(const CreationRecord& r) { return r.timeout_seconds; }
int index_of(const CreationRecord& r) { return r.group_index; }
int world_of(const CreationRecord& r) { return r.world_size; }

}  // namespace

int switch_vote(const std::optional<bool>& option, const char* env_name, bool fallback, std::exception_ptr& error) {
  if (option) return *option;
  try {
    return env::flag(env_name, "dist.new_group").value_or(fallback);
  } catch (const Error&) {
    error = std::current_exception();
    return -1;
  }
}

CreationRecord this_process_record(const std::string& backend, bool debug_check, int host_staging,
                                   double timeout_seconds, int group_index) {
  const World& w = world();
  return CreationRecord{.backend = backend,
                        .debug_check = debug_check,
                        .host_staging = host_staging,
                        .timeout_seconds = timeout_seconds,
                        .group_index = group_index,
                        .world_size = w.size,
                        .host = host_name(),
                        .local_rank = w.local_rank,
                        .local_size = w.local_size,
                        .node = w.node,
                        .pid = static_cast<long>(getpid()),
                        .start_time = proc_state(getpid()).start_time};
}

std::vector<CreationRecord> agree_on_creation(const MpiComms& comms, const CreationRecord& mine) {
  const int rank = comms.rank(), size = comms.size();
  const WireRecord wire = to_wire(mine);
  std::vector<WireRecord> gathered(static_cast<size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  RG_MPI_CHECK(
      MPI_Iallgather(&wire, sizeof wire, MPI_BYTE, gathered.data(), sizeof wire, MPI_BYTE, comms.comm(), &request));
  // Bounded by the timeout: a rank that never creates this group must not hang the others here.
  RG_CHECK(wait_within(&request, 1, mine.timeout_seconds), "dist.new_group", "rank ", rank, "/", size, " waited ",
           mine.timeout_seconds, " s for every rank to create process group #", mine.group_index, " (backend '",
           mine.backend,
           "'): some rank did not create it -- every rank must create the same groups in the same order -- or died");
  std::vector<CreationRecord> all;
  for (const WireRecord& w : gathered) all.push_back(from_wire(w));

  std::string differences =
      who_holds("backend", all, backend_of) + who_holds("debug mode", all, debug_of) +
      who_holds("host staging", all, host_staging_of) + who_holds("collective timeout (s)", all, timeout_of) +
      who_holds("creation index of this group", all, index_of) + who_holds("world size", all, world_of);
  // World layout: each machine's ranks number themselves 0 .. local_size - 1, and count them right.
  // A machine is what MPI says shares memory (World::node), not a hostname: containers on host
  // networking, or network namespaces, give two machines one name (Note [Machines by MPI, not by name]).
  std::map<int, std::vector<int>> by_node;
  for (int r = 0; r < size; ++r) by_node[all[static_cast<size_t>(r)].node].push_back(r);
  for (const auto& [node, ranks] : by_node) {
    std::vector<bool> seen(ranks.size(), false);
    for (int r : ranks) {
      const CreationRecord& rec = all[static_cast<size_t>(r)];
      const bool fits = rec.local_size == static_cast<int>(ranks.size()) && rec.local_rank >= 0 &&
                        rec.local_rank < static_cast<int>(ranks.size()) && !seen[static_cast<size_t>(rec.local_rank)];
      if (fits) seen[static_cast<size_t>(rec.local_rank)] = true;
      else
        differences +=
            str_cat("\n  world layout: rank ", r, " on ", rec.host, " says local rank ", rec.local_rank, " of ",
                    rec.local_size, ", but ", ranks.size(), " ranks share the machine of rank ", node);
    }
  }
  RG_CHECK(differences.empty(), "dist.new_group", "the ranks created process group #", mine.group_index,
           " differently (seen by rank ", rank, "/", size, "):", differences,
           "\nEvery rank must create its groups with the same backend, options and environment "
           "(RINGGRAD_DIST_DEBUG, RINGGRAD_DIST_HOST_STAGING, RINGGRAD_COLLECTIVE_TIMEOUT); see Note [Agreed at "
           "creation] in "
           "dist/group_agreement.h.");
  return all;
}

std::string layout_note(const std::vector<CreationRecord>& records) {
  // host name -> the machines (nodes) that report it, and node -> the names its ranks report.
  std::map<std::string, std::map<int, int>> nodes_of_name;
  std::map<int, std::map<std::string, int>> names_of_node;
  for (const CreationRecord& r : records) {
    ++nodes_of_name[r.host][r.node];
    ++names_of_node[r.node][r.host];
  }
  std::string seen;
  for (const auto& [name, nodes] : nodes_of_name)
    if (nodes.size() > 1)
      seen += str_cat("\n  hostname '", name, "' is reported from ", nodes.size(),
                      " machines (MPI gives them no shared memory)");
  for (const auto& [node, names] : names_of_node)
    if (names.size() > 1) seen += str_cat("\n  the machine of rank ", node, " reports ", names.size(), " hostnames");
  if (seen.empty()) return {};
  return str_cat("[dist.new_group] note: hostnames and MPI's layout differ:", seen,
                 "\n  ringgrad follows MPI: ranks share memory (and count as one machine) exactly when "
                 "MPI_COMM_TYPE_SHARED puts them together; messages name a rank's host by its hostname. To "
                 "group ranks into nodes yourself for the hierarchical backend, set RINGGRAD_RANKS_PER_NODE "
                 "(GroupOptions::ranks_per_node); to keep shared memory out of small AllReduces, "
                 "RINGGRAD_DIST_SHM=0.\n");
}

std::string peer_liveness(const std::vector<CreationRecord>& records, int my_rank) {
  if (records.empty() || my_rank < 0 || my_rank >= static_cast<int>(records.size())) return {};
  const int here = records[static_cast<size_t>(my_rank)].node;
  const std::string& here_name = records[static_cast<size_t>(my_rank)].host;
  std::string gone, remote;
  int checked = 0, elsewhere = 0, lost = 0;
  for (size_t r = 0; r < records.size(); ++r) {
    if (static_cast<int>(r) == my_rank) continue;
    const CreationRecord& rec = records[r];
    if (rec.node != here) {
      // A process on another machine cannot be looked up here: name where it runs, so that the
      // reader knows which host to look at (a few; the rest counted).
      if (elsewhere < 4) remote += str_cat(remote.empty() ? "" : ", ", "rank ", r, " on ", rec.host);
      ++elsewhere;
      continue;
    }
    ++checked;
    const ProcState s = proc_state(rec.pid);
    // Gone: no such process, a zombie waiting for its parent, or another process with its pid.
    const bool alive = s.exists && s.state != 'Z' && s.state != 'X' && s.start_time == rec.start_time;
    if (!alive) {
      gone += str_cat(gone.empty() ? "" : ", ", "rank ", r, " (pid ", rec.pid, " on ", rec.host, ")");
      ++lost;
    }
  }
  std::string out = str_cat("This rank runs on ", here_name, ".");
  if (lost > 0) out += str_cat(" ", gone, lost == 1 ? " is" : " are", " no longer running.");
  else if (checked > 0) out += str_cat(" Every other rank on ", here_name, " is still running.");
  if (elsewhere > 0)
    out += str_cat(" ", elsewhere, " rank(s) on other machines could not be checked from here (", remote,
                   elsewhere > 4 ? ", ..." : "", "): look at their hosts.");
  return out;
}

}  // namespace ringgrad::dist::detail
