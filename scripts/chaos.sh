#!/usr/bin/env bash
# The chaos run (issue 14): trains a tiny model while killing the trainer at
# random moments, restarting it after every kill, and checks that
#   - the final weights (--export) are byte-identical to a run never stopped;
#   - the ledger counted every preemption and resume, and no time or tokens twice.
# Kills: SIGKILL, SIGUSR1, SIGTERM at a random step (the trainer's fault point
# step-N, in one rank under mpirun), a quarter of them also sent from outside
# at a random moment of the first second, whichever comes first; SIGKILL or a
# stop signal inside a save, SIGKILL at start-up (RATCHET_FAULT points);
# `ratchet ckpt prune` running alongside. Every kill is aimed at something the
# attempt must reach, so all of them land on a machine of any speed.
# Scenarios:
#   single  one process
#   mpi     mpirun -np 2, a random rank receives the kill
#   zero    a world size of 1, 2 or 3 and a ZeRO stage (--zero 0 or 1, and 2
#           and 3 where the build has them) chosen anew at every restart (the same
#           global batch): each attempt resumes what another world size and
#           stage saved. Different world sizes and stages add gradients in a
#           different order, so this one is compared byte for byte with a
#           replay: the same world sizes and stages over the same step
#           ranges, stopped cleanly at the steps the chaos run resumed from.
#   async   as zero, every attempt with --ckpt-async (the shards written by a
#           background thread while training goes on); the replay saves
#           synchronously, so async and sync saves are compared byte for byte.
# In zero and async, every attempt also picks a --shard-group (hybrid
# sharding) where the build has it: 1, 2 (on 2 ranks, the only world size it
# divides) or node (on one machine: the whole world), so a checkpoint one
# grouping wrote is resumed by another; the replay uses each segment's group.
# In zero and async at stage >= 1, half of the step kills instead hit one rank
# as it enters a gradient reduce-scatter or parameter all-gather (mid-step; at
# stage 3 the all-gathers are the blocks' gathers in forward and backward).
# Under mpirun every rank writes its own shard of each checkpoint: a KILL
# inside a save at ckpt-mid-write goes to one random rank (the others are
# ended by mpirun), in the middle of its shard (in async, on its writer thread).
#   hang    mpirun -np 2 at ZeRO-1 with --hang-timeout 1: every kill is a hang
#           instead, one random rank frozen (SIGSTOP, RATCHET_FAULT STOP@point*K)
#           inside its K-th parameter all-gather (K among the steps left), its
#           K-th save (mid-write of its shard) or the first evaluation it
#           reaches; its peer waits in the collective, its hang watchdog ends
#           the job with 75, and `ratchet doctor` must blame the frozen rank.
#           Compared byte for byte with the uninterrupted run at ZeRO-1.
#
#   scripts/chaos.sh [--exe build/ratchet] [--work DIR] [--full | --quick]
#                    [--steps N] [--kills K] [--mpi-kills K] [--zero-kills K]
#                    [--async-kills K] [--hang-kills K]
#                    [--scenarios single,mpi,zero,async,hang] [--seed S]
#   --full (default): 2000 steps, 50 kills; 3 x 12 more in mpi, zero and async; 12 hangs
#   --quick (CTest, label chaos): 200 steps, 8 kills; 4 in mpi, zero and async; 3 hangs
# Exit 0: every check passed; 1: a check failed (the log says which).
set -euo pipefail

