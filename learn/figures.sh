#!/usr/bin/env bash
# The teaching track's figures, drawn from what the code itself reports -- a DDP trace, the memory
# report, allreduce_bench's table, DDP's overlap statistic -- so that they stay true as it changes.
#
#   learn/figures.sh [--out DIR] [--quick]     # default docs/learn/figures; under a minute
#
#   timeline.tsv/.png  one DDP step of W1 (examples/mnist, 2 ranks, a simulated 1 GB/s link with
#                      200 us per operation, 1 MiB buckets): forward, backward's nodes, each
#                      bucket's reduction (examples/mnist --trace; tools/trace_timeline.py --tsv)
#   memory.tsv/.png    a rank's memory by kind under DDP and ZeRO stages 1-3 (examples/gpt_mini
#                      --precision fp16 --memory-report, 2 ranks)
#   busbw.tsv/.png     AllReduce bus bandwidth against message size, 2 ranks on this machine
#                      (examples/allreduce_bench: ring, tree, auto)
#   overlap.tsv/.png   the share of communication hidden behind backward against the bucket cap
#                      (examples/mnist --simulate-network 1,200 --bucket-mb B)
#   schedules.tsv/.png every message of one ring, tree and hierarchical AllReduce, round by round,
#                      4 ranks in nodes of 2 (learn/learn_schedules, through MPI's profiling interface)
#
# The .png need gnuplot (gnuplot-nox); without it the tables are still written. CTest runs this
# with --quick (test learn_figures) to keep it working, and checks nothing about the pictures.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=docs/learn/figures quick=0 build=${BUILD:-build}
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "usage: $0 [--out DIR] [--quick]" >&2; exit 2 ;;
  esac
done
for p in examples/mnist examples/gpt_mini examples/allreduce_bench learn/learn_schedules; do
  [[ -x $build/$p ]] || { echo "$build/$p missing: build first (scripts/test.sh)" >&2; exit 1; }
done
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpiexec -n 2 --oversubscribe)
steps=$((quick ? 12 : 40))

# 1. One step's timeline, from the trace DDP records.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${mpirun[@]}" "$build/examples/mnist" --limit-steps "$steps" --stats-every 0 --bucket-mb 1 \
  --simulate-network 1,200 --trace "$work/trace.json" >/dev/null
python3 tools/trace_timeline.py "$work/trace.json" --tsv >"$out/timeline.tsv"

# 2. Memory by kind, DDP and ZeRO 1-3: the report's MiB per line.
printf 'stage\tparameters\tgradients\treduced_gradient\toptimizer_state\tpeak_above_start\n' >"$out/memory.tsv"
for zero in 0 1 2 3; do
  "${mpirun[@]}" "$build/examples/gpt_mini" --precision fp16 --memory-report --max-steps 3 --eval-every 0 \
    --zero "$zero" 2>&1 | awk -v z="$zero" '
      /memory report \(rank 0/ { on = 1 }
      on && $1 == "parameters" { p = $2 }
      on && $1 == "gradients" { g = $2; if ($0 ~ /only during a backward/) g = 0 }
      on && $1 == "reduced" { r = $3 }
      on && $1 == "optimizer" { s = $3 }
      on && $1 == "allocator" { for (i = 1; i <= NF; ++i) if ($i == "above") a = $(i - 2) }
      END { printf "%s\t%s\t%s\t%s\t%s\t%s\n", (z == 0 ? "DDP" : "ZeRO-" z), p, g, r + 0, s, a }' >>"$out/memory.tsv"
done

# 3. busbw against message size.
last=$((quick ? 16 : 64))
"${mpirun[@]}" "$build/examples/allreduce_bench" -b 4K -e "${last}M" -f 4 -n $((quick ? 3 : 10)) -w 2 \
  -r $((quick ? 1 : 3)) --backends ring,tree,auto |
  awk '/^# backend:/ { b = $3 } /^ +[0-9]/ { printf "%s\t%s\t%s\n", b, $1, $6 }' |
  { printf 'backend\tbytes\tbusbw_GBps\n'; cat; } >"$out/busbw.tsv"

# 4. Overlap against the bucket cap, on the same simulated link.
printf 'bucket_mb\toverlap_percent\n' >"$out/overlap.tsv"
caps=(0.25 1 4 25)
((quick)) && caps=(0.25 25)
for mb in "${caps[@]}"; do
  "${mpirun[@]}" "$build/examples/mnist" --limit-steps "$steps" --stats-every "$steps" --bucket-mb "$mb" \
    --simulate-network 1,200 2>&1 | sed -nE 's/.*overlap ([0-9]+)%.*/\1/p' | tail -n 1 |
    awk -v mb="$mb" '{ printf "%s\t%s\n", mb, $1 }' >>"$out/overlap.tsv"
done

# 5. The schedules, as the ranks really send them.
mpiexec -n 4 --oversubscribe "$build/learn/learn_schedules" --tsv "$out/schedules.tsv" >/dev/null

if command -v gnuplot >/dev/null; then
  gnuplot -e "out='$out'" learn/figures.gp
  echo "figures: $out/{timeline,memory,busbw,overlap,schedules}.png"
else
  echo "figures: tables in $out; no gnuplot (apt-get install gnuplot-nox), so no pictures"
fi
