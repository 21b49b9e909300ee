#!/usr/bin/env bash
# The requeue wrapper after a rank died (slurm/requeue-lib.sh: ratchet_run_step,
# then ratchet_finish on a failed step) without a cluster: a stub `srun` prints
# srun's messages of a step whose rank died and exits as srun does; stub
# `scontrol` and `sinfo` record their calls; the real `ratchet doctor
# --dead-rank` and `--exclude` decide. The job log is the wrapper's stderr, a
# file, as under sbatch. Checks: a rank SIGKILLed (srun: "task 1: Killed") or
# dead of a CUDA error (its fatal record) has its node recorded (cause "dead")
# and excluded, and the job is requeued; a previous step's messages in the
# same log are not read; a task that exited with an error, and
# RATCHET_REQUEUE_DEAD_RANK=0, leave the failure as it was (not requeued);
# a third death in one job is not requeued (it follows the run); a sweep
# trial (slurm/sweep-trial.sbatch) finds its run directory in the segment's
# --run-dir, is requeued without the node and writes no exit code.
# The real Slurm path: tests/slurm/chaos.sh dead-rank, crash-rank.
#   requeue_dead_rank_stub.sh RATCHET_EXE
set -euo pipefail
exe=${1:?usage: requeue_dead_rank_stub.sh RATCHET_EXE}
lib=$(cd "$(dirname "$0")/../../slurm" && pwd)/requeue-lib.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"

# Stand-in scontrol and sinfo (their answers: slurm_query_stubs.sh).
# shellcheck source-path=SCRIPTDIR source=slurm_query_stubs.sh
source "$(dirname "$0")/slurm_query_stubs.sh"
write_slurm_query_stubs "$work/bin"
# srun: STUB_SRUN_MESSAGES on stderr (as srun writes them), a fatal record
# when STUB_FATAL is set, then exit STUB_SRUN_RC.
cat >"$work/bin/srun" <<'STUB'
#!/bin/bash
[ -z "${STUB_FATAL:-}" ] || { mkdir -p "$CKPT_DIR/flight"; echo "$STUB_FATAL" | sed "s/NOW/$(date +%s)/" >"$CKPT_DIR/flight/fatal_rank_1.json"; }
printf '%b' "$STUB_SRUN_MESSAGES" >&2
exit "$STUB_SRUN_RC"
STUB
chmod +x "$work/bin/"*

fail() { echo "FAIL: $*" >&2; exit 1; }

# run CASE RC MESSAGES [EARLIER_LOG]: the wrapper runs the step and finishes.
run() {
  local name=$1 rc_step=$2 msgs=$3 earlier=${4:-}
  dir=$work/$name
  mkdir -p "$dir"
  : >"$dir/calls"
  printf '%b' "$earlier" >"$dir/job.out"
  rc=0
  PATH=$work/bin:$PATH STUB_LOG=$dir/calls STUB_SRUN_MESSAGES=$msgs STUB_SRUN_RC=$rc_step \
    SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 CKPT_DIR=$dir RATCHET_BIN=$exe \
    bash -c 'set -euo pipefail; . "$1"; ratchet_run_step srun ratchet train; ratchet_finish "$RATCHET_STEP_RC"' \
    _ "$lib" 2>>"$dir/job.out" || rc=$?
  echo "---- $name (exit $rc)"
  cat "$dir/job.out"
  sed 's/^/  call: /' "$dir/calls"
}
requeued_without() {  # NODE
  [ $rc -eq 0 ] || fail "$name: the wrapper exited $rc, not 0 after a requeue"
  grep -q "^scontrol requeue 42$" "$dir/calls" || fail "$name: no requeue"
  grep -q "^scontrol update JobId=42 ExcNodeList=$1$" "$dir/calls" || fail "$name: no ExcNodeList=$1"
  grep -q "\"node\": *\"$1\".*\"cause\": *\"dead\"" "$dir/suspect_nodes.jsonl" ||
    fail "$name: suspect_nodes.jsonl does not name $1 (dead)"
}
not_requeued() {  # RC
  [ $rc -eq "$1" ] || fail "$name: the wrapper exited $rc, expected the step's $1"
  grep -q "^scontrol requeue" "$dir/calls" && fail "$name: requeued a failure"
  grep -q "trainer failed (exit $1): not requeueing" "$dir/job.out" || fail "$name: no 'trainer failed' line"
}

