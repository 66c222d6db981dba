#!/usr/bin/env bash
# A cluster of K "hosts" on one Linux machine, to train across machines without having them: each
# host is a network namespace (its own interfaces, addresses and TCP stack) plus, for every process
# started in it, a UTS namespace (its own hostname). The hosts hang on a bridge that lives in a
# namespace of its own, so the machine's own network is never touched: every address of the cluster
# exists only inside the namespaces this script made, and nothing is routed anywhere else.
#
#   tools/cluster.sh up K [--rate RATE] [--same-hostname] [--dir DIR]   # hosts rgc-h0 .. rgc-h<K-1>
#   tools/cluster.sh run [--np N] [--per-host P] [MPIRUN-ARGS...] -- PROGRAM [ARGS...]
#   tools/cluster.sh exec HOST COMMAND [ARGS...]    # one command on one host (its hostname set)
#   tools/cluster.sh link HOST up|down              # cut or restore one host's cable
#   tools/cluster.sh status                          # is it up; the hosts, rate and files
#   tools/cluster.sh down                            # remove exactly what `up` made (idempotent)
#
#        rgc-h0 (10.213.47.10)   rgc-h1 (10.213.47.11)   ...
#            veth h0 |               veth h1 |
#        ------------+------ rgc-br (bridge, in namespace rgc-sw) ------+-----
#
# --rate shapes each cable in both directions with a token bucket (tc tbf; e.g. 1gbit, 5gbit): a
# host's own egress and the bridge's port towards it, so a message host A -> host B is limited once on
# A's cable and once on B's, as through a real switch. Latency cannot be added: tc's netem qdisc is
# not available on every kernel (it is not on the machines this project tests on), and a tbf delay
# only holds packets behind the rate.
#
# `run` starts Open MPI's mpirun on host rgc-h0 with a hostfile of the cluster and an rsh agent that
# starts each remote host's daemon in that host's namespaces (no ssh: `ip netns exec HOST unshare
# --uts`). Ranks are placed P per host (--per-host, default 1), by host: ranks 0..P-1 on rgc-h0, and
# so on. Every rank gets one compute thread (OMP/OpenBLAS/ringgrad's own): K hosts x P ranks on a
# two-core machine oversubscribe it by K*P/2 -- the tests that use this say so.
#
# Cores: a real host computes and runs its network stack on cores of its own, so each host here is
# confined to its own share of the machine's cores (taskset: with K <= cores, cores/K each; with
# more hosts, core i mod cores), and mpirun binds nothing further (--bind-to none). Without that,
# every host's daemon bound its first rank to core 0 -- two hosts' ranks shared one core at half
# speed -- and unbound, a host's waiting threads took the cores another host's traffic needed.
#
# --same-hostname leaves every host the machine's own hostname (no UTS namespace), as containers on
# host networking have: MPI still tells the hosts apart, and so must ringgrad.
#
# Files (hostfile, the rsh agent, the state) live in --dir, default /tmp/ringgrad-cluster; the
# hosts' /etc/hosts in /etc/netns/rgc-h<i>/ (ip netns exec binds it over /etc/hosts in the host).
# Names are fixed (prefix RINGGRAD_CLUSTER_PREFIX, default rgc), so `down` also cleans up after a
# crash. Needs root and iproute2's `ip netns`; refuses otherwise (exit 77: "cannot be made here").
set -euo pipefail
# --help, --version (scripts/cli.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/cli.sh"
cli_answer_help_and_version "$@"

prefix=${RINGGRAD_CLUSTER_PREFIX:-rgc}
subnet=${RINGGRAD_CLUSTER_SUBNET:-10.213.47}  # a /24 that exists only inside the cluster
dir=${RINGGRAD_CLUSTER_DIR:-/tmp/ringgrad-cluster}
switch_ns="${prefix}-sw"
bridge="${prefix}-br"

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
# "Cannot be made here": CTest's fixture turns this exit code into a skip (SKIP_RETURN_CODE 77).
cannot() {
  echo "cluster.sh: cannot make a cluster here: $*" >&2
  exit 77
}

