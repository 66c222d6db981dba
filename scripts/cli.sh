# The command line every script shares with the project's programs (examples/common/command_line.h):
# --help prints the usage -- the script's header comment -- and --version the library's version,
# both exit 0; a mistake prints what is wrong and the usage, exit 2. Sourced, not run:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
#   cli_answer_help_and_version "$@"     # first, before anything runs; stops looking at a "--"
#   cli_usage_error "unknown argument '$1'"
# shellcheck shell=bash

cli_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cli_script=${BASH_SOURCE[1]}  # the script that sourced this file

# The script's header comment, from line 2 to the first line that is not a comment.
cli_usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$cli_script"; }

# "ringgrad 0.1.0", from project() in CMakeLists.txt, where the library's version is set.
cli_version() { sed -nE 's/^project\(ringgrad VERSION ([0-9.]+).*/ringgrad \1/p' "$cli_root/CMakeLists.txt"; }

cli_answer_help_and_version() {
  local arg
  for arg in "$@"; do
    case $arg in
      --) return 0 ;;
      -h | --help) cli_usage; exit 0 ;;
      --version) cli_version; exit 0 ;;
    esac
  done
}

cli_usage_error() {
  echo "$(basename "$cli_script"): $*" >&2
  cli_usage >&2
  exit 2
}
