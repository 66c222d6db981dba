# examples/gpt_mini end to end on a small text, under mpirun -np 2 (MPIRUN is the launcher prefix):
#  1. resume is exact: 10 steps + resume + 10 steps ends with the same weights (parameter checksum,
#     printed to 17 digits) and the same last loss as 20 steps straight;
#  2. ZeRO changes no bit at 2 ranks (a sum of two terms does not depend on their order): 10 steps
#     at --zero 2, a sharded checkpoint, 10 more resumed at --zero 1 end where 20 plain steps end;
#  3. sampling is deterministic: the same seed gives the same text, another seed another text.
file(MAKE_DIRECTORY ${WORK})
set(tiny --data ${DATA} --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 4 --warmup 5
         --lr-decay-steps 20 --eval-every 0 --eval-batches 2 --log-every 5)
function(run_ok out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  message("---- ${ARGN}\n---- exit ${rc}\n${out}${err}")
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "command failed with '${rc}'")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()
function(final_line out_var text)
  string(REGEX MATCH "final loss [0-9.e+-]+, parameter checksum [0-9.e+-]+" line "${text}")
  if(line STREQUAL "")
    message(FATAL_ERROR "no 'final loss ..., parameter checksum ...' line")
  endif()
  set(${out_var} "${line}" PARENT_SCOPE)
endfunction()

run_ok(a ${MPIRUN} ${GPT} ${tiny} --max-steps 10 --checkpoint ${WORK}/a.ck)
run_ok(a2 ${MPIRUN} ${GPT} ${tiny} --max-steps 20 --resume ${WORK}/a.ck)
run_ok(b ${MPIRUN} ${GPT} ${tiny} --max-steps 20)
final_line(resumed "${a2}")
final_line(straight "${b}")
if(NOT resumed STREQUAL straight)
  message(FATAL_ERROR "resume is not exact:\n  resumed:  ${resumed}\n  straight: ${straight}")
endif()

run_ok(z ${MPIRUN} ${GPT} ${tiny} --max-steps 10 --zero 2 --checkpoint ${WORK}/z.ck)
run_ok(z2 ${MPIRUN} ${GPT} ${tiny} --max-steps 20 --zero 1 --resume ${WORK}/z.ck)
final_line(zero_resumed "${z2}")
if(NOT zero_resumed STREQUAL straight)
  message(FATAL_ERROR "ZeRO-2 then ZeRO-1 from its shards is not plain DDP:\n  zero:  ${zero_resumed}\n  plain: ${straight}")
endif()

run_ok(s1 ${GPT} --generate --resume ${WORK}/a.ck --seed 5 --num-chars 60 --prompt "The ")
run_ok(s2 ${GPT} --generate --resume ${WORK}/a.ck --seed 5 --num-chars 60 --prompt "The ")
run_ok(s3 ${GPT} --generate --resume ${WORK}/a.ck --seed 6 --num-chars 60 --prompt "The ")
if(NOT s1 STREQUAL s2)
  message(FATAL_ERROR "the same seed gave different samples")
endif()
if(s1 STREQUAL s3)
  message(FATAL_ERROR "different seeds gave the same sample")
endif()
if(NOT s1 MATCHES "^The ")
  message(FATAL_ERROR "the sample does not start with the prompt")
endif()
