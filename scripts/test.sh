#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: installs dependencies,
# builds everything (CUDA parts too when the toolkit is present), and runs
# every CTest test. Exits non-zero when any test fails, and also when a label
# that this build must cover (build/required_test_labels.txt: mpi, slurm, and
# simt when CUDA's headers are present) holds no tests at all.
#   scripts/test.sh                  everything
#   scripts/test.sh -L unit          only some labels (ctest arguments)
# The whole suite (no arguments) also makes the sanitizer builds, at idle
# priority while the main suite runs, and then runs their tests
# (scripts/sanitize.sh: unit + integration under ASan+UBSan, the loader's
# prefetch thread and the MPI async path under TSan); RATCHET_SANITIZERS
# chooses them ("asan tsan" by default, "" for none).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then scripts/install-deps.sh; else sudo scripts/install-deps.sh; fi
RATCHET_BUILD_DIR=build scripts/build.sh
cd build

# Coverage that must not vanish quietly: count the tests per required label.
required=$(sed -n 's/^required: //p' required_test_labels.txt)
not_required=$(sed -n 's/^not-required: //p' required_test_labels.txt)
empty=()
for label in $required; do
  n=$(ctest -N -L "^${label}\$" | sed -n 's/^Total Tests: //p')
  echo "test.sh: label $label: ${n:-0} tests"
  [ "${n:-0}" -gt 0 ] || empty+=("$label")
done
if [ -n "$not_required" ]; then
  echo "test.sh: NOT TESTED on this machine: $not_required" >&2
fi
if [ ${#empty[@]} -gt 0 ]; then
  echo "test.sh: label(s) ${empty[*]} hold no tests: the build lost that coverage (see the" \
       "configure warnings above; scripts/install-deps.sh installs what they need)" >&2
  exit 1
fi

rc=0
sanitizers=${RATCHET_SANITIZERS-asan tsan}
san_pid=
asan_ran=0
if [ $# -eq 0 ] && [ -n "$sanitizers" ]; then
  # The sanitizer builds compile while the suite below runs, at idle priority
  # (SCHED_IDLE: on the CPU time the tests leave, such as the Slurm tests'
  # waits for time limits and requeues, and barely any when they want both
  # cores), so that only their tests are left after it. Their output is in
  # build/sanitize-build.log.
  idle=(nice -n 19)
  if chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0); fi
  if ionice -c 3 true 2>/dev/null; then idle=(ionice -c 3 "${idle[@]}"); fi
  # shellcheck disable=SC2086
  (cd .. && exec "${idle[@]}" scripts/sanitize.sh --build-only $sanitizers) > sanitize-build.log 2>&1 &
  san_pid=$!
fi
# The integration tests run once: against the ASan build's binary when there
# is one (sanitize.sh), and here only those its step leaves out (below). The
# unit tests run in both builds.
main=("$@")
asan=0
if [ $# -eq 0 ] && [[ " $sanitizers " == *" asan "* ]]; then
  asan=1
  main=(-LE '^integration$')
fi
ctest --output-on-failure --timeout 900 -j 2 "${main[@]}" || rc=$?
cp Testing/Temporary/LastTestsFailed.log failed-main.log 2>/dev/null || : > failed-main.log
cd ..
if [ -n "$san_pid" ]; then
  san_rc=0
  wait "$san_pid" || san_rc=$?
  if [ "$san_rc" -ne 0 ]; then
    tail -n 100 build/sanitize-build.log
    echo "test.sh: the sanitizer builds failed (build/sanitize-build.log)" >&2
    rc=1
  else
    grep '^sanitize: .*: build' build/sanitize-build.log || true
    asan_ran=$asan
    # shellcheck disable=SC2086
    scripts/sanitize.sh --tests-only $sanitizers || rc=$?
  fi
fi
if [ $asan -eq 1 ]; then
  # The integration tests the asan step did not run (all of them when its
  # build failed), by number in this build.
  ran=
  [ "$asan_ran" -eq 0 ] || ran=$(scripts/sanitize.sh --list-asan)
  nums=$(cd build && ctest -N -L '^integration$' |
         sed -n 's/^ *Test *#\([0-9][0-9]*\): \(.*\)$/\1 \2/p' |
         while read -r n name; do grep -qxF -- "$name" <<<"$ran" || echo "$n"; done | paste -sd, -)
  if [ -n "$nums" ]; then
    echo "test.sh: the integration tests the asan step leaves out, in this build: $(tr -cd , <<<"$nums" | wc -c | awk '{print $1 + 1}')"
    (cd build && ctest --output-on-failure --timeout 900 -j 2 -I "0,0,0,$nums") || rc=1
    cat build/Testing/Temporary/LastTestsFailed.log >> build/failed-main.log 2>/dev/null || true
  fi
  cp build/failed-main.log build/Testing/Temporary/LastTestsFailed.log
fi
# The failing tests once more, last, where CI's tail shows them (their first
# output scrolls away under the sanitizer builds). The rerun only informs:
# rc stays failed whatever it gives.
if [ $rc -ne 0 ] && [ -s build/Testing/Temporary/LastTestsFailed.log ]; then
  echo "test.sh: rerunning the failed tests for their output (the run stays failed):"
  (cd build && ctest --rerun-failed --output-on-failure --timeout 900 2>&1 | tail -n 200) || true
fi
# said again at the end, where it is read
[ -z "$not_required" ] || echo "test.sh: NOT TESTED on this machine: $not_required" >&2
exit $rc
