#!/usr/bin/env bash
# ZeRO's throughput against plain DDP, side by side: W1 (MLP, SGD momentum) and W3 (GPT-mini, AdamW)
# in variant (c) of ../shared/WORKLOADS.md (mpirun -np 2, 1 thread per rank), each at --zero 0, 1
# and 2, alternated within every round (the order rotated each round) for --rounds rounds. Then the
# median throughput per stage and the ratios docs/zero.md reports (targets: stage 1 >= 0.95 x DDP,
# stage 2 >= 0.9 x DDP).
#
#   bench/zero_compare.sh [--rounds 3] [--mlp-steps 200] [--gpt-steps 30] [--precision fp32|bf16]
#
# Runs build/bench/ddp_train and build/bench/gpt_train (build first: scripts/test.sh). The machine is
# shared and noisy: compare the ratios of one run, not figures from different runs.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."

rounds=3 mlp_steps=200 gpt_steps=30 precision=fp32
while (($#)); do
  case $1 in
    --rounds) rounds=$2 ;;
    --mlp-steps) mlp_steps=$2 ;;
    --gpt-steps) gpt_steps=$2 ;;
    --precision) precision=$2 ;;
    *) echo "usage: $0 [--rounds N] [--mlp-steps N] [--gpt-steps N] [--precision fp32|bf16]" >&2; exit 2 ;;
  esac
  shift 2
done
for b in ddp_train gpt_train; do
  [[ -x build/bench/$b ]] || { echo "build/bench/$b missing: build first (scripts/test.sh)" >&2; exit 1; }
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run WORKLOAD STAGE: one run under mpirun -np 2, its RESULT line printed, its throughput kept.
run() {
  local workload=$1 stage=$2 cmd line
  case $workload in
    w1) cmd=(build/bench/ddp_train --model mlp --steps "$mlp_steps" --warmup 20) ;;
    w3) cmd=(build/bench/gpt_train --steps "$gpt_steps" --warmup 5) ;;
  esac
  if ! line=$(mpirun -np 2 --bind-to core "${cmd[@]}" --threads 1 --precision "$precision" --zero "$stage" \
      2>"$tmp/stderr" | grep '^RESULT'); then
    echo "failed: ${cmd[*]} --zero $stage" >&2
    cat "$tmp/stderr" >&2
    exit 1
  fi
  echo "$line"
  local rate=${line##*_per_s=}
  echo "$workload $stage ${rate%% *}" >>"$tmp/results"
}

echo "# zero_compare: rounds=$rounds, W1 $mlp_steps steps, W3 $gpt_steps steps, $precision, 2 ranks x 1 thread"
for ((round = 0; round < rounds; round++)); do
  for workload in w1 w3; do
    stages=(0 1 2)
    for ((k = 0; k < 3; k++)); do run $workload "${stages[(k + round) % 3]}"; done
  done
done

median() { sort -g | awk '{ x[NR] = $1 } END { print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'; }
med() { awk -v w="$1" -v s="$2" '$1 == w && $2 == s { print $3 }' "$tmp/results" | median; }
echo
printf '%-4s %14s %14s %14s %10s %10s\n' "" "zero 0 (DDP)" "zero 1" "zero 2" "1 / DDP" "2 / DDP"
for workload in w1 w3; do
  d=$(med $workload 0) z1=$(med $workload 1) z2=$(med $workload 2)
  awk -v w=$workload -v d="$d" -v a="$z1" -v b="$z2" \
    'BEGIN { printf "%-4s %14.1f %14.1f %14.1f %10.3f %10.3f\n", w, d, a, b, a / d, b / d }'
done
echo "(W1 samples/s, W3 tokens/s; medians over $rounds rounds; targets: zero 1 >= 0.95, zero 2 >= 0.90)"
