#!/usr/bin/env bash
# Installs the Debian packages ringgrad builds against. Idempotent: when every package is already
# installed it touches nothing (no apt-get update, no network). Uses sudo only when not root.
#
#   scripts/setup.sh            what the build, the tests and the examples need
#   scripts/setup.sh --bench    also the benchmark suite's peer and chart (bench/run.sh):
#                               python3-torch (PyTorch 1.13, CPU) and python3-matplotlib
#   scripts/setup.sh --interop  also python3-torch, in which the interop tests load ringgrad's
#                               exports (scripts/test.sh installs it; without it they are skipped)
#   scripts/setup.sh --sanitize also clang 14 with its sanitizer and libFuzzer runtimes
#                               (scripts/sanitize.sh)
#   scripts/setup.sh --clang    also clang 16, the second compiler scripts/test.sh builds with
#
# The CUDA toolkit is not a Debian package here; the build finds it at /usr/local/cuda when present
# (RINGGRAD_CUDA=AUTO) and builds without it otherwise.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

packages=(
  build-essential   # gcc/g++ 12, make
  cmake             # >= 3.25
  ninja-build
  pkg-config        # finds OpenBLAS (pkg_check_modules)
  libopenblas-dev   # CPU GEMM
  libopenmpi-dev    # dist/ MPI backend
  openmpi-bin       # mpirun for the multi-rank tests
  zlib1g-dev        # compressed datasets and checkpoints
  doctest-dev       # the test framework
  libcli11-dev      # command-line parsing in examples/ (header-only)
  clang-format-14   # the format check (scripts/lint.sh)
  python3           # tools/check_citations.py (the docs_citations test)
  protobuf-compiler python3-protobuf  # the TensorBoard event files' reader (test interop_tensorboard_events)
  gnuplot-nox       # learn/figures.sh's pictures (the learn_figures test), the benchmarks' charts
  dataset-fashion-mnist  # the MNIST example's default data (/usr/share/datasets/fashion-mnist)
  fortunes               # the GPT-mini corpus (/usr/share/games/fortunes)
)

case "${1:-}" in
  "") ;;
  --bench) packages+=(python3-torch python3-matplotlib) ;;
  --interop) packages+=(python3-torch) ;;  # scripts/test.sh: PyTorch reads the exports (interop_*_torch)
  --sanitize) packages+=(clang-14 libclang-rt-14-dev) ;;  # scripts/sanitize.sh: ASan, UBSan, libFuzzer
  --clang) packages+=(clang-16) ;;  # scripts/test.sh: the Release build with a second compiler
  *) echo "usage: scripts/setup.sh [--bench | --interop | --sanitize | --clang]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
