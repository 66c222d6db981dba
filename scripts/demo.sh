#!/usr/bin/env bash
# Builds ringgrad and runs the main example: one epoch of the MLP on Fashion-MNIST, data parallel on
# 2 ranks (mpirun -np 2; each rank one thread on this 2-core machine).
#
#   scripts/demo.sh [mnist arguments...]     e.g. scripts/demo.sh --model cnn --precision fp16
#   RANKS=1 scripts/demo.sh                  one process instead
#
# Uses the same build/ directory and configuration as scripts/test.sh, so running one after the
# other rebuilds nothing.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-2}

bash scripts/setup.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=OFF
ninja -C build -j "$jobs" mnist autograd_demo

ranks=${RANKS:-2}
# Open MPI refuses to start as root (containers, CI) unless told it is intended.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
echo
echo "==== mpirun -np $ranks build/examples/mnist --model mlp --epochs 1 $*"
if [ "$ranks" -gt 1 ]; then
  # The default backend, auto, sums DDP's buckets in place in memory both ranks map: on one machine
  # no ring runs at all. Say so, and how to see one (docs/learn/07-ring-tree-hierarchical.md).
  echo "(backend auto: on one machine the gradient buckets are summed in shared memory, no messages;"
  echo " add --backend ring to reduce them with the ring AllReduce instead, RINGGRAD_EXPLAIN=1 to watch a step)"
fi
exec mpirun -np "$ranks" --oversubscribe build/examples/mnist --model mlp --epochs 1 "$@"