killed='srun: error: n2: task 1: Killed\nsrun: launch/slurm: _step_signal: Terminating StepId=7.0\nsrun: error: n1: task 0: Terminated\n'
# An earlier step of the same job log lost rank 1 on n3: not this step's.
run killed 143 "$killed" 'srun: error: n3: task 1: Killed\n'
requeued_without n2
grep -q "ratchet doctor: rank 1 (n2) died of SIGKILL" "$dir/job.out" || fail "killed: the log does not name the dead rank"
grep -q '"node": *"n3"' "$dir/suspect_nodes.jsonl" && fail "killed: read the earlier step's messages"

# A CUDA error: the rank exits through MPI_Abort (srun sees an exit code);
# its fatal record names it.
STUB_FATAL='{"rank": 1, "host": "n3", "job_id": "42", "pid": 1, "cause": "library", "lib": "cuda", "what": "an illegal memory access", "time": NOW}' \
  run cuda 1 'srun: error: n1: task 0: Exited with exit code 1\n'
requeued_without n3

run error-exit 2 'srun: error: n1: task 0: Exited with exit code 2\nsrun: launch/slurm: _step_signal: Terminating StepId=7.0\nsrun: error: n2: task 1: Killed\n'
not_requeued 2
grep -q "no dead rank to blame" "$dir/job.out" || fail "error-exit: doctor's reason not logged"

RATCHET_REQUEUE_DEAD_RANK=0 run off 143 "$killed"
not_requeued 143

# Two deaths of job 42 recorded already: the third is not requeued.
mkdir -p "$work/third"
for t in 100 200; do
  echo "{\"node\": \"n$((t / 100))\", \"rank\": 1, \"cause\": \"dead\", \"job_id\": \"42\", \"time\": $t, \"detail\": \"x\"}" >>"$work/third/suspect_nodes.jsonl"
done
run third 143 "$killed"
not_requeued 143
grep -q "lost a rank 2 times before this" "$dir/job.out" || fail "third: the reason is not logged"
# A sweep trial's segment (ratchet sweep run --executor sbatch): the trial
# template takes the run directory from the segment script's --run-dir.
name=sweep-trial dir=$work/sweep-trial
mkdir -p "$dir/trial 0"
: >"$dir/calls"
printf '%s\n' '#!/bin/bash' "exec '$exe' 'train' '--run-dir' '$dir/trial 0' '--steps' '10'" >"$dir/seg.sh"
rc=0
PATH=$work/bin:$PATH STUB_LOG=$dir/calls STUB_SRUN_MESSAGES=$killed STUB_SRUN_RC=143 \
  SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 RATCHET_SWEEP_SEGMENT=$dir/seg RATCHET_SLURM_LIB=$lib \
  RATCHET_MODULES='' RATCHET_DOCTOR_BIN=$exe bash "$(dirname "$lib")/sweep-trial.sbatch" 2>>"$dir/job.out" || rc=$?
echo "---- $name (exit $rc)"
cat "$dir/job.out"
[ $rc -eq 0 ] || fail "sweep-trial: the template exited $rc, not 0 after a requeue"
grep -q "^scontrol update JobId=42 ExcNodeList=n2$" "$dir/calls" || fail "sweep-trial: no ExcNodeList=n2"
grep -q '"node": *"n2".*"cause": *"dead"' "$dir/trial 0/suspect_nodes.jsonl" ||
  fail "sweep-trial: the trial's suspect_nodes.jsonl does not name n2"
[ ! -e "$dir/seg.exit" ] || fail "sweep-trial: a requeued segment wrote an exit code ($(cat "$dir/seg.exit"))"
echo "ok"
