#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: installs dependencies,
# builds everything (CUDA parts too when the toolkit is present), and runs
# every CTest test. Exits non-zero when any test fails.
#   scripts/test.sh                  everything
#   scripts/test.sh -L unit          only some labels (ctest arguments)
# The whole suite (no arguments) then runs the sanitizer builds
# (scripts/sanitize.sh: unit + integration under ASan+UBSan, the loader's
# prefetch thread and the MPI async path under TSan); RATCHET_SANITIZERS
# chooses them ("asan tsan" by default, "" for none).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then scripts/install-deps.sh; else sudo scripts/install-deps.sh; fi
RATCHET_BUILD_DIR=build scripts/build.sh
(cd build && ctest --output-on-failure --timeout 900 -j 2 "$@")
sanitizers=${RATCHET_SANITIZERS-asan tsan}
if [ $# -eq 0 ] && [ -n "$sanitizers" ]; then
  # shellcheck disable=SC2086
  scripts/sanitize.sh $sanitizers
fi
