#!/usr/bin/env bash
# Real training jobs on the test cluster: slurm/train.sbatch running the real
# `ratchet train` (RATCHET_BUILT_EXE) on a tiny model, interrupted in every way
# the issue names. Each case ends with parameters BIT-IDENTICAL to the same
# run done without interruption outside Slurm (compared with cmp).
#   train.sh usr1-batch     `scancel --signal=USR1 --batch` mid-run: requeued once
#   train.sh usr1-full      `scancel --signal=USR1 --full` (shell, children, steps)
#   train.sh requeue        `scontrol requeue` from outside (TERM, then KILL after
#                           KillWait): resumes, loses no more than the steps since
#                           the last periodic checkpoint
#   train.sh time-limit     a 1-minute --time: the trainer reads the limit from
#                           squeue, stops itself before it (exit 75), is requeued
#   train.sh mid-save       the trainer is SIGKILLed halfway through writing a
#                           checkpoint (dead-rank requeue off); the job
#                           submitted again resumes from the previous checkpoint
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"
name=${1:?case}
new_test_dir "train-$name"
: "${RATCHET_BUILT_EXE:?run through ctest}"
exe=$RATCHET_BUILT_EXE
trap on_exit EXIT  # common.sh: a failed test cancels its job

# ---- data and config ----------------------------------------------------------
bible -f 'Gen1:1-Gen11:32' >gen.txt
"$exe" shard --tokenizer byte --input gen.txt --output-dir data --val-fraction 0.1 >/dev/null
steps=${STEPS:-1500}
[ "$name" = time-limit ] && steps=40000   # longer than one 1-minute run
# One thread: bit-identity needs the same thread count inside and outside Slurm.
cat >train.ini <<INI
model = custom
layers = 2
heads = 2
channels = 64
max-seq-len = 64
seq-len = 64
batch-size = 4
train-data = $TEST_DIR/data/train_*.h5
steps = $steps
lr = 1e-3
warmup-steps = 10
threads = 1
quiet = true
ckpt-every-steps = 200
INI

# ---- the reference: the same run, never interrupted, outside Slurm ------------
reference() {
  "$exe" train --config train.ini --ckpt-dir ref-ckpt --time-limit none --export ref.bin >ref.log 2>&1 ||
    { cat ref.log; fail "reference run failed"; }
}

# submit [SBATCH OPTIONS...]: train.sbatch with the real trainer; prints the job id.
submit() {
  local vars="ALL,RATCHET_BIN=$exe,RATCHET_MODULES=,RATCHET_CKPT_DIR=$TEST_DIR/ckpt"
  vars+=",RATCHET_CONFIG=$TEST_DIR/train.ini,RATCHET_SLURM_LIB=$SLURM_DIR/requeue-lib.sh"
  [ -n "${EXTRA_ENV:-}" ] && vars+=",$EXTRA_ENV"
  timeout 60 sbatch --parsable -J "train-$name" -c1 "$@" --export="$vars" \
    "${TEMPLATE:-$SLURM_DIR/train.sbatch}" --export "$TEST_DIR/out.bin" || fail "sbatch failed"
}

# step_reached N: waits until the run's ledger says it completed step N.
step_reached() {
  local deadline=$((SECONDS + 120)) s
  while ((SECONDS < deadline)); do
    s=$(sed -n 's/.*"max_step": \([0-9]*\).*/\1/p' ckpt/ledger.json 2>/dev/null | head -n1 || true)
    [ -n "$s" ] && [ "$s" -ge "$1" ] && return 0
    sleep 0.2
  done
  fail "the job did not reach step $1"
}

same_as_reference() {
  [ -f out.bin ] || fail "the job wrote no out.bin"
  cmp -s out.bin ref.bin || fail "final parameters differ from the uninterrupted run"
  log "final parameters are bit-identical to the uninterrupted run"
}

