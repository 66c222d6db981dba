// RG_MPI_CHECK: every MPI call in dist/ goes through it.
//
// Process groups set MPI_ERRORS_RETURN on their communicators, so a failing call returns an error
// code instead of aborting the job; this macro turns that code into a ringgrad::Error that names the
// failing statement, MPI's own message, file:line and the rank:
//   [mpi] MPI_Isend(...) failed on rank 1: MPI_ERR_RANK: invalid rank (dist/algorithms/ring.cpp:81)
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace ringgrad::dist::detail {

// The world rank as "1", or "?" before MPI_Init / after MPI_Finalize.
std::string rank_for_errors();

[[noreturn]] void throw_mpi_error(int code, const char* statement, const char* file, int line);

}  // namespace ringgrad::dist::detail

#define RG_MPI_CHECK(statement)                                                              \
  do {                                                                                       \
    const int rg_mpi_rc_ = (statement);                                                      \
    if (rg_mpi_rc_ != MPI_SUCCESS)                                                           \
      ::ringgrad::dist::detail::throw_mpi_error(rg_mpi_rc_, #statement, __FILE__, __LINE__); \
  } while (0)
