#!/usr/bin/env bash
# Builds the CUDA configuration and runs the tests labelled `gpu`: CUDA kernels against the CPU ones.
# Meant for a machine with an NVIDIA GPU; without one the tests report "skipped".
#
#   tools/gpu_check.sh [extra cmake arguments...]
#
# Environment:
#   RINGGRAD_DEPS_PREFIX  a folder where the Debian packages the build needs were unpacked with
#                         `dpkg -x PACKAGE.deb "$RINGGRAD_DEPS_PREFIX"`, for a machine where they
#                         cannot be installed (libopenblas0-pthread, libopenblas-pthread-dev,
#                         libgfortran5, doctest-dev, zlib1g-dev, libopenmpi-dev, openmpi-bin, ...)
#   BUILD_DIR             build folder (default build-gpu)
#   JOBS                  parallel build jobs (default: all cores)
#   RINGGRAD_MPI          ON/OFF (default ON); OFF skips MPI, which the gpu tests do not need
#
# The summary table (test, status, time) is printed last. Exit status: ctest's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
cmake_args=(-G Ninja -DRINGGRAD_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_MPI="${RINGGRAD_MPI:-ON}"
            -DRINGGRAD_BUILD_TESTS=ON -DRINGGRAD_BUILD_EXAMPLES=OFF -DRINGGRAD_BUILD_BENCH=OFF)

step() { printf '\n==== %s\n' "$*"; }

if [[ -z "$(command -v nvcc || true)" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# ---- dependencies unpacked under a prefix --------------------------------------------------------
# dpkg -x runs no maintainer scripts, so the files land under $prefix/usr but still name /usr inside:
# pkg-config files get rewritten copies, OpenMPI's wrappers are relocated with OPAL_PREFIX, and the
# compiler, linker and loader are pointed at the prefix through their environment variables.
if [[ -n "${RINGGRAD_DEPS_PREFIX:-}" ]]; then
  usr="$(cd "$RINGGRAD_DEPS_PREFIX" && pwd)/usr"
  [[ -d "$usr" ]] || { echo "RINGGRAD_DEPS_PREFIX=$RINGGRAD_DEPS_PREFIX has no usr/ folder" >&2; exit 1; }
  arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  lib="$usr/lib/$arch"
  step "dependencies from $usr"

  pc_dir="$PWD/$build_dir/deps-pkgconfig"
  rm -rf "$pc_dir" && mkdir -p "$pc_dir"
  # First file of a name wins (sorted paths), e.g. openblas-pthread's openblas.pc.
  while IFS= read -r pc; do
    [[ -e "$pc_dir/$(basename "$pc")" ]] && continue
    sed -E "s#(^|[=[:space:]]|-I|-L)/usr(/|\$|[[:space:]])#\1$usr\2#g" "$pc" >"$pc_dir/$(basename "$pc")"
  done < <(find "$usr" -name '*.pc' | sort)
  export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export CMAKE_PREFIX_PATH="$usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"  # doctest, zlib
  export CPATH="$usr/include:$usr/include/$arch${CPATH:+:$CPATH}"
  lib_dirs="$lib:$lib/openblas-pthread:$lib/openmpi/lib"
  export LIBRARY_PATH="$lib_dirs${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [[ -e "$usr/bin/mpicxx.openmpi" ]]; then
    export OPAL_PREFIX="$usr" PATH="$usr/bin:$PATH"
    cmake_args+=(-DMPI_CXX_COMPILER="$usr/bin/mpicxx.openmpi")
  fi
fi

# Compile for the GPU that is here only (half the nvcc time of the default "80;90").
if nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi -L
  cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES=native)
else
  echo "no GPU visible (nvidia-smi -L failed): building for the default architectures; tests will skip"
fi

step "configure $build_dir"
start=$SECONDS
cmake -S . -B "$build_dir" "${cmake_args[@]}" "$@"
step "build $build_dir"
ninja -C "$build_dir" -j "$jobs"
build_time=$((SECONDS - start))

step "ctest -L gpu"
log="$build_dir/gpu_check.log"
set +e
ctest --test-dir "$build_dir" -L gpu --output-on-failure --no-tests=error 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# ---- summary, last --------------------------------------------------------------------------------
# From ctest's result lines: "1/1 Test #1: test_cuda ........   Passed    2.31 sec" (or ***Failed,
# ***Skipped, ***Timeout, ***Exception: SegFault ...).
step "summary (configure + build ${build_time} s; ctest exit status $status)"
awk '
  BEGIN { printf "%-32s %-24s %10s\n", "test", "status", "time" }
  / Test +#[0-9]+: / {
    for (i = 1; i <= NF; i++) if ($i ~ /^#[0-9]+:$/) break
    name = $(i + 1); first = i + 2
    while (first <= NF && $first ~ /^\.+$/) first++
    state = ""
    for (j = first; j <= NF - 2; j++) state = state (state == "" ? "" : " ") $j
    sub(/^[.*]+/, "", state)  # "...***Failed" when the dots run into the status
    printf "%-32s %-24s %8s s\n", name, state, $(NF - 1)
  }' "$log"
exit "$status"
