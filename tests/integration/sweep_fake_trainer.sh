#!/bin/bash
# Stands in for `ratchet train` in the sweep tests (ratchet sweep run --trainer
# "bash THIS"): no training, a synthetic learning curve instead, so that the
# controller's decisions can be checked quickly and exactly.
#   val loss at S steps = 1 + (ln lr - ln 0.003)^2 + 10/S
#   toy/acc_norm at S steps = 0.9 - 0.02 (ln lr - ln 0.0005)^2 - 0.1/S (logged
#   on the same line: an accuracy best at another lr than the val loss), with
#   toy/acc_norm_se 0.01
#   spend: one device-second per step (ledger.json, summed over invocations),
#   plus FAKE_FIXED device-seconds per invocation outside steps (start-up, saves)
# Every invocation appends its --steps to RUN_DIR/invocations.
# Environment: FAKE_FAIL_LR=x exits 1 when --lr is x; FAKE_NAN_LR=x logs a
# non-finite val loss; FAKE_PREEMPT_LR=x exits 75 (after half the steps) on the
# first invocation for that trial (the first FAKE_PREEMPT_TIMES=n ones);
# FAKE_SLEEP=s sleeps before finishing.
# Like the trainer it holds RUN_DIR/ratchet.lock while it runs (a second one
# there exits 2 naming the lock), publishes its exit code to
# $RATCHET_SWEEP_EXIT_FILE, and takes no stop signal (USR1 is ignored).
set -u
trap '' USR1
if [ -n "${RATCHET_SWEEP_EXIT_FILE:-}" ]; then
  trap 'c=$?; echo $c > "$RATCHET_SWEEP_EXIT_FILE.trainer.tmp" && mv "$RATCHET_SWEEP_EXIT_FILE.trainer.tmp" "$RATCHET_SWEEP_EXIT_FILE"' EXIT
  # With an EXIT trap bash runs it on TERM/INT/HUP too, with the last
  # command's status (0): a killed trainer must not publish a success.
  trap 'exit 143' TERM
  trap 'exit 130' INT
  trap 'exit 129' HUP
fi
run="" steps=0 lr=0.001
while [ $# -gt 0 ]; do
  case $1 in
    --run-dir) run=$2; shift ;;
    --steps) steps=$2; shift ;;
    --lr) lr=$2; shift ;;
  esac
  shift
done
[ -n "$run" ] || { echo "fake trainer: no --run-dir" >&2; exit 2; }
# Shell builtins only, but for one awk: the kill-point test runs this ~100 times.
[ -d "$run" ] || mkdir -p "$run"
exec 9>>"$run/ratchet.lock"
flock -n 9 || { echo "fake trainer: error: --run-dir $run is in use by another trainer (ratchet.lock)"; exit 2; }
echo "$steps" >>"$run/invocations"
mapfile -t inv <"$run/invocations"
n=${#inv[@]}
prev=0 spent=0
[ -f "$run/steps" ] && prev=$(<"$run/steps")
[ -f "$run/spent" ] && spent=$(<"$run/spent")
[ "${FAKE_FAIL_LR:-}" = "$lr" ] && { echo "fake trainer: planted failure"; exit 1; }
[ -n "${FAKE_SLEEP:-}" ] && sleep "$FAKE_SLEEP"
code=0
if [ "${FAKE_PREEMPT_LR:-}" = "$lr" ] && [ "$n" -le "${FAKE_PREEMPT_TIMES:-1}" ]; then
  steps=$(( (prev + steps) / 2 ))
  code=75
fi
spent=$((spent + steps - prev + ${FAKE_FIXED:-0}))
stepsecs=0
[ -f "$run/stepsecs" ] && stepsecs=$(<"$run/stepsecs")
stepsecs=$((stepsecs + steps - prev))
echo "$spent" >"$run/spent"
echo "$steps" >"$run/steps"
echo "$stepsecs" >"$run/stepsecs"
echo "{\"wall_seconds\": $spent, \"device_seconds\": $spent, \"cost\": $spent, \"max_step\": $steps,
 \"step_seconds\": $stepsecs, \"resumes\": $((n - 1)), \"state\": $code, \"price_per_device_hour\": 3600}" >"$run/ledger.json.tmp"
mv "$run/ledger.json.tmp" "$run/ledger.json"
[ $code -eq 0 ] || exit $code
if [ "${FAKE_NAN_LR:-}" = "$lr" ]; then
  echo "{\"step\": $steps, \"val_loss\": NaN}" >>"$run/train.jsonl"
else
  awk -v lr="$lr" -v s="$steps" 'BEGIN{d = log(lr) - log(0.003); a = log(lr) - log(0.0005);
    printf "{\"step\": %d, \"val_loss\": %.6f, \"toy/acc_norm\": %.6f, \"toy/acc_norm_se\": 0.01}\n",
           s, 1 + d*d + 10/s, 0.9 - 0.02*a*a - 0.1/s}' >>"$run/train.jsonl"
fi
exit 0
