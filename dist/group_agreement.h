// What the ranks of a process group agree on when it is created (internal), and what a timed-out
// collective can then learn about its peers.
//
// Note [Agreed at creation]: a group whose ranks were created differently cannot work, and most
// such differences only show much later, as a collective that hangs until its timeout: one rank on
// 'ring' and another on 'tree' exchange different messages; a rank with debug checks on all-gathers
// a fingerprint its peers never send; a rank with a shorter timeout gives up first. So every rank's
// GroupBase all-gathers one CreationRecord at construction -- backend, debug mode, host staging (a
// rank that offers shared-memory buffers would wait for peers that never map them), timeout, the
// group's creation index, world size, its machine and local rank, its process id -- and each rank
// fails with the same error, naming every field that differs and which ranks hold which value.
// The exchange itself is bounded by the group's timeout, so a rank that never creates the group
// is an error too, not a hang.
//
// The records also tell a timed-out collective who is gone (Note [Who is gone]): for every peer
// on this machine, whether its process still runs. A rank killed by SIGKILL leaves no message, and
// Open MPI 4.1 reports no failure to the survivors; /proc can.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace ringgrad::dist::detail {

class MpiComms;

struct CreationRecord {
  std::string backend;
  bool debug_check = false;
  int host_staging = 0;  // 1 on, 0 off, -1 a malformed setting; Note [Host staging without a GPU]
  double timeout_seconds = 0;
  int group_index = 0;  // this process's n-th group
  int world_size = 1;
  std::string host;
  int local_rank = 0, local_size = 1;
  int node = 0;  // World::node: the machine as MPI sees it
  long pid = 0;
  unsigned long long start_time = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
};

// A switch every rank must set alike, as this rank's vote: the option when given, else the
// environment variable `env_name`, else `fallback` -- 1 on, 0 off, or -1 when the variable is
// malformed, its error kept in `error`. The caller raises that error only once every rank has
// voted: thrown at once, it would leave the other ranks waiting in the vote until the timeout.
int switch_vote(const std::optional<bool>& option, const char* env_name, bool fallback, std::exception_ptr& error);

// This process's record for a group about to be created.
CreationRecord this_process_record(const std::string& backend, bool debug_check, int host_staging,
                                   double timeout_seconds, int group_index);

// All-gathers the records over comms (bounded by mine.timeout_seconds) and throws the same
// ringgrad::Error on every rank when they disagree (Note [Agreed at creation]). Returns them, by rank.
std::vector<CreationRecord> agree_on_creation(const MpiComms& comms, const CreationRecord& mine);

// Note [Who is gone]: one sentence on the peers of `records` on this machine whose process no
// longer runs ("rank 1 (pid 4242 on node1) is no longer running"), or on their all running; says
// when some ranks are on other machines, which cannot be checked from here.
// Note [Machines by MPI, not by name]: which ranks share a machine is what MPI says
// (MPI_COMM_TYPE_SHARED, World::node): it decides shared memory, the local rank, the hierarchical
// backend's nodes. Hostnames only label messages. They may disagree with MPI -- two containers on
// host networking, two network namespaces (tools/cluster.sh), both named like their host -- and such
// a layout is legal: it is never refused. layout_note() says what differs (empty when nothing does);
// rank 0 prints it once.
std::string layout_note(const std::vector<CreationRecord>& records);

std::string peer_liveness(const std::vector<CreationRecord>& records, int my_rank);

}  // namespace ringgrad::dist::detail