exe=build/ratchet
work=""
steps=2000 kills=50 mpi_kills=12 zero_kills=12 async_kills=12 hang_kills=12
scenarios=single,mpi,zero,async,hang
seed=$(( $(date +%s) % 32768 ))
while [ $# -gt 0 ]; do
  case $1 in
    --exe) exe=$2; shift ;;
    --work) work=$2; shift ;;
    --full) steps=2000 kills=50 mpi_kills=12 zero_kills=12 async_kills=12 hang_kills=12 ;;
    --quick) steps=200 kills=8 mpi_kills=4 zero_kills=4 async_kills=4 hang_kills=3 ;;
    --steps) steps=$2; shift ;;
    --kills) kills=$2; shift ;;
    --mpi-kills) mpi_kills=$2; shift ;;
    --zero-kills) zero_kills=$2; shift ;;
    --async-kills) async_kills=$2; shift ;;
    --hang-kills) hang_kills=$2; shift ;;
    --scenarios) scenarios=$2; shift ;;
    --seed) seed=$2; shift ;;
    -h | --help) sed -n '2,49p' "$0"; exit 0 ;;
    *) echo "chaos.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
exe=$(realpath "$exe")
[ -x "$exe" ] || { echo "chaos.sh: no ratchet binary at $exe (build it, or pass --exe)" >&2; exit 2; }
if [ -z "$work" ]; then work=$(mktemp -d /tmp/ratchet-chaos.XXXXXX); fi
mkdir -p "$work"
work=$(realpath "$work")
RANDOM=$seed  # the choices (kind, moment, world size) replay with --seed; timing does not
echo "chaos: seed $seed, work dir $work, $exe"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=$(command -v /usr/bin/mpirun || command -v mpirun || true)
# The ZeRO stages the zero scenario switches between: 2 and 3 where this build has them.
zero_stages=(0 1)
"$exe" train --help 2>/dev/null | tr -s ' \n' ' ' | grep -q "2 = ZeRO-2" && zero_stages+=(2)
"$exe" train --help 2>/dev/null | tr -s ' \n' ' ' | grep -q "3 = ZeRO-3" && zero_stages+=(3)
# Hybrid sharding (--shard-group N|node), where the build has it.
shard_groups=0
"$exe" train --help 2>/dev/null | grep -q -- "--shard-group" && shard_groups=1

failures=0
prune_pid=""
# The prune loop must not outlive the script.
trap '[ -z "$prune_pid" ] || kill "$prune_pid" 2>/dev/null || true' EXIT
bad() { echo "chaos: FAIL: $*"; failures=$((failures + 1)); }
now() { date +%s.%N; }
# A random float in [0, $1).
rand_upto() { awk -v r="$RANDOM" -v m="$1" 'BEGIN { printf "%.3f", r / 32768 * m }'; }

# ---- data: a slice of the King James Bible, byte tokens -------------------------
if [ ! -f "$work/data/train_000000.h5" ]; then
  command -v bible >/dev/null || { echo "chaos.sh: needs bible-kjv (scripts/install-deps.sh)" >&2; exit 2; }
  bible -f "Gen1:1-Gen9:29" > "$work/text.txt"
  "$exe" shard --tokenizer byte --input "$work/text.txt" --output-dir "$work/data" \
    --val-fraction 0.1 > "$work/shard.log"
fi

# Fault points at ZeRO's collectives (src/core/fault.h), where the build has
# them: a one-step ZeRO-1 run told to die at its first all-gather does (137).
coll_points=$( (RATCHET_FAULT=zero-all-gather "$exe" train --model custom --layers 1 --heads 2 \
    --channels 16 --max-seq-len 16 --seq-len 16 --batch-size 1 --steps 1 --threads 1 --zero 1 \
    --quiet --train-data "$work/data/train_*.h5" >/dev/null 2>&1; echo $?) 2>/dev/null )
if [ "$coll_points" = 137 ]; then coll_points=1; else coll_points=0; fi
echo "chaos: ZeRO stages ${zero_stages[*]}; shard groups $([ $shard_groups = 1 ] && echo "1, 2, node" || echo "none (not in this build)"); kills inside collectives: $([ $coll_points = 1 ] && echo yes || echo "no (this build has no such fault points)")"

