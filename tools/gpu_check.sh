#!/usr/bin/env bash
# Builds the CUDA configuration, runs the tests labelled `gpu` (every CUDA kernel against the CPU's,
# GPT-mini and CNN training steps, DDP on the GPU under mpirun), then trains on the GPU: the MNIST MLP
# for one epoch, GPT-mini for 200 steps in f32 and in bf16, and, when mpirun is there, 2 ranks
# sharing the GPU through the MPI backend. One summary table comes last.
# Meant for a machine with an NVIDIA GPU; without one the tests report "skipped" and the runs are
# left out.
#
#   tools/gpu_check.sh [extra cmake arguments...]
#
# Environment:
#   RINGGRAD_DEPS_DEBS    a folder of .deb files (tools/gpu_deps.sh fetches them): each is unpacked
#                         with dpkg -x into build-gpu-deps/, which then serves as RINGGRAD_DEPS_PREFIX
#   RINGGRAD_DEPS_PREFIX  a folder where the Debian packages the build needs were unpacked with
#                         `dpkg -x PACKAGE.deb "$RINGGRAD_DEPS_PREFIX"`, for a machine where they
#                         cannot be installed (libopenblas0-pthread, libopenblas-pthread-dev,
#                         libgfortran5, doctest-dev, zlib1g-dev, libopenmpi-dev, openmpi-bin, ...)
#   BUILD_DIR             build folder (default build-gpu)
#   JOBS                  parallel build jobs (default: all cores)
#   RINGGRAD_MPI          ON/OFF (default ON); OFF skips MPI (and the DDP test and 2-rank run)
#   MNIST_DATA, FORTUNES  the data of the training runs (default: the Debian packages' folders, under
#                         RINGGRAD_DEPS_PREFIX when it is set: dataset-fashion-mnist, fortunes)
#
# The summary table (test, status, time) is printed last. Exit status: ctest's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
cmake_args=(-G Ninja -DRINGGRAD_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_MPI="${RINGGRAD_MPI:-ON}"
            -DRINGGRAD_BUILD_TESTS=ON -DRINGGRAD_BUILD_EXAMPLES=ON -DRINGGRAD_BUILD_BENCH=OFF)

step() { printf '\n==== %s\n' "$*"; }

if [[ -z "$(command -v nvcc || true)" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

if [[ -n "${RINGGRAD_DEPS_DEBS:-}" ]]; then
  export RINGGRAD_DEPS_PREFIX="$PWD/build-gpu-deps"
  step "unpacking $(ls "$RINGGRAD_DEPS_DEBS"/*.deb | wc -l) .deb files into $RINGGRAD_DEPS_PREFIX"
  mkdir -p "$RINGGRAD_DEPS_PREFIX"
  for deb in "$RINGGRAD_DEPS_DEBS"/*.deb; do dpkg -x "$deb" "$RINGGRAD_DEPS_PREFIX"; done
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
have_gpu=0
if nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi -L
  have_gpu=1
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

# ---- training on the GPU ---------------------------------------------------------------------------
# Each run appends "name|status|figure" to $runs; a failed run sets the exit status but the others
# still run.
runs="$build_dir/gpu_runs.txt"
: >"$runs"
data_root="${RINGGRAD_DEPS_PREFIX:+$(cd "$RINGGRAD_DEPS_PREFIX" && pwd)}"
mnist_data=${MNIST_DATA:-$data_root/usr/share/datasets/fashion-mnist}
fortunes=${FORTUNES:-$data_root/usr/share/games/fortunes}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# run NAME PATTERN COMMAND...: runs it (its output in $build_dir/NAME.log) and records the last line
# matching PATTERN as the figure.
run() {
  local name=$1 pattern=$2
  shift 2
  step "$name: $*"
  local started=$SECONDS
  timeout 300 "$@" >"$build_dir/$name.log" 2>&1
  local rc=$?
  tail -n 5 "$build_dir/$name.log"
  local figure
  figure=$(grep -E "$pattern" "$build_dir/$name.log" | tail -n 1 | cut -c1-110)
  if [[ $rc == 0 ]]; then
    echo "$name|ok ($((SECONDS - started)) s)|$figure" >>"$runs"
  else
    echo "$name|FAILED (exit $rc)|$figure" >>"$runs"
    status=1
  fi
}
if [[ $have_gpu == 1 && -x "$build_dir/examples/mnist" ]]; then
  if [[ -d "$mnist_data" ]]; then
    run mnist_mlp_1_epoch "samples/s|accuracy" "$build_dir/examples/mnist" --device cuda --data "$mnist_data" --epochs 1
  else
    echo "mnist_mlp_1_epoch|not run|no data at $mnist_data (MNIST_DATA)" >>"$runs"
  fi
  if [[ -e "$fortunes" ]]; then
    for precision in fp32 bf16; do
      run "gpt_mini_200_steps_$precision" "tokens/s|validation loss" "$build_dir/examples/gpt_mini" --device cuda \
        --data "$fortunes" --max-steps 200 --eval-every 200 --eval-batches 10 --log-every 50 --precision "$precision"
    done
  else
    echo "gpt_mini_200_steps|not run|no data at $fortunes (FORTUNES)" >>"$runs"
  fi
  if command -v mpirun >/dev/null 2>&1 && [[ -d "$mnist_data" ]]; then
    run mnist_2_ranks_one_gpu "samples/s" mpirun -np 2 --oversubscribe "$build_dir/examples/mnist" --device cuda \
      --data "$mnist_data" --limit-steps 200 --backend ring
  fi
fi
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
if [[ -s "$runs" ]]; then
  printf '\n%-28s %-18s %s\n' "run" "status" "figure (last matching line)"
  while IFS='|' read -r name state figure; do printf '%-28s %-18s %s\n' "$name" "$state" "$figure"; done <"$runs"
fi
exit "$status"
