#!/usr/bin/env bash
# examples/gpt_mini with --checkpoint-activations trains exactly as without it: the same losses and
# the same parameters, bit for bit (autograd/activation_checkpoint.h: the recompute runs the same
# kernels in the same order), while the memory report's activations shrink to the blocks' inputs.
#
#   tests/dist/checkpoint_activations_check.sh MPIRUN NP_FLAG NP GPT_MINI [extra args...]
#
# Exit status 0 when the final line agrees and the activations fell below half, 1 when not, 2 when a
# run failed or printed no figure. TOLERANCE (default 0: bit for bit) is the largest relative
# difference allowed between the final figures: a GPU's atomics (tools/gpu_check.sh) order sums by
# arrival, so two runs differ in rounding with or without checkpointing.
set -uo pipefail
if (($# < 4)); then
  echo "usage: tests/dist/checkpoint_activations_check.sh MPIRUN NP_FLAG NP GPT_MINI [extra args...]" >&2
  exit 2
fi
mpirun=$1 np_flag=$2 np=$3 gpt=$4
shift 4

run() {
  "$mpirun" "$np_flag" "$np" --oversubscribe "$gpt" --memory-report "$@" 2>&1
}
plain=$(run "$@") || { echo "$plain"; echo "FAIL: the run without checkpointing failed" >&2; exit 2; }
checkpointed=$(run "$@" --checkpoint-activations) || {
  echo "$checkpointed"
  echo "FAIL: the run with --checkpoint-activations failed" >&2
  exit 2
}
final() { grep -E '^final loss' <<<"$1"; }
activation_mib() { sed -n 's/^ *activations *\([0-9.]*\) MiB.*/\1/p' <<<"$1"; }
plain_final=$(final "$plain") checkpointed_final=$(final "$checkpointed")
plain_mib=$(activation_mib "$plain") checkpointed_mib=$(activation_mib "$checkpointed")
echo "without: $plain_final; activations $plain_mib MiB"
echo "with:    $checkpointed_final; activations $checkpointed_mib MiB"
if [[ -z $plain_final || -z $plain_mib || -z $checkpointed_mib ]]; then
  echo "$plain"
  echo "FAIL: a run printed no final line or no activations line" >&2
  exit 2
fi
status=0
tolerance=${TOLERANCE:-0}
figures() { grep -oE '[-+]?[0-9][0-9.]*([eE][-+]?[0-9]+)?' <<<"$1" | tr '\n' ' '; }
if [[ $tolerance == 0 ]]; then
  same=$([[ $plain_final == "$checkpointed_final" ]] && echo 1 || echo 0)
else
  same=$(awk -v a="$(figures "$plain_final")" -v b="$(figures "$checkpointed_final")" -v t="$tolerance" 'BEGIN {
    n = split(a, x, " "); m = split(b, y, " "); ok = n == m && n > 0
    for (i = 1; ok && i <= n; i++) { d = x[i] - y[i]; s = x[i] < 0 ? -x[i] : x[i]; if ((d < 0 ? -d : d) > t * s) ok = 0 }
    print ok }')
fi
if [[ $same != 1 ]]; then
  echo "FAIL: the final loss or parameters differ with --checkpoint-activations (tolerance $tolerance)" >&2
  status=1
fi
if ! awk -v a="$checkpointed_mib" -v b="$plain_mib" 'BEGIN { exit !(a < 0.5 * b) }'; then
  echo "FAIL: activations $checkpointed_mib MiB with checkpointing, not below half of $plain_mib MiB" >&2
  status=1
fi
exit $status
