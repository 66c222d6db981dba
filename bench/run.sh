#!/usr/bin/env bash
# The benchmark suite: ringgrad against PyTorch on the workloads of ../shared/WORKLOADS.md,
# side by side in one run, then one table, a JSON file and a chart (bench/report.py).
#
#   bench/run.sh [--quick | --smoke] [--rounds N] [--out DIR] [--only w1,w2,w3,w4] [--publish]
#
#   (default)   the full suite, about 30 minutes on a 2-core machine: W1-W3 with 20 warm-up and 200
#               timed steps per run (WORKLOADS.md's rule), W1 3 rounds, W2 3, W3 2 (a W3 round is ~7
#               minutes), W4 3 rounds of 1 MiB..256 MiB.
#   --quick     about 3 minutes: fewer steps (W1 100, W2 40, W3 20), 1-2 rounds, W4 up to 16 MiB.
#               Indicative only: too few steps for WORKLOADS.md, and the table says so.
#   --smoke     seconds per run (5 steps, W4 1-4 MiB): checks the driver and the report, not speed.
#   --rounds N  rounds for every workload instead of the mode's defaults.
#   --out DIR   where raw outputs, results.json, table.md and benchmarks.png go (bench/results).
#   --only LIST a subset of w1 (MLP), w2 (CNN), w3 (GPT-mini), w4 (AllReduce); default all.
#   --publish   also copy the chart to docs/benchmarks.png and the table into docs/benchmarks.md
#               (full mode only).
#
# Needs the build (scripts/setup.sh, then scripts/test.sh, which builds build/) and Debian's PyTorch
# for /usr/bin/python3; the chart wants python3-matplotlib or gnuplot. `scripts/setup.sh --bench`
# installs both.
#
# What runs. First the ceilings: build/bench/micro_ops --ceilings-only with 1 and with 2 threads (the
# sgemm peak per thread count, one core's memcpy bandwidth), so each figure is set against a ceiling
# measured on the same machine in the same run; again at the end, and the report takes the better of
# the two (another process's busy moment can only lower a ceiling). Between them, per workload, per
# round, per variant
#   (a) one process, 1 thread   (b) one process, 2 threads   (c) mpirun -np 2 --bind-to core, 1 thread
# the ringgrad program and two PyTorch peers back to back: bench/'s own and, for W1-W3, the reference
# loop of ../shared/peers (PEERS_DIR), which was written independently of bench/; each ratio is
# against the faster of the two:
#   W1 / W2  build/bench/ddp_train --model mlp|cnn        bench/ddp_train_torch.py, fmnist_torch_bench.py
#   W3       build/bench/gpt_train                        bench/gpt_train_torch.py, gpt_torch_bench.py
#   W4 (c)   build/examples/allreduce_bench, backends     bench/allreduce_torch.py (gloo)
#            MPI_Allreduce, ring, auto
#
# Why alternate, flip and take medians: the machines are shared and their speed drifts by 2-3x over
# seconds to minutes. Running the programs back to back puts all sides in the same moment; flipping
# the order every round (ringgrad first in odd rounds, last in even ones) keeps either side from
# always inheriting the other's warm caches or a slow spell; the median over rounds ignores one bad
# run, and min-max shows the spread. Ratios mean something within one run, not across runs. For the
# same reason allreduce_bench gets its backend list rotated every round.
#
# Both sides run under the same environment: whatever OPENBLAS_CORETYPE (preset on these machines),
# OMP_WAIT_POLICY etc. the caller has is left as it is and recorded in the results. (The PyTorch peers
# default OMP_WAIT_POLICY to PASSIVE themselves; see bench/ddp_train_torch.py.)
#
# Output: DIR/raw/ holds every program's stdout (first line: the command) and stderr, named
# WORKLOAD-VARIANT-IMPL-ROUND (IMPL: ringgrad, bf16 = ringgrad --precision bf16, torch = bench/'s peer,
# reference = ../shared/peers), plus ceilings-tTHREADS-{start,end}.txt and settings.txt; bench/report.py
# turns them into DIR/results.json, DIR/table.md and DIR/benchmarks.png and prints the table. A failed
# or timed-out run is reported and skipped; the script then exits 1 after the report.
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=full rounds_override='' out=bench/results only=w1,w2,w3,w4 publish=()
while (($#)); do
  case $1 in
    --quick) mode=quick ;;
    --smoke) mode=smoke ;;
    --rounds) rounds_override=${2:?--rounds needs a value}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --only) only=${2:?--only needs a list such as w1,w3}; shift ;;
    --publish) publish=(--publish) ;;
    *) cli_usage_error "unknown argument '$1'" ;;
  esac
  shift
