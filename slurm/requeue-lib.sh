# shellcheck shell=bash
# requeue-lib.sh: the shell logic shared by train.sbatch and train-multinode.sbatch.
# Sourced by the batch script (not run); needs bash and `set -euo pipefail`-safe.
#
# The stop protocol (DESIGN.md, "Checkpoints and the stop protocol"):
#   1. A warning signal reaches the batch shell: USR1 from `--signal=B:USR1@120`
#      (or `scancel --signal=USR1 --batch`), or TERM at the time limit, on
#      preemption, or from a cluster that sends nothing else.
#   2. The shell forwards it to the job step (srun, which passes it on to every
#      rank) as RATCHET_STOP_SIGNAL. The trainer only sets a flag; at the next
#      step boundary all ranks agree, save a checkpoint and exit with 75.
#   3. On 75 the shell runs `scontrol requeue` (at most RATCHET_MAX_REQUEUES
#      times per job, counted by SLURM_RESTART_COUNT); Slurm reruns the script
#      from the top and `ratchet train --resume auto` continues from `latest`.
#   4. Before it requeues, the shell asks `ratchet doctor RUN_DIR --exclude`
#      which nodes the next run must avoid (the culprit of a hang, from the
#      flight records; a straggler the trainer recorded): RUN_DIR/
#      suspect_nodes.jsonl, bounded so that the job still fits its partition.
#      After `scontrol requeue` it sets them with `scontrol update
#      ExcNodeList=` (docs/resilience.md, "Excluding the bad node").
#   5. A step that failed otherwise (not 0, 75 or 76, and no stop request) is
#      asked about too: `ratchet doctor RUN_DIR --dead-rank` reads srun's
#      messages of the step and the ranks' fatal records; a rank that died of
#      a signal (SIGKILL, SIGSEGV, ...) or a device error has its node recorded
#      as a suspect, and the job is requeued as after 75, without that node
#      (docs/resilience.md, "A dead rank"; RATCHET_REQUEUE_DEAD_RANK=0: never).
#
# Exit codes of the trainer, as the wrapper reads them:
#   0   done                                    -> the job ends, COMPLETED
#   75  checkpoint saved, run me again          -> requeue (EX_TEMPFAIL, sysexits.h)
#   76  budget reached (steps, time, cost)      -> the job ends, never requeued
#   any other                                   -> a failure; passed through, not requeued,
#                                                  unless a rank died (5. above)
# The batch script exits with the trainer's code, except after a successful
# requeue (0; the job is PENDING again by then).

RATCHET_EXIT_REQUEUE=75
RATCHET_EXIT_BUDGET=76

# Defaults for the settings both templates share (the templates set the rest).
: "${RATCHET_MAX_REQUEUES:=10}"
# Exclude suspect nodes on requeue (1) or only log them (0).
: "${RATCHET_EXCLUDE_SUSPECTS:=1}"
# Requeue (without its node) a job whose rank died of a signal or a device error (1), or fail it (0).
: "${RATCHET_REQUEUE_DEAD_RANK:=1}"
: "${RATCHET_STOP_SIGNAL:=USR1}"
RATCHET_STOP_SIGNAL=${RATCHET_STOP_SIGNAL#SIG}

_ratchet_step_pid=""
_ratchet_stop_requested=""
_ratchet_step_start=""       # when the step started (Unix seconds)
_ratchet_step_log_offset=""  # the job log's size then (this shell's stderr, a file)

ratchet_log() {
  echo "ratchet-slurm[$(date '+%F %T')] job ${SLURM_JOB_ID:-?} run $((${SLURM_RESTART_COUNT:-0} + 1)): $*" >&2
}

ratchet_die() {
  ratchet_log "error: $*"
  exit 1
}

# ratchet_load_modules WORDS: `module load` them (Lmod or environment-modules);
# nothing when empty. Finds the `module` command in a non-login batch shell.
ratchet_load_modules() {
  [ -n "${1:-}" ] || return 0
  local f
  if ! type module >/dev/null 2>&1; then
    for f in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash; do
      if [ -r "$f" ]; then
        set +eu
        # shellcheck disable=SC1090
        . "$f"
        set -eu
        break
      fi
    done
  fi
  if ! type module >/dev/null 2>&1; then
    ratchet_log "warning: no 'module' command here; not loading: $1 (set RATCHET_MODULES= to silence)"
    return 0
  fi
  set +eu
  # shellcheck disable=SC2086
  module load $1
  local rc=$?
  set -eu
  [ $rc -eq 0 ] || ratchet_die "module load $1 failed (exit $rc): fix RATCHET_MODULES"
  ratchet_log "loaded modules: $1"
}

# ratchet_setup BIN: checks the trainer exists, exports thread counts, logs the run.
ratchet_setup() {
  command -v "$1" >/dev/null 2>&1 ||
    ratchet_die "trainer '$1' not found: load its module (RATCHET_MODULES) or set RATCHET_BIN"
  case $RATCHET_MAX_REQUEUES in
    '' | *[!0-9]*) ratchet_die "RATCHET_MAX_REQUEUES='$RATCHET_MAX_REQUEUES' is not a count" ;;
  esac
  # One OpenMP thread per allocated CPU; newer Slurm (22.11+) no longer passes
  # --cpus-per-task from the job to srun on its own.
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
    export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
  fi
  ratchet_log "start on ${SLURM_JOB_NODELIST:-?} (${SLURM_NTASKS:-1} tasks;" \
    "restarts so far ${SLURM_RESTART_COUNT:-0} of at most $RATCHET_MAX_REQUEUES)"
}

