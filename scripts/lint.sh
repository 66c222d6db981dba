#!/usr/bin/env bash
# The static checks scripts/test.sh runs before it builds:
#   1. format: every C++ and CUDA source reads as .clang-format says;
#   2. layers: no #include points up the stack (docs/layout.md: core < autograd < nn < optim, data on
#      core and autograd, dist on all but data), and the ddp wing's reducer does not include ddp.h;
#   3. the backend seam: no op layer looks at a tensor's device outside core/native/backend.h.
#
#   scripts/lint.sh          report what fails and exit 1
#   scripts/lint.sh --fix    reformat the sources in place (checks 2 and 3 need a person)
#
# clang-format is pinned to version 14 (Debian 12's clang-format-14, installed by scripts/setup.sh):
# another version lays some constructs out differently, and the check would fail on code that one
# developer's editor formatted. Only tracked files are checked, so build trees never are.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *) echo "usage: scripts/lint.sh [--fix]" >&2; exit 2 ;;
esac

clang_format=$(command -v clang-format-14 || true)
if [[ -z "$clang_format" ]]; then
  echo "scripts/lint.sh: clang-format-14 not found; scripts/setup.sh installs it" >&2
  exit 1
fi

mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if ((fix)); then
  "$clang_format" -i --style=file "${files[@]}"
  exit 0
fi

failed=0

# ---- 2. layers ----------------------------------------------------------------------------------------
declare -A may_include=(
  [core]="core"
  [autograd]="core autograd"
  [nn]="core autograd nn"
  [optim]="core autograd nn optim"
  [data]="core autograd data"
  [dist]="core autograd nn optim dist"
)
for layer in "${!may_include[@]}"; do
  while IFS= read -r hit; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$hit")
    if [[ " ${may_include[$layer]} " != *" $target "* ]]; then
      echo "scripts/lint.sh: layer $layer/ includes $target/: $hit" >&2
      failed=1
    fi
  done < <(git grep --untracked -n -E '#include "[a-z_]+/' -- "$layer/" || true)
done
if git grep --untracked -n -E '#include "dist/ddp/ddp.h"' -- dist/ddp/reducer.h dist/ddp/reducer.cpp dist/ddp/comm_hook.h \
  dist/ddp/options.h >&2; then
  echo "scripts/lint.sh: the reducer, hooks and options sit below dist/ddp/ddp.h and must not include it" >&2
  failed=1
fi

# ---- 3. the backend seam ------------------------------------------------------------------------------
if git grep --untracked -n -E 'is_cpu\(\)|is_cuda\(\)|RINGGRAD_WITH_CUDA|\bcuda::|\bcpu::' -- core/native autograd nn optim data \
  ':!core/native/backend.h' >&2; then
  echo "scripts/lint.sh: the lines above look at a device outside the seam (core/native/backend.h)" >&2
  failed=1
fi

# ---- 1. format ---------------------------------------------------------------------------------------
unformatted=()
for f in "${files[@]}"; do
  "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if ((${#unformatted[@]})); then
  echo "scripts/lint.sh: ${#unformatted[@]} file(s) differ from .clang-format (run scripts/lint.sh --fix):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  failed=1
fi
((failed == 0)) || exit 1
echo "scripts/lint.sh: ${#files[@]} files formatted as .clang-format says, layers and the backend seam respected"