# Every piece of state matters: shuffled data, accumulation (single, mpi),
# warmup + cosine LR, evaluation; a save every 10 steps keeps progress per
# attempt small next to the kills.
rows=6  # global batch: 6 rows of 16 tokens
train_args() {  # $1 run dir, $2 micro-batch: sets TARGS (an array: the globs stay quoted)
  TARGS=(train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 16 --seq-len 16
    --batch-size "$2" --total-batch-tokens $((rows * 16)) --threads 1
    --train-data "$work/data/train_*.h5" --val-data "$work/data/val_*.h5" --eval-every 50
    --eval-batches 2 --warmup-steps 20 --steps "$steps" --lr 3e-3 --ckpt-every-steps 10
    --keep-last 2 --run-dir "$1" --export "$1/out.bin")
}
launch() {  # $1 world (0: no mpirun), $2 log, rest: ratchet args; sets $pid
  local world=$1 log=$2; shift 2
  if [ "$world" -eq 0 ]; then
    "$exe" "$@" > "$log" 2>&1 &
  else
    "$mpirun" -np "$world" --bind-to none -x RATCHET_FAULT "$exe" "$@" > "$log" 2>&1 &
  fi
  pid=$!
}
# The pid the kill goes to: the trainer itself, or a random rank under mpirun.
target_pid() {  # $1 world, $2 launcher pid
  if [ "$1" -eq 0 ]; then echo "$2"; return; fi
  local ranks=() i
  for i in $(seq 50); do
    mapfile -t ranks < <(pgrep -P "$2" -f "$exe" || true)
    [ "${#ranks[@]}" -ge "$1" ] && break
    sleep 0.02
  done
  if [ "${#ranks[@]}" -gt 0 ]; then echo "${ranks[RANDOM % ${#ranks[@]}]}"; fi
}

