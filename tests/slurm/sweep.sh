#!/usr/bin/env bash
# `ratchet sweep run` on the single-node test cluster, with the sweep tests'
# fake trainer (tests/integration/sweep_fake_trainer.sh: a synthetic curve):
#   sweep.sh sbatch      --executor sbatch --sbatch-array-max 1: one job per
#                        segment from slurm/sweep-trial.sbatch; the best trial
#                        is preempted mid-rung (exit 75) and comes back through
#                        the template's own Slurm requeue; same results as local
#   sweep.sh array       --executor sbatch: the first three segments start as
#                        one job array; the best trial's task is preempted and
#                        requeued alone; the controller is SIGKILLed while the
#                        tasks run, its launch records and job-id markers
#                        removed (as if killed right after sbatch), and
#                        restarted: it finds the array by name and adopts its
#                        tasks (J_I), none runs twice; same results as local
#   sweep.sh srun        the controller as a job (slurm/sweep.sbatch -n 2,
#                        --executor srun --parallel 2), sent USR1 mid-sweep:
#                        it exits 75, the job is requeued, the rerun adopts
#                        or resumes the segments; same results as local
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"
name=${1:?case}
new_test_dir "sweep-$name"
RATCHET=${RATCHET_BUILT_EXE:?run through ctest}
SWEEP_FAKE=$RATCHET_SOURCE_DIR/tests/integration/sweep_fake_trainer.sh
# common.sh's on_exit: a failed test cancels its job; always, its trial jobs.
extra_cleanup() {
  timeout 15 scancel -n "$(squeue -h -o %j 2>/dev/null | grep "ratchet-sweep-sweep-$name" | sort -u | paste -sd,)" 2>/dev/null || true
}
trap on_exit EXIT

: >val.h5  # sweep run checks that the base's inputs exist (absolute paths: init refuses relative ones)
printf 'val-data = %s/val.h5\nsteps = 9\n' "$PWD" >base.ini
printf 'lr = choice(1e-3, 3e-3, 1e-2)\n' >space.ini
results() { grep '"event":"result"' "$1/journal.jsonl" | sed 's/.*"rung":\([0-9]*\).*"trial":\([0-9]*\).*"val_loss":\([0-9.]*\).*/\2:\1:\3/' | sort; }

# The reference: the same sweep with the local executor.
"$RATCHET" sweep init ref --space space.ini --base base.ini --grid --grid-in-order >/dev/null
"$RATCHET" sweep run ref --trainer "bash $SWEEP_FAKE" --poll-seconds 0.05 --quiet ||
  fail "local reference sweep failed"
want=$(results ref)
[ "$(echo "$want" | wc -l)" -ge 4 ] || fail "reference has too few results: $want"

