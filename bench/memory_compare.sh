#!/usr/bin/env bash
# Memory per rank of GPT-mini (W3's model, f16 parameters, AdamW with f32 master weights) for every
# ZeRO stage, with and without activation checkpointing, at N ranks: the memory report of
# examples/gpt_mini, each part as a column of docs/zero/memory.tsv, drawn as stacked bars
# (docs/zero/memory.png, bench/memory_charts.gp). Then W3's throughput in variant (c) with and without
# checkpointing, alternated within each round, and the ratio docs/zero.md reports.
#
#   bench/memory_compare.sh [--ranks "2 3 4"] [--rounds 3] [--gpt-steps 20] [--out docs/zero]
#
# Backend ring: every buffer is then the allocator's (on "auto" the buckets and parameters live in
# shared memory, outside its count), so the parts and the peak are counted alike. Build first
# (scripts/test.sh). The machine is noisy: compare the ratios of one run.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."

ranks="2 3 4" rounds=3 gpt_steps=20 out=docs/zero
while (($#)); do
  case $1 in
    --ranks) ranks=$2 ;;
    --rounds) rounds=$2 ;;
    --gpt-steps) gpt_steps=$2 ;;
    --out) out=$2 ;;
    *) echo "usage: $0 [--ranks \"2 3 4\"] [--rounds N] [--gpt-steps N] [--out DIR]" >&2; exit 2 ;;
  esac
  shift 2
done
for b in examples/gpt_mini bench/gpt_train; do
  [[ -x build/$b ]] || { echo "build/$b missing: build first (scripts/test.sh)" >&2; exit 1; }
done
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# mib LABEL: the MiB figure of the memory report's line that starts with LABEL (0 when absent).
mib() { sed -n "s/^  $1 *\([0-9.]*\) MiB.*/\1/p" "$tmp/report" | head -n 1 | grep . || echo 0; }

printf 'config\tranks\tstage\tcheckpoint\tparameters\tgradients\treduced\toptimizer\tactivations\tother\tpeak\tgathered\n' \
  >"$out/memory.tsv"
for n in $ranks; do
  for stage in 0 1 2 3; do
    for checkpoint in 0 1; do
      flags=(--precision fp16 --zero "$stage" --backend ring --memory-report --max-steps 5 --warmup 1
             --eval-every 0 --log-every 5 --threads 1)
      ((checkpoint)) && flags+=(--checkpoint-activations)
      if ! mpirun -np "$n" --oversubscribe --bind-to none build/examples/gpt_mini "${flags[@]}" >"$tmp/report" 2>&1; then
        cat "$tmp/report" >&2
        exit 1
      fi
      params=$(mib "parameters") grads=$(mib "gradients") reduced=$(mib "reduced gradient")
      state=$(mib "optimizer state") acts=$(mib "activations") gathered=$(mib "gathered units")
      peak=$(sed -n 's/.*peak during training \([0-9.]*\) MiB.*/\1/p' "$tmp/report")
      # Stage 2's buckets exist only during a backward: the report says so and leaves them out of
      # the model state; they are part of "other" (temporaries) here.
      if grep -q "only during a backward" "$tmp/report"; then grads=0; fi
      label="N=$n z$stage"
      if ((checkpoint)); then label+=" ckpt"; fi
      awk -v OFS='\t' -v l="$label" -v n="$n" -v s="$stage" -v c="$checkpoint" -v p="$params" -v g="$grads" \
        -v r="$reduced" -v o="$state" -v a="$acts" -v k="$peak" -v u="$gathered" \
        'BEGIN { other = k - p - g - r - o - a - u; print l, n, s, c, p, g, r, o, a, (other > 0 ? other : 0), k, u }' \
        | tee -a "$out/memory.tsv"
    done
  done
done

# Throughput: W3 (c), 2 ranks x 1 thread, with and without checkpointing, alternated.
echo "# W3 (c) tokens/s: $rounds rounds of $gpt_steps steps, checkpointing off / on, alternated"
for ((round = 0; round < rounds; round++)); do
  for k in 0 1; do
    c=$(((k + round) % 2))
    line=$(mpirun -np 2 --bind-to core build/bench/gpt_train --steps "$gpt_steps" --warmup 3 --threads 1 \
      --checkpoint-activations "$c" 2>"$tmp/stderr" | grep '^RESULT') || { cat "$tmp/stderr" >&2; exit 1; }
    echo "$line"
    rate=${line##*tokens_per_s=}
    echo "$c ${rate%% *}" >>"$tmp/rates"
  done
done
median() { sort -g | awk '{ x[NR] = $1 } END { print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'; }
off=$(awk '$1 == 0 { print $2 }' "$tmp/rates" | median) on=$(awk '$1 == 1 { print $2 }' "$tmp/rates" | median)
awk -v a="$off" -v b="$on" 'BEGIN { printf "median tokens/s: %.1f without, %.1f with checkpointing: step time x%.3f\n", a, b, a / b }'

# Throughput: W3 (c), 2 ranks x 1 thread, DDP against ZeRO stage 3, alternated.
echo "# W3 (c) tokens/s: $rounds rounds of $gpt_steps steps, --zero 0 / 3, alternated"
: >"$tmp/rates"
for ((round = 0; round < rounds; round++)); do
  for k in 0 1; do
    z=$((3 * ((k + round) % 2)))
    line=$(mpirun -np 2 --bind-to core build/bench/gpt_train --steps "$gpt_steps" --warmup 3 --threads 1 \
      --zero "$z" 2>"$tmp/stderr" | grep '^RESULT') || { cat "$tmp/stderr" >&2; exit 1; }
    echo "$line"
    rate=${line##*tokens_per_s=}
    echo "$z ${rate%% *}" >>"$tmp/rates"
  done
done
ddp=$(awk '$1 == 0 { print $2 }' "$tmp/rates" | median) z3=$(awk '$1 == 3 { print $2 }' "$tmp/rates" | median)
awk -v a="$ddp" -v b="$z3" 'BEGIN { printf "median tokens/s: %.1f DDP, %.1f ZeRO-3: x%.3f of DDP\n", a, b, b / a }'

if command -v gnuplot >/dev/null; then
  gnuplot -e "out='$out'" bench/memory_charts.gp && echo "chart: $out/memory.png"
else
  echo "gnuplot not installed (apt-get install gnuplot-nox): no chart" >&2
fi
