#!/usr/bin/env bash
# The requeue wrapper's node exclusion (slurm/requeue-lib.sh: ratchet_finish
# on exit 75) without a cluster: stub `scontrol` and `sinfo` on PATH record
# their calls, the real `ratchet doctor --exclude` decides. Checks: the
# suspect node is excluded with `scontrol update ExcNodeList=` AFTER
# `scontrol requeue` (Slurm takes it only from a pending job); the bound
# (partition nodes left >= the job's; a down node does not count) keeps it
# in and the log says so;
# earlier exclusions accumulate; RATCHET_EXCLUDE_SUSPECTS=0 leaves the job
# alone. The real Slurm path: tests/slurm (requeue.sh exclude-bound,
# twonode.sh exclude).
#   requeue_exclusion_stub.sh RATCHET_EXE
set -euo pipefail
exe=${1:?usage: requeue_exclusion_stub.sh RATCHET_EXE}
lib=$(cd "$(dirname "$0")/../../slurm" && pwd)/requeue-lib.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin"

# Stand-in scontrol and sinfo (their answers: slurm_query_stubs.sh).
# shellcheck source-path=SCRIPTDIR source=slurm_query_stubs.sh
source "$(dirname "$0")/slurm_query_stubs.sh"
write_slurm_query_stubs "$work/bin"

fail() { echo "FAIL: $*" >&2; exit 1; }

# run CASE PARTITION JOB_NODES EXC SUSPECTS...: the wrapper after exit 75.
run() {
  local name=$1 partition=$2 nodes=$3 exc=$4 n
  shift 4
  dir=$work/$name
  mkdir -p "$dir"
  for n in "$@"; do
    echo "{\"node\": \"$n\", \"rank\": 1, \"cause\": \"straggler\", \"job_id\": \"42\", \"time\": 1000, \"detail\": \"test\"}" \
      >>"$dir/suspect_nodes.jsonl"
  done
  : >"$dir/calls"
  rc=0
  out=$(PATH=$work/bin:$PATH STUB_LOG=$dir/calls STUB_DOWN=${STUB_DOWN:-} STUB_PARTITION=$partition STUB_JOB_NODES=$nodes \
    STUB_EXC=$exc SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=$nodes CKPT_DIR=$dir RATCHET_BIN=$exe \
    bash -c 'set -euo pipefail; . "$1"; ratchet_finish 75' _ "$lib" 2>&1) || rc=$?
  echo "---- $name (exit $rc)"
  echo "$out"
  sed 's/^/  call: /' "$dir/calls"
  [ $rc -eq 0 ] || fail "$name: the wrapper exited $rc after a requeue"
  grep -q "^scontrol requeue 42$" "$dir/calls" || fail "$name: no requeue"
}

run excluded n1,n2,n3 2 "" n2
grep -q "^scontrol update JobId=42 ExcNodeList=n2$" "$dir/calls" || fail "excluded: no update of ExcNodeList=n2"
[ "$(grep -n "^scontrol requeue" "$dir/calls" | cut -d: -f1)" -lt \
  "$(grep -n "^scontrol update" "$dir/calls" | cut -d: -f1)" ] || fail "excluded: the update came before the requeue"
grep -q "the next run excludes node(s) n2 (ExcNodeList was empty)" <<<"$out" || fail "excluded: not logged"

run bound n1,n2 2 "" n2
grep -q "^scontrol update" "$dir/calls" && fail "bound: updated though the job needs both nodes"
grep -q "not excluding suspect node(s) n2: the partition has 2 node(s), 0 excluded already, and the job needs 2" <<<"$out" ||
  fail "bound: the log does not say why n2 stays"

run accumulated n1,n2,n3,n4,n5 2 n2 n2 n3
grep -q "^scontrol update JobId=42 ExcNodeList=n2,n3$" "$dir/calls" || fail "accumulated: expected ExcNodeList=n2,n3"

# A down node does not count: 3 nodes, one down, a 2-node job: n2 stays in.
STUB_DOWN=n3 run down n1,n2,n3 2 "" n2
grep -q "^scontrol update" "$dir/calls" && fail "down: excluded n2 though n3 is down"
grep -q "the partition has 2 node(s)" <<<"$out" || fail "down: the down node was counted"

RATCHET_EXCLUDE_SUSPECTS=0 run off n1,n2,n3 1 "" n2
grep -q "^scontrol update" "$dir/calls" && fail "off: updated with RATCHET_EXCLUDE_SUSPECTS=0"
echo "ok"
