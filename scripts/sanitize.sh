#!/usr/bin/env bash
# The checking build: clang with AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer
# targets of tests/fuzz, in build-sanitize/. Runs the whole suite under the sanitizers (any report
# fails its test), then each fuzz target for FUZZ_SECONDS (any finding fails it). docs/reliability.md.
#
#   scripts/sanitize.sh                      # build, suite, every fuzz target 30 s
#   FUZZ_SECONDS=600 scripts/sanitize.sh --fuzz-only      # fuzz longer, skip the suite
#   scripts/sanitize.sh --suite-only         # the suite under the sanitizers, no fuzzing
#
# A target can also run by hand, for as long as wanted, from its seeds:
#   build-sanitize/tests/fuzz/fuzz_idx -timeout=1 -rss_limit_mb=2048 -jobs=2 /tmp/found tests/fuzz/corpus/idx
# A crash input it saves becomes a regression: copy it into tests/fuzz/regressions/<target>/.
#
# Environment: JOBS (default 2); FUZZ_SECONDS (default 10); CTEST_PARALLEL_LEVEL is honoured.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-2}
fuzz_seconds=${FUZZ_SECONDS:-10}
run_suite=1
run_fuzz=1
case "${1:-}" in
  "") ;;
  --fuzz-only) run_suite=0 ;;
  --suite-only) run_fuzz=0 ;;
  *) echo "usage: scripts/sanitize.sh [--fuzz-only | --suite-only]" >&2; exit 2 ;;
esac

export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash scripts/setup.sh --sanitize

# Every report ends the process with a failure; leaks made by MPI's own libraries (allocated once,
# never freed by design) are suppressed, nothing of ringgrad's.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0"

step() { printf "\n==== %s  [%s, %d s since the start]\n" "$*" "$(date +%T)" "$SECONDS"; }

# Release, so that the vector kernels are the shipped ones (RINGGRAD_ISA_FLAGS); RINGGRAD_SANITIZE
# adds -O2 -g -UNDEBUG (CMakeLists.txt).
step "configure build-sanitize/ (clang, address + undefined, libFuzzer targets)"
cmake -S . -B build-sanitize -G Ninja \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=Release \
  -DRINGGRAD_SANITIZE=address,undefined -DRINGGRAD_FUZZ=ON -DRINGGRAD_FUZZ_SECONDS="$fuzz_seconds" \
  -DRINGGRAD_TEST_TIMEOUT_SCALE=4 -DRINGGRAD_CUDA=OFF -DRINGGRAD_BUILD_BENCH=OFF
step "build build-sanitize/"
ninja -C build-sanitize -j "$jobs"

if [[ $run_suite == 1 ]]; then
  # The install test builds a consumer without the sanitizer flags: it checks packaging, not memory.
  # Left out too, to keep CI within its time (under the sanitizers they took 7.5 of 16 minutes): the
  # runs that repeat, at larger sizes, code the suite runs here anyway -- np 4 (np 2 and 3 run),
  # the timeouts at np 3 (np 2 runs), the residual network's 40 steps (its layers and DDP's buffer
  # broadcast have tests of their own), and the comparisons of an example with one process, which
  # test numbers, not memory (their collectives run here in dist_staged_* and example_*_np*), the
  # whole dist suite at np 3 (its DDP, ZeRO and checkpoint cases run at np 3 in dist_staged_np3, and
  # every case at np 2), the namespace cluster's runs (label cluster: the same code over TCP), and
  # the two exhaustive GEMM sweeps against a triple loop (2 minutes under the sanitizers; their
  # kernels run here in the suite's other GEMM, layer and training tests), the MNIST example at
  # np 3 (its np 2 runs, and dist_staged_np3 runs DDP and ZeRO at np 3), the ladder's rungs at np 3
  # (np 2 runs), the figures script (runs of the examples that run here already), MNIST's ZeRO-2
  # with an FP8 reduce-scatter (its collective runs here in dist_np*), the command lines (label cli:
  # the examples' flags are fuzzed here, fuzz_*_cli) and the interop tests (runs of the examples read
  # back by Python; the files' parsers run here in the suite and in fuzz_safetensors).
  step "test build-sanitize/ (the suite under ASan + UBSan)"
  ctest --test-dir build-sanitize --output-on-failure -LE 'fuzz|cluster' \
    -E '^install_|_np4$|^dist_np3$|^dist_timeout_np3$|^example_mnist_(resnet_np2|np3|zero2_np3)$|same_as_one_rank|^(tiled_sgemm|bf16_gemm) matches|^learn_figures$|^learn_ladder_[0-9]_np3$|^example_mnist_zero2_fp8_np2$|^cli_|^interop_|^tools_plot_run$'
fi
if [[ $run_fuzz == 1 ]]; then
  step "fuzz build-sanitize/ (${fuzz_seconds} s per target)"
  ctest --test-dir build-sanitize --output-on-failure -L fuzz
fi
step "sanitizers and fuzzers: no finding"
