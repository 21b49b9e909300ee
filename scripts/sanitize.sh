#!/usr/bin/env bash
# Sanitizer builds and runs (issue 14); scripts/test.sh runs both.
#   asan  build-asan: ratchet and the unit + integration tests with
#         -fsanitize=address,undefined (-O1 -g1, no CUDA, no MPI; the tests' own
#         code under ASan alone: CMakeLists.txt says why), then those labels.
#         The integration tests run the sanitized ratchet binary too.
#   tsan  build-tsan (the three tests' dependency closure alone,
#         RATCHET_TSAN_FILES in CMakeLists.txt): the loader's prefetch thread (test_loader_prefetch),
#         the hang watchdog's monitor thread against the training thread
#         (test_watchdog_threads) and the MPI collectives with the
#         asynchronous all-reduce (test_mpi_collectives, 2 ranks) under
#         ThreadSanitizer.
# Every report is fatal. ASan, LSan and TSan write theirs to
# BUILD/sanitizer-logs/ (a child process's too, whatever exit code its test
# expected); UBSan ignores log_path next to ASan, so its reports exit with 87,
# a code no test expects, and the step also searches the verbose CTest log
# (BUILD/ctest-sanitize.log) for any report. The step fails on any report.
#   scripts/sanitize.sh [--build-only|--tests-only] [asan] [tsan]   (default: both)
#   scripts/sanitize.sh --list-asan     the names of the tests the asan step runs
# --build-only builds and stops; --tests-only runs the tests of builds made
# before (scripts/test.sh builds them at idle priority while the main suite
# runs, then runs their tests).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
steps="build tests"
what=()
for a in "$@"; do
  case $a in
    --build-only) steps=build ;;
    --tests-only) steps=tests ;;
    --list-asan) steps=list ;;
    *) what+=("$a") ;;
  esac
done
[ ${#what[@]} -gt 0 ] || what=(asan tsan)
step() { [[ " $steps " == *" $1 "* ]]; }
common=(-DRATCHET_CUDA=OFF -DRATCHET_KERNELS=OFF -DRATCHET_BENCH=OFF)

# What the asan step runs: the unit and integration labels, less
# - the self-tests of the GPU window's and the docs' shell scripts: what they
#   test is bash;
# - the longest end-to-end runs of the binary (the worked examples, a sweep
#   controller killed at every journal point, the comparisons with the HF
#   libraries in node), 20 to 50 s each under ASan, whose code the shorter
#   integration tests cover under it.
# scripts/test.sh runs the integration tests it leaves out in the plain build
# (--list-asan prints the names of those it runs).
asan_scope=(-L 'unit|integration'
  -E '^(gpu_(check|window|compare|bundle)\.|docs\.|FamilyWorkedExample\.|ReadmeWorkedExample\.|SweepCli\.ControllerKilledAtEveryJournalPoint$|HostileInputs\.EmptyStringPatternsMatchHfLibrary$|Families/ExportAutoTokenizer\.)')
if [ "$steps" = list ]; then
  [ -d build-asan ] || exit 0
  (cd build-asan && ctest -N "${asan_scope[@]}") | sed -n 's/^ *Test *#[0-9]*: //p'
  exit 0
fi

# Runs ctest verbosely into BUILD/ctest-sanitize.log, prints its summary, and
# fails (printing the reports) when a test failed or any report was made.
run_tests() {  # $1 build dir, $2 what runs, rest: ctest arguments
  local build=$1 name=$2; shift 2
  local log=$build/ctest-sanitize.log rc=0
  (cd "$build" && ctest -V --timeout 900 -j 2 "$@") > "$log" 2>&1 || rc=$?
  sed -n '/tests passed/,$p' "$log"
  local reports; reports=$(find "$build/sanitizer-logs" -type f 2>/dev/null | sort)
  for f in $reports; do echo "==== $f"; head -n 60 "$f"; done
  if grep -q 'runtime error:\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|WARNING: ThreadSanitizer' "$log"; then
    echo "==== reports in $log:"
    grep -B2 -A20 'runtime error:\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|WARNING: ThreadSanitizer' "$log" | head -n 200
    reports="$reports $log"
  fi
  if [ "$rc" -ne 0 ]; then
    echo "sanitize: $name: tests failed (their output: $log)"
    grep -B3 -A40 '\*\*\*Failed\|\*\*\*Timeout\|\*\*\*Exception' "$log" | head -n 300
    return 1
  fi
  [ -z "${reports// }" ] || { echo "sanitize: $name: reports found"; return 1; }
  echo "sanitize: $name: no reports"
}

for w in "${what[@]}"; do
  case $w in
    asan)
      t0=$SECONDS
      if step build; then
        RATCHET_BUILD_DIR=build-asan RATCHET_BUILD_TARGETS="ratchet tests_unit tests_integration" \
          scripts/build.sh -DRATCHET_SANITIZE=address,undefined -DRATCHET_MPI=OFF "${common[@]}"
        echo "sanitize: asan: build $((SECONDS - t0)) s"
      fi
      step tests || continue
      logs=$root/build-asan/sanitizer-logs
      rm -rf "$logs"; mkdir -p "$logs"
      t1=$SECONDS
      # detect_leaks: LeakSanitizer too; scripts/lsan.supp lists the libraries'
      # own one-time allocations it must not blame on us.
      export ASAN_OPTIONS="log_path=$logs/asan:exitcode=86:detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
      export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="exitcode=87:print_stacktrace=1"
      rc=0
      run_tests build-asan "asan+ubsan" "${asan_scope[@]}" || rc=1
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      echo "sanitize: asan: tests $((SECONDS - t1)) s"
      [ "$rc" -eq 0 ] || exit "$rc"
      ;;
    tsan)
      t0=$SECONDS
      if step build; then
        RATCHET_BUILD_DIR=build-tsan RATCHET_BUILD_TARGETS="test_loader_prefetch test_watchdog_threads test_mpi_collectives" \
          scripts/build.sh -DRATCHET_SANITIZE=thread "${common[@]}"
        echo "sanitize: tsan: build $((SECONDS - t0)) s"
      fi
      step tests || continue
      logs=$root/build-tsan/sanitizer-logs
      rm -rf "$logs"; mkdir -p "$logs"
      t1=$SECONDS
      # One OpenMP thread: libgomp is not built with TSan, so its barriers are
      # invisible to it; with one thread its regions run on the caller. Open MPI
      # is not instrumented either: scripts/tsan.supp names its internals.
      export OMP_NUM_THREADS=1
      export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp"
      rc=0
      run_tests build-tsan tsan -R 'LoaderPrefetch|LoaderResume|WatchdogThreads|mpi_collectives_np[12]$' || rc=1
      unset TSAN_OPTIONS OMP_NUM_THREADS
      echo "sanitize: tsan: tests $((SECONDS - t1)) s"
      [ "$rc" -eq 0 ] || exit "$rc"
      ;;
    *) echo "sanitize.sh: unknown build '$w' (asan, tsan)" >&2; exit 2 ;;
  esac
done
