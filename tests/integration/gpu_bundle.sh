#!/usr/bin/env bash
# scripts/gpu-bundle.sh (issue 35): packs this build's CUDA programs into a
# relocatable folder that a GPU node can run. Without building anything
# (--no-build on BUILD_DIR), into a temporary directory:
#  - the folder is under 64 MiB, and a lower limit is refused (exit 1);
#  - copied elsewhere (the original removed), its env.sh puts the copy's bin/
#    first on PATH and the copy's lib/ first on LD_LIBRARY_PATH;
#  - with LD_LIBRARY_PATH only the copy's lib/, `ratchet --version` and
#    `--help` run, and every library they load (LD_DEBUG=libs) comes from the
#    copy's lib/ or is one a GPU node provides (glibc, libstdc++, CUDA, Open
#    MPI: lib/.node_provides); the same for a GPU test program's test list;
#  - every GPU test and benchmark program this build made is in bin/;
#  - bad usage exits 2.
# Exit 77 (skipped) when BUILD_DIR has no CUDA programs (a build without CUDA).
#   gpu_bundle.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: gpu_bundle.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/scripts/gpu-bundle.sh
fails=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fails=1; fi; }
built() { find "$build" -path "$build/CMakeFiles" -prune -o -type f -name "$1" -perm -u+x -print 2>/dev/null | head -1; }

[ -n "$(built test_gpu_kernels)" ] || { echo "SKIP: $build has no CUDA programs (configured without CUDA)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- bad usage ----------------------------------------------------------------------
"$bundle" --bogus >"$tmp/out" 2>&1; rc=$?
check "--bogus exits 2 (got $rc)" '[ $rc = 2 ] && grep -q -- "--bogus" "$tmp/out"'
"$bundle" --build "$tmp/nothing" --no-build >"$tmp/out" 2>&1; rc=$?
check "--no-build on an unconfigured directory exits 2 (got $rc)" '[ $rc = 2 ] && grep -q "not a configured build" "$tmp/out"'

# ---- the size limit is enforced ---------------------------------------------------------
RATCHET_GPU_BUNDLE_LIMIT=100000 "$bundle" --build "$build" --no-build --fast --out "$tmp/small" ratchet \
  >"$tmp/out" 2>&1; rc=$?
check "a bundle over the limit exits 1 (got $rc)" '[ $rc = 1 ] && grep -q "not under the limit" "$tmp/out"'

# ---- pack, measure, move ------------------------------------------------------------------
"$bundle" --build "$build" --no-build --fast --out "$tmp/bundle" >"$tmp/pack.log" 2>&1; rc=$?
cat "$tmp/pack.log"
[ $rc = 0 ] || { echo "FAIL: gpu-bundle.sh exited $rc"; exit 1; }
size=$(du -sb "$tmp/bundle" | cut -f1)
check "the bundle is under 64 MiB ($size bytes)" '[ "$size" -lt $((64 * 1024 * 1024)) ]'
mkdir -p "$tmp/elsewhere"
cp -r "$tmp/bundle" "$tmp/elsewhere/copy"
rm -rf "$tmp/bundle"
copy=$tmp/elsewhere/copy

# env.sh from the copy: PATH and LD_LIBRARY_PATH start with the copy's own folders.
env -i HOME="$tmp" PATH=/usr/local/bin:/usr/bin:/bin bash -c \
  'source "$1/env.sh" || exit 1; echo "ldpath=$LD_LIBRARY_PATH"; echo "ratchet=$(command -v ratchet)"' _ "$copy" \
  >"$tmp/env.out" 2>&1; rc=$?
cat "$tmp/env.out"
check "sourcing the copy's env.sh works (exit $rc)" '[ $rc = 0 ]'
check "LD_LIBRARY_PATH starts with the copy's lib/" 'grep -q "^ldpath=$copy/lib\(:\|$\)" "$tmp/env.out"'
check "ratchet on PATH is the copy's" 'grep -qx "ratchet=$copy/bin/ratchet" "$tmp/env.out"'
check "a second source does not unpack again" '[ -f "$copy/.unpacked" ]'

node_provides=$(cat "$copy/lib/.node_provides" 2>/dev/null)
check "lib/.node_provides lists what a node provides" '[ -n "$node_provides" ]'
# loaded_from_bundle LOG WHAT: every library LOG (LD_DEBUG=libs) shows loaded is
# the copy's or one a node provides.
loaded_from_bundle() {
  local lib n=0 bad=""
  while read -r lib; do
    n=$((n + 1))
    case $lib in "$copy"/lib/*) continue ;; esac
    grep -qE "$node_provides" <<<"${lib##*/}" || bad="$bad $lib"
  done < <(sed -n 's/.*calling init: \(.*\)$/\1/p' "$1" | sort -u)
  [ "$n" -gt 0 ] || { echo "FAIL: $2: LD_DEBUG showed no library loads" >&2; return 1; }
  [ -z "$bad" ] || { echo "FAIL: $2 loaded libraries from outside the bundle that a GPU node lacks:$bad" >&2; return 1; }
}
for args in --version --help; do
  env -i HOME="$tmp" PATH="$copy/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$copy/lib" LD_DEBUG=libs \
    ratchet $args >"$tmp/run.out" 2>"$tmp/run.err"; rc=$?
  check "ratchet $args runs from the copy with only its lib/ (exit $rc: $(tail -3 "$tmp/run.err"))" '[ $rc = 0 ]'
  check "ratchet $args printed something" '[ -s "$tmp/run.out" ]'
  loaded_from_bundle "$tmp/run.err" "ratchet $args" || fails=1
done
check "--version names ratchet" 'grep -qi ratchet <(env -i PATH="$copy/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$copy/lib" ratchet --version)'

# A GPU test program lists its tests (running them needs a GPU) with the env.sh environment.
env -i HOME="$tmp" PATH=/usr/bin:/bin bash -c 'source "$1/env.sh" && LD_DEBUG=libs test_gpu_kernels --gtest_list_tests' _ "$copy" \
  >"$tmp/gpu.out" 2>"$tmp/gpu.err"; rc=$?
check "test_gpu_kernels --gtest_list_tests runs from the copy (exit $rc: $(tail -3 "$tmp/gpu.err"))" '[ $rc = 0 ] && [ -s "$tmp/gpu.out" ]'
loaded_from_bundle "$tmp/gpu.err" test_gpu_kernels || fails=1

# Every GPU test and benchmark program this build made is packed.
expected=(ratchet)
for f in "$root"/tests/gpu/test_*.cpp; do f=${f##*/}; expected+=("${f%.cpp}"); done
expected+=(test_mpi_nccl test_mpi_train_gpu bench_gpu_train bench_attention_gpu bench_kernels)
n=0
for t in "${expected[@]}"; do
  [ -n "$(built "$t")" ] || continue
  n=$((n + 1))
  check "bin/$t is packed and runnable" '[ -x "$copy/bin/$t" ]'
done
check "the GPU test programs were found in the build ($n)" '[ "$n" -ge 5 ]'
check "MANIFEST lists the programs" 'grep -q "^programs (" "$copy/MANIFEST"'

[ $fails = 0 ] && echo "ok: gpu-bundle.sh packs a relocatable bundle of $n programs, $size bytes"
exit $fails
