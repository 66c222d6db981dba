// A log of the point-to-point messages this process's collectives post, taken the way MPI tools
// (mpiP, Score-P, Vampir) take theirs: through MPI's profiling interface.
//
// Every MPI function F also exists as PMPI_F. message_log.cpp defines MPI_Isend, MPI_Irecv,
// MPI_Test and MPI_Testall itself; the linker resolves ringgrad's calls to those
// definitions, which note what happens and call the PMPI_ versions to do it. ringgrad is not
// changed or told: what the log holds is what dist/algorithms/ really sends.
//
// Only the messages posted between start() and stop() are kept. Ranks are world ranks, whatever
// communicator the message went on (hierarchical's node and leaders communicators included).
#pragma once

#include <cstdint>
#include <vector>

namespace learn {

struct SentMessage {
  int to = -1;  // world rank
  int tag = 0;
  int64_t bytes = 0;
  int64_t offset = -1;          // byte offset of the send buffer in the watched tensor; -1 when outside it
  int64_t received_before = 0;  // how many of this rank's receives had completed when it was posted
};

struct ReceivedMessage {
  int from = -1;  // world rank
  int tag = 0;
};

struct MessageLog {
  std::vector<SentMessage> sent;          // in posting order
  std::vector<ReceivedMessage> received;  // in completion order
};

// Start recording, noting send buffers' offsets within [watched, watched + watched_bytes).
void start_message_log(const void* watched, int64_t watched_bytes);
// Stop recording and hand over what was recorded.
MessageLog stop_message_log();

}  // namespace learn
