# The command line every script shares with the project's programs (examples/common/command_line.h):
# --help prints the usage -- the script's header comment -- and --version the library's version,
# both exit 0; a mistake prints what is wrong and the usage, exit 2. Sourced, not run:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
#   cli_answer_help_and_version "$@"     # first, before anything runs; looks at the first argument
#   cli_usage_error "unknown argument '$1'"
# shellcheck shell=bash

cli_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cli_script=${BASH_SOURCE[1]}  # the script that sourced this file

# The script's header comment, from line 2 to the first line that is not a comment.
cli_usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$cli_script"; }

# "ringgrad 0.1.0", from project() in CMakeLists.txt, where the library's version is set.
cli_version() { sed -nE 's/^project\(ringgrad VERSION ([0-9.]+).*/ringgrad \1/p' "$cli_root/CMakeLists.txt"; }

# Only the first argument: later ones may belong to a command the script runs
# (tools/cluster.sh exec HOST df -h, scripts/demo.sh's mnist flags).
cli_answer_help_and_version() {
  case ${1:-} in
    -h | --help) cli_usage; exit 0 ;;
    --version) cli_version; exit 0 ;;
  esac
}

cli_usage_error() {
  echo "$(basename "$cli_script"): $*" >&2
  cli_usage >&2
  exit 2
}
