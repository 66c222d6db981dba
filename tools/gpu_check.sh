#!/usr/bin/env bash
# The GPU check: one command that fits one device call (about 5 minutes, build included), for the lent GPU
# machine as it is (CUDA's compiler, CMake, ninja and PyTorch installed; cuDNN and NCCL only as
# Python wheels; Debian packages carried as .debs). Every line goes to $OUT/gpu_check.log as it is
# printed, and a summary of the steps so far is printed and written to $OUT/summary.txt after each
# step, so a time-out still returns what was learned.
#
#   RINGGRAD_DEPS_DEBS=gpu-deps tools/gpu_check.sh [extra cmake arguments...]
#
# Steps, each with its own time limit (cut to what is left of the budget):
#   1. deps       unpack the .debs, link Open MPI's launcher (dpkg -x makes no mpirun), list the
#                 carried libraries' unresolved dependencies (ldd)
#   2. probe      tools/gpu_probe.sh: the GPU and its architecture, nvcc, cuDNN / NCCL (beside the
#                 toolkit, or Python's nvidia/ wheels), mpirun, compute-sanitizer, PyTorch on CUDA
#   3. configure, build   only what the steps run, for the GPU's architecture only
#   4. correctness        test_cuda (every CUDA kernel against the CPU's); test_cuda_dist with one
#                         rank (nccl) and with two ranks on one GPU (the MPI backends' staging)
#   5. multi-rank         what users run: both examples under mpirun -np 2 --device cuda on 'ring',
#                         'mpi' and 'hierarchical' (two ranks share the GPU through host staging),
#                         each against one process on the global batch (tools/same_as_one_rank.sh,
#                         the CPU tests' tolerances); 'nccl' at world size 1, and refused with a clear
#                         error when two ranks share the GPU; a GPU checkpoint resumed (plain and
#                         ZeRO-2 -> ZeRO-1) against the run that never stopped
#                         (tests/dist/gpt_mini_check.cmake, within TOLERANCE: the GPU's atomics
#                         make its sums order-dependent); gpt_mini --checkpoint-activations against
#                         the run without (tests/dist/checkpoint_activations_check.sh)
#   6. memcheck           compute-sanitizer --tool memcheck on a subset of test_cuda
#   7. throughput         MNIST CNN samples/s and GPT-mini tokens/s (fp32, bf16) on one GPU, then
#                         PyTorch on the same GPU for the same workloads, eager and torch.compile'd
#                         (tools/torch_gpu_peer.py)
#   8. real readers       the image's tensorboard (EventAccumulator) and safetensors packages read a
#                         short GPT-mini run's log and --export as ringgrad's own readers do
#                         (tests/interop/check_real_readers.py; CI's machines have neither package)
#
# Environment:
#   RINGGRAD_DEPS_DEBS    a folder of .deb files (tools/gpu_deps.sh fetches them): each is unpacked
#                         with dpkg -x into build-gpu-deps/, which then serves as RINGGRAD_DEPS_PREFIX
#   RINGGRAD_DEPS_PREFIX  a folder where the Debian packages the build needs were unpacked with
#                         `dpkg -x PACKAGE.deb "$RINGGRAD_DEPS_PREFIX"`
#   OUT                   where the log, the summary and each step's output go (default
#                         BUILD_DIR/out); the device tool returns what is under its $OUT
#   GPU_CHECK_SECONDS     the budget (default 420); a step that would start with under 10 s left is
#                         recorded as NOT RUN, which fails the check
#   BUILD_DIR             build folder (default build-gpu)
#   JOBS                  parallel build jobs (default: all cores)
#   MNIST_DATA, FORTUNES  the training data (default: the Debian packages' folders, under
#                         RINGGRAD_DEPS_PREFIX when it is set)
#
# Exit status: 0 when every step ran and passed (steps skipped for want of a GPU or mpirun count as
# passed; a step the budget left no time for does not).
set -uo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD

build_dir=${BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
budget=${GPU_CHECK_SECONDS:-420}
out=${OUT:-$repo/$build_dir/out}
mkdir -p "$out" "$build_dir"
log="$out/gpu_check.log"
summary="$out/summary.txt"
: >"$log"
: >"$summary"
exec > >(tee -a "$log") 2>&1
status=0
echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), budget ${budget}s"

# record NAME STATUS SECONDS FIGURE: one summary line, then the summary so far.
record() {
  printf '%-26s %-22s %5ss  %s\n' "$1" "$2" "$3" "$4" >>"$summary"
  # "skipped" is a step without what it needs (no GPU, no mpirun); a step the budget left no time
  # for is "NOT RUN" and fails the check, which must show every step passing.
  case $2 in ok* | skipped*) ;; *) status=1 ;; esac
  printf '\n---- summary after %s (%ss of %ss used)\n' "$1" "$SECONDS" "$budget"
  cat "$summary"
}

