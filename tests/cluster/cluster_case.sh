#!/usr/bin/env bash
# Training across machines, on the namespace cluster of tools/cluster.sh (docs/across_machines.md).
# CTest runs one case per test (label cluster); `up` and `down` are the fixture around them.
#
#   cluster_case.sh up | down
#   cluster_case.sh same LAYOUT MNIST BACKEND [--zero N ...]   # N ranks end where one process ends
#   cluster_case.sh dist LAYOUT TEST_DIST [doctest args]       # test_dist's cases across the hosts
#   cluster_case.sh same_hostname MNIST   # two hosts named alike: a legal layout, never refused
#   cluster_case.sh resume MNIST DIR      # a checkpoint written at 2 hosts x 2 resumes at 1 x 3
#   cluster_case.sh sigkill MNIST DIR     # a rank killed on the other host: diagnosed, no hang
#   cluster_case.sh linkdown MNIST DIR    # a cable pulled mid-step: diagnosed, no hang
#
# LAYOUT is HOSTSxRANKS: 2x2 (ranks 0,1 on rgc-h0 and 2,3 on rgc-h1) or 3x1. Every rank computes on
# one thread: at 2x2 four ranks share the machine's two cores (2x oversubscribed), which only slows
# these correctness runs. Exit 77 (CTest: skipped) when the cluster is not up -- `up` could not make
# it here (not root, no `ip netns`) and said why.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster="$root/tools/cluster.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
need_cluster() {
  "$cluster" status >/dev/null 2>&1 || {
    echo "skipped: the test cluster is not up (cluster_up could not make it here; see its output)"
    exit 77
  }
}
# HOSTSxRANKS -> "NP PER_HOST"
layout() {
  [[ $1 =~ ^([0-9]+)x([0-9]+)$ ]] || fail "layout '$1' is not HOSTSxRANKS"
  echo "$((BASH_REMATCH[1] * BASH_REMATCH[2])) ${BASH_REMATCH[2]}"
}
# The figures the mnist example ends with: "parameter checksum C, norm N".
checksum_of() { grep -Eo 'parameter checksum -?[0-9.e+-]+' "$1" | tail -n 1 | awk '{print $3}'; }
# |a - b| <= tol * |b|
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= t * m) }'; }

