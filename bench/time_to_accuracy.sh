#!/usr/bin/env bash
# Time to accuracy across a slow link: W1 (examples/mnist, the MLP on Fashion-MNIST, SGD) on 2 hosts
# of the namespace cluster (tools/cluster.sh, one rank per host, one thread per rank) at 1 Gbit/s,
# with each of ringgrad's communication hooks, scored on the whole test set every --eval-every steps
# against training time (the clock stops while the test set is scored). Samples/s alone cannot tell
# whether a hook's rounding costs more steps than its bytes save; this can. docs/compression.md
# shows its output.
#
#   bench/time_to_accuracy.sh [--epochs 2] [--seeds "0 1 2"] [--eval-every 10] [--target 84]
#                             [--rate 1gbit] [--out DIR]     # as root; ~5 min
#
#   accuracy.tsv          (in --out, default docs/compression/) hook seed step seconds accuracy:
#                         every evaluation of every run
#   time_to_accuracy.tsv  hook, then per seed the training seconds and steps to the first
#                         evaluation at or above --target% ("-" if none), then their medians
#   accuracy.png          test accuracy against training time, one curve per hook (the first seed)
#
# No PyTorch peer: its loop (bench/ddp_train_torch.py) measures samples/s, not accuracy over time.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
epochs=2 seeds="0 1 2" eval_every=10 target=84 rate=1gbit out=docs/compression
while (($#)); do
  case $1 in
    --epochs) epochs=$2 ;;
    --seeds) seeds=$2 ;;
    --eval-every) eval_every=$2 ;;
    --target) target=$2 ;;
    --rate) rate=$2 ;;
    --out) out=$2 ;;
    *)
      echo "usage: $0 [--epochs N] [--seeds \"S ...\"] [--eval-every N] [--target PCT] [--rate RATE] [--out DIR]" >&2
      exit 2
      ;;
  esac
  shift 2
done
[[ -x build/examples/mnist ]] || { echo "build/examples/mnist missing: build first (scripts/test.sh)" >&2; exit 1; }
mkdir -p "$out"
cluster=tools/cluster.sh
trap '$cluster down >/dev/null' EXIT
$cluster up 2 --rate "$rate" >/dev/null

hooks=(allreduce fp16 bf16 fp8-e4m3 fp8-e5m2 powersgd)
# "eval: step S, T s of training, test accuracy A%" -> "S T A"
run() { # HOOK SEED
  timeout 300 $cluster run -- build/examples/mnist --model mlp --epochs "$epochs" --threads 1 --stats-every 0 \
    --eval-every "$eval_every" --comm-hook "$1" --seed "$2" 2>&1 |
    sed -nE 's/^eval: step ([0-9]+), ([0-9.]+) s of training, test accuracy ([0-9.]+)%.*/\1 \2 \3/p' || true
}  # a run that fails or is cut adds no rows (and "-" in the table), and the sweep goes on

printf 'hook\tseed\tstep\tseconds\taccuracy\n' >"$out/accuracy.tsv"
for seed in $seeds; do
  for h in "${hooks[@]}"; do
    run "$h" "$seed" | awk -v h="$h" -v s="$seed" -v OFS='\t' '{ print h, s, $1, $2, $3 }' >>"$out/accuracy.tsv"
  done
done

median() { sort -g | awk '{ x[NR] = $1 } END { if (NR) print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2); else print "-" }'; }
{
  printf 'hook'
  for seed in $seeds; do printf '\tseconds_seed%s\tsteps_seed%s' "$seed" "$seed"; done
  printf '\tmedian_seconds\tmedian_steps\n'
} >"$out/time_to_accuracy.tsv"
for h in "${hooks[@]}"; do
  line=$h secs="" stepss=""
  for seed in $seeds; do
    # The first evaluation of this run at or above the target.
    hit=$(awk -F'\t' -v h="$h" -v s="$seed" -v t="$target" '$1 == h && $2 == s && $5 >= t { print $4, $3; exit }' \
      "$out/accuracy.tsv")
    if [[ -n "$hit" ]]; then
      line+=$(printf '\t%s\t%s' ${hit})
      secs+="${hit% *}"$'\n' stepss+="${hit#* }"$'\n'
    else
      line+=$'\t-\t-'
    fi
  done
  printf '%s\t%s\t%s\n' "$line" "$(printf '%s' "$secs" | grep . | median)" "$(printf '%s' "$stepss" | grep . | median)" |
    tee -a "$out/time_to_accuracy.tsv"
done

if command -v gnuplot >/dev/null; then
  first_seed=${seeds%% *}
  gnuplot -e "out='$out'; seed='$first_seed'; target=$target" bench/accuracy_chart.gp && echo "# chart: $out/accuracy.png"
else
  echo "# no gnuplot: chart skipped (apt-get install gnuplot-nox)"
fi
