#!/usr/bin/env bash
# Builds ringgrad and runs the main example.
#
#   scripts/demo.sh [example arguments...]
#
# Uses the same build/ directory and configuration as scripts/test.sh, so running one after the
# other rebuilds nothing. The main example is examples/autograd_demo for now: a tiny model trained
# with ringgrad's autograd, printing its loss as it falls.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-2}

bash scripts/setup.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=OFF
ninja -C build -j "$jobs" autograd_demo

echo
echo "==== build/examples/autograd_demo $*"
exec build/examples/autograd_demo "$@"
