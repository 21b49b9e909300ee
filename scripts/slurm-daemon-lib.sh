# shellcheck shell=bash
# slurm-daemon-lib.sh: starting and stopping daemons by their pid files, shared
# by scripts/slurm-cluster.sh (one node) and scripts/slurm-cluster-2node.sh
# (two nodes in network namespaces). Sourced; the caller sets $prog.

: "${prog:?set prog before sourcing slurm-daemon-lib.sh}"
die() { echo "$prog: error: $*" >&2; exit 1; }
say() { echo "$prog: $*"; }

# alive PIDFILE NAME: the pid file names a live (not zombie) process called NAME.
alive() {
  local pidfile=$1 name=$2 pid state comm
  pid=$({ tr -dc 0-9 <"$pidfile"; } 2>/dev/null) || return 1  # may vanish as a daemon exits
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [ "$comm" = "$name" ] || return 1            # a recycled pid is not our daemon
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$state" != Z ]                            # a killed daemon may linger <defunct>
}

# stop_daemon PIDFILE NAME: TERM, wait up to 10 s, then KILL. Pid file only.
stop_daemon() {
  local pidfile=$1 name=$2 pid i
  if ! alive "$pidfile" "$name"; then
    say "$name not running"
    rm -f "$pidfile"
    return 0
  fi
  pid=$({ tr -dc 0-9 <"$pidfile"; } 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    alive "$pidfile" "$name" || break
    sleep 0.1
  done
  if alive "$pidfile" "$name"; then
    say "$name (pid $pid) ignored TERM for 10 s: sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$pidfile"
  say "stopped $name (pid $pid)"
}

# start_daemon PIDFILE NAME LOG [PREFIX...]: starts /usr/sbin/NAME (through
# PREFIX, e.g. runuser, when given) unless the pid file names it alive; the
# daemon detaches and writes PIDFILE itself. fd 9 (our lock) is not inherited.
start_daemon() {
  local pidfile=$1 name=$2 log=$3
  shift 3
  if alive "$pidfile" "$name"; then
    say "$name already running"
    return 0
  fi
  rm -f "$pidfile"
  "$@" "/usr/sbin/$name" 9>&- || die "$name failed to start; see $log"
  say "started $name"
}

# wait_pidfile PIDFILE NAME LOG: up to 15 s for the pid file to name a live NAME.
wait_pidfile() {
  local i
  for ((i = 0; i < 150; i++)); do
    alive "$1" "$2" && return 0
    sleep 0.1
  done
  die "$2 did not come up (no live pid in $1); see $3"
}
