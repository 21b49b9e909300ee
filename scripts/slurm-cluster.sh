#!/usr/bin/env bash
# A real single-node Slurm cluster (munge + slurmctld + slurmd) on localhost,
# for the `slurm` test label and for trying the sbatch templates in slurm/.
#
#   sudo scripts/slurm-cluster.sh start    # idempotent; waits until the node is idle
#   sudo scripts/slurm-cluster.sh status   # exit 0 when all three daemons run and the node is up
#   sudo scripts/slurm-cluster.sh stop     # kills the daemons by their pid files only
#
# Needs root and the packages from scripts/install-deps.sh; no systemd, no
# cgroups. Recipe and settings: docs/platform.md ("A single-node Slurm cluster").
# The node advertises 4 CPUs (more than the cores; config_overrides allows it)
# so 2-rank and requeue tests fit side by side. Partition: debug (default).
#
# Environment (all optional):
#   RATCHET_SLURM_CPUS          CPUs the node advertises (default 4)
#   RATCHET_SLURM_START_TIMEOUT seconds to wait for the node to be idle (default 30)
set -euo pipefail

prog=slurm-cluster.sh
conf_dir=/etc/slurm
conf=$conf_dir/slurm.conf
run_dir=/run/slurm
log_dir=/var/log/slurm
ctld_pid=$run_dir/slurmctld.pid
slurmd_pid=$run_dir/slurmd.pid
ctld_log=$log_dir/slurmctld.log
slurmd_log=$log_dir/slurmd.log
munge_pid=/run/munge/munged.pid
munge_log=/var/log/munge/munged.log
munge_key=/etc/munge/munge.key
cpus=${RATCHET_SLURM_CPUS:-4}
start_timeout=${RATCHET_SLURM_START_TIMEOUT:-30}

# die, say, alive, stop_daemon, start_daemon, wait_pidfile
# shellcheck source-path=SCRIPTDIR source=slurm-daemon-lib.sh
. "$(dirname "$0")/slurm-daemon-lib.sh"

node_name() { hostname -s; }

# The configuration, from the platform notes. Written only when it changed.
render_conf() {
  local node
  node=$(node_name)
  cat <<EOF
# Written by ratchet scripts/slurm-cluster.sh: a single-node test cluster.
# Do not edit by hand; the script rewrites it when its settings change.
ClusterName=ci
SlurmctldHost=${node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again.
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=${ctld_pid}
SlurmdPidFile=${slurmd_pid}
SlurmctldLogFile=${ctld_log}
SlurmdLogFile=${slurmd_log}
SlurmctldPort=6817
SlurmdPort=6818
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
# Finished jobs stay visible to 'scontrol show job' for 5 min (no accounting).
MinJobAge=300
InactiveLimit=0
NodeName=${node} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

need_tools() {
  local t missing=()
  for t in munged munge unmunge mungekey slurmctld slurmd sinfo scontrol runuser; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: run scripts/install-deps.sh first (as root)"
}

start_munge() {
  install -d -m 0700 -o munge -g munge /etc/munge /var/lib/munge /var/log/munge
  install -d -m 0755 -o munge -g munge /run/munge
  if [ ! -s "$munge_key" ]; then
    mungekey --create --keyfile="$munge_key"
  fi
  chown munge:munge "$munge_key"
  chmod 0400 "$munge_key"
  start_daemon "$munge_pid" munged "$munge_log" runuser -u munge --
  local i
  for ((i = 0; i < 50; i++)); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munge -n | unmunge fails; see $munge_log"
}

# node_state: the node's state as sinfo prints it ("idle", "down*", ...).
node_state() { timeout 10 sinfo -h -o %T 2>/dev/null | head -n1; }

wait_idle() {
  local deadline=$((SECONDS + start_timeout)) state=""
  while ((SECONDS < deadline)); do
    state=$(node_state) || state=""
    case $state in
      idle | mixed | allocated | completing) say "node $(node_name) is $state"; return 0 ;;
    esac
    alive "$ctld_pid" slurmctld || die "slurmctld exited; see $ctld_log"
    alive "$slurmd_pid" slurmd || die "slurmd exited; see $slurmd_log"
    sleep 0.2
  done
  die "node not idle after ${start_timeout}s (sinfo says '${state:-nothing}');" \
    "see $ctld_log and $slurmd_log"
}

cmd_start() {
  need_tools
  install -d -m 0755 "$conf_dir" "$run_dir" "$log_dir" /var/spool/slurmctld /var/spool/slurmd
  start_munge

  local new changed=0
  new=$(render_conf)
  if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new" ]; then
    printf '%s\n' "$new" >"$conf.tmp.$$"
    mv -f "$conf.tmp.$$" "$conf"
    changed=1
    say "wrote $conf"
  fi
  # A cluster running on an older config is restarted so the settings apply.
  if ((changed)) && { alive "$ctld_pid" slurmctld || alive "$slurmd_pid" slurmd; }; then
    say "configuration changed: restarting the Slurm daemons"
    stop_daemon "$slurmd_pid" slurmd
    stop_daemon "$ctld_pid" slurmctld
  fi

  start_daemon "$ctld_pid" slurmctld "$ctld_log"
  start_daemon "$slurmd_pid" slurmd "$slurmd_log"
  # They fork and write their pid files a moment later (wait_idle reads a
  # missing one as a daemon that died).
  wait_pidfile "$ctld_pid" slurmctld "$ctld_log"
  wait_pidfile "$slurmd_pid" slurmd "$slurmd_log"
  wait_idle
}

cmd_stop() {
  stop_daemon "$slurmd_pid" slurmd
  stop_daemon "$ctld_pid" slurmctld
  stop_daemon "$munge_pid" munged
}

cmd_status() {
  local rc=0 d
  for d in "munged:$munge_pid" "slurmctld:$ctld_pid" "slurmd:$slurmd_pid"; do
    if alive "${d#*:}" "${d%%:*}"; then
      echo "${d%%:*}: running (pid $(cat "${d#*:}" 2>/dev/null))"
    else
      echo "${d%%:*}: stopped"
      rc=3
    fi
  done
  if ((rc == 0)); then
    echo "node $(node_name): $(node_state || echo unknown)"
  fi
  return $rc
}

[ $# -eq 1 ] || { echo "usage: $prog start|stop|status" >&2; exit 2; }
case $1 in
  start | stop)
    [ "$(id -u)" -eq 0 ] || die "run as root (it starts system daemons)"
    # One caller at a time: concurrent starts would race on pid files.
    exec 9>/run/ratchet-slurm-cluster.lock
    flock -w 60 9 || die "another $prog is still running (lock /run/ratchet-slurm-cluster.lock)"
    "cmd_$1"
    ;;
  status) cmd_status ;;
  *) echo "usage: $prog start|stop|status" >&2; exit 2 ;;
esac
