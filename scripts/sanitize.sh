#!/usr/bin/env bash
# Sanitizer builds and runs (issue 14); scripts/test.sh runs both.
#   asan  build-asan: ratchet and the unit + integration tests with
#         -fsanitize=address,undefined (-O1, no CUDA, no MPI), then those labels.
#         The integration tests run the sanitized ratchet binary too.
#   tsan  build-tsan: the loader's prefetch thread (test_loader_prefetch) and
#         the MPI collectives with the asynchronous all-reduce
#         (test_mpi_collectives, 2 ranks) under ThreadSanitizer.
# Every report is fatal and is written to BUILD/sanitizer-logs/ (a child
# process's too, whatever exit code the test expected): the step fails when any
# report exists, and prints it.
#   scripts/sanitize.sh [asan] [tsan]      (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(asan tsan)
common=(-DRATCHET_CUDA=OFF -DRATCHET_KERNELS=OFF -DRATCHET_BENCH=OFF)

# Fails (printing the reports) when the run left any sanitizer log behind.
check_logs() {  # $1 log dir, $2 what ran
  local logs; logs=$(find "$1" -type f 2>/dev/null | sort)
  if [ -n "$logs" ]; then
    echo "sanitize: $2: $(echo "$logs" | wc -l) report(s):"
    for f in $logs; do echo "==== $f"; head -n 60 "$f"; done
    return 1
  fi
  echo "sanitize: $2: no reports"
}

for w in "${what[@]}"; do
  case $w in
    asan)
      t0=$SECONDS
      RATCHET_BUILD_DIR=build-asan RATCHET_BUILD_TARGETS="ratchet tests_unit tests_integration" \
        scripts/build.sh -DRATCHET_SANITIZE=address,undefined -DRATCHET_MPI=OFF "${common[@]}"
      logs=$root/build-asan/sanitizer-logs
      rm -rf "$logs"; mkdir -p "$logs"
      t1=$SECONDS
      # detect_leaks: LeakSanitizer too; scripts/lsan.supp lists the libraries'
      # own one-time allocations it must not blame on us.
      export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
      export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1"
      rc=0
      (cd build-asan && ctest --output-on-failure --timeout 900 -j 2 -L 'unit|integration') || rc=$?
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      echo "sanitize: asan: build $((t1 - t0)) s, tests $((SECONDS - t1)) s"
      check_logs "$logs" "asan+ubsan" || rc=1
      [ "$rc" -eq 0 ] || exit "$rc"
      ;;
    tsan)
      t0=$SECONDS
      RATCHET_BUILD_DIR=build-tsan RATCHET_BUILD_TARGETS="test_loader_prefetch test_mpi_collectives" \
        scripts/build.sh -DRATCHET_SANITIZE=thread "${common[@]}"
      logs=$root/build-tsan/sanitizer-logs
      rm -rf "$logs"; mkdir -p "$logs"
      t1=$SECONDS
      # One OpenMP thread: libgomp is not built with TSan, so its barriers are
      # invisible to it; with one thread its regions run on the caller. Open MPI
      # is not instrumented either: scripts/tsan.supp names its internals.
      export OMP_NUM_THREADS=1
      export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp"
      rc=0
      (cd build-tsan && ctest --output-on-failure --timeout 900 -j 2 \
         -R 'LoaderPrefetch|LoaderResume|mpi_collectives_np[12]$') || rc=$?
      unset TSAN_OPTIONS OMP_NUM_THREADS
      echo "sanitize: tsan: build $((t1 - t0)) s, tests $((SECONDS - t1)) s"
      check_logs "$logs" "tsan" || rc=1
      [ "$rc" -eq 0 ] || exit "$rc"
      ;;
    *) echo "sanitize.sh: unknown build '$w' (asan, tsan)" >&2; exit 2 ;;
  esac
done
