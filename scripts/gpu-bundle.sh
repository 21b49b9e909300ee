#!/usr/bin/env bash
# Packs what a GPU node needs to run ratchet's CUDA build into one relocatable
# folder, so that the build happens where its Debian packages are (a login
# node, this machine) and only the folder travels. A GPU node has its driver,
# CUDA, cuDNN, NCCL, Open MPI, glibc and libstdc++, but often not HDF5, Boost,
# OpenBLAS, libdeflate, utf8proc or pcre2 (docs/platform.md, "A GPU node").
#
#   scripts/gpu-bundle.sh [--build DIR] [--out DIR] [--no-build] [--fast] [PROGRAM...]
#
# --build DIR   the build directory (default build-gpu). When it holds no
#               CMakeCache.txt it is configured here: CUDA on, portable CPU
#               code (RATCHET_NATIVE=OFF: the GPU node's CPU is not this one),
#               benchmarks on, CUDA architectures $GPU_ARCHS (default 90).
#               An existing build is used as it is configured.
# --no-build    pack what DIR already holds (no cmake --build)
# --out DIR     where the bundle goes (default .gpu at the project root)
# --fast        compress quickly (xz -1) instead of well (xz -6)
# PROGRAM...    the programs (default: ratchet, every GPU test program
#               (tests/gpu/test_*.cpp, test_mpi_nccl, test_mpi_train_gpu) and
#               every GPU benchmark (bench_gpu_train, bench_attention_gpu,
#               bench_kernels) that the build defines)
#
# The bundle: env.sh, pack.tar.xz (bin/ with the programs, stripped; lib/ with
# every library they link, as ldd finds it, except those the node provides:
# glibc, libstdc++/libgcc_s, CUDA, cuDNN, cuBLAS, NCCL, nvrtc, Open MPI and its
# runtime) and MANIFEST (programs, libraries, sizes). The programs and libraries
# are packed because unpacked they are well over the 64 MiB the bundle may
# take; the script refuses a bundle of 64 MiB or more. On the GPU node, from
# any copy of the folder:
#   source DIR/env.sh        # unpacks bin/ and lib/ beside itself once (or into
#                            # $TMPDIR when the folder is read-only), then puts
#                            # DIR/bin on PATH and DIR/lib (plus the node's CUDA,
#                            # cuDNN and NCCL libraries where found) on LD_LIBRARY_PATH
#   ratchet --version; scripts/gpu-check.sh --prebuilt DIR; bench/gpu/compare.sh --prebuilt DIR
# Exit codes: 0 packed; 1 the build failed, or the bundle is too large or
# incomplete; 2 bad usage or a build without the CUDA programs.
set -euo pipefail
prog=gpu-bundle.sh
root=$(cd "$(dirname "$0")/.." && pwd)
limit=$((64 * 1024 * 1024))
# Tests lower it to see the refusal; it is never raised.
if [ -n "${RATCHET_GPU_BUNDLE_LIMIT:-}" ] && [ "$RATCHET_GPU_BUNDLE_LIMIT" -lt "$limit" ] 2>/dev/null; then
  limit=$RATCHET_GPU_BUNDLE_LIMIT
fi

die() { echo "$prog: $*" >&2; exit 1; }
usage() { echo "$prog: $*" >&2; echo "usage: scripts/gpu-bundle.sh [--build DIR] [--out DIR] [--no-build] [--fast] [PROGRAM...]" >&2; exit 2; }

build=${GPU_BUILD:-build-gpu}; out=""; do_build=1; xz_level=-6; programs=()
while [ $# -gt 0 ]; do
  case $1 in
    --build | --out) [ $# -ge 2 ] || usage "$1 needs a directory"
      if [ "$1" = --build ]; then build=$2; else out=$2; fi; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --fast) xz_level=-1; shift ;;
    --help | -h) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown option '$1'" ;;
    *) programs+=("$1"); shift ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
