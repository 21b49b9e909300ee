#!/usr/bin/env bash
# A real multi-node Slurm cluster on one machine, for the multi-node tests
# (tests/slurm/twonode.sh, tests/slurm/chaos.sh) and for trying
# slurm/train-multinode.sbatch: two (or RATCHET_SLURM2_NODES) slurmd, each in
# its own network and UTS namespace (hostnames rnode1, rnode2, ..., addresses
# 10.77.0.11, .12, ... on a bridge), one slurmctld and one munged in the
# machine's own namespaces. Partition `debug` (the default) holds rnode1 and
# rnode2 whatever the count, so the two-node tests see two nodes; with three or
# more, partition `all` holds every node (the chaos tests: a 2-node job there
# still fits when one node is excluded or down). Nothing in it touches the
# single-node cluster of scripts/slurm-cluster.sh: own config, ports, munge
# socket, spool, logs; the two run side by side.
#
#   sudo scripts/slurm-cluster-2node.sh check    # exit 0, or 3 and the reason namespaces cannot be made here
#   sudo scripts/slurm-cluster-2node.sh start    # idempotent; restarts what died; waits until both nodes are idle
#   sudo scripts/slurm-cluster-2node.sh status   # exit 0 when every daemon runs and both nodes are up
#   sudo scripts/slurm-cluster-2node.sh crash rnode2  # SIGKILL everything in that node's namespace (a power cut)
#   sudo scripts/slurm-cluster-2node.sh stop     # daemons by pid file, the namespaces' processes, links, namespaces
#                                                # (every node found, whatever RATCHET_SLURM2_NODES says)
#   eval "$(scripts/slurm-cluster-2node.sh env)" # SLURM_CONF for sbatch/srun/squeue against this cluster
#
# Open MPI between the nodes goes over TCP on the bridge: the test exports
# OMPI_MCA_btl_tcp_if_include / OMPI_MCA_oob_tcp_if_include = the subnet
# (`env` prints them too). Needs root, iproute2 (`ip`), util-linux (`unshare`)
# and the packages of scripts/install-deps.sh; no systemd, no cgroups.
# Recipe: docs/platform.md ("Nodes on one machine"); a checkout under /tmp:
# docs/slurm.md ("Two nodes on one machine").
#
# Environment (all optional):
#   RATCHET_SLURM2_NET            first three octets of the /24 (default 10.77.0):
#                                 .1 the bridge and slurmctld, .11/.12 the nodes
#   RATCHET_SLURM2_CPUS           CPUs each node advertises (default 2)
#   RATCHET_SLURM2_NODES          number of nodes, 2 to 9 (default 2); a start with another
#                                 count rewrites slurm.conf and restarts the daemons (a node
#                                 no longer listed is stopped and its namespace removed)
#   RATCHET_SLURM2_START_TIMEOUT  seconds to wait for both nodes to be idle (default 40)
#   RATCHET_SLURM2_SHARE          more paths (colon separated) that the nodes must see
#                                 although they lie under /tmp (e.g. a build directory)
#
# Each node mounts its own /tmp, as real nodes do. A path under /tmp is
# therefore invisible on the nodes unless it is bound into them: `start` binds
# this script's own checkout, when it lies under /tmp, and every path of
# RATCHET_SLURM2_SHARE under /tmp, at the same path inside each node's /tmp.
# The bound paths are part of the rendered slurm.conf (a comment), so a start
# from another checkout under /tmp restarts the node daemons with its binds.
set -euo pipefail

prog=slurm-cluster-2node.sh
net=${RATCHET_SLURM2_NET:-10.77.0}
cpus=${RATCHET_SLURM2_CPUS:-2}
start_timeout=${RATCHET_SLURM2_START_TIMEOUT:-40}
nnodes=${RATCHET_SLURM2_NODES:-2}
[[ $nnodes =~ ^[2-9]$ ]] ||
  { echo "$prog: error: RATCHET_SLURM2_NODES='$nnodes' is not a node count from 2 to 9" >&2; exit 2; }
