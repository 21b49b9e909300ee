#!/usr/bin/env bash
# Chaos on the namespace cluster (issue 40, item 6): a 2-node job of the real
# `ratchet train` (slurm/train-multinode.sbatch, one rank per node, partition
# `all` of the three-node cluster of scripts/slurm-cluster-2node.sh with
# RATCHET_SLURM2_NODES=3), a fault injected into one node mid-run, and in
# every case:
#   - the fault is detected (the hang watchdog's allowance plus the margin
#     stated below, the straggler check's windows, or Slurm's SlurmdTimeout);
#   - the job is requeued and its rerun runs on the two other nodes: excluded
#     by the wrapper (ExcNodeList, read back) for a hang or a straggler, by
#     Slurm (the node DOWN) when the node itself is unreachable;
#   - the final parameters (--export) are BIT-IDENTICAL (cmp) to the same run
#     never interrupted (srun on two nodes; computed once per configuration
#     and binary, kept in the work directory for the other cases).
#
#   chaos.sh node-hang   rank 1 freezes itself (SIGSTOP, RATCHET_FAULT=rank1/STOP@step-25)
#                        on the first run; rank 0's watchdog (--hang-timeout 2) ends the
#                        job with 75; `ratchet doctor --exclude` blames rank 1's node
#   chaos.sh link-down   `ip link set eth0 down` in rank 1's node's namespace at step 26
#                        (both ranks then stall 1 s for data, RATCHET_FAULT=SLEEP1000@data-27):
#                        both ranks wait in the same collective, both watchdogs fire,
#                        no rank is to blame (doctor: a network fault); the node's slurmd
#                        is unreachable too, Slurm marks it DOWN; the rerun avoids it
#   chaos.sh slow-node   rank 1 stopped and continued at a 50 % duty cycle (100 ms / 100 ms,
#                        kill -STOP/-CONT from outside) with --straggler-every 4
#                        --straggler-windows 2 --on-straggler requeue: named, saved, 75,
#                        its node excluded
#   chaos.sh dead-node   slurmd of rank 1's node killed (only slurmd) while both ranks sit
#                        in a 60 s data stall (RATCHET_FAULT=SLEEP60000@data-31, first run;
#                        --hang-timeout 13: a data allowance of 65 s): Slurm marks the node
#                        DOWN (SlurmdTimeout 10 s) and requeues the job itself (--requeue);
#                        the rerun resumes from the last checkpoint on the other nodes. The
#                        rank left on the node (its slurmstepd outlives slurmd) is killed
#                        once the rerun runs; slurmd is restarted afterwards
#   chaos.sh dead-rank   rank 1 SIGKILLed (RATCHET_FAULT=rank1/step-25: uncatchable, as the
#                        OOM killer's): the step fails; the wrapper reads srun's "task 1:
#                        Killed" (`ratchet doctor --dead-rank`), records rank 1's node as a
#                        suspect (cause "dead") and requeues the job without it
#   chaos.sh crash-rank  rank 1 dies of SIGSEGV (RATCHET_FAULT=rank1/SEGV@step-25): its
#                        fatal record (flight/fatal_rank_1.json) names it; the same requeue
# Every case also checks the ledger (ledger_accounts below): the breakdown by
# cause sums to the whole within 1 %, and the causes the fault implies (hang
# detection, lost progress, the requeue gap, ...) are nonzero, the others zero.
# Runs on the fixture slurm_cluster_2node (tests/slurm/twonode.sh start, which
# starts three nodes). Exits 77 (skipped) with the reason where namespaces
# cannot be made here, as twonode.sh does.
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"
name=${1:?node-hang|link-down|slow-node|dead-node|dead-rank|crash-rank}
CLUSTER2=$RATCHET_SOURCE_DIR/scripts/slurm-cluster-2node.sh
export RATCHET_SLURM2_NODES=${RATCHET_SLURM2_NODES:-3}
export RATCHET_SLURM2_SHARE=$RATCHET_BUILD_DIR${RATCHET_TEST_WORK:+:$RATCHET_TEST_WORK}
case $name in
  node-hang | link-down | slow-node | dead-node | dead-rank | crash-rank) ;;
  *) fail "unknown case $name" ;;
esac
if ! why=$("$CLUSTER2" check); then
  echo "SKIP: no namespace cluster on this machine: $why"
  exit 77