# Wait (at most $2 s) until file $1 exists.
wait_for_file() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [[ -s $1 ]] && return 0
    sleep 0.1
  done
  return 1
}
# The pids of PROGRAM's processes on HOST.
pids_on() { for p in $(ip netns pids "$1" 2>/dev/null); do [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$2" ]] && echo "$p"; done; }

case_same() {
  local np per_host
  read -r np per_host <<<"$(layout "$1")"
  local mnist=$2 backend=$3
  shift 3
  # same_as_one_rank.sh's one-process run starts here; its N-rank run through the cluster's mpirun.
  MPIRUN="$here/mpirun.sh" NP_FLAG=--np MPIRUN_ARGS="--per-host $per_host --" \
    bash "$root/tools/same_as_one_rank.sh" mnist "$mnist" "$np" 32 --model mlp --limit-steps 30 --threads 1 \
    --backend "$backend" "$@"
}

case_dist() {
  local np per_host
  read -r np per_host <<<"$(layout "$1")"
  shift
  "$cluster" run --np "$np" --per-host "$per_host" -- "$@"
}

case_same_hostname() {
  local mnist=$1
  out=$(mktemp)  # global: the EXIT trap reads it
  # A cluster of its own, beside the fixture's: other names, another subnet, another folder.
  export RINGGRAD_CLUSTER_PREFIX=rgs RINGGRAD_CLUSTER_SUBNET=10.213.48 RINGGRAD_CLUSTER_DIR=/tmp/ringgrad-cluster-same
  trap '"$cluster" down >/dev/null 2>&1; rm -f "$out"' EXIT
  "$cluster" up 2 --same-hostname || exit $?
  "$cluster" run -- "$mnist" --limit-steps 10 --threads 1 >"$out" 2>&1
  local rc=$?
  cat "$out"
  ((rc == 0)) || fail "two hosts with one hostname: the run failed (exit $rc)"
  grep -q "hostname '$(hostname)' is reported from 2 machines" "$out" || fail "no note on the shared hostname"
  grep -q "parameter checksum" "$out" || fail "the run did not finish"
  echo "two hosts named $(hostname): trained, with the layout note"
}

case_resume() {
  local mnist=$1 dir=$2
  rm -rf "$dir" && mkdir -p "$dir"
  # 2 hosts x 2 ranks x batch 3 = 12 a step; 20 steps, then the checkpoint.
  "$cluster" run --np 4 --per-host 2 -- "$mnist" --batch-size 3 --limit-steps 20 --checkpoint-every 20 \
    --checkpoint "$dir/ck" --threads 1 >"$dir/first.txt" 2>&1 || { cat "$dir/first.txt"; fail "the 2x2 run failed"; }
  # 1 host x 3 ranks x batch 4 = 12 a step: steps 21..40 from the checkpoint.
  "$cluster" run --np 3 --per-host 3 -- "$mnist" --batch-size 4 --limit-steps 40 --resume "$dir/ck" \
    --threads 1 >"$dir/resumed.txt" 2>&1 || { cat "$dir/resumed.txt"; fail "the 1x3 resume failed"; }
  # The reference: one process, batch 12, 40 steps.
  "$mnist" --batch-size 12 --limit-steps 40 --threads 1 >"$dir/one.txt" 2>&1 || fail "the one-process run failed"
  local got want
  got=$(checksum_of "$dir/resumed.txt") want=$(checksum_of "$dir/one.txt")
  echo "parameter checksum: 2x2 then 1x3 $got, one process $want"
  [[ -n $got && -n $want ]] || fail "a run printed no checksum"
  close "$got" "$want" 1e-5 || fail "resumed at 1x3, the parameters differ from one process's"
}

# Common to sigkill and linkdown: 2 hosts x 1 rank, 8 s collective timeout, a checkpoint every 20
# steps; returns once the first checkpoint is on disk (the run goes on in the background).
start_training() {
  local mnist=$1 dir=$2
  rm -rf "$dir" && mkdir -p "$dir"
  "$cluster" status >/dev/null
  (
    RINGGRAD_COLLECTIVE_TIMEOUT=8 exec "$cluster" run --np 2 --mca orte_abort_on_non_zero_status 0 \
      -x RINGGRAD_COLLECTIVE_TIMEOUT -- "$mnist" --epochs 1 --batch-size 32 --checkpoint "$dir/ck" \
      --checkpoint-every 20 --threads 1 >"$dir/out.txt" 2>&1
  ) &
  run_pid=$!
  wait_for_file "$dir/ck" 60 || { cat "$dir/out.txt"; fail "no checkpoint within 60 s"; }
  sleep 1
}
# The last checkpoint is whole: one process resumes from it (2 x 32 = 64 a step).
check_checkpoint() {
  local mnist=$1 dir=$2
  "$mnist" --batch-size 64 --resume "$dir/ck" --limit-steps 1000000 --epochs 1 --threads 1 >"$dir/after.txt" 2>&1 ||
    { cat "$dir/after.txt"; fail "the last checkpoint does not load"; }
  grep -q "parameter checksum" "$dir/after.txt" || fail "the resumed run did not finish"
  echo "the last checkpoint loads and training resumes from it"
}
# Rank R's diagnosis names the op, its bytes, the timeout, its own host and the other rank's.
check_diagnosis() {
  local out=$1 rank=$2 host=$3 other=$4
  grep -E "rank $rank/2 timed out after 8 s\. This rank runs on $host\." "$out" | grep -E "allreduce #[0-9]+ .*[0-9]+ bytes" |
    grep -q "rank $((1 - rank)) on $other" || fail "rank $rank has no diagnosis naming op, bytes, its host and rank $((1 - rank)) on $other"
}

case_sigkill() {
  local mnist=$1 dir=$2
  start_training "$mnist" "$dir"
  local victim
  victim=$(pids_on rgc-h1 mnist)
  [[ -n $victim ]] || fail "no rank on rgc-h1 to kill"
  kill -9 $victim
  local t0=$SECONDS
  # mpirun must end: the survivor's timeout (8 s) and teardown, well within 60 s.
  timeout 60 tail --pid="$run_pid" -f /dev/null || fail "the run did not end within 60 s of the kill (a hang)"
  wait "$run_pid"
  local rc=$?
  cat "$dir/out.txt" | grep -v '^epoch'
  echo "ended $((SECONDS - t0)) s after the kill, exit $rc"
  ((rc != 0)) || fail "the run reported success with a rank killed"
  check_diagnosis "$dir/out.txt" 0 rgc-h0 rgc-h1
  check_checkpoint "$mnist" "$dir"
}

case_linkdown() {
  local mnist=$1 dir=$2
  start_training "$mnist" "$dir"
  "$cluster" link rgc-h1 down
  local t0=$SECONDS i
  trap '"$cluster" link rgc-h1 up' EXIT
  # Both ranks end by their own timeout while the cable is out: rank 0's words reach us at once; rank
  # 1's process must be gone from rgc-h1 (its words travel through mpirun, over the dead cable).
  for ((i = 0; i < 300; i++)); do
    [[ -z $(pids_on rgc-h0 mnist) && -z $(pids_on rgc-h1 mnist) ]] && break
    sleep 0.1
  done
  local ended=$((SECONDS - t0))
  [[ -z $(pids_on rgc-h0 mnist) && -z $(pids_on rgc-h1 mnist) ]] || fail "a rank still runs 30 s after the cable was pulled"
  echo "both ranks ended ${ended} s after the cable was pulled (timeout 8 s)"
  "$cluster" link rgc-h1 up
  timeout 60 tail --pid="$run_pid" -f /dev/null || fail "mpirun did not end within 60 s of the cable's return"
  wait "$run_pid"
  local rc=$?
  grep -v '^epoch' "$dir/out.txt"
  ((rc != 0)) || fail "the run reported success with its cable pulled"
  check_diagnosis "$dir/out.txt" 0 rgc-h0 rgc-h1
  check_diagnosis "$dir/out.txt" 1 rgc-h1 rgc-h0
  check_checkpoint "$mnist" "$dir"
}

what=${1:-}
shift || true
case $what in
  up) exec "$cluster" up 3 ;;
  down) exec "$cluster" down ;;
  same) need_cluster; case_same "$@" ;;
  dist) need_cluster; case_dist "$@" ;;
  same_hostname) case_same_hostname "$@" ;;
  resume) need_cluster; case_resume "$@" ;;
  sigkill) need_cluster; case_sigkill "$@" ;;
  linkdown) need_cluster; case_linkdown "$@" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