nodes=()
for ((i = 1; i <= nnodes; i++)); do nodes+=("rnode$i"); done
ctld_port=6827   # the single-node cluster has 6817/6818
slurmd_port=6828
bridge=ratchet-br0
conf_dir=/etc/ratchet-slurm-2node
conf=$conf_dir/slurm.conf
run_dir=/run/ratchet-slurm-2node
log_dir=/var/log/ratchet-slurm-2node
spool=/var/spool/ratchet-slurm-2node
ctld_pid=$run_dir/slurmctld.pid
ctld_log=$log_dir/slurmctld.log
munge_dir=$run_dir/munge
munge_socket=$munge_dir/munge.socket
munge_pid=$munge_dir/munged.pid
munge_log=/var/log/munge/munged-2node.log
munge_key=/etc/munge/munge.key

case $net in
  *[!0-9.]* | *..* | .* | *.) echo "$prog: error: RATCHET_SLURM2_NET='$net' is not three octets (e.g. 10.77.0)" >&2; exit 2 ;;
esac
[ "$(tr -dc . <<<"$net")" = .. ] ||
  { echo "$prog: error: RATCHET_SLURM2_NET='$net' is not three octets (e.g. 10.77.0)" >&2; exit 2; }

# die, say, alive, stop_daemon, start_daemon, wait_pidfile
# shellcheck source-path=SCRIPTDIR source=slurm-daemon-lib.sh
. "$(dirname "$0")/slurm-daemon-lib.sh"