fi
eval "$("$CLUSTER2" env)"  # SLURM_CONF (this cluster), Open MPI's TCP on its subnet
: "${RATCHET_BUILT_EXE:?run through ctest}"
exe=$RATCHET_BUILT_EXE
"$CLUSTER2" status >/dev/null || fail "the namespace cluster is not up (fixture slurm_cluster_2node)"
part=all
[ "$(timeout 15 sinfo -h -p $part -o %D)" -ge 3 ] 2>/dev/null ||
  fail "partition '$part' does not have 3 nodes: start the cluster with RATCHET_SLURM2_NODES=3"
new_test_dir "chaos-$name"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mpi_yield_when_idle=1

t_case=$SECONDS
victim=""       # the node the fault is aimed at (rank 1's)
stopper_pid=""  # slow-node: the STOP/CONT loop
extra_cleanup() {
  [ -z "$stopper_pid" ] || kill "$stopper_pid" 2>/dev/null || true
  local n
  for n in rnode1 rnode2 rnode3; do
    [ -e "/run/netns/ratchet-$n" ] && ip netns exec "ratchet-$n" ip link set eth0 up 2>/dev/null
    # Anything of this test's left in a node (a rank whose slurmd was killed).
    for p in $(ip netns pids "ratchet-$n" 2>/dev/null); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ratchet ] && [ "$(readlink "/proc/$p/exe")" = "$exe" ] &&
        kill -CONT "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    done
  done
  # A node left DOWN comes back once its slurmd runs and answers (ReturnToService=2).
  timeout 90 "$CLUSTER2" start >/dev/null 2>&1 || true
}
trap on_exit EXIT  # common.sh: a failed test cancels its job

# ---- data, configuration, the reference ----------------------------------------
data=$RATCHET_TEST_WORK/chaos-data
if [ ! -f "$data/train_000000.h5" ]; then
  bible -f 'Gen1:1-Gen11:32' >gen.txt
  "$exe" shard --tokenizer byte --input gen.txt --output-dir "$data.tmp" --val-fraction 0.1 >/dev/null
  rm -rf "$data" && mv "$data.tmp" "$data"
fi
# Tiny and quick (a few ms a step): 2 ranks x B=4 x T=32 = 256 tokens a step.
# slow-node needs steps whose own time is above the straggler check's 50 ms
# floor (a 50 % duty cycle doubles a rank's own time: the excess is one step's
# compute), so its model is larger, and its batch too: the stopped rank must
# spend its stops computing, not waiting in the gradients' all-reduce (time
# that is not its own). At B = 4 an AMD EPYC's step was mostly that wait and
# the rank was never named.
steps=60
batch=4
model="layers = 1
heads = 2
channels = 32"
if [ "$name" = slow-node ]; then
  steps=32
  batch=16
  model="layers = 2
heads = 4
channels = 256"
fi
cat >train.ini <<INI
model = custom
$model
max-seq-len = 32
seq-len = 32
batch-size = $batch
total-batch-tokens = $((2 * batch * 32))
train-data = $data/train_*.h5
steps = $steps
lr = 1e-3
warmup-steps = 5
threads = 1
quiet = true
ckpt-every-steps = 10
INI
# The uninterrupted run, once per configuration and binary.
key=$( { cat train.ini; sha256sum <"$exe"; } | sha256sum | cut -c1-16)
refdir=$RATCHET_TEST_WORK/chaos-ref-$key
if [ ! -f "$refdir/ref.bin" ]; then
  rm -rf "$refdir.tmp" && mkdir -p "$refdir.tmp"
  t0=$SECONDS
  timeout 200 srun -J chaos-ref -p $part -N2 -n2 -c1 -t5 --mpi=pmix --kill-on-bad-exit=1 "$exe" train \
    --config train.ini --ckpt-dir "$refdir.tmp/ckpt" --export "$refdir.tmp/ref.bin" >"$refdir.tmp/ref.log" 2>&1 ||
    { cat "$refdir.tmp/ref.log"; fail "reference run failed"; }
  grep -q "data parallel: 2 rank(s) (mpi, 1 on this node)" "$refdir.tmp/ref.log" ||
    { cat "$refdir.tmp/ref.log"; fail "reference: not 1 rank on each of 2 nodes"; }
  rm -rf "$refdir" && mv "$refdir.tmp" "$refdir"
  log "reference run: $((SECONDS - t0)) s"
