#!/usr/bin/env bash
# Install-and-consume test: installs the ringgrad build in BUILD_DIR into a scratch prefix, then
# configures, builds and runs tests/install/consumer (a project that only does
# find_package(ringgrad)) against that prefix. Fails on any step.
#
#   run_install_test.sh BUILD_DIR WORK_DIR
#
# BUILD_DIR: a configured and built ringgrad tree. WORK_DIR: scratch space, wiped first.
# The consumer is configured with the compiler, generator and build type of BUILD_DIR, and, when
# BUILD_DIR built the CUDA backend, pointed at the same toolkit (the package's config then does
# find_dependency(CUDAToolkit) and links the CUDA runtime).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR WORK_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
work_dir=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="$build_dir/CMakeCache.txt"
[[ -f "$cache" ]] || { echo "install test: $cache not found: configure and build first" >&2; exit 2; }

# Value of a CMake cache entry of BUILD_DIR ("" when absent).
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }

rm -rf "$work_dir"
mkdir -p "$work_dir"
work_dir=$(cd "$work_dir" && pwd)
prefix="$work_dir/prefix"

echo "== cmake --install $build_dir --prefix $prefix"
cmake --install "$build_dir" --prefix "$prefix" > "$work_dir/install.log" ||
  { cat "$work_dir/install.log"; exit 1; }
# The package must bring its headers, the library and the CMake config.
for f in include/ringgrad/ringgrad.h include/ringgrad/core/tensor.h include/ringgrad/autograd/engine.h; do
  [[ -f "$prefix/$f" ]] || { echo "install test: $prefix/$f missing" >&2; exit 1; }
done
# ... and only the public headers: what ringgrad.h reaches (cmake/public_headers.cmake), not the
# implementation's (the communication thread, MPI helpers, the backend seam, the kernels).
for f in include/ringgrad/dist/comm_thread.h include/ringgrad/dist/mpi_check.h include/ringgrad/core/native/native.h \
  include/ringgrad/core/kernels.h include/ringgrad/core/cpu/gemm.h; do
  [[ ! -e "$prefix/$f" ]] || { echo "install test: internal header $prefix/$f installed" >&2; exit 1; }
done
# The package links MPI's C bindings, not the deprecated C++ ones.
if grep -rq 'MPI::MPI_CXX' "$prefix"; then
  echo "install test: the installed package links MPI::MPI_CXX" >&2
  exit 1
fi
for pattern in 'libringgrad.*' ringgradConfig.cmake ringgradTargets.cmake; do
  [[ -n "$(find "$prefix" -name "$pattern" -print -quit)" ]] ||
    { echo "install test: nothing named $pattern under $prefix" >&2; exit 1; }
done

configure_args=(
  -S "$here/consumer" -B "$work_dir/build"
  -G "$(cache_get CMAKE_GENERATOR)"
  -DCMAKE_PREFIX_PATH="$prefix"
  -DCMAKE_CXX_COMPILER="$(cache_get CMAKE_CXX_COMPILER)"
  -DCMAKE_BUILD_TYPE="$(cache_get CMAKE_BUILD_TYPE)"
)
cuda_compiler=$(cache_get CMAKE_CUDA_COMPILER)
if [[ -n "$cuda_compiler" && "$cuda_compiler" != *NOTFOUND && -x "$cuda_compiler" ]]; then
  # nvcc lives in <toolkit>/bin; FindCUDAToolkit takes the toolkit root.
  configure_args+=(-DCUDAToolkit_ROOT="$(dirname "$(dirname "$cuda_compiler")")")
fi

echo "== configure consumer: cmake ${configure_args[*]}"
cmake "${configure_args[@]}"
echo "== build consumer"
cmake --build "$work_dir/build"
echo "== run consumer"
"$work_dir/build/app"
echo "== install test passed"
