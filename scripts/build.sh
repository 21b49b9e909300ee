#!/usr/bin/env bash
# Configures and builds ratchet into ./build (or $RATCHET_BUILD_DIR).
# Extra arguments go to the CMake configure step, e.g. -DRATCHET_CUDA=OFF.
#   scripts/build.sh [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RATCHET_BUILD_DIR:-build}
targets=${RATCHET_BUILD_TARGETS:-all}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets
