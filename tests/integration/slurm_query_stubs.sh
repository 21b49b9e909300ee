# shellcheck shell=bash
# Sourced by the requeue wrapper's stub tests (requeue_exclusion_stub.sh,
# requeue_dead_rank_stub.sh): writes stand-in `scontrol` and `sinfo` into
# the folder $1, which the test puts first on PATH. Both append their calls
# to $STUB_LOG. What they answer comes from the environment at call time:
#   STUB_JOB_NODES  `scontrol show job`'s NumNodes (default 2)
#   STUB_EXC        its ExcNodeList (default "(null)": none yet)
#   STUB_PARTITION  the partition's nodes for `sinfo`, comma-separated
#                   (default n1,n2,n3), each "idle"
#   STUB_DOWN       one of them that `sinfo` shows "down*"
# `scontrol show hostnames LIST` expands a comma list (no ranges: the tests
# name nodes one by one). Every other call is recorded and succeeds.
write_slurm_query_stubs() {
  local bin=${1:?write_slurm_query_stubs needs a folder}
  mkdir -p "$bin"
  cat >"$bin/scontrol" <<'STUB'
#!/bin/bash
echo "scontrol $*" >>"$STUB_LOG"
case "$1 ${2:-}" in
  "show job") echo "JobId=42 JobName=t UserId=u(0) JobState=RUNNING Reason=None Partition=part NumNodes=${STUB_JOB_NODES:-2} ExcNodeList=${STUB_EXC:-(null)} Command=/x/train.sbatch" ;;
  "show hostnames") tr ',' '\n' <<<"$3" ;;
esac
exit 0
STUB
  cat >"$bin/sinfo" <<'STUB'
#!/bin/bash
echo "sinfo $*" >>"$STUB_LOG"
for n in $(tr ',' ' ' <<<"${STUB_PARTITION:-n1,n2,n3}"); do
  if [ "$n" = "${STUB_DOWN:-}" ]; then echo "$n down*"; else echo "$n idle"; fi
done
STUB
  chmod +x "$bin/scontrol" "$bin/sinfo"
}
