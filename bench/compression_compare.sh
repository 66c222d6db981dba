#!/usr/bin/env bash
# Gradient compression across a slow link, measured: W1 (the MLP of ../shared/WORKLOADS.md) on 2
# hosts of the namespace cluster (tools/cluster.sh, one rank per host, one thread per rank) at 1
# Gbit/s, with each of ringgrad's communication hooks beside PyTorch DDP (gloo) with its comparable
# hooks, on the same links, in one run. docs/compression.md shows its output.
#
#   bench/compression_compare.sh [--rounds 2] [--steps 60] [--rate 1gbit] [--out DIR]   # as root; ~7 min
#
#   hooks.tsv   (in --out, default docs/compression/) impl hook samples/s wire_bytes_per_step: the
#               median of --rounds runs, the hooks of one round in turn and the rounds in
#               alternating order; wire bytes are ringgrad's own messages (dist::transport_bytes(),
#               per rank), blank for torch
#
# PyTorch's peers: allreduce and fp16 (default_hooks.fp16_compress_hook). Its bf16 hook needs CUDA
# and NCCL, and its PowerSGD hook aborts over gloo in Debian's PyTorch 1.13 (a gloo size
# mismatch, "op.preamble.length <= op.nbytes"), so neither runs here.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=2 steps=60 rate=1gbit out=docs/compression
while (($#)); do
  case $1 in
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --rate) rate=$2 ;;
    --out) out=$2 ;;
    *) echo "usage: $0 [--rounds N] [--steps N] [--rate RATE] [--out DIR]" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x build/bench/ddp_train ]] || { echo "build/bench/ddp_train missing: build first (scripts/test.sh)" >&2; exit 1; }
mkdir -p "$out"
cluster=tools/cluster.sh
trap '$cluster down >/dev/null' EXIT
master="${RINGGRAD_CLUSTER_SUBNET:-10.213.47}.10"  # rgc-h0, where mpirun and rank 0 run
$cluster up 2 --rate "$rate" >/dev/null

ringgrad_hooks=(allreduce fp16 bf16 fp8-e4m3 fp8-e5m2 powersgd)
torch_hooks=(allreduce fp16)
# A run that hangs (a peer's rendezvous has been seen to) is cut after 5 minutes and counts as no figure.
run_ringgrad() { # HOOK -> "samples/s wire_bytes"
  timeout 300 $cluster run -- build/bench/ddp_train --model mlp --steps "$steps" --warmup 20 --threads 1 --comm-hook "$1" 2>&1 |
    { grep '^RESULT' || true; } | sed -E 's/.*samples_per_s=([0-9.]+).*wire_bytes_per_step=([0-9.]+).*/\1 \2/'
}
run_torch() { # HOOK -> "samples/s"
  timeout 300 $cluster run -x MASTER_ADDR="$master" -- /usr/bin/python3 bench/ddp_train_torch.py --model mlp --steps "$steps" \
    --warmup 20 --threads 1 --comm-hook "$1" 2>&1 | { grep '^RESULT' || true; } | grep -Eo 'samples_per_s=[0-9.]+' | cut -d= -f2 || true
}
median() { sort -g | awk '{ x[NR] = $1 } END { print (NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2) }'; }

: >"$out/.runs"
for ((i = 0; i < rounds; i++)); do
  one_round() {
    for h in "${ringgrad_hooks[@]}"; do echo "ringgrad $h $(run_ringgrad "$h")" >>"$out/.runs"; done
    for h in "${torch_hooks[@]}"; do echo "torch $h $(run_torch "$h")" >>"$out/.runs"; done
  }
  if ((i % 2)); then # the other order: torch first, ringgrad's hooks reversed
    for h in "${torch_hooks[@]}"; do echo "torch $h $(run_torch "$h")" >>"$out/.runs"; done
    for ((k = ${#ringgrad_hooks[@]} - 1; k >= 0; k--)); do
      h=${ringgrad_hooks[k]}
      echo "ringgrad $h $(run_ringgrad "$h")" >>"$out/.runs"
    done
  else
    one_round
  fi
done
printf 'impl\thook\tsamples_per_s\twire_bytes_per_step\n' >"$out/hooks.tsv"
for h in "${ringgrad_hooks[@]}"; do
  printf 'ringgrad\t%s\t%s\t%s\n' "$h" "$(awk -v h="$h" '$1 == "ringgrad" && $2 == h { print $3 }' "$out/.runs" | median)" \
    "$(awk -v h="$h" '$1 == "ringgrad" && $2 == h { print $4 }' "$out/.runs" | median)" | tee -a "$out/hooks.tsv"
done
for h in "${torch_hooks[@]}"; do
  printf 'torch\t%s\t%s\t\n' "$h" "$(awk -v h="$h" '$1 == "torch" && $2 == h { print $3 }' "$out/.runs" | median)" |
    tee -a "$out/hooks.tsv"
done
rm -f "$out/.runs"
