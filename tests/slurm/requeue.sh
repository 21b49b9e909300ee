#!/usr/bin/env bash
# The sbatch templates' requeue logic (slurm/requeue-lib.sh), with
# tests/slurm/fake-trainer.sh in place of `ratchet train` (RATCHET_BIN):
#   requeue.sh finish      exit 75 twice, then 0: requeued twice, COMPLETED
#   requeue.sh bound       always 75 with RATCHET_MAX_REQUEUES=1: one requeue, then
#                          the job ends with 75 and "requeue limit reached"
#   requeue.sh budget      exit 76 (budget reached): never requeued
#   requeue.sh failure     exit 1: passed through, never requeued
#   requeue.sh usr1        `scancel --signal=USR1 --batch`: the shell forwards it,
#                          the trainer exits 75, requeue, COMPLETED
#   requeue.sh term-batch  no --signal line; `scancel --signal=TERM --batch` (a
#                          cluster that sends only TERM): forwarded, requeued
#   requeue.sh usr1-early  the forwarded USR1 kills a trainer that has no handlers
#                          yet (still loading): the shell treats it as exit 75 and
#                          requeues; nothing is lost (no step ran since the checkpoint)
#   requeue.sh time-limit  no --signal line, --time=1: Slurm's own TERM at the
#                          time limit is forwarded, requeued (60-90 s)
#   requeue.sh scancel     plain `scancel`: the trainer saves, no requeue
#   requeue.sh multinode   train-multinode.sbatch, 2 ranks via srun --mpi=pmix
#   requeue.sh exclude-bound  the trainer records its node as a suspect and exits
#                          75; the real `ratchet doctor --exclude` (RATCHET_DOCTOR_BIN)
#                          keeps it (one node in the partition, the job needs one),
#                          says so, and the job is requeued and completes
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"
name=${1:?case}
new_test_dir "requeue-$name"
ckpt=$TEST_DIR/ckpt
trap on_exit EXIT  # common.sh: a failed test cancels its job

