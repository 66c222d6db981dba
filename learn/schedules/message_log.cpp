// The profiling-interface wrappers behind message_log.h. ringgrad's collectives run on its
// communication thread (dist/comm_thread.h) while the main thread waits, so every entry point
// takes one lock.
#include "learn/schedules/message_log.h"

#include <mpi.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace learn {
namespace {

struct Recorder {
  std::mutex mutex;
  bool on = false;
  const std::byte* watched = nullptr;
  int64_t watched_bytes = 0;
  MessageLog log;
  std::unordered_map<MPI_Request, ReceivedMessage> pending;  // posted receives not yet seen complete
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

// A rank of `comm` as a rank of MPI_COMM_WORLD.
int world_rank_of(MPI_Comm comm, int rank) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int out = MPI_UNDEFINED;
  MPI_Group_translate_ranks(group, 1, &rank, world, &out);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

// Called with the lock held, once `request` is known complete.
void note_completed(Recorder& r, MPI_Request request) {
  if (!r.on) return;
  auto it = r.pending.find(request);
  if (it == r.pending.end()) return;
  r.log.received.push_back(it->second);
  r.pending.erase(it);
}

}  // namespace

void start_message_log(const void* watched, int64_t watched_bytes) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  r.on = true;
  r.watched = static_cast<const std::byte*>(watched);
  r.watched_bytes = watched_bytes;
  r.log = {};
  r.pending.clear();
}

MessageLog stop_message_log() {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  r.on = false;
  return std::move(r.log);
}

}  // namespace learn

extern "C" {

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
  auto& r = learn::recorder();
  std::lock_guard lock(r.mutex);
  if (r.on) {
    int type_bytes = 0;
    MPI_Type_size(type, &type_bytes);
    const auto* at = static_cast<const std::byte*>(buf);
    const bool inside = at >= r.watched && at < r.watched + r.watched_bytes;
    r.log.sent.push_back({learn::world_rank_of(comm, dest), tag, int64_t{count} * type_bytes,
                          inside ? at - r.watched : -1, static_cast<int64_t>(r.log.received.size())});
  }
  return PMPI_Isend(buf, count, type, dest, tag, comm, request);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
  auto& r = learn::recorder();
  std::lock_guard lock(r.mutex);
  const int rc = PMPI_Irecv(buf, count, type, source, tag, comm, request);
  if (r.on && rc == MPI_SUCCESS) r.pending[*request] = {learn::world_rank_of(comm, source), tag};
  return rc;
}

// MPI_Test and MPI_Testall set a completed request to MPI_REQUEST_NULL, so the handles are copied
// first. Testall completes all or none ("flag" false leaves every request as it was). ringgrad's
// collectives poll and never block in MPI_Wait (Note [Polling, not spinning]); a receive completed
// any other way would go unrecorded, and learn_schedules --check would say so.
int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  auto& r = learn::recorder();
  std::lock_guard lock(r.mutex);
  const MPI_Request before = *request;
  const int rc = PMPI_Test(request, flag, status);
  if (rc == MPI_SUCCESS && *flag) learn::note_completed(r, before);
  return rc;
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  auto& r = learn::recorder();
  std::lock_guard lock(r.mutex);
  const std::vector<MPI_Request> before(requests, requests + count);
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  if (rc == MPI_SUCCESS && *flag)
    for (MPI_Request q : before) learn::note_completed(r, q);
  return rc;
}

}  // extern "C"