done
[[ -z $rounds_override || $rounds_override =~ ^[1-9][0-9]*$ ]] || { echo "--rounds: expected a positive number" >&2; exit 2; }
IFS=, read -r -a workloads <<<"$only"
for w in "${workloads[@]}"; do
  [[ $w =~ ^w[1-4]$ ]] || { echo "--only: '$w' is not one of w1 w2 w3 w4" >&2; exit 2; }
done

# ---- settings per mode ---------------------------------------------------------------------------
declare -A steps warmup rounds
case $mode in
  full)
    steps=([w1]=200 [w2]=200 [w3]=200) warmup=([w1]=20 [w2]=20 [w3]=20)
    rounds=([w1]=3 [w2]=3 [w3]=2 [w4]=3)
    w4_sizes=(-b 1M -e 256M -f 4 -n 20 -w 5)
    run_timeout=900 ;;
  quick)
    steps=([w1]=100 [w2]=40 [w3]=20) warmup=([w1]=10 [w2]=5 [w3]=5)
    rounds=([w1]=2 [w2]=1 [w3]=1 [w4]=2)
    w4_sizes=(-b 1M -e 16M -f 4 -n 10 -w 3)
    run_timeout=300 ;;
  smoke)
    steps=([w1]=5 [w2]=5 [w3]=5) warmup=([w1]=2 [w2]=2 [w3]=2)
    rounds=([w1]=1 [w2]=1 [w3]=1 [w4]=1)
    w4_sizes=(-b 1M -e 4M -f 4 -n 2 -w 1)
    run_timeout=120 ;;
esac
if [[ -n $rounds_override ]]; then
  for w in w1 w2 w3 w4; do rounds[$w]=$rounds_override; done
fi

# ---- prerequisites -------------------------------------------------------------------------------
missing=()
for f in build/bench/micro_ops build/bench/ddp_train build/bench/gpt_train build/examples/allreduce_bench; do
  [[ -x $f ]] || missing+=("$f")
done
for d in /usr/share/datasets/fashion-mnist /usr/share/games/fortunes; do
  [[ -d $d ]] || missing+=("$d")
