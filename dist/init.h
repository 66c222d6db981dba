// Starting and stopping the distributed runtime, and where this process sits in the job.
//
// Launch with `mpirun -np N prog args...`. Several machines need no code change: give mpirun a
// hostfile (`mpirun -np 8 --hostfile hosts prog`, one line per machine, e.g. `node1 slots=4`);
// local_rank / local_size then describe the ranks that share this machine.
// Run without mpirun, a program is a world of one (rank 0 of 1), and every collective is a copy.
//
// dist::init is the one place the process touches MPI's global state; everything after it (process
// groups, their communicators and threads) is an object the caller creates and passes around.
#pragma once

#include <functional>

namespace ringgrad::dist {

// The job as this process sees it.
struct World {
  int rank = 0;        // 0 .. size-1 in MPI_COMM_WORLD
  int size = 1;        // world size N
  int local_rank = 0;  // index among the ranks on this machine (MPI_COMM_TYPE_SHARED)
  int local_size = 1;  // ranks on this machine
  // The world rank of the first rank on this machine: names the machine as MPI sees it, which is
  // what decides who shares memory -- a hostname may repeat across machines (containers).
  int node = 0;
  // The MPI thread level granted: MPI_THREAD_MULTIPLE normally. See Note [MPI thread level].
  int thread_level = 0;
  bool thread_multiple = true;
};

// Calls MPI_Init_thread (asking for MPI_THREAD_MULTIPLE) and fills the World. Throws ringgrad::Error
// when MPI is already initialised by someone else, or grants less than MPI_THREAD_SERIALIZED.
// argc / argv may be null.
//
// Note [MPI thread level]: each process group runs its collectives on its own communication thread,
// while the main thread keeps computing (and may create groups, or call MPI itself). That needs
// MPI_THREAD_MULTIPLE. An MPI that grants only MPI_THREAD_SERIALIZED still works if the program
// makes no MPI calls of its own, and creates / destroys process groups only while no collective is
// outstanding; init prints a one-line warning saying so.
//
// Note [Two TCP links per peer]: across machines Open MPI's TCP transport carries each pair of ranks
// over one connection by default, and when both directions stream at once -- as a ring's every step
// does at N = 2, where the left and right neighbours are one rank -- each direction got half the
// link: 0.47 Gbit/s of 0.92 on a 1 Gbit/s cable, one direction alone 0.88 (tests/cluster, measured
// with a Sendrecv of 16 MiB; docs/across_machines.md). Two connections per pair (btl_tcp_links 2)
// give each direction 0.88, and the ring's busbw goes from 58% of the link to 90%. So init sets
// OMPI_MCA_btl_tcp_links=2 unless the environment already says otherwise (mpirun -x or --mca, or
// an exported variable). Ranks on one machine talk through shared memory and are not affected.
World init(int* argc = nullptr, char*** argv = nullptr);

// The World filled by init. Throws when init has not run.
const World& world();

// Calls MPI_Finalize. Destroy every process group first (their threads use MPI): finalize with a
// group still alive throws ringgrad::Error naming the live groups, and leaves MPI initialised.
void finalize();

bool is_initialized();  // between init and finalize

// The body of a distributed main: runs `body`, then finalize(), and returns its exit code. If it
// throws, prints "error: ..." and -- with more than one rank -- calls MPI_Abort, so that the other
// ranks end too instead of waiting in a collective this rank will never join.
int run_or_abort(const std::function<int()>& body);

}  // namespace ringgrad::dist
