#!/usr/bin/env bash
# Configures and builds ratchet into ./build (or $RATCHET_BUILD_DIR).
# Extra arguments go to the CMake configure step, e.g. -DRATCHET_CUDA=OFF.
#   scripts/build.sh [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RATCHET_BUILD_DIR:-build}
targets=${RATCHET_BUILD_TARGETS:-all}
# ccache when installed: paths under the checkout are hashed relative to it,
# so two checkouts of the tree share cached objects.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${launcher[@]+"${launcher[@]}"} "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets
