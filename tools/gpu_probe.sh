#!/usr/bin/env bash
# What a GPU machine has, found the way tools/gpu_check.sh needs it: the GPU and its architecture,
# nvcc, cuDNN 9 and NCCL 2 (beside the toolkit, in the system folders, or as Python wheels), an MPI
# launcher, compute-sanitizer, and a python3 with PyTorch on CUDA. Starts nothing on the GPU.
#
#   tools/gpu_probe.sh [ENV_FILE]
#
# Prints a report; with ENV_FILE also writes shell assignments that gpu_check.sh sources:
#   PROBE_GPU             1 when nvidia-smi lists a GPU, else 0
#   PROBE_GPU_NAME        e.g. "NVIDIA H200"
#   PROBE_CUDA_ARCH       CMAKE_CUDA_ARCHITECTURES: the GPU's (e.g. 90 for compute capability 9.0),
#                         "80;90" without a GPU
#   PROBE_NVCC            nvcc's path, or empty
#   PROBE_CUDNN_INCLUDE, PROBE_CUDNN_LIBRARY, PROBE_NCCL_INCLUDE, PROBE_NCCL_LIBRARY
#                         the header folder and the library file (an unversioned .so if there is one,
#                         else the versioned one a wheel ships, e.g. libcudnn.so.9), or empty
#   PROBE_LIB_DIRS        the libraries' folders, ':'-separated, for LD_LIBRARY_PATH
#   PROBE_MPIRUN          a runnable mpirun / mpiexec (under RINGGRAD_DEPS_PREFIX when that is set,
#                         since the build then links that MPI), or empty
#   PROBE_MPI_LAUNCHER    where there is none: Open MPI's launcher under RINGGRAD_DEPS_PREFIX
#                         (orterun / mpirun.openmpi, unpacked from .debs without the links that
#                         dpkg's scripts would make), or empty
#   PROBE_SANITIZER       compute-sanitizer's path, or empty
#   PROBE_TORCH_CUDA      1 when python3 imports torch and torch.cuda.is_available(), else 0
#
# Where it looks for cuDNN and NCCL, in order: RINGGRAD_PROBE_SYSTEM_DIRS (default: CUDA_HOME,
# /usr/local/cuda, nvcc's parent folder, /usr), then the nvidia/ folders of Python's site-packages
# (RINGGRAD_PY_SITE, ':'-separated, overrides python3's list: the probe's test points both at fake
# layouts). Wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) put headers under
# site-packages/nvidia/*/include and only versioned libraries under .../lib.
set -uo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

env_file=${1:-}

