#!/usr/bin/env bash
# The modulefiles after `cmake --install`: modules.sh install|lua|tcl|in-job|template
#   install   fixture setup: cmake --install of the build into RATCHET_TEST_PREFIX
#   lua       Lmod in a login shell: module use/load, ratchet --version, RATCHET_ROOT
#   tcl       the Tcl modulefile: evaluated by tclsh with stub module commands,
#             then loaded by Lmod from share/modulefiles-tcl
#   in-job    the lua check inside a batch job (sbatch --wait, job output file)
#   template  slurm/train.sbatch loads the module (RATCHET_MODULES) and finds
#             the real ratchet; its exit code is passed through, not requeued
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"
prefix=${RATCHET_TEST_PREFIX:?}
version=${RATCHET_PROJECT_VERSION:?}
lua=$prefix/share/modulefiles/ratchet/$version.lua
tcl=$prefix/share/modulefiles-tcl/ratchet/$version

# The load-and-print snippet (MP = the modulefile tree) and what it must print.
# shellcheck disable=SC2016
snippet='module use "$MP"; module load ratchet; ratchet --version; echo "RATCHET_ROOT=$RATCHET_ROOT"; echo "PATH=$PATH"'
check_load_output() {
  grep -qx "ratchet $version" <<<"$1" || fail "no 'ratchet $version' in: $1"
  grep -qx "RATCHET_ROOT=$prefix" <<<"$1" || fail "RATCHET_ROOT is not $prefix in: $1"
  grep -q "^PATH=$prefix/bin:" <<<"$1" || fail "PATH does not start with $prefix/bin in: $1"
}

case ${1:?install|lua|tcl|in-job|template} in
  install)
    [ -x "${RATCHET_BUILT_EXE:-}" ] ||
      fail "the ratchet binary is not built: cmake --build ${RATCHET_BUILD_DIR:-build} --target ratchet"
    rm -rf "$prefix"
    cmake --install "$RATCHET_BUILD_DIR" --prefix "$prefix" || fail "cmake --install failed"
    for f in "$prefix/bin/ratchet" "$lua" "$tcl" "$prefix/share/ratchet/slurm/train.sbatch" \
      "$prefix/share/ratchet/slurm/requeue-lib.sh"; do
      [ -e "$f" ] || fail "not installed: $f"
    done
    # The prefix is the install-time one, not the configure-time one.
    grep -q "local root    = \"$prefix\"" "$lua" || fail "$lua does not name $prefix"
    grep -q "set root    \"$prefix\"" "$tcl" || fail "$tcl does not name $prefix"
    if grep -n '@[A-Z_]*@' "$lua" "$tcl"; then fail "unexpanded @VAR@ left in the modulefiles"; fi
    ;;
  lua)
    out=$(MP=$prefix/share/modulefiles timeout 60 bash -lc "$snippet" 2>&1) || fail "login shell: $out"
    echo "$out"
    check_load_output "$out"
    # shellcheck disable=SC2016
    help=$(MP=$prefix/share/modulefiles timeout 60 bash -lc \
      'module use "$MP"; module help ratchet; module whatis ratchet' 2>&1)
    for want in "Provenance: ratchet $version \(commit " "openmpi" "cuda" "hdf5" "Version: $version"; do
      grep -qE "$want" <<<"$help" || fail "module help/whatis lacks '$want': $help"
    done
    # Unloading restores the environment.
    # shellcheck disable=SC2016
    out=$(MP=$prefix/share/modulefiles timeout 60 bash -lc \
      'module use "$MP"; module load ratchet; module unload ratchet; echo "R=${RATCHET_ROOT:-unset}"' 2>&1)
    grep -qx "R=unset" <<<"$out" || fail "unload left RATCHET_ROOT: $out"
    ;;
  tcl)
    command -v tclsh >/dev/null || fail "tclsh missing: run scripts/install-deps.sh"
    # Evaluate the whole file with stub module commands: catches syntax errors
    # and unknown commands, and shows what it sets.
    out=$(timeout 30 tclsh 2>&1 <<TCL
set env_ops {}
proc module-whatis {args} {}
proc conflict {args} {}
proc prereq {args} {}
proc setenv {name value} { global env_ops; lappend env_ops "setenv \$name=\$value" }
proc prepend-path {name value} { global env_ops; lappend env_ops "prepend \$name=\$value" }
proc append-path {name value} { global env_ops; lappend env_ops "append \$name=\$value" }
source {$tcl}
ModulesHelp
foreach op \$env_ops { puts \$op }
TCL
    ) || fail "tclsh could not evaluate $tcl: $out"
    echo "$out"
    grep -qx "setenv RATCHET_ROOT=$prefix" <<<"$out" || fail "Tcl: RATCHET_ROOT"
    grep -qx "prepend PATH=$prefix/bin" <<<"$out" || fail "Tcl: PATH"
    grep -q "Provenance: ratchet $version" <<<"$out" || fail "Tcl: no provenance in the help"
    out=$(MP=$prefix/share/modulefiles-tcl timeout 60 bash -lc "$snippet" 2>&1) || fail "Lmod + Tcl: $out"
    echo "$out"
    check_load_output "$out"
    ;;
  in-job)
    new_test_dir modules-in-job
    # sbatch --wrap would run /bin/sh: a bash login shell sets up Lmod.
    cat >job.sh <<JOB
#!/bin/bash
MP=$prefix/share/modulefiles bash -lc '$snippet'
JOB
    timeout 120 sbatch --wait -J module-job -o '%x-%j.out' -c1 -t2 job.sh || fail "sbatch --wait: exit $?"
    out=$(cat module-job-*.out)
    echo "$out"
    check_load_output "$out"
    ;;
  template)
    new_test_dir modules-template
    id=$(timeout 60 sbatch --parsable -J tmpl -c1 -t2 \
      "--export=ALL,MODULEPATH=$prefix/share/modulefiles,RATCHET_MODULES=ratchet,RATCHET_CKPT_DIR=$TEST_DIR/ckpt,RATCHET_CONFIG=$TEST_DIR/none.ini" \
      "$SLURM_DIR/train.sbatch")
    wait_job "$id" 60 >/dev/null
    cat ./*.out
    expect_log "loaded modules: ratchet"
    expect_log "step: srun --kill-on-bad-exit=1 ratchet train --config $TEST_DIR/none.ini --ckpt-dir $TEST_DIR/ckpt --resume auto"
    expect_log "trainer failed \(exit [0-9]+\): not requeueing"
    [ "$(job_field "$id" Restarts)" = 0 ] || fail "requeued"
    ;;
  *) fail "unknown case $1" ;;
esac
log "ok"
