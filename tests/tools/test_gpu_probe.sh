#!/usr/bin/env bash
# tools/gpu_probe.sh against fake machine layouts, so that its search logic is checked before a GPU
# machine ever runs it: cuDNN and NCCL as Python wheels ship them (headers under
# site-packages/nvidia/*/include, only versioned libraries), a fake nvidia-smi reporting an H200, a
# machine without a GPU, and Open MPI unpacked from .debs without its mpirun link.
set -euo pipefail
probe="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/gpu_probe.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
expect() {  # expect NAME WANT GOT
  if [[ "$2" == "$3" ]]; then echo "ok   $1"; else echo "FAIL $1: want '$2', got '$3'"; failures=$((failures + 1)); fi
}

# A wheel layout: nvidia/cudnn and nvidia/nccl, versioned libraries only (two cuDNN versions: the
# higher wins), plus an unrelated nvidia/ package.
site="$tmp/site-packages"
mkdir -p "$site/nvidia/cudnn/include" "$site/nvidia/cudnn/lib" "$site/nvidia/nccl/include" "$site/nvidia/nccl/lib" \
  "$site/nvidia/cublas/include"
touch "$site/nvidia/cudnn/include/cudnn.h" "$site/nvidia/cudnn/lib/libcudnn.so.9" "$site/nvidia/cudnn/lib/libcudnn.so.8" \
  "$site/nvidia/cudnn/lib/libcudnn_ops.so.9" "$site/nvidia/nccl/include/nccl.h" "$site/nvidia/nccl/lib/libnccl.so.2" \
  "$site/nvidia/cublas/include/cublas_v2.h"
# A fake nvidia-smi answering the probe's query as the real one does for an H200.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'SMI'
#!/bin/sh
echo "NVIDIA H200, 9.0"
SMI
chmod +x "$tmp/bin/nvidia-smi"
empty="$tmp/empty"
mkdir -p "$empty"

# 1. GPU present, cuDNN / NCCL only as wheels (the system folders searched are empty).
RINGGRAD_PROBE_NVIDIA_SMI="$tmp/bin/nvidia-smi" RINGGRAD_PROBE_SYSTEM_DIRS="$empty" RINGGRAD_PY_SITE="$empty:$site" \
  bash "$probe" "$tmp/wheels.env" >"$tmp/wheels.txt"
(
  source "$tmp/wheels.env"
  expect "gpu seen" 1 "$PROBE_GPU"
  expect "gpu name" "NVIDIA H200" "$PROBE_GPU_NAME"
  expect "architecture from compute_cap 9.0" 90 "$PROBE_CUDA_ARCH"
  expect "cudnn headers from the wheel" "$site/nvidia/cudnn/include" "$PROBE_CUDNN_INCLUDE"
  expect "cudnn library: the highest versioned" "$site/nvidia/cudnn/lib/libcudnn.so.9" "$PROBE_CUDNN_LIBRARY"
  expect "nccl headers from the wheel" "$site/nvidia/nccl/include" "$PROBE_NCCL_INCLUDE"
  expect "nccl library" "$site/nvidia/nccl/lib/libnccl.so.2" "$PROBE_NCCL_LIBRARY"
  expect "library folders for LD_LIBRARY_PATH" "$site/nvidia/cudnn/lib:$site/nvidia/nccl/lib" "$PROBE_LIB_DIRS"
) || failures=$((failures + 1))

# 2. The toolkit's folders first: an unversioned library there wins over the wheel.
sys="$tmp/cuda"
mkdir -p "$sys/include" "$sys/lib64"
touch "$sys/include/cudnn.h" "$sys/lib64/libcudnn.so" "$sys/lib64/libcudnn.so.9"
RINGGRAD_PROBE_NVIDIA_SMI="$tmp/bin/nvidia-smi" RINGGRAD_PROBE_SYSTEM_DIRS="$sys" RINGGRAD_PY_SITE="$site" bash "$probe" "$tmp/sys.env" >/dev/null
(
  source "$tmp/sys.env"
  expect "cudnn beside the toolkit first" "$sys/lib64/libcudnn.so" "$PROBE_CUDNN_LIBRARY"
  expect "nccl still from the wheel" "$site/nvidia/nccl/lib/libnccl.so.2" "$PROBE_NCCL_LIBRARY"
) || failures=$((failures + 1))

# 3. No GPU (no nvidia-smi), nothing found: empty answers and the default architectures, never an error.
RINGGRAD_PROBE_NVIDIA_SMI="$empty/nvidia-smi" RINGGRAD_PROBE_SYSTEM_DIRS="$empty" RINGGRAD_PY_SITE="$empty" bash "$probe" "$tmp/none.env" >"$tmp/none.txt"
(
  source "$tmp/none.env"
  expect "no gpu" 0 "$PROBE_GPU"
  expect "default architectures" "80;90" "$PROBE_CUDA_ARCH"
  expect "no cudnn" "" "$PROBE_CUDNN_LIBRARY"
  expect "no nccl" "" "$PROBE_NCCL_LIBRARY"
) || failures=$((failures + 1))
grep -q "cudnn *(not found)" "$tmp/none.txt" && echo "ok   the report says what is missing" ||
  { echo "FAIL the report does not say cudnn is missing"; failures=$((failures + 1)); }

# 4. Open MPI unpacked from .debs: orterun without the mpirun link, found for gpu_check to link.
deps="$tmp/deps"
mkdir -p "$deps/usr/bin"
printf '#!/bin/sh\n' >"$deps/usr/bin/orterun"
chmod +x "$deps/usr/bin/orterun"
RINGGRAD_DEPS_PREFIX="$deps" RINGGRAD_PROBE_SYSTEM_DIRS="$empty" RINGGRAD_PY_SITE="$empty" \
  bash "$probe" "$tmp/mpi.env" >/dev/null
(
  source "$tmp/mpi.env"
  expect "not the mpirun on PATH, which is another MPI" "" "$PROBE_MPIRUN"
  expect "the unpacked launcher" "$deps/usr/bin/orterun" "$PROBE_MPI_LAUNCHER"
) || failures=$((failures + 1))

if ((failures)); then
  echo "test_gpu_probe: $failures failure(s)"
  exit 1
fi
echo "test_gpu_probe: all passed"