# ---- the GPU --------------------------------------------------------------------------------------
gpu=0 gpu_name="" arch="80;90"
smi=${RINGGRAD_PROBE_NVIDIA_SMI:-nvidia-smi}  # the test's fake, else the real one
if command -v "$smi" >/dev/null 2>&1; then
  line=$("$smi" --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
  if [[ -n $line ]]; then
    gpu=1
    gpu_name=${line%,*}
    cap=${line##*,}
    cap=${cap// /}
    [[ $cap =~ ^[0-9]+\.[0-9]+$ ]] && arch=${cap/./}
  fi
fi

nvcc=$(command -v nvcc 2>/dev/null || true)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc

# ---- cuDNN and NCCL -------------------------------------------------------------------------------
if [[ -n ${RINGGRAD_PROBE_SYSTEM_DIRS+set} ]]; then
  IFS=: read -r -a system_dirs <<<"$RINGGRAD_PROBE_SYSTEM_DIRS"
else
  system_dirs=()
  [[ -n ${CUDA_HOME:-} ]] && system_dirs+=("$CUDA_HOME")
  system_dirs+=(/usr/local/cuda)
  [[ -n $nvcc ]] && system_dirs+=("$(dirname "$(dirname "$nvcc")")")
  system_dirs+=(/usr)
fi
if [[ -n ${RINGGRAD_PY_SITE+set} ]]; then
  IFS=: read -r -a py_sites <<<"$RINGGRAD_PY_SITE"
else
  mapfile -t py_sites < <(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
fi

# best_library DIR STEM: DIR/STEM.so if present, else the highest-versioned DIR/STEM.so.N*.
best_library() {
  local dir=$1 stem=$2
  if [[ -e $dir/$stem.so ]]; then echo "$dir/$stem.so"; return; fi
  find "$dir" -maxdepth 1 -name "$stem.so.*" 2>/dev/null | sort -V | tail -n 1
}

# find_package_files HEADER STEM: sets found_include and found_library.
find_package_files() {
  local header=$1 stem=$2 root lib dir
  found_include="" found_library=""
  for root in "${system_dirs[@]}"; do
    [[ -n $root && -e $root/include/$header ]] || continue
    for lib in "$root/lib64" "$root/lib" "$root/lib/x86_64-linux-gnu" "$root/targets/x86_64-linux/lib"; do
      local candidate
      candidate=$(best_library "$lib" "$stem")
      if [[ -n $candidate ]]; then
        found_include="$root/include" found_library=$candidate
        return
      fi
    done
  done
  for root in "${py_sites[@]}"; do
    [[ -n $root && -d $root/nvidia ]] || continue
    while IFS= read -r hdr; do
      dir=$(dirname "$(dirname "$hdr")")  # .../nvidia/<package>
      for lib in "$dir/lib" "$dir/lib64"; do
        local candidate
        candidate=$(best_library "$lib" "$stem")
        if [[ -n $candidate ]]; then
          found_include=$(dirname "$hdr") found_library=$candidate
          return
        fi
      done
    done < <(find "$root/nvidia" -maxdepth 4 -name "$header" -path '*/include/*' 2>/dev/null | sort)
  done
}

find_package_files cudnn.h libcudnn
cudnn_include=$found_include cudnn_library=$found_library
find_package_files nccl.h libnccl
nccl_include=$found_include nccl_library=$found_library
lib_dirs=""
for library in "$cudnn_library" "$nccl_library"; do
  [[ -n $library ]] || continue
  dir=$(dirname "$library")
  [[ ":$lib_dirs:" == *":$dir:"* ]] || lib_dirs=${lib_dirs:+$lib_dirs:}$dir
done

# ---- MPI, the sanitizer, PyTorch ------------------------------------------------------------------
# With unpacked .debs the build links the MPI under RINGGRAD_DEPS_PREFIX, so its launcher is the one
# to use, whatever else is on PATH.
mpirun="" mpi_launcher=""
if [[ -n ${RINGGRAD_DEPS_PREFIX:-} ]]; then
  if [[ -x $RINGGRAD_DEPS_PREFIX/usr/bin/mpirun ]]; then
    mpirun="$RINGGRAD_DEPS_PREFIX/usr/bin/mpirun"
  else
    for name in mpirun.openmpi orterun prterun; do
      if [[ -x $RINGGRAD_DEPS_PREFIX/usr/bin/$name ]]; then
        mpi_launcher="$RINGGRAD_DEPS_PREFIX/usr/bin/$name"
        break
      fi
    done
  fi
else
  mpirun=$(command -v mpirun 2>/dev/null || command -v mpiexec 2>/dev/null || true)
fi
sanitizer=$(command -v compute-sanitizer 2>/dev/null || true)
if [[ -z $sanitizer && -n $nvcc ]]; then
  for candidate in "$(dirname "$nvcc")/compute-sanitizer" "$(dirname "$(dirname "$nvcc")")/compute-sanitizer/compute-sanitizer"; do
    [[ -x $candidate ]] && sanitizer=$candidate && break
  done
fi
torch_cuda=0
python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 && torch_cuda=1

# ---- the report -----------------------------------------------------------------------------------
show() { printf '  %-18s %s\n' "$1" "${2:-(not found)}"; }
echo "gpu_probe:"
show gpu "$([[ $gpu == 1 ]] && echo "$gpu_name, CMAKE_CUDA_ARCHITECTURES $arch" || echo "none visible (nvidia-smi): building for $arch")"
show nvcc "$nvcc"
show cudnn "${cudnn_library:+$cudnn_library (headers $cudnn_include)}"
show nccl "${nccl_library:+$nccl_library (headers $nccl_include)}"
show mpirun "${mpirun:-${mpi_launcher:+none on PATH; $mpi_launcher can be linked as mpirun}}"
show compute-sanitizer "$sanitizer"
show "torch on CUDA" "$([[ $torch_cuda == 1 ]] && echo yes || echo no)"

if [[ -n $env_file ]]; then
  {
    printf 'PROBE_GPU=%q\nPROBE_GPU_NAME=%q\nPROBE_CUDA_ARCH=%q\nPROBE_NVCC=%q\n' "$gpu" "$gpu_name" "$arch" "$nvcc"
    printf 'PROBE_CUDNN_INCLUDE=%q\nPROBE_CUDNN_LIBRARY=%q\n' "$cudnn_include" "$cudnn_library"
    printf 'PROBE_NCCL_INCLUDE=%q\nPROBE_NCCL_LIBRARY=%q\nPROBE_LIB_DIRS=%q\n' "$nccl_include" "$nccl_library" "$lib_dirs"
    printf 'PROBE_MPIRUN=%q\nPROBE_MPI_LAUNCHER=%q\n' "$mpirun" "$mpi_launcher"
    printf 'PROBE_SANITIZER=%q\nPROBE_TORCH_CUDA=%q\n' "$sanitizer" "$torch_cuda"
  } >"$env_file"
fi
exit 0
