#!/usr/bin/env bash
# Data-parallel training under the real single-node Slurm cluster
# (scripts/slurm-cluster.sh; labels `mpi` and `slurm`). Cases:
#   srun2     `srun -n 2 --mpi=pmix ratchet train` trains on 2 ranks and ends
#             with the same parameters as `mpirun -np 2` (bit-identical: a sum
#             of two values does not depend on the order)
#   preempt   a 2-rank batch job gets its stop signal at step 6 (first run
#             only), saves and exits 75; the script requeues the job, the rerun
#             resumes on 2 ranks from the checkpoint and finishes, with the
#             parameters of an uninterrupted 2-rank run
#   failrank  one rank of an `srun -n 2` step fails: the step ends at once
#             (--kill-on-bad-exit) with the rank named
# Exits 77 (CTest: skipped) when the cluster is not up.
# Environment from CTest: RATCHET_EXE, RATCHET_TEST_WORK.
set -euo pipefail
case_name=${1:?usage: slurm_dp.sh srun2|preempt|failrank}
: "${RATCHET_EXE:?run through ctest}" "${RATCHET_TEST_WORK:?run through ctest}"

log() { echo "[$(date +%T)] $*"; }
die() {
  echo "FAIL: $*" >&2
  for f in "${dir:-/nonexistent}"/*.out; do [ -e "$f" ] && { echo "---- $f" >&2; cat "$f" >&2; }; done
  exit 1
}

if ! timeout 10 sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed|allocated'; then
  echo "SKIP: no Slurm cluster up (scripts/slurm-cluster.sh start)"
  exit 77
fi

dir=$RATCHET_TEST_WORK/$case_name
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
bible -f 'Gen1:1-Gen5:32' >gen.txt
"$RATCHET_EXE" shard --tokenizer byte --input gen.txt --output-dir data --val-fraction 0.1 \
  --seed 1 >/dev/null

# 2 ranks x B=2, 16 steps, tiny model, 1 thread per rank.
args="train --model custom --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 16
  --batch-size 2 --total-batch-tokens 64 --threads 1 --train-data $dir/data/train_*.h5
  --steps 16 --lr 3e-3 --quiet"
mpirun_env=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none)

reference() {  # the same run under mpirun, outside Slurm
  env -u SLURM_JOB_ID "${mpirun_env[@]}" mpirun -np 2 --bind-to none "$RATCHET_EXE" $args \
    --export "$dir/ref.bin" >ref.log 2>&1 || { cat ref.log; die "reference run failed"; }
}

# wait_job ID SECONDS: until the job is in a final state; prints it.
wait_job() {
  local id=$1 deadline=$((SECONDS + $2)) state=""
  while ((SECONDS < deadline)); do
    state=$(timeout 15 scontrol show job -o "$id" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) echo "$state"; return 0 ;; esac
    sleep 0.5
  done
  timeout 15 scancel "$id" || true
  die "job $id not finished after $2 s (state '$state')"
}
job_field() { timeout 15 scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }

case $case_name in
  srun2)
    reference
    log "srun -n 2 --mpi=pmix"
    timeout 120 srun -n 2 --mpi=pmix --kill-on-bad-exit=1 --job-name=dp-srun2 "$RATCHET_EXE" \
      $args --export "$dir/out.bin" >run.out 2>&1 || { cat run.out; die "srun failed"; }
    cat run.out
    grep -q "data parallel: 2 rank(s) (mpi, 2 on this node)" run.out || die "not 2 ranks"
    grep -q "trained 16 steps" run.out || die "did not finish"
    cmp -s out.bin ref.bin || die "srun and mpirun runs differ"
    log "OK: srun -n 2 trained; parameters equal mpirun -np 2"
    ;;

  preempt)
    reference
    cat >job.sbatch <<EOF
#!/bin/bash
#SBATCH --job-name=dp-preempt         # the test's job
#SBATCH --ntasks=2                    # two ranks
#SBATCH --requeue                     # may be requeued
#SBATCH --open-mode=append            # keep the first run's log
#SBATCH --output=%x-%j.out            # log name
set -uo pipefail
echo "run \${SLURM_RESTART_COUNT:-0} of job \$SLURM_JOB_ID"
# The first run gets its stop signal at step 6, as from a preemption warning.
if [ -z "\${SLURM_RESTART_COUNT:-}" ]; then export RATCHET_FAULT=USR1@step-6; fi
srun --mpi=pmix --kill-on-bad-exit=1 $RATCHET_EXE $(echo $args) --ckpt-dir $dir/ck \
  --export $dir/out.bin &
wait \$!
rc=\$?
echo "ratchet exited \$rc"
if [ \$rc -eq 75 ]; then scontrol requeue \$SLURM_JOB_ID; sleep 30; fi
exit \$rc
EOF
    id=$(sbatch --parsable job.sbatch)
    log "submitted job $id"
    state=$(wait_job "$id" 150)
    cat ./*.out
    [ "$state" = COMPLETED ] || die "job $id ended $state"
    [ "$(job_field "$id" Restarts)" = 1 ] || die "job $id was not requeued once"
    grep -q "stopping at step 6: SIGUSR1 received" ./*.out || die "no stop at step 6"
    grep -q "ratchet exited 75" ./*.out || die "first run did not exit 75"
    grep -q "continuing from step 6" ./*.out || die "the rerun did not resume"
    grep -q "data parallel: 2 rank(s)" ./*.out || die "not 2 ranks"
    cmp -s out.bin ref.bin || die "resumed parameters differ from the uninterrupted run"
    log "OK: preempted 2-rank job requeued, resumed from step 6, same parameters"
    ;;

  failrank)
    start=$SECONDS
    set +e
    RATCHET_TEST_FAIL=1@step-3 timeout 60 srun -n 2 --mpi=pmix --kill-on-bad-exit=1 \
      --job-name=dp-failrank "$RATCHET_EXE" ${args/--steps 16/--steps 100000} >run.out 2>&1
    rc=$?
    set -e
    cat run.out
    took=$((SECONDS - start))
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || die "exit code $rc (124: timeout = a hang)"
    grep -q "error on rank 1 of 2" run.out || die "the failing rank is not named"
    ((took < 20)) || die "took $took s"
    log "OK: failing rank ended the step in $took s (exit $rc)"
    ;;

  *) die "unknown case $case_name" ;;
esac
