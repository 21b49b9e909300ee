#!/bin/bash
# Stands in for `ratchet train` in the sbatch wrapper tests (RATCHET_BIN=this).
# Called as: fake-trainer.sh train --config C --ckpt-dir D --resume auto ...
# Counts its runs per rank in D/runs.<rank> and then, from the environment:
#   FAKE_EXIT=N            exit N at once on every run (e.g. 76, budget reached)
#   FAKE_REQUEUE_TIMES=N   exit 75 ("checkpoint saved, requeue me") on runs 1..N, 0 after
#   FAKE_WAIT_SIGNAL=1     on run 1, wait up to 100 s for USR1 or TERM, then
#                          exit 75 (the real trainer saves first); 0 on later runs
#   FAKE_DIE_ON_SIGNAL=1   on run 1, wait up to 100 s without handlers, so USR1 or
#                          TERM kills it (a trainer still loading, before main()
#                          installs its handlers); 0 on later runs
#   FAKE_SUSPECT=1         on run 1, record its own node in D/suspect_nodes.jsonl
#                          (as the trainer does for a straggler) and exit 75; 0 after
set -u
ckpt=""
while [ $# -gt 0 ]; do
  case $1 in
    --ckpt-dir) ckpt=$2; shift ;;
  esac
  shift
done
[ -n "$ckpt" ] || { echo "fake-trainer: no --ckpt-dir" >&2; exit 2; }
rank=${SLURM_PROCID:-0}
n=$(( $(cat "$ckpt/runs.$rank" 2>/dev/null || echo 0) + 1 ))
echo "$n" >"$ckpt/runs.$rank"
say() { echo "fake-trainer rank $rank run $n: $*"; }
say "start (SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-unset} PMIX_RANK=${PMIX_RANK:-unset})"

if [ "${FAKE_SUSPECT:-0}" = 1 ]; then
  if [ "$n" -eq 1 ]; then
    node=${SLURMD_NODENAME:-$(hostname)}
    echo "{\"node\": \"$node\", \"rank\": $rank, \"cause\": \"straggler\", \"job_id\": \"${SLURM_JOB_ID:-}\", \"time\": $(date +%s), \"detail\": \"fake\"}" \
      >>"$ckpt/suspect_nodes.jsonl"
    say "recorded suspect node $node, exit 75 (requeue me)"
    exit 75
  fi
  say "on $(hostname), done, exit 0"
  exit 0
fi
if [ -n "${FAKE_EXIT:-}" ]; then
  say "exit $FAKE_EXIT"
  exit "$FAKE_EXIT"
fi
if [ "${FAKE_WAIT_SIGNAL:-0}" = 1 ] && [ "$n" -eq 1 ]; then
  got=""
  trap 'got=USR1' USR1
  trap 'got=TERM' TERM
  echo ready >"$ckpt/ready.$rank"
  for ((i = 0; i < 1000; i++)); do
    [ -z "$got" ] || break
    sleep 0.1
  done
  [ -n "$got" ] || { say "no signal came"; exit 1; }
  say "got SIG$got: checkpoint saved, exit 75"
  exit 75
fi
if [ "${FAKE_DIE_ON_SIGNAL:-0}" = 1 ] && [ "$n" -eq 1 ]; then
  trap - USR1 TERM
  echo ready >"$ckpt/ready.$rank"
  for ((i = 0; i < 1000; i++)); do sleep 0.1; done
  say "no signal came"
  exit 1
fi
if [ "$n" -le "${FAKE_REQUEUE_TIMES:-0}" ]; then
  say "exit 75 (requeue me)"
  exit 75
fi
say "done, exit 0"
exit 0
