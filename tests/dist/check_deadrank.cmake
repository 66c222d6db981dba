# Runs CMD (an mpirun line) and checks how the job ended when a rank died (tests/dist/test_deadrank.cpp).
#   EXPECT=teardown: mpirun kills the survivors quickly: non-zero exit in < 20 s, no survivor error.
#   EXPECT=timeout:  the survivors' collective timeout fires with its diagnosis, naming rank 1 as
#                    gone, then mpirun exits non-zero (the survivors call MPI_Abort).
#   EXPECT=sigkill:  rank 1 is killed by SIGKILL during DDP training; rank 0's timeout names it.
#   EXPECT=creation: only rank 0 creates a group; its creation fails after the timeout.
# A script rather than PASS_REGULAR_EXPRESSION, which would ignore the exit status.
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(log "${out}${err}")
message("---- mpirun exit status '${rc}' after ~${elapsed} s ----\n${log}")
# The ranks a diagnosis names as gone, after rank 1: another survivor may have timed out, aborted
# and exited before this one looked ("rank 1 (pid 7 on vm), rank 2 (pid 8 on vm) are no longer
# running").
set(_rg_more_gone "(, rank [0-9]+ \\(pid [0-9]+ on [^)]+\\))*")
if(rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "expected mpirun to fail (non-zero exit status), got '${rc}'")
endif()
if(EXPECT STREQUAL "teardown")
  if(elapsed GREATER 20)
    message(FATAL_ERROR "mpirun took ${elapsed} s to tear the job down")
  endif()
  if(log MATCHES "SURVIVOR ERROR")
    message(FATAL_ERROR "a survivor reached its own timeout: mpirun did not tear the job down")
  endif()
elseif(EXPECT STREQUAL "timeout")
  if(NOT log MATCHES "SURVIVOR ERROR: \\[dist.allreduce\\] allreduce #1 \\(sum, \\(1000,\\) f32 cpu, 4000 bytes\\) on backend '[a-z]+', rank 0/[0-9]+ timed out after 3 s")
    message(FATAL_ERROR "the survivors did not report the timeout diagnosis")
  endif()
  if(NOT log MATCHES "SURVIVOR ERROR: [^\n]*rank 1 \\(pid [0-9]+ on [^)]+\\)${_rg_more_gone} (is|are) no longer running")
    message(FATAL_ERROR "the survivors' diagnosis does not name rank 1 as gone")
  endif()
elseif(EXPECT STREQUAL "creation")
  if(NOT log MATCHES "rank 0: SURVIVOR ERROR: \\[dist.new_group\\] rank 0/[0-9]+ waited 3 s for every rank to create process group #0")
    message(FATAL_ERROR "rank 0's group creation did not fail with the diagnosis")
  endif()
elseif(EXPECT STREQUAL "sigkill")
  # Every survivor's own error names the lost rank, within the collective timeout (3 s) plus start-up.
  if(NOT log MATCHES "rank 1: killing itself")
    message(FATAL_ERROR "rank 1 did not reach its kill")
  endif()
  if(NOT log MATCHES "rank 0: SURVIVOR ERROR: [^\n]*timed out after 3 s\\. [^\n]*rank 1 \\(pid [0-9]+ on [^)]+\\)${_rg_more_gone} (is|are) no longer running")
    message(FATAL_ERROR "rank 0's error does not name rank 1 as gone")
  endif()
  if(elapsed GREATER 45)
    message(FATAL_ERROR "the job took ${elapsed} s to end after rank 1 was killed")
  endif()
else()
  message(FATAL_ERROR "bad EXPECT='${EXPECT}'")
endif()
