#!/usr/bin/env bash
# Training throughput of ringgrad against PyTorch DDP (gloo), side by side: W1 (MLP) or W2 (CNN) on
# Fashion-MNIST as ../shared/WORKLOADS.md fixes them, in its three variants on a 2-core machine:
#   (a) one process, 1 thread   (b) one process, 2 threads   (c) mpirun -np 2, 1 thread per rank
#
#   bench/ddp_compare.sh [--model mlp|cnn] [--rounds 3] [--steps 200] [--warmup 20] [--bind core|none]
#
# Runs build/bench/ddp_train (build it first: scripts/test.sh) and bench/ddp_train_torch.py (Debian's
# python3-torch under /usr/bin/python3) alternately -- ringgrad then torch for each variant, the order
# flipped every round -- for --rounds rounds, printing every RESULT line as it comes. Then the median
# samples/s per (implementation, variant) and the ratios the distributed issue asks for:
#   ringgrad (c) / (2 x ringgrad (a))   scaling to 2 ranks, target >= 0.9
#   ringgrad (c) / torch (c)            target >= 1
#   ringgrad (a) / torch (a), ringgrad (b) / torch (b)
# and the scaling of each round, with its median.
# Both implementations' (c) runs get the same launch: mpirun -np 2 --bind-to core (OpenMPI's default
# for 2 ranks: one core each); --bind none lets the scheduler move them. The machine is shared and
# noisy: compare ratios from one run, not figures from different runs, and run it on a quiet machine.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."

model=mlp rounds=3 steps=200 warmup=20 bind=core
while (($#)); do
  case $1 in
    --model) model=$2 ;;
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --bind) bind=$2 ;;
    *) echo "usage: $0 [--model mlp|cnn] [--rounds N] [--steps N] [--warmup N] [--bind core|none]" >&2; exit 2 ;;
  esac
  shift 2
done

[[ -x build/bench/ddp_train ]] || { echo "build/bench/ddp_train missing: build first (scripts/test.sh)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "no torch for /usr/bin/python3: apt-get install python3-torch" >&2; exit 1; }

# OpenMPI refuses to start as root unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run IMPL VARIANT: one run, its RESULT line printed and its samples/s appended to $tmp/results.
run() {
  local impl=$1 variant=$2 cmd line
  case $impl in
    ringgrad) cmd=(build/bench/ddp_train) ;;
    torch) cmd=(/usr/bin/python3 bench/ddp_train_torch.py) ;;
  esac
  case $variant in
    a) cmd+=(--threads 1) ;;
    b) cmd+=(--threads 2) ;;
    c) cmd=(mpirun -np 2 --bind-to "$bind" "${cmd[@]}" --threads 1) ;;
  esac
  if ! line=$("${cmd[@]}" --model "$model" --steps "$steps" --warmup "$warmup" 2>"$tmp/stderr" | grep '^RESULT'); then
    echo "failed: ${cmd[*]}" >&2
    cat "$tmp/stderr" >&2
    exit 1
  fi
  echo "$line variant=$variant"
  echo "$impl $variant ${line##*samples_per_s=}" | cut -d' ' -f1-3 >>"$tmp/results"
}

echo "# ddp_compare: model=$model rounds=$rounds steps=$steps warmup=$warmup, (c) under mpirun --bind-to $bind"
for ((round = 1; round <= rounds; round++)); do
  for variant in a b c; do
    if ((round % 2)); then run ringgrad $variant; run torch $variant; else run torch $variant; run ringgrad $variant; fi
  done
done

median() { sort -g | awk '{ x[NR] = $1 } END { print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'; }
# runs IMPL VARIANT: the samples/s of those runs, in run order (one per round)
runs() { awk -v i="$1" -v v="$2" '$1 == i && $2 == v { print $3 }' "$tmp/results"; }
med() { runs "$1" "$2" | median; }  # med IMPL VARIANT: the median samples/s of those runs
ratio() { awk -v x="$1" -v y="$2" -v k="${3:-1}" 'BEGIN { printf "%.2f", x / (k * y) }'; }  # x / (k y)

declare -A m
echo
echo "# median samples/s over $rounds rounds ($model)"
printf '%-10s %12s %12s %12s\n' impl "(a) 1p1t" "(b) 1p2t" "(c) 2r1t"
for impl in ringgrad torch; do
  for variant in a b c; do m[$impl$variant]=$(med $impl $variant); done
  printf '%-10s %12.1f %12.1f %12.1f\n' $impl "${m[${impl}a]}" "${m[${impl}b]}" "${m[${impl}c]}"
done
echo
echo "ringgrad (c) / (2 x ringgrad (a)) = $(ratio "${m[ringgradc]}" "${m[ringgrada]}" 2)   (target >= 0.9)"
echo "ringgrad (c) / torch (c)          = $(ratio "${m[ringgradc]}" "${m[torchc]}")   (target >= 1)"
echo "ringgrad (a) / torch (a)          = $(ratio "${m[ringgrada]}" "${m[torcha]}")"
echo "ringgrad (b) / torch (b)          = $(ratio "${m[ringgradb]}" "${m[torchb]}")"
echo "torch (c) / (2 x torch (a))       = $(ratio "${m[torchc]}" "${m[torcha]}" 2)   (for reference)"
# The scaling round by round ((a) and (c) of the same round ran within a minute of each other): the
# spread says how much of a ratio near its target is the machine's noise.
per_round=$(paste <(runs ringgrad a) <(runs ringgrad c) | awk '{ printf "%.3f\n", $2 / (2 * $1) }')
echo "ringgrad (c) / (2 x (a)) per round: $(echo "$per_round" | tr '\n' ' ')(median $(echo "$per_round" | median))"