fi

# The trainer the job runs: the fault (RATCHET_FAULT) on the first run only, as
# a real fault would not recur on other nodes after the requeue.
cat >trainer.sh <<SH
#!/bin/bash
[ -z "\${SLURM_RESTART_COUNT:-}" ] || unset RATCHET_FAULT
exec $exe "\$@"
SH
chmod +x trainer.sh

# submit [VAR=VALUE...] -- [TRAIN FLAGS...]: the 2-node job; prints its id.
submit() {
  local vars="ALL,RATCHET_BIN=$TEST_DIR/trainer.sh,RATCHET_DOCTOR_BIN=$exe,RATCHET_MODULES="
  vars+=",RATCHET_CKPT_DIR=$TEST_DIR/ckpt,RATCHET_CONFIG=$TEST_DIR/train.ini,RATCHET_SLURM_LIB=$SLURM_DIR/requeue-lib.sh"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=",$1"; shift; done
  [ $# -eq 0 ] || shift
  timeout 60 sbatch --parsable -J "chaos-$name" -p $part --nodes=2 --ntasks-per-node=1 -c1 -t5 \
    --export="$vars" "$SLURM_DIR/train-multinode.sbatch" --export "$TEST_DIR/out.bin" "$@" ||
    fail "sbatch failed"
}
ledger_step() { sed -n 's/.*"max_step": \([0-9]*\).*/\1/p' ckpt/ledger.json 2>/dev/null | head -n1; }
step_reached() {  # N [SECONDS]
  local deadline=$((SECONDS + ${2:-120})) s
  while ((SECONDS < deadline)); do
    s=$(ledger_step || true)
    [ -n "$s" ] && [ "$s" -ge "$1" ] && return 0
    sleep 0.05
  done
  fail "the job did not reach step $1"
}
# The nodes of the job's current run, one per line (rank r on line r+1).
job_nodes() { timeout 15 scontrol show hostnames "$(job_field "$id" NodeList)"; }
running_on_two() {  # waits until the job runs on two nodes; sets victim (rank 1's node)
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    if [ "$(job_field "$id" JobState)" = RUNNING ] && [ "$(job_nodes | wc -l)" -eq 2 ]; then
      victim=$(job_nodes | sed -n 2p)
      log "job $id runs on $(job_nodes | paste -sd' ' -); rank 1 on $victim"
      return 0
    fi
    sleep 0.2
  done
  fail "job $id did not start on two nodes"
}
# rank_pid NODE: the pid of the trainer in that node's namespace.
rank_pid() {
  local deadline=$((SECONDS + 30)) p
  while ((SECONDS < deadline)); do
    for p in $(ip netns pids "ratchet-$1" 2>/dev/null); do
      [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ] && { echo "$p"; return 0; }
    done
    sleep 0.1
  done
  fail "no trainer process in $1's namespace"
}
restarted() {  # waits until the job's rerun runs (Restarts >= 1, RUNNING)
  local deadline=$((SECONDS + ${1:-90})) r
  while ((SECONDS < deadline)); do
    r=$(job_field "$id" Restarts)
    [ -n "$r" ] && [ "$r" -ge 1 ] && [ "$(job_field "$id" JobState)" = RUNNING ] && return 0
    sleep 0.2
  done
  fail "job $id was not rerun within ${1:-90} s (state $(job_field "$id" JobState), reason $(job_field "$id" Reason))"
}
# The checks every case ends with: the rerun avoided the victim, resumed, and
# the parameters equal the uninterrupted run's.
finished_without_victim() {
  wait_job "$id" 200 >/dev/null
  local state restarts nodes
  state=$(job_field "$id" JobState) restarts=$(job_field "$id" Restarts) nodes=$(job_nodes | paste -sd, -)
  log "job $id: JobState=$state Restarts=$restarts NodeList=$nodes ExcNodeList=$(job_field "$id" ExcNodeList)"
  [ "$state" = COMPLETED ] || fail "job $id ended $state"
  [ "$restarts" -ge 1 ] || fail "job $id was never requeued"
  [[ ,$nodes, != *",$victim,"* ]] || fail "the rerun ran on $nodes, which includes $victim"
  [ "$(job_nodes | wc -l)" -eq 2 ] || fail "the rerun ran on '$nodes', not two nodes"
  expect_log "resume: continuing from step [0-9]+"
  [ -f out.bin ] || fail "the job wrote no out.bin"
  cmp -s out.bin "$refdir/ref.bin" || fail "final parameters differ from the uninterrupted two-node run"
  log "final parameters are bit-identical to the uninterrupted two-node run"
}
# The watchdog's own line: "hang watchdog: OP #N in flight for X s (allowance Y s)";
# prints the largest X - Y over the ranks that fired, fails beyond MARGIN.
detected_within() {  # MARGIN
  local worst
  worst=$(sed -n 's/.*hang watchdog: .* for \([0-9.]*\) s (allowance \([0-9.]*\) s).*/\1 \2/p' "$TEST_DIR"/*.out |
    awk 'BEGIN { w = -1 } { d = $1 - $2; if (d > w) w = d } END { if (w >= 0) printf "%.1f", w }')
  [ -n "$worst" ] || fail "no hang watchdog line in the job log"
  awk -v w="$worst" -v m="$1" 'BEGIN { exit !(w <= m) }' ||
    fail "the watchdog fired ${worst} s after its allowance (margin $1 s)"
  log "detected ${worst} s after the allowance (margin $1 s)"
}
# The wrapper excluded NODE for the rerun (scontrol update ExcNodeList, read back).
excluded_by_wrapper() {
  expect_log "excluding suspect node\(s\) $1 "
  expect_log "the next run excludes node\(s\) $1 \(ExcNodeList was empty\)"
  [ "$(job_field "$id" ExcNodeList)" = "$1" ] || fail "ExcNodeList=$(job_field "$id" ExcNodeList), expected $1"
}

# ledger_accounts NONZERO ZERO: the ledger's breakdown (ckpt/ledger.json,
# device_seconds_by_cause) accounts for the time lost: its parts sum to the
# whole (device_seconds + requeue_gap, docs/resilience.md "Goodput by
# cause") within 1 % (the issue's bound), each cause named in NONZERO
# (space-separated) is above zero, each in ZERO is zero. Logs the breakdown.
ledger_accounts() {
  local out
  out=$(awk -v nz="$1" -v z="$2" '
    /"device_seconds_by_cause"/ { inb = 1; next }
    inb && /}/ { inb = 0; next }
    inb { line = $0; gsub(/[",]/, "", line); split(line, a, ":"); k = a[1]; gsub(/ /, "", k)
          part[k] = a[2] + 0; sum += a[2]; order = order " " k }
    /^  "device_seconds":/ { line = $0; gsub(/[",]/, "", line); split(line, a, ":"); ds = a[2] + 0 }
    END {
      if (order == "") { print "FAIL no device_seconds_by_cause in the ledger"; exit }
      whole = ds + part["requeue_gap"]
      n = split(order, ks, " ")
      msg = sprintf("ledger: whole %.2f device-s, parts sum %.2f:", whole, sum)
      for (i = 1; i <= n; i++) msg = msg sprintf(" %s %.3f", ks[i], part[ks[i]])
      print msg
      d = sum - whole; if (d < 0) d = -d
      if (d > 0.01 * whole) printf "FAIL the parts sum to %.3f, the whole is %.3f (beyond 1%%)\n", sum, whole
      n = split(nz, c, " ")
      for (i = 1; i <= n; i++) if (!(part[c[i]] > 0)) printf "FAIL %s is %s, expected above zero\n", c[i], part[c[i]]
      n = split(z, c, " ")
      for (i = 1; i <= n; i++) if (part[c[i]] != 0) printf "FAIL %s is %s, expected zero\n", c[i], part[c[i]]
    }' ckpt/ledger.json) || fail "cannot read ckpt/ledger.json"
  log "$(grep -v '^FAIL' <<<"$out")"
  if grep -q '^FAIL' <<<"$out"; then
    cat ckpt/ledger.json
    fail "the ledger's breakdown: $(sed -n 's/^FAIL //p' <<<"$out" | paste -sd';' -)"
  fi
  log "the ledger accounts for the time lost (nonzero: $1; zero: ${2:-none})"
}

# The margin of a hang's detection: the monitor polls several times per
# allowance, and 2 cores shared with the rest of CI delay it; 1.5 s is the
# bound asserted on top of the allowance (--hang-timeout 2: a step allowance
# of 2 s on steps of a few ms).
margin=1.5
case $name in
  node-hang)
    id=$(submit RATCHET_FAULT=rank1/STOP@step-25 -- --hang-timeout 2)
    running_on_two
    wait_job "$id" 200 >/dev/null
    expect_log "hang watchdog: .* in flight for"
    detected_within $margin
    expect_log "ratchet doctor: rank 1 \($victim\) "
    expect_log "recorded suspect node $victim \(rank 1, hang\)"
    excluded_by_wrapper "$victim"
    grep -q "\"node\": *\"$victim\".*\"cause\": *\"hang\"" ckpt/suspect_nodes.jsonl ||
      fail "ckpt/suspect_nodes.jsonl does not name $victim for a hang"
    finished_without_victim
    # Frozen at step 25, the last checkpoint at 20: steps 21-25 recomputed.
    ledger_accounts "productive hang_detection lost_progress requeue_gap" ""
    "$exe" doctor ckpt | sed 's/^/doctor: /'
    ;;
  link-down)
    # A 1 s data stall before step 27 on both ranks holds the job after step
    # 26 until the cut: at ~1 ms a step it used to reach step 60 and finish
    # in the 50 ms between two polls of the ledger (cut "at step 60", no hang
    # to detect). In the data phase, under its own allowance: the step's
    # clock restarts after it, so the hang is the all-reduce's, not the step's.
    id=$(submit RATCHET_FAULT=SLEEP1000@data-27 -- --hang-timeout 2)
    running_on_two
    step_reached 26
    ip netns exec "ratchet-$victim" ip link set eth0 down || fail "ip link set down in $victim"
    t_cut=$SECONDS
    log "link of $victim down at step $(ledger_step)"
    # The rerun starts once Slurm has given up on the node (DOWN); then the link
    # comes back, and the node returns to service without the job.
    restarted 120
    log "job $id rerun $((SECONDS - t_cut)) s after the cut, on $(job_nodes | paste -sd' ' -); node states: $(timeout 15 sinfo -h -N -p $part -o '%N=%T' | paste -sd' ' -)"
    ip netns exec "ratchet-$victim" ip link set eth0 up
    expect_log "hang watchdog: .* in flight for"
    detected_within $margin
    finished_without_victim
    ledger_accounts "productive hang_detection lost_progress requeue_gap" ""
    ;;
  slow-node)
    id=$(submit -- --hang-timeout 5 --straggler-every 4 --straggler-windows 2 --on-straggler requeue)
    running_on_two
    step_reached 3
    pid=$(rank_pid "$victim")
    # 50 % duty cycle until the process is gone (the requeue ends it).
    ( while kill -STOP "$pid" 2>/dev/null; do sleep 0.1; kill -CONT "$pid" 2>/dev/null || break; sleep 0.1; done ) &
    stopper_pid=$!
    from=$(ledger_step)
    log "rank 1 (pid $pid on $victim) at a 50 % duty cycle from step $from"
    restarted 120
    kill "$stopper_pid" 2>/dev/null || true
    stopper_pid=""
    expect_log "straggler: rank 1 \($victim\) at step [0-9]+"
    named=$(sed -n 's/.*straggler: rank 1 ([^)]*) at step \([0-9]*\):.*/\1/p' "$TEST_DIR"/*.out | head -n1)
    # Named after 2 slow windows of 4 steps (windows end at multiples of 4).
    # The window the cycle began in is partly fast, and `from` is the
    # ledger's last step, which may lag the cycle's start by a step or two,
    # so the first full window may be fast too: at most 3 windows after the
    # first window boundary past `from` (CI once named it at 16 from 3).
    boundary=$(( (from + 3) / 4 * 4 ))
    log "named at step $named, the duty cycle began after step $from"
    [ "$named" -le $((boundary + 12)) ] ||
      fail "named at step $named: more than 3 windows after step $boundary (the cycle began after step $from)"
    expect_log "stopping at step [0-9]+: .*straggler"
    excluded_by_wrapper "$victim"
    finished_without_victim
    # Saved at the straggler step and resumed from it: nothing recomputed, no
    # hang; the waits for the slow rank are collective_wait.
    ledger_accounts "productive collective_wait requeue_gap" "hang_detection lost_progress"
    ;;
  dead-node)
    # The stall holds the job while Slurm notices (about 20 s: SlurmdTimeout
    # 10 s and its pings); without it the job would end first and COMPLETE
    # (slurmstepd, not slurmd, runs the ranks and reports their end).
    # 60 s: room for a slow controller; the job is killed as soon as the node
    # is DOWN (29 s after the kill when measured), so it costs no more.
    id=$(submit RATCHET_FAULT=SLEEP60000@data-31 -- --hang-timeout 13)
    running_on_two
    step_reached 30
    sleep 0.5  # both ranks inside the stall of step 31 (60 s, under the data allowance of 65 s)
    pidfile=/run/ratchet-slurm-2node/slurmd-$victim.pid
    kill -KILL "$(cat "$pidfile")" || fail "kill slurmd of $victim"
    t_kill=$SECONDS
    log "slurmd of $victim killed at step $(ledger_step)"
    # Slurm's detection: the node DOWN and the job requeued within the stall.
    restarted 120
    ((SECONDS - t_kill < 75)) || fail "the rerun began $((SECONDS - t_kill)) s after the kill: the stall (60 s) had ended"
    log "job $id rerun $((SECONDS - t_kill)) s after the kill; node states: $(timeout 15 sinfo -h -N -p $part -o '%N=%T' | paste -sd' ' -)"
    state=$(timeout 15 sinfo -h -n "$victim" -o %T)
    [[ $state == down* ]] || fail "$victim is '$state' after its slurmd died, not down"
    # The first run's rank 1 still sleeps on the dead node (nobody told its
    # slurmstepd); a real node would be rebooted or its slurmd would kill it
    # when it comes back. Frozen here so that it cannot touch the run, and
    # killed only once the job has ended: killed now, its slurmstepd reports
    # the end of step N.0 to the controller, which then cancelled the rerun's
    # own step N.0 as it launched (seen once: "StepId=N.0 aborted before step
    # completely launched", the job FAILED with 137).
    leftover=""
    for p in $(ip netns pids "ratchet-$victim" 2>/dev/null); do
      if [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$exe" ]; then
        log "freezing the first run's rank left on $victim (pid $p) until the job ends"
        kill -STOP "$p"
        leftover+=" $p"
      fi
    done
    expect_log "JOB $id ON [a-z0-9]+ CANCELLED AT .* DUE TO NODE FAILURE"
    finished_without_victim
    for p in $leftover; do kill -KILL "$p" 2>/dev/null || true; done
    # Killed inside step 31's data stall, the last checkpoint at 30: the
    # attempt's end (no ledger write, no flight record of a hang) is the gap.
    ledger_accounts "productive requeue_gap" "hang_detection"
    ;;
  dead-rank | crash-rank)
    if [ "$name" = dead-rank ]; then fault=rank1/step-25 death="SIGKILL"; else fault=rank1/SEGV@step-25 death="SIGSEGV"; fi
    id=$(submit RATCHET_FAULT=$fault --)
    running_on_two
    restarted 120
    log "job $id rerun on $(job_nodes | paste -sd' ' -)"
    if [ "$name" = dead-rank ]; then
      expect_log "srun: error: $victim: task 1: Killed"
      expect_log "ratchet doctor: rank 1 \($victim\) died of SIGKILL \(srun: "
    else
      expect_log "ratchet doctor: rank 1 \($victim\) died of SIGSEGV \(its fatal record\)"
      grep -q '"what": "SIGSEGV"' ckpt/flight/fatal_rank_1.json || fail "no fatal record of rank 1's SIGSEGV"
    fi
    expect_log "recorded suspect node $victim \(rank 1, dead\)"
    expect_log "a rank died: requeueing without its node"
    excluded_by_wrapper "$victim"
    grep -q "\"node\": *\"$victim\".*\"cause\": *\"dead\"" ckpt/suspect_nodes.jsonl ||
      fail "ckpt/suspect_nodes.jsonl does not name $victim as dead"
    finished_without_victim
    # Died after step 25, the last checkpoint at 20: steps 21-25 recomputed;
    # no watchdog fired (the default --hang-timeout): no hang detection.
    ledger_accounts "productive lost_progress requeue_gap" "hang_detection"
    "$exe" doctor ckpt | sed 's/^/doctor: /'
    ;;
esac
cat "$TEST_DIR"/*.out
log "ok: $name ($((SECONDS - t_case)) s)"
