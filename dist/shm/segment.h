// POSIX shared-memory segments that every rank of one machine maps (internal): the mechanics shared
// by SharedSlots (dist/shm/slots.h) and SharedBuffer (dist/shm/reduction_buffer.h).
//
// dist/shm/ is the shared memory of one machine, one concept per file pair:
//   segment           creating, mapping and unlinking a segment (this file)
//   slots             SharedSlots: small AllReduces copied through per-rank slots (tree, auto)
//   reduction_buffer  SharedBuffer: the buffers new_reduction_buffer hands out (DDP's buckets),
//                     AllReduced in place across every rank's copy
// MpiGroupBase (dist/backends/mpi_group.h) owns a group's slots and buffers.
//
// Rank 0 creates a segment and writes a random nonce into its first 8 bytes; the other ranks map it
// by name and check the nonce. A rank that maps something else under that name (another /dev/shm,
// as in containers that MPI counts as one node) reports failure, and the caller falls back to
// messages. Once every rank has mapped it, rank 0 unlinks the name: nothing is left in /dev/shm,
// and the memory lives until the last munmap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringgrad::dist::detail {

// A fresh random nonce (rank 0 picks it).
uint64_t new_shm_nonce();
// Rank 0's half: creates a zero-filled segment of `bytes`, maps it at *base and writes `nonce` in its
// first 8 bytes. Returns the name, or "" when it could not (then *base is untouched). A name taken
// already (a killed job's leftover, another PID namespace's) is retried with the next number.
std::string create_shm_segment(size_t bytes, uint64_t nonce, std::byte** base);
// The other ranks' half: the mapping of `name`, or null unless the segment has at least `bytes`
// and holds `nonce` in its first 8 bytes.
std::byte* map_shm_segment(const char* name, size_t bytes, uint64_t nonce);
// Rank 0, after every rank mapped the segment (or gave up).
void unlink_shm_segment(const char* name);

}  // namespace ringgrad::dist::detail
