#!/usr/bin/env bash
# Training across machines, measured: ../shared/WORKLOADS.md's X1 on the namespace cluster of
# tools/cluster.sh (one rank per host, one thread per rank), ringgrad beside PyTorch DDP (gloo,
# Debian's python3-torch) on the same links, in one run. docs/across_machines.md shows its output.
#
#   bench/cluster_compare.sh [--rounds 2] [--steps 60] [--out DIR]   # as root; about 10 minutes
#
#   busbw.tsv    rate hosts backend bytes busbw(GB/s): AllReduce (examples/allreduce_bench) at 1 and
#                5 Gbit/s and unshaped, 2 and 4 hosts
#   train.tsv    rate model impl samples_or_tokens/s: W1 (MLP) and W3 (GPT-mini) at 2 hosts,
#                ringgrad and torch alternating, median of --rounds; "alone" = one process, 1 thread
#   buckets.tsv  rate bucket_mb samples/s: W1 at 2 hosts, DDP's bucket cap swept
#   scaling.tsv  hosts samples/s: W1 at 1 Gbit/s, 1 -> 2 -> 4 hosts
#   *.png        the curves (gnuplot, when installed)
#
# The machine has 2 cores: 4 hosts x 1 rank oversubscribe it 2x (compute slows, the link does not).
# Noise: the runs of one table alternate, and ratios come from one run; compare ratios, not figures
# from different runs.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=2 steps=60 out=bench/cluster-results
while (($#)); do
  case $1 in
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --out) out=$2 ;;
    *) echo "usage: $0 [--rounds N] [--steps N] [--out DIR]" >&2; exit 2 ;;
  esac
  shift 2
done
for b in build/bench/ddp_train build/bench/gpt_train build/examples/allreduce_bench; do
  [[ -x $b ]] || { echo "$b missing: build first (scripts/test.sh)" >&2; exit 1; }
done
mkdir -p "$out"
cluster=tools/cluster.sh
trap '$cluster down >/dev/null' EXIT
master="${RINGGRAD_CLUSTER_SUBNET:-10.213.47}.10"  # rgc-h0, where mpirun and rank 0 run
rate_arg() { [[ $1 == unshaped ]] || echo "--rate $1"; }
up() {
  # shellcheck disable=SC2046 # no --rate for an unshaped link
  $cluster up "$1" $(rate_arg "$2") >/dev/null
}
# The figure of a RESULT line: samples_per_s or tokens_per_s.
figure() { grep '^RESULT' | grep -Eo '(samples|tokens)_per_s=[0-9.]+' | cut -d= -f2; }
median() { sort -g | awk '{ x[NR] = $1 } END { print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'; }
ringgrad() { # MODEL [flags]: one run on the cluster, its figure
  local model=$1
  shift
  local bin=build/bench/ddp_train args=(--model "$model")
  [[ $model == gpt ]] && bin=build/bench/gpt_train args=()
  $cluster run -- "$bin" "${args[@]}" --steps "$steps" --warmup 10 --threads 1 "$@" 2>&1 | figure
}
torch() { # MODEL
  local script=bench/ddp_train_torch.py args=(--model "$1")
  [[ $1 == gpt ]] && script=bench/gpt_train_torch.py args=()
  $cluster run -x MASTER_ADDR="$master" -- /usr/bin/python3 "$script" "${args[@]}" --steps "$steps" --warmup 10 \
    --threads 1 2>&1 | figure
}

echo "# busbw: AllReduce over the cluster"
printf 'rate\thosts\tbackend\tbytes\tbusbw_GBps\n' >"$out/busbw.tsv"
for rate in 1gbit 5gbit unshaped; do
  for hosts in 2 4; do
    up "$hosts" "$rate"
    $cluster run -- build/examples/allreduce_bench -b 1M -e 16M -f 4 -n 3 -w 1 -r 1 --backends ring,tree,mpi 2>&1 |
      awk -v r="$rate" -v h="$hosts" '/^# backend:/ { b = $3 }
        /^ +[0-9]/ { printf "%s\t%s\t%s\t%s\t%.4f\n", r, h, b, $1, $1 / ($4 * 1e3) * 2 * (h - 1) / h }' |
      tee -a "$out/busbw.tsv"
  done
done

echo "# W1 and W3 at 2 hosts: ringgrad and PyTorch DDP (gloo), alternating"
printf 'rate\tmodel\timpl\tper_s\n' >"$out/train.tsv"
for model in mlp gpt; do
  alone=$(for ((i = 0; i < rounds; i++)); do
    if [[ $model == gpt ]]; then build/bench/gpt_train --steps "$steps" --warmup 10 --threads 1 2>&1 | figure
    else build/bench/ddp_train --model mlp --steps "$steps" --warmup 10 --threads 1 2>&1 | figure; fi
  done | median)
  printf 'none\t%s\talone\t%s\n' "$model" "$alone" | tee -a "$out/train.tsv"
  for rate in 1gbit unshaped; do
    up 2 "$rate"
    : >"$out/.runs"
    for ((i = 0; i < rounds; i++)); do
      if ((i % 2)); then
        echo "torch $(torch "$model")" >>"$out/.runs"
        echo "ringgrad $(ringgrad "$model")" >>"$out/.runs"
      else
        echo "ringgrad $(ringgrad "$model")" >>"$out/.runs"
        echo "torch $(torch "$model")" >>"$out/.runs"
      fi
    done
    for impl in ringgrad torch; do
      printf '%s\t%s\t%s\t%s\n' "$rate" "$model" "$impl" "$(awk -v i=$impl '$1 == i { print $2 }' "$out/.runs" | median)" |
        tee -a "$out/train.tsv"
    done
  done
done
rm -f "$out/.runs"

echo "# W1 at 2 hosts: DDP's bucket cap"
printf 'rate\tbucket_mb\tsamples_per_s\n' >"$out/buckets.tsv"
for rate in 1gbit unshaped; do
  up 2 "$rate"
  for mb in 0.25 1 4 16 64; do
    printf '%s\t%s\t%s\n' "$rate" "$mb" "$(ringgrad mlp --bucket-mb "$mb" --first-bucket-mb "$mb")" | tee -a "$out/buckets.tsv"
  done
done

echo "# W1 at 1 Gbit/s: 1 -> 2 -> 4 hosts"
printf 'hosts\tsamples_per_s\n' >"$out/scaling.tsv"
printf '1\t%s\n' "$(build/bench/ddp_train --model mlp --steps "$steps" --warmup 10 --threads 1 2>&1 | figure)" |
  tee -a "$out/scaling.tsv"
for hosts in 2 4; do
  up "$hosts" 1gbit
  printf '%s\t%s\n' "$hosts" "$(ringgrad mlp)" | tee -a "$out/scaling.tsv"
done

if command -v gnuplot >/dev/null; then
  gnuplot -e "out='$out'" bench/cluster_charts.gp && echo "# charts: $out/*.png"
else
  echo "# no gnuplot: charts skipped (apt-get install gnuplot-nox)"
fi