host_name() { echo "${prefix}-h$1"; }
host_addr() { echo "${subnet}.$((10 + $1))"; }

require_capable() {
  [[ $(id -u) == 0 ]] || cannot "network namespaces need root (running as uid $(id -u))"
  command -v ip >/dev/null || cannot "iproute2's 'ip' is not installed"
  command -v unshare >/dev/null || cannot "util-linux's 'unshare' is not installed"
  ip netns list >/dev/null 2>&1 || cannot "'ip netns' does not work here: $(ip netns list 2>&1 | head -n 1)"
}

hosts_up() { ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^${prefix}-h[0-9]*$" || true; }

cmd_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(h[0-9]+|sw)$" || true); do
    # Processes left in a host (a crashed run) keep its namespace alive: end them first.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086 # one pid a word
    if [[ -n $pids ]]; then kill -9 $pids 2>/dev/null || true; fi
    ip netns delete "$ns" 2>/dev/null || true
  done
  rm -rf /etc/netns/"${prefix}"-h* "$dir"
  echo "cluster.sh: down (no ${prefix}-* namespace left)"
}

# tbf on one interface's egress: RATE, a burst of 1 ms at that rate (at least 64 KiB, so that TSO
# segments pass), and at most 4 ms of queue: a switch port's buffer (with 1 ms a TCP stream no
# longer reaches the rate; 20 ms only adds delay).
shape() {
  local ns=$1 dev=$2 rate=$3
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$(burst_bytes "$rate")" latency 4ms
}
burst_bytes() {
  local rate=$1 bits
  case $rate in
    *gbit) bits=$((${rate%gbit} * 1000000000)) ;;
    *mbit) bits=$((${rate%mbit} * 1000000)) ;;
    *) die "--rate '$rate': give it as <N>gbit or <N>mbit" ;;
  esac
  local b=$((bits / 8 / 1000))
  ((b < 65536)) && b=65536
  echo "$b"
}

cmd_up() {
  local k=${1:-}
  shift || true
  local rate="" uts=1
  while (($#)); do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      --same-hostname) uts=0; shift ;;
      --dir) dir=$2; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= 32)) || die "up: K must be a number of hosts, 1..32 (got '$k')"
  require_capable
  [[ -z $rate ]] || burst_bytes "$rate" >/dev/null
  cmd_down >/dev/null
  mkdir -p "$dir"

  ip netns add "$switch_ns"
  ip -n "$switch_ns" link add "$bridge" type bridge
  ip -n "$switch_ns" link set "$bridge" up
  local i h hosts_file="$dir/hosts"
  : >"$hosts_file"
  for ((i = 0; i < k; i++)); do
    echo "$(host_addr "$i") $(host_name "$i")" >>"$hosts_file"
  done
  for ((i = 0; i < k; i++)); do
    h=$(host_name "$i")
    ip netns add "$h"
    # The pair is made inside the switch's namespace, and one end moved to the host's: no interface
    # of the cluster ever appears in the machine's own namespace.
    ip -n "$switch_ns" link add "p$i" type veth peer name eth0 netns "$h"
    ip -n "$switch_ns" link set "p$i" master "$bridge" up
    ip -n "$h" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    if [[ -n $rate ]]; then
      shape "$h" eth0 "$rate"
      shape "$switch_ns" "p$i" "$rate"
    fi
    mkdir -p "/etc/netns/$h"
    { echo "127.0.0.1 localhost"; cat "$hosts_file"; } >"/etc/netns/$h/hosts"
  done

  # Each host's share of the cores (see the top of this file).
  local cores i_first i_last
  cores=$(nproc)
  for ((i = 0; i < k; i++)); do
    if ((k <= cores)); then
      i_first=$((i * cores / k)) i_last=$(((i + 1) * cores / k - 1))
      echo "${i_first}-${i_last}" >"$dir/cpus.$(host_name "$i")"
    else
      echo "$((i % cores))" >"$dir/cpus.$(host_name "$i")"
    fi
  done

  # The hostfile names the hosts; slots are set by `run` (--per-host).
  : >"$dir/hostfile"
  for ((i = 0; i < k; i++)); do host_name "$i" >>"$dir/hostfile"; done
  # Open MPI's rsh launcher calls "AGENT HOST COMMAND..." and, as with ssh, the command is one shell
  # line: run it in the host's namespaces with the host's name.
  # shellcheck disable=SC2016 # $host is the agent's variable, expanded when the agent runs
  local name_it='hostname $host && '
  ((uts)) || name_it=""
  cat >"$dir/rsh" <<EOF
