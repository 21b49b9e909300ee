# shellcheck shell=bash
# Helpers for the slurm tests (sourced). CTest passes, via ENVIRONMENT:
#   RATCHET_SOURCE_DIR  the source tree        RATCHET_TEST_WORK    scratch dir (build tree)
#   RATCHET_BUILD_DIR   the build tree         RATCHET_TEST_PREFIX  `cmake --install` prefix
#   RATCHET_PROJECT_VERSION                    PROJECT_VERSION
# Accounting is off on the test cluster: jobs are watched with `scontrol show
# job`, which keeps finished jobs for MinJobAge (300 s).
set -euo pipefail

: "${RATCHET_SOURCE_DIR:?run through ctest}" "${RATCHET_TEST_WORK:?run through ctest}"
# shellcheck disable=SC2034  # used by the test scripts
SLURM_DIR=$RATCHET_SOURCE_DIR/slurm
# shellcheck disable=SC2034
FAKE=$RATCHET_SOURCE_DIR/tests/slurm/fake-trainer.sh
# shellcheck disable=SC2034
CLUSTER=$RATCHET_SOURCE_DIR/scripts/slurm-cluster.sh

log() { echo "[$(date +%T)] $*"; }
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "${TEST_DIR:-/nonexistent}"/*.out; do
    [ -e "$f" ] && { echo "---- $f" >&2; cat "$f" >&2; }
  done
  exit 1
}

# A failed test leaves no job behind: a test that submits keeps the job id in
# $id and installs `trap on_exit EXIT`; on a non-zero exit the job is
# cancelled. A test that also needs other cleanup (on any exit) defines
# extra_cleanup.
id=""
on_exit() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -n "$id" ]; then timeout 15 scancel "$id" 2>/dev/null; fi
  if declare -F extra_cleanup >/dev/null; then extra_cleanup; fi
  exit $rc
}

# new_test_dir NAME: an empty scratch dir for one test; cd into it.
new_test_dir() {
  TEST_DIR=$RATCHET_TEST_WORK/$1
  rm -rf "$TEST_DIR"
  mkdir -p "$TEST_DIR"
  cd "$TEST_DIR"
}

# job_field ID FIELD: one field of `scontrol show job -o` (JobState, Restarts, ExitCode...).
job_field() {
  timeout 15 scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

# wait_job ID SECONDS: polls until the job reaches a final state; prints it.
# Requeued jobs pass through PENDING again and are waited for.
wait_job() {
  local id=$1 deadline=$((SECONDS + $2)) state=""
  while ((SECONDS < deadline)); do
    state=$(job_field "$id" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        echo "$state"
        return 0
        ;;
    esac
    sleep 0.5
  done
  timeout 15 scancel "$id" 2>/dev/null || true
  fail "job $id not finished after $2 s (state '${state}')"
}

# wait_file PATH SECONDS
wait_file() {
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    [ -e "$1" ] && return 0
    sleep 0.2
  done
  fail "$1 did not appear within $2 s"
}

# expect_job ID STATE RESTARTS EXITCODE: checks the finished job's record.
expect_job() {
  local state restarts code
  state=$(job_field "$1" JobState)
  restarts=$(job_field "$1" Restarts)
  code=$(job_field "$1" ExitCode)
  log "job $1: JobState=$state Restarts=$restarts ExitCode=$code"
  [ "$state" = "$2" ] || fail "job $1: JobState=$state, expected $2"
  [ "$restarts" = "$3" ] || fail "job $1: Restarts=$restarts, expected $3"
  [ "$code" = "$4" ] || fail "job $1: ExitCode=$code, expected $4"
}

# expect_log PATTERN: the job log(s) in TEST_DIR match the extended regex.
expect_log() {
  grep -qE -- "$1" "$TEST_DIR"/*.out || fail "no line matching '$1' in the job log"
}
