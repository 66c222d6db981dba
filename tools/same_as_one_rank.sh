#!/usr/bin/env bash
# Data parallelism changes no result: an example trained on NP ranks with B samples per rank ends
# where one process trained with NP*B ends. Both see the same global batches (mnist's
# DistributedSampler deals the permutation out rank by rank; gpt_mini's WindowSampler numbers its
# windows (step, rank, slot), which one process with NP*B slots enumerates in the same order) and the
# gradients are averaged, so only the order of the sums differs: the results agree up to rounding.
#
#   tools/same_as_one_rank.sh mnist    BINARY NP B [extra args...]   # test accuracy, parameter norm
#   tools/same_as_one_rank.sh gpt_mini BINARY NP B [extra args...]   # validation loss, parameter norm
#
# The extra arguments go to both runs (--device cuda, --backend ring, --limit-steps 40, ...).
# Exit status 0 when every figure agrees within its tolerance, 1 when one does not, 2 when a run
# failed or printed no figure. ctest runs it on the CPU (example_*_same_as_one_rank_np*), and
# tools/gpu_check.sh on the GPU, with the same tolerances.
#
# Environment:
#   MPIRUN            the launcher (default: mpirun), NP_FLAG its flag for the rank count (default:
#                     -np), MPIRUN_ARGS its other flags (default: --oversubscribe; set empty for none)
#   TOL_NORM          largest relative difference of the parameters' L2 norms (default 1e-3)
#   TOL_ACCURACY      largest difference of the test accuracies, in points (default 0.5)
#   TOL_LOSS          largest relative difference of the validation losses (default 1e-3)
set -uo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

if (($# < 4)); then
  echo "usage: tools/same_as_one_rank.sh mnist|gpt_mini BINARY NP B [extra args...]" >&2
  exit 2
fi
example=$1 binary=$2 np=$3 per_rank=$4
shift 4
mpirun=${MPIRUN:-mpirun}
np_flag=${NP_FLAG:--np}
read -r -a mpirun_args <<<"${MPIRUN_ARGS---oversubscribe}"
tol_norm=${TOL_NORM:-1e-3}
tol_accuracy=${TOL_ACCURACY:-0.5}
tol_loss=${TOL_LOSS:-1e-3}

case $example in
  mnist) score_pattern='test accuracy [0-9.]+%' ;;
  gpt_mini) score_pattern='validation loss [0-9.]+' ;;
  *) echo "same_as_one_rank: unknown example '$example' (mnist or gpt_mini)" >&2; exit 2 ;;
esac

one_out=$(mktemp) many_out=$(mktemp)
trap 'rm -f "$one_out" "$many_out"' EXIT

echo "---- one process, batch $((np * per_rank)): $binary --batch-size $((np * per_rank)) $*"
if ! "$binary" --batch-size $((np * per_rank)) "$@" >"$one_out" 2>&1; then
  cat "$one_out"
  echo "same_as_one_rank: the one-process run failed" >&2
  exit 2
fi
echo "---- $np ranks, batch $per_rank each: $mpirun $np_flag $np ${mpirun_args[*]} $binary --batch-size $per_rank $*"
if ! "$mpirun" "$np_flag" "$np" "${mpirun_args[@]}" "$binary" --batch-size "$per_rank" "$@" >"$many_out" 2>&1; then
  cat "$many_out"
  echo "same_as_one_rank: the $np-rank run failed" >&2
  exit 2
fi

# last NUMBER of the last line matching PATTERN in FILE
figure() { grep -Eo "$2" "$1" | tail -n 1 | grep -Eo -- '-?[0-9][0-9.e+-]*' | tail -n 1; }

status=0
# compare NAME ONE MANY TOLERANCE relative|absolute
compare() {
  local verdict
  verdict=$(awk -v a="$2" -v b="$3" -v tol="$4" -v kind="$5" 'BEGIN {
    d = a - b; if (d < 0) d = -d
    if (kind == "relative") { s = a < 0 ? -a : a; d = s > 0 ? d / s : d }
    printf "%s %.3g", (d <= tol ? "ok" : "DIFFERS"), d }')
  printf '%-18s one process %-24s %s ranks %-24s %s difference %s (tolerance %s)\n' "$1" "$2" "$np" "$3" \
    "${verdict%% *}" "${verdict#* }" "$4"
  [[ $verdict == ok* ]] || status=1
}

for file in "$one_out" "$many_out"; do
  if [[ -z $(figure "$file" "$score_pattern") || -z $(figure "$file" 'parameter checksum -?[0-9.e+-]+, norm [0-9.e+-]+') ]]; then
    cat "$file"
    echo "same_as_one_rank: no '$score_pattern' or 'parameter checksum ..., norm ...' line in a run's output" >&2
    exit 2
  fi
done
if [[ $example == mnist ]]; then
  compare "test accuracy" "$(figure "$one_out" "$score_pattern")" "$(figure "$many_out" "$score_pattern")" \
    "$tol_accuracy" absolute
else
  compare "validation loss" "$(figure "$one_out" "$score_pattern")" "$(figure "$many_out" "$score_pattern")" \
    "$tol_loss" relative
fi
compare "parameter norm" "$(figure "$one_out" 'parameter checksum -?[0-9.e+-]+, norm [0-9.e+-]+')" \
  "$(figure "$many_out" 'parameter checksum -?[0-9.e+-]+, norm [0-9.e+-]+')" "$tol_norm" relative
exit $status