case $name in
  usr1-batch | usr1-full)
    reference
    id=$(submit -t5)
    step_reached 300
    flag=--batch
    [ "$name" = usr1-full ] && flag=--full
    timeout 15 scancel --signal=USR1 $flag "$id"
    wait_job "$id" 240 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    expect_log "stopping at step [0-9]+: SIGUSR1 received"
    expect_log "resume: continuing from step [0-9]+"
    same_as_reference
    # The cost ledger summed across the Slurm requeue: one preemption, one
    # resume, nothing recomputed (the stop saved), every step's tokens once.
    ledger_is() {
      local v
      v=$(sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" ckpt/ledger.json | head -n1)
      awk -v a="$v" -v b="$2" 'BEGIN { exit !(a == b) }' || fail "ledger $1 = $v, expected $2"
    }
    ledger_is preemptions 1
    ledger_is resumes 1
    ledger_is steps_lost 0
    ledger_is tokens $((steps * 256))
    ledger_is state 1
    log "ledger: 1 preemption, 1 resume, $((steps * 256)) tokens, as expected"
    ;;
  requeue)
    reference
    id=$(submit -t5)
    step_reached 500
    timeout 15 scontrol requeue "$id" || fail "scontrol requeue failed"
    wait_job "$id" 240 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    # TERM gives the trainer a step boundary to save at; if it had been killed,
    # it would have lost at most ckpt-every-steps (200) steps.
    lost=$(sed -n 's/.*"steps_lost": \([0-9.e+]*\).*/\1/p' ckpt/ledger.json | head -n1)
    log "steps recomputed after the requeue: $lost"
    awk -v l="$lost" 'BEGIN { exit !(l <= 200) }' || fail "lost $lost steps, more than the 200 since a checkpoint"
    expect_log "resume: continuing from step [0-9]+"
    same_as_reference
    ;;
  time-limit)
    # No reference here (a 40000-step run outside Slurm would double the time):
    # bit-identity is the usr1/requeue cases' job; this one checks the stop itself.
    # The template without its --signal line, so that no early USR1 arrives:
    # the trainer alone must notice the limit.
    sed '/^#SBATCH --signal/d' "$SLURM_DIR/train.sbatch" >nosignal.sbatch
    id=$(TEMPLATE=$TEST_DIR/nosignal.sbatch submit -t1)
    wait_job_restarted() {
      local deadline=$((SECONDS + 150)) r
      while ((SECONDS < deadline)); do
        r=$(job_field "$id" Restarts)
        [ -n "$r" ] && [ "$r" -ge 1 ] && return 0
        sleep 1
      done
      fail "job $id was not requeued within 150 s"
    }
    wait_job_restarted
    expect_log "time limit: Slurm job $id time left"
    expect_log "stopping at step [0-9]+: time limit near"
    expect_log "exiting with code 75"
    # The trainer stopped by itself: Slurm never had to kill it for the limit.
    grep -q "DUE TO TIME LIMIT" "$TEST_DIR"/*.out && fail "the job hit the time limit"
    timeout 15 scancel "$id" || true
    id=""
    ;;
  mid-save)
    reference
    # The first job dies inside its second save (step 400), as on a node
    # failure: SIGKILL, exit 137. The wrapper would requeue a dead rank
    # (docs/resilience.md, "A dead rank"; the chaos cases test that), and the
    # fault would kill every rerun too: RATCHET_REQUEUE_DEAD_RANK=0 leaves
    # the job failed, so that the resubmission below is what resumes.
    id=$(EXTRA_ENV="RATCHET_FAULT=ckpt-mid-write*2,RATCHET_REQUEUE_DEAD_RANK=0" submit -t5)
    wait_job "$id" 240 >/dev/null
    expect_job "$id" FAILED 0 137:0   # the batch script passes the step's 137 on
    [ -f ckpt/step_00000200/COMMITTED ] || fail "no checkpoint before the killed save"
    ls -a ckpt | grep -q '^\.tmp-step_00000400' || fail "the kill left no partial checkpoint"
    # Submitted again, the job resumes from step 200 and ignores the partial one.
    id=$(submit -t5)
    wait_job "$id" 240 >/dev/null
    expect_job "$id" COMPLETED 0 0:0
    expect_log "resume: continuing from step 200"
    same_as_reference
    ;;
  *) fail "unknown case $name" ;;
esac
log "ok: $name"
