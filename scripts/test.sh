#!/usr/bin/env bash
# The CI entry point: install dependencies, build, run the test suite.
#
#   scripts/test.sh
#
# 0. format       scripts/lint.sh: every tracked C++ / CUDA source as .clang-format says.
# 1. build/       CPU configuration (Release, RINGGRAD_CUDA=OFF): the whole doctest suite, examples,
#                 benchmarks, multi-rank tests under mpirun, the install-and-consume test.
# 2. build-clang/ the same CPU configuration built with a second compiler, clang 16 (Release): the
#                 library, tests and examples, and the suite again but for its timer-bound tests. A
#                 flag or a construct one compiler refuses -- or crashes on -- fails CI (README.md,
#                 "Compilers").
#
# 3. build-cuda/  CUDA configuration (RINGGRAD_CUDA=ON), only when nvcc is available: the library and
#                 tests are compiled and linked with nvcc so that a CUDA compile or link error fails CI.
#                 Its `gpu`-labelled tests run too; without a device they report "skipped" (exit code
#                 77, SKIP_RETURN_CODE), on a GPU machine they compare CUDA against CPU. The install
#                 test runs here as well, so a consumer of a CUDA-enabled package is checked.
#
# 4. build-sanitize/  scripts/sanitize.sh: clang 14 with ASan + UBSan; the whole suite under the
#                 sanitizers (timeouts x4), then every libFuzzer target of tests/fuzz for FUZZ_SECONDS
#                 (default 10) each. Any report or finding fails CI. docs/reliability.md.
#
# build/ is CPU-only on purpose: the CUDA configuration is covered by build-cuda/, and building the
# CUDA kernels twice would only cost time on a two-core machine. A plain `cmake -S . -B build`
# (RINGGRAD_CUDA=AUTO) builds the CUDA backend whenever a toolkit is found.
#
# Environment: JOBS (default 2) build jobs; CTEST_PARALLEL_LEVEL is honoured by ctest;
# RINGGRAD_SKIP_CLANG=1 skips step 2; RINGGRAD_SKIP_CUDA=1 step 3; RINGGRAD_SKIP_SANITIZE=1 step 4;
# FUZZ_SECONDS.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
(($# == 0)) || cli_usage_error "takes no arguments, got: $*"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-2}

# OpenMPI refuses to start as root unless told it is intended (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# With PyTorch, so that the interop tests load ringgrad's exports in it instead of skipping.
bash scripts/setup.sh --interop

step() { printf "\n==== %s  [%s, %d s since the start]\n" "$*" "$(date +%T)" "$SECONDS"; }

# ---- 0. format ------------------------------------------------------------------------------------
step "format check (scripts/lint.sh)"
bash scripts/lint.sh

# ---- 1. CPU build ----------------------------------------------------------------------------------
step "configure build/ (CPU)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=OFF
step "build build/"
ninja -C build -j "$jobs"
step "test build/"
ctest --test-dir build --output-on-failure

# ---- 2. the second compiler ------------------------------------------------------------------------
if [[ "${RINGGRAD_SKIP_CLANG:-0}" == 1 ]]; then
  step "clang build skipped (RINGGRAD_SKIP_CLANG=1)"
else
  bash scripts/setup.sh --clang
  step "configure build-clang/ ($(clang++-16 --version | head -n 1), Release)"
  cmake -S . -B build-clang -G Ninja -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
    -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=OFF -DRINGGRAD_BUILD_BENCH=OFF
  step "build build-clang/"
  ninja -C build-clang -j "$jobs"
  # The suite but the tests that wait on timers or packaging (timeouts, dead ranks, malformed-input
  # limits, the install test), the multi-rank runs at np 3 and 4 that repeat np 2's code at more
  # ranks, the namespace cluster's runs (label cluster), which repeat the same code over TCP, and the
  # figures script (runs of the examples), the command lines (label cli: parsing that build/ runs)
  # and the interop tests (runs of the examples read back by Python): build/ ran them all. CI's
  # time goes to what a compiler can change.
  step "test build-clang/"
  ctest --test-dir build-clang --output-on-failure \
    -E 'timeout|deadrank|sigkill|created_alone|malformed|^install_|_np4$|^dist_np3$|np3_(staged_)?same_as_one_rank|^cluster_|^learn_figures$|^cli_|^interop_|^tools_plot_run$'
fi

# ---- 3. CUDA build (compile + link check; gpu tests skip without a device) -------------------------
if [[ -z "$(command -v nvcc || true)" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [[ "${RINGGRAD_SKIP_CUDA:-0}" == 1 ]]; then
  step "CUDA build skipped (RINGGRAD_SKIP_CUDA=1)"
elif command -v nvcc >/dev/null 2>&1; then
  step "configure build-cuda/ (CUDA, nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_CUDA=ON \
    -DRINGGRAD_BUILD_TESTS=ON -DRINGGRAD_BUILD_EXAMPLES=OFF -DRINGGRAD_BUILD_BENCH=OFF
  step "build build-cuda/"
  # The library (with the CUDA kernels) and the gpu tests; the CPU test suite already ran in build/.
  ninja -C build-cuda -j "$jobs" ringgrad test_cuda test_cuda_dist
  step "test build-cuda/ (gpu tests, install test)"
  ctest --test-dir build-cuda --output-on-failure -L gpu
  ctest --test-dir build-cuda --output-on-failure -R '^install_'
else
  step "CUDA build skipped: no nvcc on PATH or in /usr/local/cuda/bin"
fi

# ---- 4. sanitizers and fuzzers ---------------------------------------------------------------------
if [[ "${RINGGRAD_SKIP_SANITIZE:-0}" == 1 ]]; then
  step "sanitizer suite and fuzzers skipped (RINGGRAD_SKIP_SANITIZE=1)"
else
  bash scripts/sanitize.sh
fi

step "all tests passed"
