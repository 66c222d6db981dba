#!/usr/bin/env bash
# mpirun on the test cluster, for tools/same_as_one_rank.sh (MPIRUN): the arguments of
# `tools/cluster.sh run`.
exec "$(dirname "${BASH_SOURCE[0]}")/../../tools/cluster.sh" run "$@"