# The step of the newest committed checkpoint in $1 (0: none): no attempt
# resumes later than that.
resume_bound() {
  local best=0 d n
  for d in "$1"/step_*; do
    [ -f "$d/COMMITTED" ] || continue
    n=$((10#${d##*/step_}))
    [ "$n" -gt "$best" ] && best=$n
  done
  echo "$best"
}

# ---- one scenario ----------------------------------------------------------------
# $1 name, $2 kills, $3 world mode: 0 = no mpirun, 2 = two ranks, z = 1..3 ranks,
# each attempt with a ZeRO stage of $zero_stages
run_scenario() {
  local name=$1 want_kills=$2 mode=$3
  # async: the zero scenario's attempts with --ckpt-async (the reference and the replay without).
  local async_args=()
  [ "$mode" = a ] && mode=z && async_args=(--ckpt-async)
  # hang: two ranks at ZeRO-1 (all-gathers every step), every kill a hang.
  local hang=0 hang_args=() hang_timeout=1
  [ "$mode" = h ] && mode=2 && hang=1 && hang_args=(--zero 1 --hang-timeout "$hang_timeout")
  local dir="$work/$name" ref="$work/$name-ref"
  rm -rf "$dir" "$ref"; mkdir -p "$dir/logs"
  local zero_args=() ref_world=$mode
  [ "$mode" = z ] && zero_args=(--zero 1) && ref_world=1
  local t_start; t_start=$(now)

  # The uninterrupted reference.
  local t0; t0=$(now)
  train_args "$ref" $((rows / (ref_world > 0 ? ref_world : 2)))
  launch "$ref_world" "$work/$name-ref.log" "${TARGS[@]}" "${zero_args[@]}" ${hang_args[@]+"${hang_args[@]}"}
  wait "$pid" || { bad "$name: the uninterrupted run failed (rc $?, $work/$name-ref.log)"; return; }
  local ref_s; ref_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print b - a }')
  echo "chaos: $name: uninterrupted run: $steps steps in ${ref_s}s"

  local attempt=0 landed=0 done_rc=-1 sum_wall=0 preempt_expected=0 resumes_seen=0 printed=0 preempt_maybe=0
  local segments=()  # "start_step:world[:stage[:group]]" of the attempts whose work the final weights keep
  local kinds=(KILL USR1 TERM save-KILL save-TERM)
  [ "$hang" = 1 ] && kinds=(hang-gather hang-save hang-eval)
  local hang_rank=""
  local points=(ckpt-mid-write ckpt-before-commit ckpt-before-latest)
  local starts=(attempt-start setup-model resume)  # reached by every attempt before its steps
  while :; do
    attempt=$((attempt + 1))
    [ "$attempt" -gt $((want_kills * 3 + 20)) ] && { bad "$name: no end after $attempt attempts"; break; }
    local log; log=$(printf '%s/logs/attempt_%03d.log' "$dir" "$attempt")
    local world=$mode stage="" group=""
    if [ "$mode" = z ]; then
      world=$((1 + RANDOM % 3))
      stage=${zero_stages[RANDOM % ${#zero_stages[@]}]}
      zero_args=(--zero "$stage")
      if [ "$shard_groups" = 1 ]; then
        local groups=(1 node); [ "$world" -eq 2 ] && groups+=(2)
        group=${groups[RANDOM % ${#groups[@]}]}
        zero_args+=(--shard-group "$group")
      fi
    fi
    local kind=none when=- fault=""
    if [ "$landed" -lt "$want_kills" ]; then
      kind=${kinds[RANDOM % ${#kinds[@]}]}
      # Every kill is aimed at something the attempt must reach before it can
      # end, so every planned kill lands however fast the machine is: a step
      # (the trainer's fault point step-N), a save, or a start-up point.
      # `from`: the newest committed checkpoint; the attempt resumes there or
      # earlier, so it trains every step after it.
      local from; from=$(resume_bound "$dir/ckpt")
      # Where: a random step among the next 2/(kills left + 1) of the steps
      # left, so that the kills spread over the run. A stop signal is heeded
      # up to the step before the last (at the last the run just ends).
      local span=$(( 2 * (steps - from) / (want_kills - landed + 1) ))
      local target=$(( from + 1 + RANDOM % (span > 1 ? span : 1) ))
      [ "$target" -le $((steps - 1)) ] || target=$((steps - 1))
      # Saves ahead (every 10 steps, then the final one): `saves` that a KILL
      # can hit, `stop_saves` after which a step is left to stop at.
      local first=$(( (from / 10 + 1) * 10 ))
      local saves=$(( (first <= steps - 1 ? (steps - 1 - first) / 10 + 1 : 0) + 1 ))
      local stop_saves=$(( first <= steps - 2 ? (steps - 2 - first) / 10 + 1 : 0 ))
      if [ "$from" -ge "$steps" ]; then kind=start-KILL  # nothing left but start-up and the end
      elif [ "$target" -le "$from" ]; then kind=save-KILL  # no step to stop at: the final save
      fi
      [ "$kind" = save-TERM ] && [ "$stop_saves" -eq 0 ] && kind=save-KILL
      if [ "$hang" = 1 ]; then
        # Every attempt reaches a gather each step, a save and an evaluation
        # (the final ones at least): the frozen rank's peer waits in the
        # collective until its watchdog ends the job.
        kind=${kinds[RANDOM % ${#kinds[@]}]}
        hang_rank=$((RANDOM % 2))
        saves=$(( saves > 3 ? 3 : saves ))
        case $kind in
          hang-gather) fault="rank$hang_rank/STOP@zero-all-gather*$((1 + RANDOM % (steps - from)))" ;;
          hang-save) fault="rank$hang_rank/STOP@ckpt-mid-write*$((1 + RANDOM % saves))" ;;
          hang-eval) fault="rank$hang_rank/STOP@eval" ;;
        esac
        if [ "$from" -ge "$steps" ]; then
          # The final checkpoint is committed: the attempt only ends the run,
          # no gather or save is left to hang in. No more hangs.
          echo "chaos: $name: the final checkpoint is saved: no hang left to land ($landed of $want_kills)"
          want_kills=$landed kind=none fault=""
        fi
      fi
      case $kind in
        KILL | USR1 | TERM)
          # At step $target, in one random rank under mpirun: SIGKILL, or the
          # signal raised so that the trainer's handlers run.
          local sig=""; [ "$kind" = KILL ] || sig="$kind@"
          local rank=""; [ "$world" != 0 ] && rank="rank$((RANDOM % world))/"
          fault="$rank${sig}step-$target"
          when="step$target"
          # A quarter also from outside, at a random moment of the first
          # second (start-up, the resume, the first steps), at most what the
          # uninterrupted run took for the steps left: whichever comes first.
          if [ $((RANDOM % 4)) -eq 0 ]; then
            local reach; reach=$(awk -v r="$ref_s" -v n="$steps" -v l="$from" \
              'BEGIN { x = r * (n - l) / n; printf "%.3f", (x < 1 ? x : 1) }')
            when="$(rand_upto "$reach")s|$when"
          fi ;;
        save-KILL)  # the Nth save from here, N within the saves left (the final one too)
          saves=$(( saves > 3 ? 3 : saves ))
          local point=${points[RANDOM % 3]}
          # Every rank writes its shard (ckpt-mid-write): one of them is killed
          # there; the commit points are rank 0's. With a numeric shard group
          # at stage >= 1 only group 0 (ranks 0 .. N-1) writes, one replica.
          local writers=$world
          if [ -n "$group" ] && [ "$group" != node ] && [ "${stage:-0}" -ge 1 ]; then writers=$group; fi
          local who=""; [ "$world" != 0 ] && [ "$point" = ckpt-mid-write ] && who="rank$((RANDOM % writers))/"
          fault="$who$point*$((1 + RANDOM % saves))" ;;
        save-TERM) fault="TERM@${points[RANDOM % 3]}" ;;  # at the first save, a periodic one
        start-KILL) fault=${starts[RANDOM % ${#starts[@]}]} ;;
        hang-*) ;;
      esac
      # zero, async at stage >= 1: half of the step kills go to one rank as it
      # enters a gradient reduce-scatter or a parameter all-gather instead (its
      # peers are inside the collective, waiting): SIGKILL at the K-th such
      # call (every step makes at least one of each, so K <= the steps left is
      # reached), a stop signal at the first.
      if [ -n "$stage" ] && [ "$stage" -ge 1 ] && [ "$coll_points" = 1 ] &&
         { [ "$kind" = KILL ] || [ "$kind" = USR1 ] || [ "$kind" = TERM ]; } && [ $((RANDOM % 2)) -eq 0 ]; then
        local colls=(zero-reduce-scatter zero-all-gather)
        local coll=${colls[RANDOM % 2]} who="rank$((RANDOM % world))/"
        when=-
        if [ "$kind" = KILL ]; then
          fault="$who$coll*$((1 + RANDOM % (steps - from)))"
        else
          fault="$who$kind@$coll"
        fi
        kind=coll-$kind
      fi
    fi
    # `ckpt prune` alongside in a third of the attempts.
    local pruning=0
    if [ $((RANDOM % 3)) -eq 0 ]; then
      pruning=1
      ( while :; do "$exe" ckpt prune "$dir/ckpt" --keep-last 1 >> "$dir/prune.log" 2>&1 || true
                    sleep 0.05; done ) &
      prune_pid=$!
    fi
    train_args "$dir" $((rows / (world > 0 ? world : 2)))
    local args=("${TARGS[@]}")
    local a0; a0=$(now)
    RATCHET_FAULT=$fault launch "$world" "$log" "${args[@]}" "${zero_args[@]}" ${async_args[@]+"${async_args[@]}"} \
      ${hang_args[@]+"${hang_args[@]}"}
    case $when in
      *s\|step*)  # from outside after the delay, unless the step came first (the
        # attempt is not waited for yet, so its pid cannot be reused meanwhile)
        sleep "${when%%s|*}"
        local victim; victim=$(target_pid "$world" "$pid")
        [ -n "$victim" ] && kill -s "$kind" "$victim" 2>/dev/null || true ;;
    esac
    local rc=0
    wait "$pid" || rc=$?
    local a1; a1=$(now)
    if [ -n "$prune_pid" ]; then kill "$prune_pid" 2>/dev/null || true; wait "$prune_pid" 2>/dev/null || true; prune_pid=""; fi
    sum_wall=$(awk -v s="$sum_wall" -v a="$a0" -v b="$a1" 'BEGIN { print s + b - a }')
    # Where the attempt started, how far it got.
    local start; start=$(sed -n 's/^resume: continuing from step \([0-9]*\).*/\1/p' "$log" | head -n 1)
    # The ledger.json write of a resume comes just before this line.
    grep -q "^resume: [0-9]* step(s) since the checkpoint" "$log" && resumes_seen=$((resumes_seen + 1))
    local reached; reached=$(sed -n 's/^step *\([0-9]*\)\/.*/\1/p' "$log" | tail -n 1)
    if [ -z "$start" ] && { [ -n "$reached" ] || grep -q 'starting from scratch' "$log"; }; then start=0; fi
    printed=$((printed + $(grep -c '^step *[0-9]*/' "$log" || true)))
    if [ -n "$start" ]; then
      reached=${reached:-$start}
      # The final weights keep this attempt's work from $start on; what the
      # attempts since $start did is replaced.
      while [ "${#segments[@]}" -gt 0 ] && [ "${segments[-1]%%:*}" -ge "$start" ]; do unset 'segments[-1]'; done
      segments+=("$start:$world${stage:+:$stage}${group:+:$group}")
    else  # killed before it knew where to start: it changed nothing
      start=-1 reached=-1
    fi
    printf 'chaos: %s: attempt %3d world %s%s%s %-9s at %-9s fault %-24s prune %d: steps %4d -> %4d, rc %s\n' \
      "$name" "$attempt" "$world" "${stage:+ zero $stage}" "${group:+ group $group}" "$kind" "$when" "${fault:--}" "$pruning" "$start" \
      "$reached" "$rc"
    # A hang: the watchdog ended the job (75), within the allowance, and
    # `ratchet doctor` blames the frozen rank.
    if [ "$kind" != none ] && [ "$hang" = 1 ]; then
      local verdict; verdict=$("$exe" doctor "$dir" 2>&1 | head -n 1)
      echo "chaos: $name: attempt $attempt: doctor: $verdict"
      if [ "$rc" -ne 75 ]; then
        bad "$name: attempt $attempt ($kind, fault '$fault') ended with rc $rc, not 75 (the watchdog's): $log"
      elif ! grep -q "hang watchdog: " "$log"; then
        bad "$name: attempt $attempt: no hang watchdog line in $log"
      elif ! grep -qE "^rank $hang_rank( \([^)]*\))? (left no record and )?(never entered|never joined|was frozen)" <<<"$verdict"; then
        bad "$name: attempt $attempt: doctor does not blame rank $hang_rank: $verdict"
      fi
      # The watchdog fires within its allowance plus a margin (1.5 s on
      # 2 shared cores); the line says by how much.
      local late; late=$(sed -n 's/.*hang watchdog: .* for \([0-9.]*\) s (allowance \([0-9.]*\) s).*/\1 \2/p' "$log" |
        awk 'BEGIN { w = -1 } { d = $1 - $2; if (d > w) w = d } END { if (w >= 0) printf "%.1f", w }')
      if [ -n "$late" ] && ! awk -v w="$late" 'BEGIN { exit !(w <= 1.5) }'; then
        bad "$name: attempt $attempt: the watchdog fired $late s after its allowance (margin 1.5 s)"
      fi
      rm -rf "$dir/flight"  # the next attempt's records start over
    fi
    case $rc in
      0) done_rc=0; break ;;
      75) ;;                                        # stopped by a signal and saved
      137) ;;                                       # SIGKILL (ours or a fault point)
      *) if [ "$world" != 0 ] && grep -q "exited on signal 9\|killed by signal 9\|signal 9 (Killed)" "$log"; then
           :                                        # mpirun ending the job after a rank's SIGKILL
         elif { [ "$kind" = USR1 ] || [ "$kind" = TERM ]; } && { [ "$rc" -eq 138 ] || [ "$rc" -eq 143 ]; } &&
              ! grep -q '^device\|^step *[0-9]*/\|^resume\|^ratchet\|^model' "$log"; then
           # The signal came while the process was still being loaded, before
           # main() could install its handlers: the default action ends it.
           # Nothing was written; slurm/requeue-lib.sh requeues such a step.
           echo "chaos: $name: attempt $attempt died of SIG$kind while starting up (before main)"
         else
           bad "$name: attempt $attempt ended with rc $rc ($kind, fault '${fault}'): $log"
           tail -n 5 "$log" | sed 's/^/    /'
         fi ;;
    esac
    [ "$rc" -ne 0 ] && landed=$((landed + 1))
    # The ledger can only count an attempt that wrote it: one that counted the
    # attempt before it ("ledger: the previous attempt ended early"), resumed,
    # or trained a step; each line is printed just after that write. An attempt
    # killed before (process start-up, options, opening the data) is not
    # counted; one killed between a write and its line may be.
    if [ "$rc" -ne 0 ]; then
      if grep -q '^step *[0-9]*/\|^resume: [0-9]* step(s) since\|^ledger: the previous attempt ended early' "$log"; then
        preempt_expected=$((preempt_expected + 1))
      else
        preempt_maybe=$((preempt_maybe + 1))
        echo "chaos: $name: attempt $attempt was stopped before it wrote the ledger (may not count)"
      fi
    fi
  done
  [ "$done_rc" -eq 0 ] || { bad "$name: the run never finished"; return; }

  # ---- the final weights ----
  if [ "$mode" = z ]; then
    # Replay: the surviving segments, each stopped cleanly where the next began.
    local i rdir="$work/$name-replay"; rm -rf "$rdir"
    for i in "${!segments[@]}"; do
      local ws=${segments[$i]#*:} stop_at="" f=""
      local w=${ws%%:*} st=${ws#*:} grp=""
      case $st in *:*) grp=${st#*:} st=${st%%:*} ;; esac
      [ $((i + 1)) -lt ${#segments[@]} ] && stop_at=${segments[$((i + 1))]%%:*} && f="USR1@step-$stop_at"
      [ "$stop_at" = "$steps" ] && f=""  # the last step: that run ends normally, the next does nothing
      train_args "$rdir" $((rows / w))
      RATCHET_FAULT=$f launch "$w" "$rdir-$i.log" "${TARGS[@]}" --zero "$st" \
        ${grp:+--shard-group "$grp"}
      local rrc=0; wait "$pid" || rrc=$?
      [ "$rrc" -eq $([ -n "$f" ] && echo 75 || echo 0) ] || bad "$name: replay segment $i (world $w, zero $st${grp:+, group $grp}, to ${stop_at:-the end}) rc $rrc: $rdir-$i.log"
    done
    echo "chaos: $name: replayed ${#segments[@]} segment(s): ${segments[*]} (start:world:stage$([ "$shard_groups" = 1 ] && echo :group))"
    cmp -s "$dir/out.bin" "$rdir/out.bin" && echo "chaos: $name: final weights byte-identical to the replay" \
      || bad "$name: final weights differ from the replay ($dir/out.bin vs $rdir/out.bin)"
    python3 - "$dir/out.bin" "$ref/out.bin" <<'EOF'
import sys
from array import array
def weights(path):  # an llm.c file: a 256 x int32 header, then fp32 parameters
    w = array("f"); raw = open(path, "rb").read()[1024:]; w.frombytes(raw); return w
a, b = weights(sys.argv[1]), weights(sys.argv[2])
print(f"chaos: zero: max |w - w(uninterrupted, 1 rank)| = {max(abs(x - y) for x, y in zip(a, b)):.3g} "
      "(not bitwise by design: 1, 2, 3 ranks and the stages add gradients in different orders)")
EOF
  else
    cmp -s "$dir/out.bin" "$ref/out.bin" && echo "chaos: $name: final weights byte-identical to the uninterrupted run" \
      || bad "$name: final weights differ from the uninterrupted run ($dir/out.bin vs $ref/out.bin)"
  fi

  # ---- the ledger ----
  # preemptions: every attempt that ended early and wrote the ledger; resumes:
  # every attempt that continued from a checkpoint; tokens: every step trained,
  # recomputed ones once each (steps + steps_lost); wall time: at most the sum of
  # the attempts' measured durations.
  python3 - "$dir/ledger.json" "$preempt_expected:$preempt_maybe" "$resumes_seen" "$steps" "$((rows * 16))" "$sum_wall" "$name" \
    "$printed" "$attempt" <<'EOF' \
    || failures=$((failures + 1))
import json, sys
path, pre, res, steps, tps, wall, name, printed, attempts = sys.argv[1:]
L = json.load(open(path))
pre, maybe = (int(x) for x in pre.split(":"))
res, steps, tps, wall = int(res), int(steps), int(tps), float(wall)
printed, attempts = int(printed), int(attempts)
trained = L["tokens"] / tps
checks = [
    ("state 1 (done)", L["state"] == 1),
    (f"max_step {L['max_step']:.0f} == {steps}", L["max_step"] == steps),
    (f"preemptions {L['preemptions']:.0f} == {pre} attempts that ended early (+ up to {maybe})",
     pre <= L["preemptions"] <= pre + maybe),
    (f"resumes {L['resumes']:.0f} == {res} attempts that resumed", L["resumes"] == res),
    (f"tokens {L['tokens']:.0f} == {tps} x (steps {steps} + steps_lost {L['steps_lost']:.0f})",
     L["tokens"] == tps * (steps + L["steps_lost"])),
    # A step's line is printed just after the ledger counts it: a kill in
    # between leaves at most one counted step without its line per attempt.
    (f"steps counted {trained:.0f} in [{printed}, {printed} + {attempts}] (step lines printed)",
     printed <= trained <= printed + attempts),
    (f"wall {L['wall_seconds']:.2f} s <= {wall:.2f} s measured over all attempts",
     L["wall_seconds"] <= wall),
]
ok = True
for what, good in checks:
    print(f"chaos: {name}: ledger: {what}: {'ok' if good else 'WRONG'}")
    ok &= good
sys.exit(0 if ok else 1)
EOF
  echo "chaos: $name: $landed kill(s) landed over $attempt attempt(s), $(awk -v a="$t_start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }') s in all"
  # Every kill is aimed at a step, a save or a start-up point the attempt
  # must reach: one that did not land is a defect of this script or of the
  # trainer's fault points, on any machine.
  [ "$landed" -ge "$want_kills" ] || bad "$name: only $landed of $want_kills kills landed"
}

t_all=$(now)
for s in ${scenarios//,/ }; do
  case $s in
    single) run_scenario single "$kills" 0 ;;
    mpi | zero | async | hang)
      if [ -z "$mpirun" ]; then echo "chaos: $s: skipped (no mpirun)"; continue; fi
      case $s in
        mpi) run_scenario mpi "$mpi_kills" 2 ;;
        hang) run_scenario hang "$hang_kills" h ;;
        zero) run_scenario zero "$zero_kills" z ;;
        async) run_scenario async "$async_kills" a ;;
      esac ;;
    *) echo "chaos.sh: unknown scenario '$s' (single, mpi, zero, async, hang)" >&2; exit 2 ;;
  esac
done
echo "chaos: $(awk -v a="$t_all" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }') s in all, $failures failure(s), seed $seed"
[ "$failures" -eq 0 ]