# run_step NAME LIMIT PATTERN CMD...: runs CMD under `timeout` (LIMIT, or what is left of the budget),
# its output to the log and to $out/NAME.log; PATTERN (grep -E) picks the summary's figure, the last
# matching line. Exit 77 is a skip (a test without a device).
run_step() {
  local name=$1 limit=$2 pattern=$3
  shift 3
  local left=$((budget - SECONDS))
  if ((left < 10)); then
    record "$name" "NOT RUN: out of time" 0 ""
    return 0
  fi
  ((limit > left)) && limit=$left
  printf '\n==== %s (limit %ss): %s\n' "$name" "$limit" "$*"
  local started=$SECONDS rc figure=""
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  [[ -n $pattern ]] && figure=$(grep -E "$pattern" "$out/$name.log" | tail -n 1 | cut -c1-120)
  case $rc in
    0) record "$name" ok $((SECONDS - started)) "$figure" ;;
    77) record "$name" "skipped (no device)" $((SECONDS - started)) "$figure" ;;
    124 | 137) record "$name" "TIMEOUT after ${limit}s" $((SECONDS - started)) "$figure" ;;
    *) record "$name" "FAILED (exit $rc)" $((SECONDS - started)) "$figure" ;;
  esac
  return "$rc"
}

cmake_args=(-G Ninja -DRINGGRAD_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DRINGGRAD_MPI=ON
            -DRINGGRAD_BUILD_TESTS=ON -DRINGGRAD_BUILD_EXAMPLES=ON -DRINGGRAD_BUILD_BENCH=OFF)

# ---- 1. deps ----------------------------------------------------------------------------------------
started=$SECONDS
if [[ -n "${RINGGRAD_DEPS_DEBS:-}" ]]; then
  export RINGGRAD_DEPS_PREFIX="$repo/build-gpu-deps"
  echo "unpacking $(ls "$RINGGRAD_DEPS_DEBS"/*.deb | wc -l) .deb files into $RINGGRAD_DEPS_PREFIX"
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
  echo "dependencies from $usr"

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
    # ringgrad links MPI's C bindings (MPI::MPI_C); the C++ wrapper is named for the test programs.
    cmake_args+=(-DMPI_C_COMPILER="$usr/bin/mpicc.openmpi" -DMPI_CXX_COMPILER="$usr/bin/mpicxx.openmpi")
  fi
fi

missing_libs=""
if [[ -n "${RINGGRAD_DEPS_PREFIX:-}" ]]; then
  # What the carried binaries and libraries need that neither they nor the machine provide.
  missing_libs=$(find "$usr/bin" "$lib" -maxdepth 3 \( -name 'orterun' -o -name 'prterun' -o -name 'lib*.so*' \) \
                   -type f 2>/dev/null | xargs -r ldd 2>/dev/null | awk '/not found/ { print $1 }' | sort -u | tr '\n' ' ')
  [[ -n $missing_libs ]] && echo "unresolved by the carried .debs and the machine: $missing_libs"
fi
record deps "$([[ -z $missing_libs ]] && echo ok || echo "ok, libraries missing")" $((SECONDS - started)) \
  "${missing_libs:+missing: $missing_libs}"

# ---- 2. probe ---------------------------------------------------------------------------------------
started=$SECONDS
bash tools/gpu_probe.sh "$out/probe.env"
source "$out/probe.env"
[[ -n $PROBE_NVCC && -z "$(command -v nvcc || true)" ]] && export PATH="$(dirname "$PROBE_NVCC"):$PATH"
if [[ -z $PROBE_MPIRUN && -n $PROBE_MPI_LAUNCHER ]]; then  # the links dpkg's scripts would have made
  mkdir -p "$build_dir/bin"
  ln -sf "$PROBE_MPI_LAUNCHER" "$build_dir/bin/mpirun"
  ln -sf "$PROBE_MPI_LAUNCHER" "$build_dir/bin/mpiexec"
  PROBE_MPIRUN="$repo/$build_dir/bin/mpirun"
  export PATH="$repo/$build_dir/bin:$PATH"
  echo "linked $PROBE_MPI_LAUNCHER as $PROBE_MPIRUN"