#!/bin/sh
# rsh agent of the ringgrad test cluster (tools/cluster.sh): run a command "on" a host.
host=\$1
shift
exec taskset -c "\$(cat "$dir/cpus.\$host")" ip netns exec "\$host" unshare --uts sh -c "${name_it}\$*"
EOF
  chmod +x "$dir/rsh"
  printf 'hosts=%s\nrate=%s\nsubnet=%s.0/24\nuts=%s\n' "$k" "${rate:-unshaped}" "$subnet" "$uts" >"$dir/state"
  echo "cluster.sh: up: $k host(s) ${prefix}-h0..${prefix}-h$((k - 1)) on ${subnet}.0/24, cables ${rate:-unshaped}"
}

cmd_exec() {
  local h=$1
  shift
  ip netns list | awk '{print $1}' | grep -qx "$h" || die "exec: no host '$h' (tools/cluster.sh status)"
  local cpus
  cpus=$(cat "$dir/cpus.$h")
  if [[ $(sed -n 's/^uts=//p' "$dir/state" 2>/dev/null) == 0 ]]; then
    exec taskset -c "$cpus" ip netns exec "$h" "$@"
  fi
  exec taskset -c "$cpus" ip netns exec "$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

cmd_run() {
  [[ -f $dir/state ]] || die "run: the cluster is not up (tools/cluster.sh up K)"
  local k np="" per_host=1 mpi_args=()
  k=$(sed -n 's/^hosts=//p' "$dir/state")
  while (($#)) && [[ $1 != -- ]]; do
    case $1 in
      --np) np=$2; shift 2 ;;
      --per-host) per_host=$2; shift 2 ;;
      *) mpi_args+=("$1"); shift ;;
    esac
  done
  [[ ${1:-} == -- ]] || die "run: give the program after '--'"
  shift
  (($#)) || die "run: no program given"
  np=${np:-$((k * per_host))}
  ((np <= k * per_host)) || die "run: --np $np ranks do not fit $k host(s) x --per-host $per_host"
  local hostfile="$dir/hostfile.p$per_host"
  sed "s/\$/ slots=$per_host/" "$dir/hostfile" >"$hostfile"
  # The first host runs mpirun; its daemons and the ranks talk over the cluster's subnet only.
  cmd_exec "$(host_name 0)" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np "$np" --hostfile "$hostfile" --map-by slot --bind-to none \
    --mca plm_rsh_agent "$dir/rsh" \
    --mca oob_tcp_if_include "${subnet}.0/24" --mca btl_tcp_if_include "${subnet}.0/24" \
    --mca btl self,vader,tcp \
    -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x RINGGRAD_NUM_THREADS=1 \
    "${mpi_args[@]}" "$@"
}

cmd_link() {
  local h=$1 state=$2 i=${1##*-h}
  [[ $state == up || $state == down ]] || die "link: say up or down"
  ip -n "$switch_ns" link set "p$i" "$state"
}

cmd_status() {
  # Up: the state file, and every host it names still there (a crash or a reboot may have left one
  # without the other).
  if [[ -f $dir/state && $(hosts_up) == "$(sed -n 's/^hosts=//p' "$dir/state")" ]]; then
    cat "$dir/state"
    echo "hosts up: $(hosts_up)"
    echo "hostfile: $dir/hostfile; rsh agent: $dir/rsh"
  else
    echo "cluster.sh: down"
    return 1
  fi
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) require_capable; cmd_down ;;
  run) shift; cmd_run "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  link) shift; cmd_link "$@" ;;
  status) cmd_status ;;
  *) cli_usage_error "unknown command '${1:-}'" ;;
esac
