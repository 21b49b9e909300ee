#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a copy of its seed corpus
# (CTest label `fuzz`). Every corpus file runs first (the reproducers of past
# crashes are regression tests); then fuzzing for SECONDS (env
# RATCHET_FUZZ_SECONDS overrides). A crash, leak, timeout or sanitizer report
# fails the test; its reproducer is copied into the source corpus
# (tests/fuzz/corpus/TARGET/) so that committing it keeps it tested.
#   run_fuzzer.sh BINARY CORPUS_DIR [SECONDS]
set -euo pipefail
bin=$1 corpus=$2 secs=${RATCHET_FUZZ_SECONDS:-${3:-10}}
name=$(basename "$bin")
# tmpfs when there is one: the readers take paths, so every input is a file write
work=$(mktemp -d -p "$([ -d /dev/shm ] && echo /dev/shm || echo /tmp)")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts" "$work/scratch"
cp "$corpus"/* "$work/corpus/" 2>/dev/null || true
rc=0
RATCHET_FUZZ_SCRATCH=$work/scratch \
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$bin" "$work/corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -max_len=16384 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  > "$work/log" 2>&1 || rc=$?
# The summary: coverage, features, exec/s, corpus size.
grep -E "^stat::|#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs|INFO: Loaded [0-9]+ modules" "$work/log" | tail -n 20
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$work/log"
  for a in "$work"/artifacts/*; do
    [ -e "$a" ] || continue
    cp "$a" "$corpus/"
    echo "$name: reproducer saved as $corpus/$(basename "$a"): fix the reader, commit the file"
  done
  echo "$name: FAILED (exit $rc)"
  exit 1
fi
echo "$name: ok, no crash in ${secs}s"