# The paths under /tmp each node must see, one per line, sorted, none inside
# another: this checkout and RATCHET_SLURM2_SHARE's. Dies (before anything
# starts) on a path that does not exist or that the node's sh -c line could
# not quote.
shared_tmp_paths() {
  local p k keep=() all=()
  all+=("$(cd "$(dirname "$0")/.." && pwd -P)")
  local IFS=:
  # shellcheck disable=SC2206  # split at colons on purpose
  all+=(${RATCHET_SLURM2_SHARE:-})
  unset IFS
  for p in "${all[@]}"; do
    [ -n "$p" ] || continue
    [ -e "$p" ] || die "RATCHET_SLURM2_SHARE: '$p' does not exist (the nodes cannot be given it)"
    p=$(cd "$p" 2>/dev/null && pwd -P || realpath "$p")
    case $p in /tmp/?*) ;; *) continue ;; esac
    [[ $p =~ ^[A-Za-z0-9._/+-]+$ ]] ||
      die "'$p' lies under /tmp, which each node mounts for itself, and its name has characters" \
          "the bind into the nodes cannot take: move the checkout (or build) out of /tmp or rename it"
    echo "$p"
  done | sort -u | while read -r p; do
    for k in "${keep[@]}"; do [[ $p == "$k"/* ]] && continue 2; done
    keep+=("$p")
    echo "$p"
  done
}

ns_of() { echo "ratchet-$1"; }                  # network namespace of a node
addr_of() { echo "$net.$((10 + ${1#rnode}))"; } # rnode1 -> .11
veth_of() { echo "rtc-$1"; }                    # the bridge side of its link
slurmd_pid_of() { echo "$run_dir/slurmd-$1.pid"; }
slurmd_log_of() { echo "$log_dir/slurmd-$1.log"; }
export SLURM_CONF=$conf
shared_tmp=""  # cmd_start: the paths under /tmp bound into each node

# check: can namespaces and links be made here? Prints the reason when not.
cmd_check() {
  [ "$(id -u)" -eq 0 ] || { echo "$prog: cannot make network namespaces: not root"; return 3; }
  local t
  for t in ip unshare nsenter; do
    command -v "$t" >/dev/null 2>&1 ||
      { echo "$prog: cannot make network namespaces: no '$t' (scripts/install-deps.sh installs iproute2)"; return 3; }
  done
  local err
  # A throwaway namespace: new network + UTS namespace, a veth pair inside it.
  if ! err=$(unshare --net --uts sh -c 'hostname rnode-probe && ip link add rp0 type veth peer name rp1' 2>&1); then
    echo "$prog: cannot make network/UTS namespaces or veth links here (no CAP_SYS_ADMIN/CAP_NET_ADMIN?): ${err:-unshare failed}"
    return 3
  fi
  echo "$prog: network and UTS namespaces and veth links work here"
}

need_tools() {
  local t missing=()
  for t in munged munge unmunge mungekey slurmctld slurmd sinfo scontrol runuser; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: run scripts/install-deps.sh first (as root)"
}

render_conf() {
  cat <<EOF
# Written by ratchet scripts/slurm-cluster-2node.sh: a two-node test cluster,
# each node a network + UTS namespace. Do not edit by hand; the script
# rewrites it when its settings change. Use: export SLURM_CONF=$conf
# Partition debug, as on the single-node cluster: the sbatch templates name it.
ClusterName=ci2node
SlurmctldHost=$(hostname -s)(${net}.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again;
# socket: this cluster's own munged (the single-node cluster keeps the default).
AuthInfo=cred_expire=10,socket=${munge_socket}
StateSaveLocation=${spool}/ctld
SlurmdSpoolDir=${spool}/%n
SlurmctldPidFile=${ctld_pid}
SlurmdPidFile=${run_dir}/slurmd-%n.pid
SlurmctldLogFile=${ctld_log}
SlurmdLogFile=${log_dir}/slurmd-%n.log
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmix
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
OverTimeLimit=0
MinJobAge=300
InactiveLimit=0
# A node whose slurmd stops answering is DOWN after 10 s (default 300), and
# its running jobs are requeued (they ask for it with --requeue).
SlurmdTimeout=10
# Bound into each node's own /tmp at the same path (scripts/slurm-cluster-2node.sh):
#   ${shared_tmp:-none}
$(for n in "${nodes[@]}"; do echo "NodeName=$n NodeAddr=$(addr_of "$n") CPUs=${cpus} RealMemory=1000 State=UNKNOWN"; done)
PartitionName=debug Nodes=rnode[1-2] Default=YES MaxTime=INFINITE State=UP
$( ((nnodes > 2)) && echo "PartitionName=all Nodes=rnode[1-$nnodes] MaxTime=INFINITE State=UP")
EOF
}

# Every node this cluster may have left behind: the ones configured now and
# any with a namespace or a slurmd pid file (a start or stop with another
# RATCHET_SLURM2_NODES).
all_known_nodes() {
  {
    printf '%s\n' "${nodes[@]}"
    find /run/netns -maxdepth 1 -name "ratchet-rnode[0-9]" -printf "%f\n" 2>/dev/null | sed "s/^ratchet-//"
    find "$run_dir" -maxdepth 1 -name "slurmd-rnode[0-9].pid" -printf "%f\n" 2>/dev/null | sed "s/^slurmd-//; s/\.pid$//"
  } | sort -u
}

# remove_node NODE: its slurmd, its processes, its link and namespace.
remove_node() {
  local n=$1 ns i
  ns=$(ns_of "$n")
  stop_daemon "$(slurmd_pid_of "$n")" slurmd
  kill_namespace "$n"
  ip link del "$(veth_of "$n")" 2>/dev/null || true
  if [ -e "/run/netns/$ns" ]; then
    # A killed process takes a moment to leave the namespace.
    for ((i = 0; i < 50; i++)); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    ip netns del "$ns" && say "deleted network namespace $ns"
  fi
}

start_munge() {
  install -d -m 0700 -o munge -g munge /etc/munge /var/lib/munge /var/log/munge
  install -d -m 0755 -o munge -g munge "$munge_dir"
  [ -s "$munge_key" ] || mungekey --create --keyfile="$munge_key"
  chown munge:munge "$munge_key"
  chmod 0400 "$munge_key"
  # start_daemon appends the program: sh -c puts the options after it ($0).
  start_daemon "$munge_pid" munged "$munge_log" runuser -u munge -- sh -c \
    "exec \"\$0\" --socket=$munge_socket --pid-file=$munge_pid --log-file=$munge_log \
      --seed-file=/var/lib/munge/munged-2node.seed --key-file=$munge_key"
  local i
  for ((i = 0; i < 50; i++)); do
    munge -S "$munge_socket" -n 2>/dev/null | unmunge -S "$munge_socket" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munge -n | unmunge fails on $munge_socket; see $munge_log"
}

# The network: a bridge with the controller's address, and per node a
# namespace joined to it by a veth pair. Each step is skipped when done.
start_network() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    say "created bridge $bridge"
  fi
  # Matched in a string, not `ip ... | grep -q`: under pipefail grep's early
  # exit can fail the pipe (SIGPIPE) and the address would be added twice.
  [[ $(ip addr show dev "$bridge") == *"inet ${net}.1/24"* ]] || ip addr add "${net}.1/24" dev "$bridge"
  ip link set "$bridge" up
  local n ns veth
  for n in "${nodes[@]}"; do
    ns=$(ns_of "$n") veth=$(veth_of "$n")
    if [ ! -e "/run/netns/$ns" ]; then
      ip netns add "$ns"
      say "created network namespace $ns"
    fi
    if ! ip link show "$veth" >/dev/null 2>&1; then
      ip netns exec "$ns" ip link del eth0 2>/dev/null || true
      ip link add "$veth" type veth peer name eth0 netns "$ns"
    fi
    ip link set "$veth" master "$bridge" up
    ip netns exec "$ns" ip link set lo up
    [[ $(ip netns exec "$ns" ip addr show dev eth0) == *"inet $(addr_of "$n")/24"* ]] ||
      ip netns exec "$ns" ip addr add "$(addr_of "$n")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
  done
}

# start_slurmd NODE: slurmd inside the node's network namespace and a new
# UTS namespace whose hostname is NODE (slurmd finds its NodeName by it).
# nsenter, not `ip netns exec`: that one remounts /sys, and slurmd then finds
# no /sys/fs/cgroup and refuses to start. A mount namespace gives each node
# its own /tmp, as real nodes have: Slurm's PMIx plugin and Open MPI keep
# per-step directories there under names that would collide. Everything else
# (the build tree, checkpoints, munge's socket) is shared, like NFS. A checkout
# under /tmp (shared_tmp_paths) is bound onto its mount point inside the node's
# /tmp first, then that /tmp with it (--rbind): the node sees it at its own
# path. unshare's mount namespace is private: none of this reaches the host.
start_slurmd() {
  local n=$1 p binds=""
  for p in $shared_tmp; do  # /tmp/a/b is bound onto the node's tmp/a/b
    install -d -m 0755 "$spool/$n/tmp${p#/tmp}"
    binds+="mount --bind $p $spool/$n/tmp${p#/tmp} && "
  done
  start_daemon "$(slurmd_pid_of "$n")" slurmd "$(slurmd_log_of "$n")" \
    nsenter --net="/run/netns/$(ns_of "$n")" unshare --uts --mount \
    sh -c "${binds}mount --rbind $spool/$n/tmp /tmp && hostname $n && exec \"\$0\" -f $conf"
}

# Node states as sinfo prints them, "rnode1=idle rnode2=idle".
node_states() {
  timeout 10 sinfo -h -N -o '%N=%T' 2>/dev/null | sort -u | tr '\n' ' '
}

wait_idle() {
  local deadline=$((SECONDS + start_timeout)) states="" n ok
  while ((SECONDS < deadline)); do
    states=$(node_states) || states=""
    ok=1
    for n in "${nodes[@]}"; do
      grep -qE "(^| )$n=(idle|mixed|allocated|completing)( |$)" <<<"$states" || ok=0
    done
    if ((ok)); then
      say "nodes: $states"
      return 0
    fi
    alive "$ctld_pid" slurmctld || die "slurmctld exited; see $ctld_log"
    for n in "${nodes[@]}"; do
      alive "$(slurmd_pid_of "$n")" slurmd || die "slurmd of $n exited; see $(slurmd_log_of "$n")"
    done
    sleep 0.3
  done
  die "nodes not idle after ${start_timeout}s (sinfo says '${states:-nothing}');" \
    "see $ctld_log and $log_dir/slurmd-*.log"
}

cmd_start() {
  local why
  why=$(cmd_check) || die "$why"
  need_tools
  shared_tmp=$(shared_tmp_paths | tr '\n' ' ') || exit 1
  shared_tmp=${shared_tmp% }
  [ -z "$shared_tmp" ] || say "bound into each node's /tmp: $shared_tmp"
  install -d -m 0755 "$conf_dir" "$run_dir" "$log_dir" "$spool" "$spool/ctld"
  local n
  for n in "${nodes[@]}"; do install -d -m 0755 "$spool/$n" && install -d -m 1777 "$spool/$n/tmp"; done
  start_munge
  start_network

  local new changed=0
  new=$(render_conf)
  if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new" ]; then
    printf '%s\n' "$new" >"$conf.tmp.$$"
    mv -f "$conf.tmp.$$" "$conf"
    changed=1
    say "wrote $conf"
  fi
  if ((changed)); then
    for n in $(all_known_nodes); do
      if [[ " ${nodes[*]} " != *" $n "* ]]; then
        say "$n is no longer a node of this cluster: removing it"
        remove_node "$n"
      fi
    done
    for n in "${nodes[@]}"; do
      alive "$(slurmd_pid_of "$n")" slurmd && { say "configuration changed: restarting"; stop_daemon "$(slurmd_pid_of "$n")" slurmd; }
    done
    stop_daemon "$ctld_pid" slurmctld >/dev/null
  fi
  start_daemon "$ctld_pid" slurmctld "$ctld_log" env SLURM_CONF="$conf"
  for n in "${nodes[@]}"; do start_slurmd "$n"; done
  # The daemons fork and write their pid files a moment later: wait_idle reads
  # a missing one as a daemon that died (seen under load after a restart).
  wait_pidfile "$ctld_pid" slurmctld "$ctld_log"
  for n in "${nodes[@]}"; do wait_pidfile "$(slurmd_pid_of "$n")" slurmd "$(slurmd_log_of "$n")"; done
  wait_idle
}

# kill_namespace NODE: SIGKILL every process in the node's network namespace
# (slurmd, its steps, the job's tasks: all started by this cluster).
kill_namespace() {
  local ns pids
  ns=$(ns_of "$1")
  [ -e "/run/netns/$ns" ] || return 0
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  if [ -n "${pids// /}" ]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    say "killed the processes of $1 ($ns): $pids"
  fi
}

cmd_crash() {
  local n=$1
  [[ " ${nodes[*]} " == *" $n "* ]] || die "no node '$n' (the nodes are ${nodes[*]})"
  kill_namespace "$n"
}

cmd_stop() {
  local n jobs
  # Jobs left in the queue would be recovered from the state files and run
  # again at the next start: a teardown cancels them (all are this cluster's).
  if alive "$ctld_pid" slurmctld; then
    jobs=$(timeout 15 squeue -h -o %i 2>/dev/null | tr '\n' ' ') || jobs=""
    if [ -n "${jobs// /}" ]; then
      # shellcheck disable=SC2086
      timeout 15 scancel $jobs 2>/dev/null || true
      say "cancelled jobs $jobs"
    fi
  fi
  local known
  known=$(all_known_nodes)
  for n in $known; do stop_daemon "$(slurmd_pid_of "$n")" slurmd; done
  # Job processes left behind by a killed slurmd.
  for n in $known; do kill_namespace "$n"; done
  stop_daemon "$ctld_pid" slurmctld
  stop_daemon "$munge_pid" munged
  for n in $known; do remove_node "$n" >/dev/null; done
  if ip link show "$bridge" >/dev/null 2>&1; then
    ip link del "$bridge" && say "deleted bridge $bridge"
  fi
}

cmd_status() {
  local rc=0 d n
  local list=("munged:$munge_pid" "slurmctld:$ctld_pid")
  for n in "${nodes[@]}"; do list+=("slurmd:$(slurmd_pid_of "$n"):$n"); done
  for d in "${list[@]}"; do
    IFS=: read -r name pidfile node <<<"$d"
    if alive "$pidfile" "$name"; then
      echo "$name${node:+ ($node)}: running (pid $(cat "$pidfile" 2>/dev/null))"
    else
      echo "$name${node:+ ($node)}: stopped"
      rc=3
    fi
  done
  for n in "${nodes[@]}"; do
    [ -e "/run/netns/$(ns_of "$n")" ] || { echo "namespace $(ns_of "$n"): missing"; rc=3; }
  done
  ((rc == 0)) && echo "nodes: $(node_states || echo unknown)"
  return $rc
}

cmd_env() {
  echo "export SLURM_CONF=$conf"
  echo "export OMPI_MCA_btl_tcp_if_include=${net}.0/24 OMPI_MCA_oob_tcp_if_include=${net}.0/24"
}

usage() { echo "usage: $prog check|start|stop|status|env|crash NODE" >&2; exit 2; }
[ $# -ge 1 ] || usage
case $1 in
  start | stop | crash)
    if [ "$1" = crash ]; then [ $# -eq 2 ] || usage; else [ $# -eq 1 ] || usage; fi
    [ "$(id -u)" -eq 0 ] || die "run as root (it makes namespaces and starts system daemons)"
    # One caller at a time: concurrent starts would race on pid files and links.
    exec 9>/run/ratchet-slurm-cluster-2node.lock
    flock -w 90 9 || die "another $prog is still running (lock /run/ratchet-slurm-cluster-2node.lock)"
    "cmd_$1" "${@:2}"
    ;;
  check | status | env) [ $# -eq 1 ] || usage; "cmd_$1" ;;
  *) usage ;;
esac