# ratchet_shrunk_ntasks: prints the task count for srun when this run's
# allocation holds fewer task slots than the job was submitted with, and
# fails (prints nothing) otherwise. A requeued job may be shrunk while pending
# (scontrol update NumTasks=, NumNodes=, e.g. after a node died), but
# SLURM_NTASKS keeps the submission's count (Slurm 22.05) and srun would try
# to start that many ranks. SLURM_TASKS_PER_NODE ("2(x3),1" = 7 slots) is the
# allocation's; it may exceed the ranks asked for (--ntasks-per-node is a
# maximum next to --ntasks), so only a smaller sum is taken.
ratchet_shrunk_ntasks() {
  local spec=${SLURM_TASKS_PER_NODE:-} item count reps n=0 items
  [ -n "$spec" ] && [ -n "${SLURM_NTASKS:-}" ] || return 1
  IFS=, read -ra items <<<"$spec"
  for item in "${items[@]}"; do
    count=${item%%(*} reps=1
    if [[ $item == *"(x"* ]]; then reps=${item#*(x} reps=${reps%)}; fi
    [[ $count =~ ^[0-9]+$ && $reps =~ ^[0-9]+$ ]] || return 1
    n=$((n + count * reps))
  done
  [ "$n" -gt 0 ] && [ "$n" -lt "$SLURM_NTASKS" ] || return 1
  ratchet_log "this run's allocation holds $n task(s) (${SLURM_JOB_NODELIST:-?}); the job was submitted with $SLURM_NTASKS: starting $n"
  echo "$n"
}

# A stop request (USR1 or TERM) reached the batch shell: pass it to the step.
# TERM is passed on as RATCHET_STOP_SIGNAL, because srun treats a TERM of its
# own as "kill the step" (the ranks would die without saving); srun forwards
# USR1/USR2 to every rank untouched. The trainer treats both alike.
_ratchet_on_signal() {
  _ratchet_stop_requested=$1
  if [ -n "$_ratchet_step_pid" ] && kill -0 "$_ratchet_step_pid" 2>/dev/null; then
    ratchet_log "got SIG$1: sending SIG$RATCHET_STOP_SIGNAL to the step (checkpoint and exit $RATCHET_EXIT_REQUEUE)"
    kill -s "$RATCHET_STOP_SIGNAL" "$_ratchet_step_pid" 2>/dev/null || true
  elif [ -n "$_ratchet_step_pid" ]; then
    ratchet_log "got SIG$1 as the step was ending"
  else
    ratchet_log "got SIG$1 before the step started"
  fi
}

ratchet_install_traps() {
  # shellcheck disable=SC2064
  trap "_ratchet_on_signal $RATCHET_STOP_SIGNAL" "$RATCHET_STOP_SIGNAL"
  trap '_ratchet_on_signal TERM' TERM
}

# ratchet_run_step CMD...: runs CMD (an `srun ...` line) in the background and
# waits for it, so the traps above can run while it works (bash runs a trap
# only between commands, never during a foreground one). Sets RATCHET_STEP_RC.
ratchet_run_step() {
  RATCHET_STEP_RC=0
  if [ -n "$_ratchet_stop_requested" ]; then
    # The job is being stopped already: do not start a trainer just to stop it.
    ratchet_log "stop requested before the step started: not starting it"
    RATCHET_STEP_RC=$RATCHET_EXIT_REQUEUE
    return 0
  fi
  ratchet_log "step: $*"
  # Where this step's messages begin in the job log (srun writes to this
  # shell's stderr, the file of --output): a failed step's srun messages are
  # read back from there (_ratchet_dead_rank). Not a file: not read.
  _ratchet_step_start=$(date +%s)
  _ratchet_step_log_offset=""
  if [ -f "/proc/$$/fd/2" ]; then
    _ratchet_step_log_offset=$(stat -L -c %s "/proc/$$/fd/2" 2>/dev/null) || _ratchet_step_log_offset=""
  fi
  "$@" &
  _ratchet_step_pid=$!
  local rc rc2
  while :; do
    rc=0
    wait "$_ratchet_step_pid" || rc=$?
    # Above 128: the step died of a signal, or a trapped signal woke `wait`.
    [ $rc -gt 128 ] || break
    kill -0 "$_ratchet_step_pid" 2>/dev/null && continue
    # It has ended: ask again for its real status (127: the first wait had it).
    rc2=0
    wait "$_ratchet_step_pid" || rc2=$?
    [ $rc2 -eq 127 ] || rc=$rc2
    break
  done
  _ratchet_step_pid=""
  # A status bash could not read back (seen as -1 when Slurm's time limit
  # signalled the shell and the step at once and the step was reaped inside the
  # trap): after a stop request that is a requeue, as a kill would be; the next
  # run resumes from the newest committed checkpoint, so nothing is lost twice.
  if [ "$rc" -lt 0 ] || [ "$rc" -gt 255 ]; then
    if [ -n "$_ratchet_stop_requested" ]; then
      ratchet_log "step status unreadable (wait gave $rc) after a stop request: treating it as exit $RATCHET_EXIT_REQUEUE"
      rc=$RATCHET_EXIT_REQUEUE
    else
      ratchet_log "step status unreadable (wait gave $rc)"
    fi
  fi
  # A stop signal we forwarded that killed the step outright: it arrived while
  # the trainer was still being loaded, before main() installs its handlers
  # (the default action of USR1/TERM ends a process). Nothing was written
  # since the last checkpoint, so this is a requeue like exit 75.
  if [ -n "$_ratchet_stop_requested" ] && [ "$rc" -gt 128 ]; then
    local sig; sig=$(kill -l $((rc - 128)) 2>/dev/null || true)
    case ${sig#SIG} in
      "${RATCHET_STOP_SIGNAL#SIG}" | TERM)
        ratchet_log "step died of SIG${sig#SIG} before it could catch it (still starting up):" \
          "treating it as exit $RATCHET_EXIT_REQUEUE"
        rc=$RATCHET_EXIT_REQUEUE ;;
    esac
  fi
  # shellcheck disable=SC2034  # read by the templates
  RATCHET_STEP_RC=$rc
  ratchet_log "step exited with $rc"
}

# True when the job is ending because someone cancelled it (scancel): then a
# requeue would undo the user's decision. A time limit (Reason=TimeLimit),
# preemption or a node problem still requeue; so does any doubt.
_ratchet_job_cancelled() {
  local info state reason
  info=$(timeout 60 scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null) || return 1
  state=$(sed -n 's/.*JobState=\([^ ]*\).*/\1/p' <<<"$info")
  reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<<"$info")
  case $state in
    RUNNING | SUSPENDED | "") return 1 ;;
  esac
  case $reason in
    TimeLimit | *Preempt* | *Node* | *Reboot*) return 1 ;;
  esac
  ratchet_log "job state $state (reason $reason): it was cancelled"
  return 0
}

