# Sourced by scripts/gpu-check.sh and bench/gpu/compare.sh: put the programs of
# a bundle built elsewhere (scripts/gpu-bundle.sh's layout: DIR/env.sh, which
# unpacks DIR/bin and DIR/lib; or a plain DIR/bin and DIR/lib) on this shell's PATH and library path.
#   use_prebuilt_env DIR WHO   (WHO names the caller in the error; exits 2 when
#                               the bundle's env.sh fails)

use_prebuilt_env() {
  local dir=$1 who=$2
  if [ -f "$dir/env.sh" ]; then
    # shellcheck disable=SC1091
    source "$dir/env.sh" || { echo "$who: sourcing $dir/env.sh failed" >&2; exit 2; }
  else
    export PATH="$dir/bin:$PATH"
    [ -d "$dir/lib" ] && export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  return 0
}