"$RATCHET" sweep init "sweep-$name" --space space.ini --base base.ini --grid --grid-in-order >/dev/null
dir=$TEST_DIR/sweep-$name
case $name in
  sbatch)
    export RATCHET_SLURM_LIB=$SLURM_DIR/requeue-lib.sh RATCHET_MODULES= FAKE_PREEMPT_LR=3e-3
    timeout 240 "$RATCHET" sweep run "$dir" --executor sbatch --parallel 3 --sbatch-array-max 1 \
      --sbatch-template "$SLURM_DIR/sweep-trial.sbatch" --sbatch-args "-t 5" \
      --trainer "bash $SWEEP_FAKE" --poll-seconds 0.5 >controller.log 2>&1 ||
      { cat controller.log; fail "sbatch sweep failed"; }
    # lr 3e-3 is trial 1: its first segment stopped at 75, Slurm requeued that job.
    [ "$(head -2 "$dir/trials/t0001/invocations" | paste -sd,)" = "1,1" ] ||
      fail "trial 1 invocations: $(paste -sd, "$dir/trials/t0001/invocations")"
    job=$(cat "$dir/trials/t0001/seg-r0-a0.job")
    [ "$(job_field "$job" Restarts)" = 1 ] || fail "job $job was not requeued by Slurm"
    grep -q "requeued (restart 1" "$dir"/trials/t0001/slurm-*.out || fail "no requeue line in the trial log"
    grep -q '"event":"requeued"' "$dir/journal.jsonl" && fail "the controller requeued; Slurm should have"
    ;;
  array)
    export RATCHET_SLURM_LIB=$SLURM_DIR/requeue-lib.sh RATCHET_MODULES='' FAKE_PREEMPT_LR=3e-3 FAKE_SLEEP=2
    run=("$RATCHET" sweep run "$dir" --executor sbatch --parallel 3
      --sbatch-template "$SLURM_DIR/sweep-trial.sbatch" --sbatch-args "-t 5"
      --trainer "bash $SWEEP_FAKE" --poll-seconds 0.5)
    "${run[@]}" >controller.log 2>&1 &
    ctl=$!
    # Killed once the array's three tasks are launched (journaled), then rerun.
    deadline=$((SECONDS + 60))
    until [ "$(grep -c '"event":"launched"' "$dir/journal.jsonl" 2>/dev/null)" -ge 3 ]; do
      ((SECONDS < deadline)) || { kill -9 $ctl; cat controller.log; fail "no launches within 60 s"; }
      sleep 0.2
    done
    kill -9 $ctl
    wait $ctl 2>/dev/null || true
    # As if it had died between sbatch and its records: the launches unjournaled,
    # the job-id markers unwritten. The rerun must find the array by its job
    # name (the segments' .array markers name it) and submit nothing again.
    array_job=$(sed -n 's/.*"handle":"\([0-9]*\)_0".*/\1/p' "$dir/journal.jsonl" | head -n1)
    [ -n "$array_job" ] || fail "no array task handle in the journal"
    grep -v '"event":"launched"' "$dir/journal.jsonl" >journal.tmp && mv journal.tmp "$dir/journal.jsonl"
    rm -f "$dir"/trials/t000[012]/seg-r0-a0.job "$dir"/arrays/*.list.job
    timeout 240 "${run[@]}" >>controller.log 2>&1 || { cat controller.log; fail "restarted sbatch sweep failed"; }
    lists=("$dir"/arrays/*.list)
    [ ${#lists[@]} = 1 ] || fail "a second array was submitted: ${lists[*]}"
    # One array: trials 0..2 at rung 0 are tasks 0..2 of the same job.
    j0=$(cat "$dir/trials/t0000/seg-r0-a0.job")
    [ "$j0" = "${array_job}_0" ] || fail "trial 0's segment is '$j0', not task 0 of the first array $array_job"
    for t in 1 2; do
      [ "$(cat "$dir/trials/t000$t/seg-r0-a0.job")" = "${j0%_0}_$t" ] || fail "trial $t not in array ${j0%_0}"
    done
    [ "$(wc -l <"$dir/arrays/$(basename "$(cut -d' ' -f1 "$dir/trials/t0000/seg-r0-a0.array")")")" -ge 2 ] ||
      fail "the array list has not three lines"
    # lr 3e-3 is trial 1: its task stopped at 75 and Slurm requeued that task alone.
    [ "$(head -2 "$dir/trials/t0001/invocations" | paste -sd,)" = "1,1" ] ||
      fail "trial 1 invocations: $(paste -sd, "$dir/trials/t0001/invocations")"
    [ "$(job_field "${j0%_0}_1" Restarts)" = 1 ] || fail "task ${j0%_0}_1 was not requeued by Slurm"
    [ "$(job_field "${j0%_0}_0" Restarts)" = 0 ] || fail "task ${j0%_0}_0 was requeued too"
    grep -q "requeued (restart 1" "$dir/trials/t0001/slurm-${j0%_0}_1.out" || fail "no requeue line in task 1's log"
    grep -q '"event":"requeued"' "$dir/journal.jsonl" && fail "the controller requeued; Slurm should have"
    # Nothing ran twice: every trial's invocations as in the local reference (+1 for the preempted one).
    for t in 0 2; do
      [ "$(paste -sd, "$dir/trials/t000$t/invocations")" = "$(paste -sd, ref/trials/t000$t/invocations)" ] ||
        fail "trial $t ran $(paste -sd, "$dir/trials/t000$t/invocations"), the reference $(paste -sd, ref/trials/t000$t/invocations)"
    done
    [ "$(grep -c '"event":"run"' "$dir/journal.jsonl")" = 2 ] || fail "the controller did not run twice"
    ;;
  srun)
    export FAKE_SLEEP=2
    id=$(timeout 60 sbatch --parsable -J "sweep-srun" -n 2 -c 1 -t 5 \
      --export="ALL,RATCHET_BIN=$RATCHET,RATCHET_MODULES=,RATCHET_SLURM_LIB=$SLURM_DIR/requeue-lib.sh" \
      "$SLURM_DIR/sweep.sbatch" "$dir" --executor srun --parallel 2 --threads-per-trial 1 \
      --trainer "bash $SWEEP_FAKE" --poll-seconds 0.2) || fail "sbatch failed"
    # Wait for the first results, then preempt the controller's job.
    deadline=$((SECONDS + 90))
    until grep -q '"event":"result"' "$dir/journal.jsonl" 2>/dev/null; do
      ((SECONDS < deadline)) || fail "no result within 90 s"
      sleep 0.5
    done
    timeout 15 scancel --signal=USR1 --batch "$id"
    wait_job "$id" 200 >/dev/null
    expect_job "$id" COMPLETED 1 0:0
    [ "$(grep -c '"event":"run"' "$dir/journal.jsonl")" -ge 2 ] || fail "the controller did not run twice"
    expect_log "got signal 10: the controller stops \(exit 75\)"
    ;;
  *) fail "unknown case $name" ;;
esac
got=$(results "$dir")
[ "$got" = "$want" ] || fail "results differ from the local sweep:
$got
---- want
$want"
"$RATCHET" sweep status "$dir"
log "ok"