# ratchet_note_run_dir ARGS...: the trainer's --run-dir among its arguments
# (RATCHET_RUN_DIR, unless set already): where the flight records and
# suspect_nodes.jsonl are; without one they are in CKPT_DIR.
ratchet_note_run_dir() {
  [ -z "${RATCHET_RUN_DIR:-}" ] || return 0
  while [ $# -gt 0 ]; do
    case $1 in
      --run-dir) RATCHET_RUN_DIR=${2:-}; shift ;;
      --run-dir=*) RATCHET_RUN_DIR=${1#--run-dir=} ;;
    esac
    shift
  done
  return 0
}

# _ratchet_plan_exclusion: sets _ratchet_exclude to the ExcNodeList the
# requeued job should have, and _ratchet_excluded_now to the one it has; both
# empty when there is nothing to change. `ratchet doctor --exclude` records
# the culprit of a hang (flight records) in RUN_DIR/suspect_nodes.jsonl and
# decides (train/suspect_nodes.h): most-blamed suspects first, never so many
# that the partition's nodes left are fewer than the job's. Its messages go
# to the log. Any failure here only means no exclusion: the requeue goes on.
_ratchet_exclude="" _ratchet_excluded_now=""
_ratchet_plan_exclusion() {
  _ratchet_exclude="" _ratchet_excluded_now=""
  [ "$RATCHET_EXCLUDE_SUSPECTS" = 1 ] || return 0
  local dir=${RATCHET_RUN_DIR:-${CKPT_DIR:-}} doctor=${RATCHET_DOCTOR_BIN:-${RATCHET_BIN:-ratchet}}
  local info part exc="" pnodes="" nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}} out err rc=0 line
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  # Neither flight records nor suspects: nothing to exclude, nothing to ask.
  [ -e "$dir/suspect_nodes.jsonl" ] || [ -d "$dir/flight" ] || return 0
  info=$(timeout 60 scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null) || info=""
  part=$(sed -n 's/.* Partition=\([^ ]*\).*/\1/p' <<<"$info")
  exc=$(sed -n 's/.* ExcNodeList=\([^ ]*\).*/\1/p' <<<"$info")
  [ "$exc" != "(null)" ] || exc=""
  if [ -n "$exc" ]; then exc=$(timeout 60 scontrol show hostnames "$exc" 2>/dev/null | paste -sd, -) || exc=""; fi
  # The partition's usable nodes (sinfo -N: one line per node and partition):
  # a node down, drained, draining or failed cannot take the job anyway, so it
  # does not count towards the bound (and excluding it costs nothing).
  if [ -n "$part" ]; then
    pnodes=$(timeout 60 sinfo -h -N -p "$part" -o '%N %t' 2>/dev/null |
      awk '$2 !~ /^(down|drain|drng|fail|inval|futr)/ {print $1}' | sort -u | paste -sd, -) || pnodes=""
  fi
  err=$(mktemp "${TMPDIR:-/tmp}/ratchet-doctor.XXXXXX") || return 0
  out=$(timeout 120 "$doctor" doctor "$dir" --exclude --job-nodes "$nodes" \
    --partition-nodes "$pnodes" --excluded "$exc" 2>"$err") || rc=$?
  while IFS= read -r line; do ratchet_log "$line"; done <"$err"
  rm -f "$err"
  if [ $rc -ne 0 ]; then
    ratchet_log "warning: '$doctor doctor $dir --exclude' failed (exit $rc): not excluding any node"
    return 0
  fi
  out=$(head -n1 <<<"$out")
  if [ "$out" != "$exc" ]; then
    _ratchet_exclude=$out
    _ratchet_excluded_now=$exc
  fi
  return 0
}

