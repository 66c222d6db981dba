#!/usr/bin/env bash
# Fetches (here, where Debian's registry is reachable) the .deb files tools/gpu_check.sh needs on a GPU
# machine that reaches no registry: OpenBLAS, doctest, zlib headers, CLI11, OpenMPI and its libraries,
# and the training data (Fashion-MNIST, fortunes). About 50 MiB.
#
#   tools/gpu_deps.sh [DIR]        # default DIR: gpu-deps/ (git-ignored)
#
# Then, on the GPU machine (the device tool carries ignored paths: carry=["gpu-deps"]):
#   RINGGRAD_DEPS_DEBS=gpu-deps tools/gpu_check.sh
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=${1:-gpu-deps}
mkdir -p "$dir"
packages=(
  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5   # CPU BLAS
  doctest-dev zlib1g-dev libcli11-dev                                         # tests, checkpoints, examples
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common                       # MPI ...
  libhwloc15 libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1  # ... and what Open MPI loads
  libucx0 libpsm2-2 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm-infinipath1
  dataset-fashion-mnist fortunes fortunes-min                                 # training data
)
(cd "$dir" && apt-get download "${packages[@]}")
du -sh "$dir"