fi
[[ -n $PROBE_MPIRUN ]] && cmake_args+=(-DMPIEXEC_EXECUTABLE="$PROBE_MPIRUN")
cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES="$PROBE_CUDA_ARCH")
[[ -n $PROBE_CUDNN_LIBRARY ]] && cmake_args+=(-DRINGGRAD_CUDNN_INCLUDE_DIR="$PROBE_CUDNN_INCLUDE"
                                              -DRINGGRAD_CUDNN_LIBRARY="$PROBE_CUDNN_LIBRARY")
[[ -n $PROBE_NCCL_LIBRARY ]] && cmake_args+=(-DRINGGRAD_NCCL_INCLUDE_DIR="$PROBE_NCCL_INCLUDE"
                                             -DRINGGRAD_NCCL_LIBRARY="$PROBE_NCCL_LIBRARY")
[[ -n $PROBE_LIB_DIRS ]] && export LD_LIBRARY_PATH="$PROBE_LIB_DIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
record probe ok $((SECONDS - started)) "gpu ${PROBE_GPU_NAME:-none}, arch $PROBE_CUDA_ARCH, cudnn ${PROBE_CUDNN_LIBRARY:-MISSING}, nccl ${PROBE_NCCL_LIBRARY:-MISSING}, mpirun ${PROBE_MPIRUN:-none}"

# ---- 3. configure, build ------------------------------------------------------------------------------
targets=(test_cuda mnist gpt_mini)
[[ -n $PROBE_MPIRUN ]] && targets+=(test_cuda_dist)
run_step configure 120 "CUDA backend|cuDNN" cmake -S . -B "$build_dir" "${cmake_args[@]}" "$@" || {
  echo "gpu_check: configure failed; nothing else can run"
  exit 1
}
run_step build 300 "" ninja -C "$build_dir" -j "$jobs" "${targets[@]}" || {
  echo "gpu_check: build failed; nothing else can run"
  exit 1
}

# ---- 4. correctness -----------------------------------------------------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_step test_cuda 150 "test cases|assertions" "$build_dir/tests/cuda/test_cuda"
if [[ -x $build_dir/tests/cuda/test_cuda_dist ]]; then
  run_step test_cuda_dist_np1 45 "test cases" "$build_dir/tests/cuda/test_cuda_dist"
  run_step test_cuda_dist_np2 60 "test cases" "$PROBE_MPIRUN" -np 2 --oversubscribe "$build_dir/tests/cuda/test_cuda_dist"
else
  record test_cuda_dist "skipped: no mpirun" 0 ""
fi

# ---- 5. multi-rank, as users run it -------------------------------------------------------------------
data_root="${RINGGRAD_DEPS_PREFIX:+$(cd "$RINGGRAD_DEPS_PREFIX" && pwd)}"
mnist_data=${MNIST_DATA:-$data_root/usr/share/datasets/fashion-mnist}
fortunes=${FORTUNES:-$data_root/usr/share/games/fortunes}
tiny_gpt=(--data "$fortunes/computers" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --warmup 5
          --lr-decay-steps 20 --max-steps 20 --eval-every 20 --eval-batches 2)
if [[ $PROBE_GPU != 1 || -z $PROBE_MPIRUN ]]; then
  record multi_rank "skipped: $([[ $PROBE_GPU == 1 ]] && echo "no mpirun" || echo "no GPU")" 0 ""