# _ratchet_scontrol_after_requeue ARGS...: `scontrol ARGS` once the requeue
# is under way. Slurm answers a requeue with CONT+TERM to every process of the
# job, then KILL after KillWait (30 s by default): the shell ignores TERM by
# then (ratchet_finish), and so does scontrol, which inherits that. Not under
# `timeout`: it installs its own TERM handler and passes the TERM on to
# scontrol (the update was killed so on the test cluster, and the rerun ran
# on the suspect node). Bounded here instead: 60 s, then KILL.
_ratchet_scontrol_after_requeue() {
  scontrol "$@" &
  local pid=$! i rc=0
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" || rc=$?
  return $rc
}

# _ratchet_apply_exclusion: after the requeue (Slurm takes ExcNodeList only
# from a pending job: a running one gets "Job is no longer pending"). The
# requeued job cannot start again before this script has ended (it is
# completing until then), so it never starts on the excluded node.
_ratchet_apply_exclusion() {
  [ -n "$_ratchet_exclude" ] || return 0
  if _ratchet_scontrol_after_requeue update JobId="$SLURM_JOB_ID" ExcNodeList="$_ratchet_exclude"; then
    ratchet_log "the next run excludes node(s) ${_ratchet_exclude} (ExcNodeList was ${_ratchet_excluded_now:-empty})"
  else
    ratchet_log "warning: 'scontrol update JobId=$SLURM_JOB_ID ExcNodeList=$_ratchet_exclude' failed:" \
      "the next run may use the suspect node(s) again"
  fi
}