# submit SBATCH_FILE VAR=VALUE...: submits with the fake trainer; prints the job id.
submit() {
  local file=$1 vars
  shift
  vars="ALL,RATCHET_BIN=$FAKE,RATCHET_MODULES=,RATCHET_CKPT_DIR=$ckpt,RATCHET_CONFIG=$TEST_DIR/train.ini"
  vars+=",RATCHET_SLURM_LIB=$SLURM_DIR/requeue-lib.sh"
  [ $# -eq 0 ] || vars+=",$(IFS=,; echo "$*")"
  # shellcheck disable=SC2086  # SBATCH_EXTRA: several options
  timeout 60 sbatch --parsable -J "rq-$name" -c1 -t"${TIME_LIMIT:-5}" ${SBATCH_EXTRA:-} --export="$vars" "$file" ||
    fail "sbatch failed"
}

# The template without its --signal line: a cluster that only ever sends TERM.
term_only_template() {
  sed '/^#SBATCH --signal/d' "$SLURM_DIR/train.sbatch" >"$TEST_DIR/train-nosignal.sbatch"
  grep -q '^#SBATCH --signal' "$TEST_DIR/train-nosignal.sbatch" && fail "sed left --signal"
  echo "$TEST_DIR/train-nosignal.sbatch"
}

runs() { cat "$ckpt/runs.${1:-0}" 2>/dev/null || echo 0; }

case $name in
  finish)
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_REQUEUE_TIMES=2)
    wait_job "$id" 90 >/dev/null
    expect_job "$id" COMPLETED 2 0:0
    [ "$(runs)" = 3 ] || fail "trainer ran $(runs) times, expected 3"
    expect_log "requeued \(restart 2 of at most 10\)"
    expect_log "training finished"
    ;;
  bound)
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_REQUEUE_TIMES=100 RATCHET_MAX_REQUEUES=1)
    wait_job "$id" 60 >/dev/null
    expect_job "$id" FAILED 1 75:0
    [ "$(runs)" = 2 ] || fail "trainer ran $(runs) times, expected 2"
    expect_log "requeue limit reached \(SLURM_RESTART_COUNT=1, RATCHET_MAX_REQUEUES=1\): not requeueing"
    ;;
  budget)
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_EXIT=76)
    wait_job "$id" 30 >/dev/null
    expect_job "$id" FAILED 0 76:0
    expect_log "budget reached \(exit 76\): finished, not requeueing"
    ;;
  failure)
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_EXIT=1)
    wait_job "$id" 30 >/dev/null
    expect_job "$id" FAILED 0 1:0
    expect_log "trainer failed \(exit 1\): not requeueing"
    ;;
  usr1 | term-batch)
    if [ "$name" = usr1 ]; then file=$SLURM_DIR/train.sbatch sig=USR1; else file=$(term_only_template) sig=TERM; fi
    id=$(submit "$file" FAKE_WAIT_SIGNAL=1)
    wait_file "$ckpt/ready.0" 30
    log "scancel --signal=$sig --batch $id"
    timeout 30 scancel --signal="$sig" --batch "$id"
    wait_job "$id" 60 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    expect_log "got SIG$sig: sending SIGUSR1 to the step"
    expect_log "fake-trainer rank 0 run 1: got SIGUSR1: checkpoint saved, exit 75"
    expect_log "fake-trainer rank 0 run 2: done"
    ;;
  usr1-early)
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_DIE_ON_SIGNAL=1)
    wait_file "$ckpt/ready.0" 30
    log "scancel --signal=USR1 --batch $id"
    timeout 30 scancel --signal=USR1 --batch "$id"
    wait_job "$id" 60 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    expect_log "got SIGUSR1: sending SIGUSR1 to the step"
    expect_log "step died of SIGUSR1 before it could catch it \(still starting up\): treating it as exit 75"
    expect_log "requeued \(restart 1 of at most 10\)"
    expect_log "fake-trainer rank 0 run 2: done"
    ;;
  time-limit)
    file=$(term_only_template)
    id=$(TIME_LIMIT=1 submit "$file" FAKE_WAIT_SIGNAL=1)
    wait_file "$ckpt/ready.0" 30
    log "waiting for the 1-minute limit (Slurm checks limits about every 30 s)"
    wait_job "$id" 150 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    expect_log "DUE TO TIME LIMIT"
    expect_log "fake-trainer rank 0 run 1: got SIG(TERM|USR1): checkpoint saved, exit 75"
    expect_log "requeued \(restart 1 of at most 10\)"
    ;;
  scancel)
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_WAIT_SIGNAL=1)
    wait_file "$ckpt/ready.0" 30
    log "scancel $id"
    timeout 30 scancel "$id"
    wait_job "$id" 30 >/dev/null
    expect_job "$id" CANCELLED 0 75:0
    expect_log "checkpoint saved, exit 75"
    expect_log "not requeueing a cancelled job"
    sleep 12 # past cred_expire: a requeued job would be back by now
    [ "$(job_field "$id" JobState)" = CANCELLED ] || fail "the cancelled job came back"
    ;;
  multinode)
    # One node here: the command line overrides the template's --nodes=2.
    id=$(SBATCH_EXTRA="--nodes=1 --ntasks-per-node=2" \
      submit "$SLURM_DIR/train-multinode.sbatch" FAKE_REQUEUE_TIMES=1)
    wait_job "$id" 60 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    [ "$(runs 0)-$(runs 1)" = 2-2 ] || fail "ranks ran $(runs 0) and $(runs 1) times, expected 2 and 2"
    expect_log "step: srun --mpi=pmix --kill-on-bad-exit=1 "
    expect_log "fake-trainer rank 1 run 1: start \(SLURM_RESTART_COUNT=unset PMIX_RANK=1\)"
    expect_log "fake-trainer rank 1 run 2: start \(SLURM_RESTART_COUNT=1 PMIX_RANK=1\)"
    ;;
  exclude-bound)
    : "${RATCHET_BUILT_EXE:?run through ctest}"
    id=$(submit "$SLURM_DIR/train.sbatch" FAKE_SUSPECT=1 RATCHET_DOCTOR_BIN="$RATCHET_BUILT_EXE")
    wait_job "$id" 60 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    expect_log "recorded suspect node [^ ]+, exit 75"
    expect_log "not excluding suspect node\(s\) [^ ]+: the partition has 1 node\(s\), 0 excluded already, and the job needs 1"
    expect_log "requeued \(restart 1 of at most 10\)"
    [ "$(job_field "$id" ExcNodeList)" = "(null)" ] || fail "ExcNodeList=$(job_field "$id" ExcNodeList), expected none"
    ;;
  *) fail "unknown case $name" ;;
esac
cat "$TEST_DIR"/*.out
log "ok"