else
  export MPIRUN=$PROBE_MPIRUN
  for backend in ring mpi hierarchical; do
    run_step "mnist_np2_$backend" 45 "parameter norm" bash tools/same_as_one_rank.sh mnist \
      "$build_dir/examples/mnist" 2 32 --device cuda --backend "$backend" --model mlp --limit-steps 40 --data "$mnist_data"
    run_step "gpt_mini_np2_$backend" 45 "parameter norm" bash tools/same_as_one_rank.sh gpt_mini \
      "$build_dir/examples/gpt_mini" 2 4 --device cuda --backend "$backend" "${tiny_gpt[@]}"
  done
  run_step mnist_np2_ring_cnn_zero2 45 "parameter norm" bash tools/same_as_one_rank.sh mnist \
    "$build_dir/examples/mnist" 2 32 --device cuda --backend ring --model cnn --zero 2 --limit-steps 20 --data "$mnist_data"
  run_step nccl_np1 45 "test accuracy" "$build_dir/examples/mnist" --device cuda --backend nccl --model mlp \
    --limit-steps 40 --data "$mnist_data"
  # Two ranks on one GPU: nccl must refuse on every rank, naming both -- not hang.
  run_step nccl_np2_refused 45 "refused" bash -c '
    "$1" -np 2 --oversubscribe "$2" --device cuda --backend nccl --limit-steps 5 --data "$3" 2>&1 | tee "$4"
    rc=${PIPESTATUS[0]}
    if [[ $rc != 0 ]] && grep -q "would both drive one GPU" "$4"; then
      echo "refused: exit $rc, the error names both ranks"
      exit 0
    fi
    echo "expected a failure naming both ranks, got exit $rc"
    exit 1' _ "$PROBE_MPIRUN" "$build_dir/examples/mnist" "$mnist_data" "$out/nccl_np2_output.txt"
  # ZeRO stage 3 on the GPU: units gathered and released in cached device memory, prefetches on the
  # communication path; the result of one process with the global batch.
  run_step gpt_mini_np2_ring_zero3 45 "parameter norm" bash tools/same_as_one_rank.sh gpt_mini \
    "$build_dir/examples/gpt_mini" 2 4 --device cuda --backend ring --zero 3 --checkpoint-activations "${tiny_gpt[@]}"
  # --checkpoint-activations trains as without it (within the atomics' rounding) with fewer activations.
  run_step gpt_mini_np2_checkpoint_activations 60 "with:" env TOLERANCE=1e-4 \
    bash tests/dist/checkpoint_activations_check.sh "$PROBE_MPIRUN" -np 2 "$build_dir/examples/gpt_mini" \
    --device cuda --precision fp16 "${tiny_gpt[@]}"
  run_step gpu_resume_np2 90 "" cmake "-DMPIRUN=$PROBE_MPIRUN;-np;2;--oversubscribe" \
    "-DGPT=$build_dir/examples/gpt_mini" "-DDATA=$fortunes/computers" "-DWORK=$build_dir/gpu_resume" \
    "-DEXTRA=--device;cuda" -DTOLERANCE=1e-4 -P tests/dist/gpt_mini_check.cmake
fi

# ---- 6. memcheck ---------------------------------------------------------------------------------------
if [[ $PROBE_GPU == 1 && -n $PROBE_SANITIZER ]]; then
  run_step memcheck 45 "ERROR SUMMARY|test cases" "$PROBE_SANITIZER" --tool memcheck --error-exitcode 1 \
    "$build_dir/tests/cuda/test_cuda" -tc="copies*,binary ops*,sum, mean and max*,matmul*,*caching allocator*"
else
  record memcheck "skipped: $([[ $PROBE_GPU == 1 ]] && echo "no compute-sanitizer" || echo "no GPU")" 0 ""
fi

# ---- 7. throughput ---------------------------------------------------------------------------------------
if [[ $PROBE_GPU != 1 ]]; then
  record throughput "skipped: no GPU" 0 ""
else
  if [[ -d $mnist_data ]]; then
    run_step cnn_fp32 30 "samples/s" "$build_dir/examples/mnist" --device cuda --model cnn --data "$mnist_data" \
      --limit-steps 400
  else
    record cnn_fp32 "FAILED: no data" 0 "no Fashion-MNIST at $mnist_data (MNIST_DATA)"
  fi
  if [[ -e $fortunes ]]; then
    for precision in fp32 bf16; do
      run_step "gpt_mini_$precision" 30 "tokens/s" "$build_dir/examples/gpt_mini" --device cuda --data "$fortunes" \
        --max-steps 150 --eval-every 150 --eval-batches 5 --log-every 50 --precision "$precision"
    done
  else
    record gpt_mini "FAILED: no data" 0 "no fortunes at $fortunes (FORTUNES)"
  fi
  if [[ $PROBE_TORCH_CUDA == 1 ]]; then
    run_step torch_peer 120 "RESULT" python3 tools/torch_gpu_peer.py --mnist "$mnist_data" --fortunes "$fortunes" \
      --steps 100 --warmup 10 --modes eager,compiled
    grep -E '^RESULT' "$out/torch_peer.log" >>"$summary"
  else
    record torch_peer "skipped: no PyTorch on CUDA" 0 ""
  fi
fi

# ---- 8. the ecosystem's readers ----------------------------------------------------------------------
# On the CPU: what is checked is the files, which do not depend on the device that trained.
if [[ -e $fortunes ]]; then
  run_step real_readers 90 "^tensorboard|^safetensors|not installed" python3 tests/interop/check_real_readers.py \
    "$build_dir/examples/gpt_mini" "$fortunes/computers" "$build_dir/real_readers"
else
  record real_readers "FAILED: no data" 0 "no fortunes at $fortunes (FORTUNES)"
fi

printf '\n==== gpu_check done in %ss, exit status %s; log %s\n' "$SECONDS" "$status" "$log"
exit "$status"