# _ratchet_dead_rank: true when the failed step lost a rank to a signal or a
# device error: `ratchet doctor RUN_DIR --dead-rank` (report/dead_rank.h)
# reads srun's messages of this step from the job log and the ranks' fatal
# records (RUN_DIR/flight/fatal_rank_R.json), and records the rank's node as
# a suspect (cause "dead"); the requeue then excludes it as after a hang.
# False (a failure, not requeued) when no rank is to blame or on any doubt.
_ratchet_dead_rank() {
  [ "$RATCHET_REQUEUE_DEAD_RANK" = 1 ] || return 1
  # A stop we asked for (preemption, time limit, scancel): not a death.
  [ -z "$_ratchet_stop_requested" ] || return 1
  local dir=${RATCHET_RUN_DIR:-${CKPT_DIR:-}} doctor=${RATCHET_DOCTOR_BIN:-${RATCHET_BIN:-ratchet}}
  local msgs err rc=0 line
  [ -n "$dir" ] && [ -d "$dir" ] || return 1
  msgs=$(mktemp "${TMPDIR:-/tmp}/ratchet-srun.XXXXXX") || return 1
  err=$(mktemp "${TMPDIR:-/tmp}/ratchet-doctor.XXXXXX") || { rm -f "$msgs"; return 1; }
  if [ -n "$_ratchet_step_log_offset" ]; then
    tail -c +$((_ratchet_step_log_offset + 1)) "/proc/$$/fd/2" 2>/dev/null | grep -a 'srun: ' >"$msgs" || true
  fi
  timeout 120 "$doctor" doctor "$dir" --dead-rank "$msgs" --since "${_ratchet_step_start:-0}" 2>"$err" || rc=$?
  while IFS= read -r line; do ratchet_log "$line"; done <"$err"
  rm -f "$msgs" "$err"
  [ $rc -eq 0 ] || return 1
  ratchet_log "a rank died: requeueing without its node, as after exit $RATCHET_EXIT_REQUEUE"
  return 0
}

# ratchet_check_dead_rank: after ratchet_run_step, turns RATCHET_STEP_RC into
# 75 (requeue) when the failed step lost a rank (_ratchet_dead_rank), for a
# template that acts on the code before ratchet_finish (sweep-trial.sbatch
# writes the segment's exit code). ratchet_finish does the same on its own.
_ratchet_dead_rank_asked=""
ratchet_check_dead_rank() {
  case $RATCHET_STEP_RC in
    0 | "$RATCHET_EXIT_BUDGET" | "$RATCHET_EXIT_REQUEUE") return 0 ;;
  esac
  [ -z "$_ratchet_dead_rank_asked" ] || return 0
  _ratchet_dead_rank_asked=1
  if _ratchet_dead_rank; then RATCHET_STEP_RC=$RATCHET_EXIT_REQUEUE; fi
  return 0
}

# ratchet_finish RC: ends the batch script according to the trainer's exit code.
ratchet_finish() {
  local rc=$1 restarts=${SLURM_RESTART_COUNT:-0}
  case $rc in
    0 | "$RATCHET_EXIT_BUDGET" | "$RATCHET_EXIT_REQUEUE") ;;
    *) if [ -z "$_ratchet_dead_rank_asked" ] && _ratchet_dead_rank; then rc=$RATCHET_EXIT_REQUEUE; fi ;;
  esac
  case $rc in
    0)
      ratchet_log "training finished"
      exit 0
      ;;
    "$RATCHET_EXIT_BUDGET")
      ratchet_log "budget reached (exit $rc): finished, not requeueing"
      exit "$rc"
      ;;
    "$RATCHET_EXIT_REQUEUE") ;;
    *)
      ratchet_log "trainer failed (exit $rc): not requeueing; see the messages above"
      exit "$rc"
      ;;
  esac

  # 75: a checkpoint is committed; run again if allowed.
  if [ "$restarts" -ge "$RATCHET_MAX_REQUEUES" ]; then
    ratchet_log "requeue limit reached (SLURM_RESTART_COUNT=$restarts," \
      "RATCHET_MAX_REQUEUES=$RATCHET_MAX_REQUEUES): not requeueing." \
      "The checkpoint in ${CKPT_DIR:-the checkpoint directory} is kept; sbatch again to continue"
    exit "$rc"
  fi
  if _ratchet_job_cancelled; then
    ratchet_log "not requeueing a cancelled job; the checkpoint in ${CKPT_DIR:-the checkpoint directory}" \
      "is kept; sbatch again to continue"
    exit "$rc"
  fi
  _ratchet_plan_exclusion
  # Slurm answers the requeue with CONT+TERM to this shell: nothing left to forward.
  trap '' TERM "$RATCHET_STOP_SIGNAL"
  # The requeue's own TERM may come before scontrol has returned: not under
  # `timeout` either (a killed scontrol would read as a failed requeue).
  if _ratchet_scontrol_after_requeue requeue "$SLURM_JOB_ID"; then
    ratchet_log "requeued (restart $((restarts + 1)) of at most $RATCHET_MAX_REQUEUES);" \
      "the next run resumes from the latest checkpoint"
    _ratchet_apply_exclusion
    exit 0
  fi
  ratchet_log "error: 'scontrol requeue $SLURM_JOB_ID' failed (is --requeue allowed here?);" \
    "sbatch again to continue from the checkpoint"
  exit "$rc"
}