out=${out:-$root/.gpu}
case $out in /*) ;; *) out=$PWD/$out ;; esac
for t in ldd strip xz tar; do command -v "$t" >/dev/null || usage "needs '$t' (binutils, xz-utils)"; done

# ---- configure and build ---------------------------------------------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  [ $do_build = 1 ] || usage "--no-build: '$build' is not a configured build directory"
  launcher=()
  if command -v ccache >/dev/null; then
    export CCACHE_BASEDIR=$root
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
              -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRATCHET_NATIVE=OFF -DRATCHET_CUDA=ON \
        -DRATCHET_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES="${GPU_ARCHS:-90}" -DRATCHET_CUDA_ARCHS="${GPU_ARCHS:-90}" \
        ${launcher[@]+"${launcher[@]}"} >/dev/null || die "configuring $build failed"
fi
if grep -q '^RATCHET_NATIVE:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "$prog: warning: $build is built with -march=native (RATCHET_NATIVE=ON): its CPU code may" \
       "not run on a GPU node whose CPU differs; a fresh --build DIR is configured portable" >&2
fi

default_programs() {
  local f
  echo ratchet
  for f in "$root"/tests/gpu/test_*.cpp; do f=${f##*/}; echo "${f%.cpp}"; done
  echo test_mpi_nccl test_mpi_train_gpu bench_gpu_train bench_attention_gpu bench_kernels | tr ' ' '\n'
}
explicit=${#programs[@]}
[ "$explicit" -gt 0 ] || mapfile -t programs < <(default_programs)

# find_program NAME: the executable the build made (empty when none).
find_program() {
  if [ "$1" = ratchet ] && [ -x "$build/ratchet" ]; then echo "$build/ratchet"; return; fi
  find "$build" -path "$build/CMakeFiles" -prune -o -type f -name "$1" -perm -u+x -print 2>/dev/null | head -1
}

if [ $do_build = 1 ]; then
  # Only the targets this build defines (no cuDNN: no test_cudnn_attention; no MPI: no test_mpi_*).
  known=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
  targets=()
  for t in "${programs[@]}"; do grep -qx "$t" <<<"$known" && targets+=("$t"); done
  [ ${#targets[@]} -gt 0 ] || die "$build defines none of: ${programs[*]}"
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || die "building ${targets[*]} in $build failed"
fi

# ---- collect the programs ------------------------------------------------------------
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
packed=(); missing=()
for t in "${programs[@]}"; do
  f=$(find_program "$t")
  if [ -z "$f" ]; then missing+=("$t"); continue; fi
  cp "$f" "$stage/bin/$t"
  strip --strip-unneeded "$stage/bin/$t" 2>/dev/null || true   # symbols only; the code is unchanged
  packed+=("$t")
done
[ -f "$stage/bin/ratchet" ] || die "$build has no ratchet executable (build it first, or drop --no-build)"
if [ "$explicit" -gt 0 ] && [ ${#missing[@]} -gt 0 ]; then
  die "not built in $build: ${missing[*]}"
fi
if [ "$explicit" -eq 0 ] && [ ! -f "$stage/bin/test_gpu_kernels" ]; then
  usage "$build has no GPU programs (no test_gpu_kernels): it was configured without CUDA;" \
        "give a fresh --build DIR (configured with -DRATCHET_CUDA=ON here) or reconfigure it"
fi

# ---- the libraries a GPU node lacks ------------------------------------------------------
# Left out, the node's own: glibc (its loader and libraries), libstdc++ and libgcc_s (a
# newer node's serve older programs), the CUDA runtime and libraries, cuDNN, NCCL, nvrtc
# (they must match the node's driver), Open MPI and its runtime (the node's mpirun).
node_provides='^(ld-linux.*|linux-vdso.*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc.*|libnvJitLink|libnvToolsExt|libmpi|libmpi_cxx|libopen-pal|libopen-rte|libevent.*|libhwloc|libudev|libpmix|libfabric|libucp|libucs|libuct|libucm|libibverbs|librdmacm|libpsm.*|libefa)\.so'
printf '%s\n' "$node_provides" > "$stage/lib/.node_provides"
unresolved=()
for b in "$stage"/bin/*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    grep -qE "$node_provides" <<<"$name" && continue
    if [ "$path" = "not" ]; then unresolved+=("${b##*/}: $name"); continue; fi
    [ -f "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
  done < <(ldd "$b")
done
[ ${#unresolved[@]} -eq 0 ] || die "ldd finds no library for: ${unresolved[*]}"
for l in "$stage"/lib/*.so*; do strip --strip-unneeded "$l" 2>/dev/null || true; done

# ---- pack ---------------------------------------------------------------------------
mkdir -p "$out"
rm -rf "$out/bin" "$out/lib" "$out/pack.tar.xz" "$out/.unpacked"
{
  echo "ratchet GPU bundle: $(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown), built in $build"
  echo "programs (${#packed[@]}): ${packed[*]}"
  [ ${#missing[@]} -eq 0 ] || echo "not built there, left out: ${missing[*]}"
  echo "libraries ($(ls "$stage/lib" | wc -l)):"; (cd "$stage/lib" && ls | sed 's/^/  /')
  echo "unpacked size: $(du -sb "$stage" | cut -f1) bytes"
} > "$out/MANIFEST"
tar -C "$stage" -cf - bin lib | xz -T0 "$xz_level" > "$out/pack.tar.xz"
cat > "$out/env.sh" <<'ENV'
# Sourced on the GPU node: `source DIR/env.sh`, DIR any copy of the bundle that
# scripts/gpu-bundle.sh wrote. Unpacks pack.tar.xz into bin/ and lib/ beside this
# file (once per pack; into $TMPDIR when this folder is read-only), then puts bin/
# on PATH and lib/ on LD_LIBRARY_PATH, followed by the node's CUDA, cuDNN and NCCL
# libraries where they are (/usr/local/cuda, python's nvidia packages).
_rg_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_rg_stamp=$(cksum < "$_rg_dir/pack.tar.xz" | cut -d' ' -f1)
_rg_home=$_rg_dir
if [ ! -w "$_rg_dir" ]; then
  _rg_home=${TMPDIR:-/tmp}/ratchet-gpu-$_rg_stamp
  mkdir -p "$_rg_home"
fi
if [ "$(cat "$_rg_home/.unpacked" 2>/dev/null)" != "$_rg_stamp" ]; then
  rm -rf "$_rg_home/bin" "$_rg_home/lib"
  if xz -dc "$_rg_dir/pack.tar.xz" | tar -C "$_rg_home" -xf -; then
    echo "$_rg_stamp" > "$_rg_home/.unpacked"
  else
    echo "env.sh: unpacking $_rg_dir/pack.tar.xz into $_rg_home failed" >&2
    unset _rg_dir _rg_stamp _rg_home
    return 1 2>/dev/null || exit 1
  fi
fi
_rg_nv=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
_rg_extra=""
for _rg_d in /usr/local/cuda/lib64 /usr/local/cuda/lib ${_rg_nv:+"$_rg_nv"/cudnn/lib "$_rg_nv"/cublas/lib \
             "$_rg_nv"/nccl/lib "$_rg_nv"/cuda_runtime/lib "$_rg_nv"/cuda_nvrtc/lib "$_rg_nv"/cu13/lib}; do
  [ -d "$_rg_d" ] && _rg_extra="$_rg_extra:$_rg_d"
done
export RATCHET_GPU_BUNDLE=$_rg_home
export LD_LIBRARY_PATH="$_rg_home/lib$_rg_extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$_rg_home/bin:$PATH"
unset _rg_dir _rg_stamp _rg_home _rg_nv _rg_extra _rg_d
ENV

size=$(du -sb "$out" | cut -f1)
if [ "$size" -ge "$limit" ]; then
  rm -f "$out/pack.tar.xz"
  die "the bundle in $out is $size bytes, not under the limit of $limit bytes (64 MiB): pack fewer programs (PROGRAM...)"
fi
echo "$prog: $out: ${#packed[@]} programs, $(ls "$stage/lib" | wc -l) libraries, $((size / 1048576)) MiB" \
     "(limit 64)${missing[0]+; not built, left out: ${missing[*]}}"
echo "$prog: copy $out to the GPU node and run 'source <copy>/env.sh' there"
