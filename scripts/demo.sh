#!/usr/bin/env bash
# Builds ringgrad and runs the main example: one epoch of the MLP on Fashion-MNIST (single process
# until the distributed issue switches this to 2 ranks under mpirun).
#
#   scripts/demo.sh [mnist arguments...]     e.g. scripts/demo.sh --model cnn --precision fp16
#
# Uses the same build/ directory and configuration as scripts/test.sh, so running one after the
# other rebuilds nothing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-2}

bash scripts/setup.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=OFF
ninja -C build -j "$jobs" mnist autograd_demo

echo
echo "==== build/examples/mnist --model mlp --epochs 1 $*"
exec build/examples/mnist --model mlp --epochs 1 "$@"