done
command -v mpirun >/dev/null || missing+=(mpirun)
if ((${#missing[@]})); then
  echo "run.sh: missing ${missing[*]}: run scripts/setup.sh --bench, then scripts/test.sh (it builds build/)" >&2
  exit 1
fi
if ! torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  echo "run.sh: /usr/bin/python3 cannot import torch, the peer of every workload: scripts/setup.sh --bench (installs python3-torch)" >&2
  exit 1
fi
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null && ! command -v gnuplot >/dev/null; then
  echo "run.sh: note: no plotter, so no chart (the table and JSON are still written):" \
    "scripts/setup.sh --bench (installs python3-matplotlib)" >&2
fi

# The reference PyTorch loops (../shared/peers, read-only, run from there): every W1-W3 ratio is
# against the faster of them and bench/'s own peer. PEERS_DIR overrides where they are.
peers_dir=${PEERS_DIR:-../shared/peers}
if [[ -f $peers_dir/fmnist_torch_bench.py && -f $peers_dir/gpt_torch_bench.py ]]; then
  peers_dir=$(cd "$peers_dir" && pwd)
else
  echo "run.sh: warning: no reference loops at $peers_dir (PEERS_DIR): W1-W3 are measured against" \
    "bench/'s own PyTorch peers only, and the table says so" >&2
  peers_dir=''
fi

# OpenMPI refuses to start as root unless told it is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun -np 2 --bind-to core)

raw=$out/raw
rm -rf "$raw"
mkdir -p "$raw"
failures=()

# record NAME COMMAND...: runs COMMAND (killed after $run_timeout s) with stdout to $raw/NAME.txt, its
# first line the command, and stderr to $raw/NAME.err; prints one progress line.
record() {
  local name=$1 started=$SECONDS status=0
  shift
  echo "# command: $*" >"$raw/$name.txt"
  timeout --kill-after=30 "$run_timeout" "$@" >>"$raw/$name.txt" 2>"$raw/$name.err" || status=$?
  if ((status == 0)); then
    # The headline: a training run's throughput, a ceiling's best, else just ok.
    printf '  %-20s %4ds  %s\n' "$name" $((SECONDS - started)) \
      "$(grep -o -e '[a-z_]*_per_s=[0-9.]*' -e '"samples_per_s": [0-9.]*' -e '"tokens_per_s_mean": [0-9.]*' \
        -e 'best [0-9.]* G[^,]*' "$raw/$name.txt" | paste -sd ' ' | grep . || echo ok)"
  else
    failures+=("$name")
    printf '  %-20s %4ds  FAILED (exit %d%s), last lines of %s:\n' "$name" $((SECONDS - started)) \
      "$status" "$( ((status == 124)) && echo ", timed out after ${run_timeout}s")" "$raw/$name.err"
    tail -n 5 "$raw/$name.err" | sed 's/^/      /'
  fi
}

# bench_command WORKLOAD VARIANT IMPL ROUND: sets `command` to that run's command line.
bench_command() {
  local workload=$1 variant=$2 impl=$3 round=$4
  case $workload-$impl in
    w1-ringgrad) command=(build/bench/ddp_train --model mlp) ;;
    w1-bf16) command=(build/bench/ddp_train --model mlp --precision bf16) ;;
    w1-torch) command=(/usr/bin/python3 bench/ddp_train_torch.py --model mlp) ;;
    w2-ringgrad) command=(build/bench/ddp_train --model cnn) ;;
    w2-torch) command=(/usr/bin/python3 bench/ddp_train_torch.py --model cnn) ;;
    w3-ringgrad) command=(build/bench/gpt_train) ;;
    w3-bf16) command=(build/bench/gpt_train --precision bf16) ;;
    w3-torch) command=(/usr/bin/python3 bench/gpt_train_torch.py) ;;
    w4-ringgrad)
      # The backend order rotates with the round, as the pair order flips.
      local backends=(MPI_Allreduce ring auto) k=$(((round - 1) % 3))
      local rotated=("${backends[@]:k}" "${backends[@]:0:k}")
      command=("${mpirun[@]}" build/examples/allreduce_bench "${w4_sizes[@]}" -r 1 -d f32
        --backends "$(IFS=,; echo "${rotated[*]}")")
      return ;;
    w4-torch) command=("${mpirun[@]}" /usr/bin/python3 bench/allreduce_torch.py "${w4_sizes[@]}" -d f32); return ;;
  esac
  case $variant in
    a) command+=(--threads 1) ;;
    b) command+=(--threads 2) ;;
    c) command=("${mpirun[@]}" "${command[@]}" --threads 1) ;;
  esac
  command+=(--steps "${steps[$workload]}" --warmup "${warmup[$workload]}")
}

# reference_command WORKLOAD VARIANT: sets `command` to the reference loop of ../shared/peers (its
# README: --threads N, --ddp 2 spawns both ranks itself) for W1-W3, or to nothing where there is none.
# Variant (b) passes --omp-wait-policy PASSIVE, which its own help recommends for two threads here.
reference_command() {
  local workload=$1 variant=$2
  command=()
  [[ -n $peers_dir ]] || return 0
  case $workload in
    w1) command=(/usr/bin/python3 "$peers_dir/fmnist_torch_bench.py" --model mlp) ;;
    w2) command=(/usr/bin/python3 "$peers_dir/fmnist_torch_bench.py" --model cnn) ;;
    w3) command=(/usr/bin/python3 "$peers_dir/gpt_torch_bench.py") ;;
    *) return 0 ;;
  esac
  case $variant in
    a) command+=(--threads 1) ;;
    b) command+=(--threads 2 --omp-wait-policy PASSIVE) ;;
    c) command+=(--ddp 2 --threads 1) ;;
  esac
  command+=(--steps "${steps[$workload]}" --warmup "${warmup[$workload]}")
}

