#!/usr/bin/env bash
# Makes the checkpoint-compatibility fixtures (tests/mpi/test_ckpt_compat.cpp)
# with a GIVEN build, normally an older one: for each configuration below, a
# run stopped by SIGUSR1 at step 7 (its checkpoint directory, ck/) and the
# export of the same run never stopped (ref.bin). A newer build must resume
# ck/ and end byte-identical to ref.bin on the machine that made them (MACHINE,
# machine.sh's line). Remake only to add configurations; the point of the
# files is that an OLD build wrote them (ORIGIN says which).
#   tests/data/ckpt_compat/make_fixtures.sh BUILD_DIR OUT_DIR
set -euo pipefail
set -f  # the globs in the train arguments reach ratchet unexpanded
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd); out=$2
mkdir -p "$out"; out=$(cd "$out" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
cd "$out"
find . -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
# Genesis 1-5 of the KJV (Debian's bible-kjv), byte tokenizer: 3 small shards.
bible -f "Gen1:1-Gen5:32" > gen.txt
"$build/ratchet" shard -i gen.txt --blank-lines -o data --shard-tokens 8000 --val-fraction 0.2 --threads 1 >/dev/null
rm gen.txt
base="--model custom --layers 2 --heads 2 --channels 16 --max-seq-len 32 --seq-len 16 \
--batch-size 2 --total-batch-tokens 128 --threads 1 --train-data data/train_*.h5 \
--val-data data/val_*.h5 --eval-every 5 --eval-batches 2 --warmup-steps 3 --lr 3e-3 --steps 12 --quiet"
# name ranks program extra-flags
configs=(
  "cpu-zero0 1 ratchet --zero 0"
  "cpu-zero1 2 ratchet --zero 1"
  "cpu-zero2 2 ratchet --zero 2"
  "cpu-zero3 2 ratchet --zero 3"
  "simt-zero1 2 ratchet-simt --device simt --zero 1"
  "simt-zero2 2 ratchet-simt --device simt --zero 2"
  "simt-zero3 2 ratchet-simt --device simt --zero 3"
)
for c in "${configs[@]}"; do
  read -r name ranks prog extra <<<"$c"
  [ -x "$build/$prog" ] || { echo "make_fixtures.sh: $build/$prog missing" >&2; exit 1; }
  mkdir -p "$name"
  args="train $base $extra"
  echo "$ranks $prog $args" > "$name/cmd"
  mpirun -np "$ranks" --bind-to none "$build/$prog" $args --ckpt-dir "$name/ref-ck" --export "$name/ref.bin" >/dev/null
  rm -rf "$name/ref-ck"
  rc=0
  mpirun -np "$ranks" --bind-to none -x RATCHET_FAULT=USR1@step-7 "$build/$prog" $args --ckpt-dir "$name/ck" \
    --export "$name/stopped.bin" >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 75 ] || { echo "make_fixtures.sh: $name: the stopped run exited $rc, not 75" >&2; exit 1; }
  [ ! -e "$name/stopped.bin" ] || { echo "make_fixtures.sh: $name exported before its end" >&2; exit 1; }
  rm -f "$name/ck/ratchet.lock"
done
commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "made by tests/data/ckpt_compat/make_fixtures.sh with a build of $commit on $(date -u +%Y-%m-%d)" > ORIGIN
# Where the bytes hold: the test compares bytes on a machine that prints the
# same line, and within a tolerance elsewhere (test_ckpt_compat.cpp).
"$here/machine.sh" > MACHINE
