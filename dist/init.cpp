#include "dist/init.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/random.h"
#include "dist/algorithms/network_model.h"
#include "dist/mpi_check.h"
#include "dist/process_group.h"

namespace ringgrad::dist {

namespace {
// The process's place in the job; MPI_COMM_WORLD is process-global, so this is too.
World g_world;
bool g_initialized = false;
}  // namespace

namespace detail {

std::string rank_for_errors() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return "?";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return std::to_string(rank);
}

void throw_mpi_error(int code, const char* statement, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
  throw Error(
      str_cat("[mpi] ", statement, " failed on rank ", rank_for_errors(), ": ", text, " (", file, ":", line, ")"));
}

}  // namespace detail

World init(int* argc, char*** argv) {
  int already = 0;
  RG_MPI_CHECK(MPI_Initialized(&already));
  RG_CHECK(!already, "dist.init", "MPI is already initialised; call dist::init once, before any other MPI use");
  // Note [Two TCP links per peer]: read by Open MPI's TCP transport during MPI_Init; a value the
  // user set (environment, mpirun --mca) wins.
  setenv("OMPI_MCA_btl_tcp_links", "2", /*overwrite=*/0);
  int provided = 0;
  RG_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // From here on MPI errors on MPI_COMM_WORLD return codes (RG_MPI_CHECK turns them into Errors)
  // instead of aborting every rank.
  RG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  World w;
  RG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  RG_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w.size));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    RG_FAIL("dist.init", "MPI granted thread level ", provided, " on rank ", w.rank,
            "; ringgrad needs at least MPI_THREAD_SERIALIZED (its communication thread calls MPI). "
            "Use an MPI built with thread support (Open MPI and MPICH are by default).");
  }
  w.thread_level = provided;
  w.thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  if (!w.thread_multiple && w.rank == 0) {
    fprintf(stderr,
            "[dist.init] warning: MPI granted MPI_THREAD_SERIALIZED, not MPI_THREAD_MULTIPLE: make no MPI "
            "calls of your own and create/destroy process groups only while no collective is outstanding "
            "(see Note [MPI thread level] in dist/init.h)\n");
  }
  // Ranks that share memory share a machine: their index there is the local rank.
  MPI_Comm local = MPI_COMM_NULL;
  RG_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local));
  RG_MPI_CHECK(MPI_Comm_rank(local, &w.local_rank));
  RG_MPI_CHECK(MPI_Comm_size(local, &w.local_size));
  RG_MPI_CHECK(MPI_Allreduce(&w.rank, &w.node, 1, MPI_INT, MPI_MIN, local));
  // Every rank's machine, for counting bytes by transport (Note [Bytes by transport]).
  std::vector<int> machine_of(static_cast<size_t>(w.size));
  RG_MPI_CHECK(MPI_Allgather(&w.node, 1, MPI_INT, machine_of.data(), 1, MPI_INT, MPI_COMM_WORLD));
  detail::set_machine_layout(std::move(machine_of));
  RG_MPI_CHECK(MPI_Comm_free(&local));
  select_local_device(w.local_rank);  // one GPU per rank on a machine; opens no context yet
  g_world = w;
  g_initialized = true;
  set_rank_label(str_cat("rank ", w.rank, "/", w.size));  // for errors raised below dist/ (CUDA calls)
  set_random_rank(w.rank);                                // Note [Dropout streams per rank]
  return w;
}

const World& world() {
  RG_CHECK(g_initialized, "dist.world", "dist::init has not been called (or dist::finalize already was)");
  return g_world;
}

void finalize() {
  if (!g_initialized) return;
  // A live group's communication thread may still call MPI; MPI_Finalize under it aborts inside
  // the MPI library ("MPI_Comm_free() ... after MPI_FINALIZE") with no word of which group.
  const std::vector<std::string> live = live_groups();
  if (!live.empty()) {
    std::string names;
    for (const std::string& n : live) names += (names.empty() ? "" : ", ") + n;
    RG_FAIL("dist.finalize", "rank ", g_world.rank, "/", g_world.size, ": ", live.size(),
            " process group(s) still alive: ", names,
            ". Destroy every group first (reset its shared_ptr, and let the DDP wrappers and anything "
            "else holding it go out of scope): their communication threads use MPI");
  }
  g_initialized = false;
  set_rank_label("");
  RG_MPI_CHECK(MPI_Finalize());
}

bool is_initialized() { return g_initialized; }

int run_or_abort(const std::function<int()>& body) {
  try {
    const int rc = body();
    finalize();
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    if (is_initialized() && world().size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

}  // namespace ringgrad::dist