# pair WORKLOAD VARIANT ROUND: ringgrad, bench/'s PyTorch peer and the reference loop back to back;
# ringgrad first in odd rounds, last in even ones. W1 and W3 also run ringgrad in bf16 (impl bf16,
# --precision bf16) beside its f32 run: the mixed-precision rows of the report.
pair() {
  local impls=(ringgrad torch reference) impl
  [[ $1 == w1 || $1 == w3 ]] && impls=(ringgrad bf16 torch reference)
  (($3 % 2)) || impls=($(printf '%s\n' "${impls[@]}" | tac))
  for impl in "${impls[@]}"; do
    if [[ $impl == reference ]]; then
      reference_command "$1" "$2"
      ((${#command[@]})) || continue
    else
      bench_command "$1" "$2" "$impl" "$3"
    fi
    record "$1-$2-$impl-$3" "${command[@]}"
  done
}

# ---- the run -------------------------------------------------------------------------------------
{
  echo "mode=$mode"
  for w in w1 w2 w3; do echo "steps_$w=${steps[$w]}"; echo "warmup_$w=${warmup[$w]}"; done
  for w in w1 w2 w3 w4; do echo "rounds_$w=${rounds[$w]}"; done
  echo "workloads=$only"
  echo "w4_sizes=${w4_sizes[*]}"
  echo "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo +changes)"
  echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  echo "cores=$(nproc)"
  echo "torch=$torch_version"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}"
  echo "OMP_WAIT_POLICY=${OMP_WAIT_POLICY-(unset)}"
  echo "peers_dir=${peers_dir:-(none)}"
  echo "RINGGRAD_ISA=${RINGGRAD_ISA-(unset)}"
  # the ISA ringgrad's CPU kernels selected (core/cpu_isa.h), as micro_ops reports it
  echo "cpu_isa=$(build/bench/micro_ops --ceilings-only --repeat 1 --warmup 0 2>/dev/null | sed -n 's/^# cpu isa: //p')"
} >"$raw/settings.txt"

case $mode in
  full) echo "# bench/run.sh: full suite (about 30 minutes), results in $out/" ;;
  quick) echo "# bench/run.sh --quick (about 3 minutes; fewer steps and rounds than WORKLOADS.md asks: indicative only)" ;;
  smoke) echo "# bench/run.sh --smoke (a few steps per run: checks the driver, the figures mean nothing)" ;;
esac

# ceilings WHEN: the sgemm peak with 1 and 2 threads and one core's memcpy, into ceilings-tN-WHEN.
ceilings() {
  echo "== ceilings ($1): micro_ops --ceilings-only, 1 and 2 threads"
  record "ceilings-t1-$1" build/bench/micro_ops --ceilings-only --threads 1 --repeat 5
  record "ceilings-t2-$1" build/bench/micro_ops --ceilings-only --threads 2 --repeat 5
}

ceilings start

declare -A titles=([w1]="W1 MLP" [w2]="W2 CNN" [w3]="W3 GPT-mini" [w4]="W4 AllReduce")
for w in "${workloads[@]}"; do
  if [[ $w == w4 ]]; then
    echo "== ${titles[$w]}: ${rounds[$w]} rounds, variant (c), ${w4_sizes[*]}"
    variants=(c)
  else
    echo "== ${titles[$w]}: ${rounds[$w]} rounds x (a b c), ${warmup[$w]} warm-up + ${steps[$w]} timed steps"
    variants=(a b c)
  fi
  for ((round = 1; round <= rounds[$w]; round++)); do
    for variant in "${variants[@]}"; do pair "$w" "$variant" "$round"; done
  done
done

ceilings end  # the report takes the better of start and end: a busy moment lowers a ceiling

echo "elapsed_s=$SECONDS" >>"$raw/settings.txt"
echo "== done in $((SECONDS / 60))m $((SECONDS % 60))s"
echo
/usr/bin/python3 bench/report.py "$out" "${publish[@]}"

if ((${#failures[@]})); then
  echo "run.sh: ${#failures[@]} run(s) failed: ${failures[*]} (see $raw/*.err)" >&2
  exit 1
fi
