# Runs CMD (an mpirun line) and checks how the job ended when a rank died (tests/dist/test_deadrank.cpp).
#   EXPECT=teardown: mpirun kills the survivors quickly: non-zero exit in < 20 s, no survivor error.
#   EXPECT=timeout:  the survivors' collective timeout fires with its diagnosis, then mpirun exits
#                    non-zero (the survivors call MPI_Abort).
# A script rather than PASS_REGULAR_EXPRESSION, which would ignore the exit status.
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(log "${out}${err}")
message("---- mpirun exit status '${rc}' after ~${elapsed} s ----\n${log}")
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
else()
  message(FATAL_ERROR "bad EXPECT='${EXPECT}'")
endif()
