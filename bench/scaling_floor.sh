#!/usr/bin/env bash
# Where W1's 2-rank scaling goes: four configurations interleaved round by round, so that a noisy
# stretch of the machine hits all of them alike.
#
#   bench/scaling_floor.sh [--model mlp|cnn] [--rounds 5] [--steps 400]
#
#   alone      build/bench/ddp_train --threads 1, the other core idle             (variant (a))
#   pair       two of those at once, one per core, not talking to each other
#   lockstep   the pair's own step times, step i of both taken as the slower of the two: an
#              estimate of what a synchroniser that costs nothing and moves nothing would reach on
#              those two busy cores (not a strict bound: the two processes drift apart, so a stall
#              that hits both cores at once can count in two different steps; short runs suffer most)
#   sync-only  mpirun -np 2, DDP whose hook AllReduces one element per bucket: the lockstep
#              (every step waits for the slower rank) without the gradient traffic
#   ddp        mpirun -np 2, DDP as W1 runs it                                     (variant (c))
#   pinned     alone on core 0, then alone on core 1, summed: the baseline for ranks bound to those
#              cores (the VM's two cores often differ in speed for minutes at a time, and the lockstep
#              runs at the slower one's pace)
#   steal      the hypervisor's steal time during the ddp run, in ms (/proc/stat): ~100 ms stalls of
#              both cores at once, which one busy core alone rarely sees
#
# Each round prints the figures (samples/s; pair and lockstep: both processes together) and, per
# round, each one against 2 x alone; the last lines are the medians of those per-round ratios.
#   pair / 2 alone        what a second busy core costs by itself (shared caches, memory, clocks)
#   lockstep / 2 alone    plus waiting, every step, for the slower core (no communication at all)
#   sync-only / 2 alone   plus data parallelism's lockstep
#   ddp / 2 alone         plus moving the gradients: the scaling the issue asks >= 0.9 of
#   ddp / pinned          the same against the cores the ranks ran on
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."

model=mlp rounds=5 steps=400
while (($#)); do
  case $1 in
    --model) model=$2 ;;
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    *) echo "usage: $0 [--model mlp|cnn] [--rounds N] [--steps N]" >&2; exit 2 ;;
  esac
  shift 2
done

[[ -x build/bench/ddp_train ]] || { echo "build/bench/ddp_train missing: build first (scripts/test.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

batch=$([[ $model == mlp ]] && echo 128 || echo 64)  # per rank: W1's and W2's (../shared/WORKLOADS.md)
train=(build/bench/ddp_train --model "$model" --threads 1 --steps "$steps" --batch "$batch")
rate() { grep '^RESULT' | sed 's/.*samples_per_s=\([0-9.]*\).*/\1/'; }  # samples/s of a RESULT line
sum() { awk '{ s += $1 } END { print s }' "$@"; }  # of the numbers on stdin, or in the files named

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# scaling_floor: model=$model rounds=$rounds steps=$steps"
steal_ms() { awk '/^cpu / { print $9 * 10 }' /proc/stat; }  # USER_HZ = 100
printf '%-6s %9s %9s %9s %9s %9s %9s %6s   %s\n' round alone pinned pair lockstep sync-only ddp steal \
  "ratios to 2 x alone: pair lockstep sync-only ddp; ddp / pinned"
for ((round = 1; round <= rounds; round++)); do
  alone=$("${train[@]}" 2>/dev/null | rate)
  pinned=$( (taskset -c 0 "${train[@]}" 2>/dev/null | rate; taskset -c 1 "${train[@]}" 2>/dev/null | rate) | sum)
  taskset -c 0 "${train[@]}" --step-times "$tmp/t0" 2>/dev/null | rate >"$tmp/p0" &
  taskset -c 1 "${train[@]}" --step-times "$tmp/t1" 2>/dev/null | rate >"$tmp/p1"
  wait
  pair=$(sum "$tmp/p0" "$tmp/p1")
  lockstep=$(paste "$tmp/t0" "$tmp/t1" |
    awk -v n="$((2 * batch))" '{ s += ($1 > $2 ? $1 : $2) } END { print n * NR * 1e3 / s }')  # s: ms
  sync=$(mpirun -np 2 --bind-to core "${train[@]}" --comm-hook sync-only 2>/dev/null | rate)
  steal0=$(steal_ms)
  ddp=$(mpirun -np 2 --bind-to core "${train[@]}" 2>/dev/null | rate)
  steal=$(($(steal_ms) - steal0))
  read -r rp rl rs rd rpin < <(awk -v a="$alone" -v p="$pair" -v l="$lockstep" -v s="$sync" -v d="$ddp" -v q="$pinned" \
    'BEGIN { printf "%.3f %.3f %.3f %.3f %.3f\n", p / (2 * a), l / (2 * a), s / (2 * a), d / (2 * a), d / q }')
  printf '%-6s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %6s   %s %s %s %s; %s\n' "$round" "$alone" "$pinned" "$pair" \
    "$lockstep" "$sync" "$ddp" "$steal" "$rp" "$rl" "$rs" "$rd" "$rpin"
  echo "$rp $rl $rs $rd $rpin" >>"$tmp/ratios"
done

median() { sort -g | awk '{ x[NR] = $1 } END { print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'; }
echo
echo "median pair / (2 x alone)      = $(cut -d' ' -f1 "$tmp/ratios" | median)"
echo "median lockstep / (2 x alone)  = $(cut -d' ' -f2 "$tmp/ratios" | median)"
echo "median sync-only / (2 x alone) = $(cut -d' ' -f3 "$tmp/ratios" | median)"
echo "median ddp / (2 x alone)       = $(cut -d' ' -f4 "$tmp/ratios" | median)   (target >= 0.9)"
echo "median ddp / pinned            = $(cut -d' ' -f5 "$tmp/ratios" | median)"
