#!/usr/bin/env bash
# The test cluster itself: cluster.sh start|stop|idempotent
#   start       fixture setup: scripts/slurm-cluster.sh start; notes whether it
#               was already running (then `stop` leaves it running)
#   stop        fixture cleanup: stops the cluster if `start` brought it up
#   idempotent  a second start is a no-op; status says running; a job runs
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"
marker=$RATCHET_TEST_WORK/cluster-started-by-tests

case ${1:?start|stop|idempotent} in
  start)
    [ "$(id -u)" -eq 0 ] || fail "the slurm tests start system daemons: run ctest as root"
    mkdir -p "$RATCHET_TEST_WORK"
    if "$CLUSTER" status >/dev/null 2>&1; then
      log "cluster already running: the tests will leave it running"
      rm -f "$marker"
    else
      touch "$marker"
    fi
    timeout 90 "$CLUSTER" start || fail "scripts/slurm-cluster.sh start failed"
    ;;
  stop)
    if [ -e "$marker" ]; then
      timeout 60 "$CLUSTER" stop || fail "scripts/slurm-cluster.sh stop failed"
      rm -f "$marker"
      if "$CLUSTER" status >/dev/null 2>&1; then fail "cluster still running after stop"; fi
    else
      log "the cluster was running before the tests: leaving it running"
    fi
    ;;
  idempotent)
    new_test_dir cluster-idempotent
    out=$(timeout 30 "$CLUSTER" start) || fail "second start failed: $out"
    echo "$out"
    for d in munged slurmctld slurmd; do
      grep -q "$d already running" <<<"$out" || fail "second start touched $d"
    done
    grep -q wrote <<<"$out" && fail "second start rewrote slurm.conf"
    "$CLUSTER" status || fail "status: $?"
    [ "$(timeout 20 srun -c1 -t1 hostname)" = "$(hostname -s)" ] || fail "srun hostname"
    # The settings the other tests rely on.
    conf=$(timeout 20 scontrol show config)
    for kv in "KillWait *= 5 sec" "MinJobAge *= 300 sec" "OverTimeLimit *= 0 min" "AuthInfo *= cred_expire=10"; do
      grep -qE "^$kv" <<<"$conf" || fail "scontrol show config: no '$kv'"
    done
    [ "$(timeout 20 scontrol show node -o | grep -o 'CPUTot=[0-9]*')" = CPUTot=4 ] || fail "node CPUs != 4"
    [ "$(timeout 20 sinfo -h -o %P)" = "debug*" ] || fail "partition debug is not the default"
    ;;
  *) fail "unknown case $1" ;;
esac
log "ok"
