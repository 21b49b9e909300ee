#!/usr/bin/env bash
# Tries the README's two commands as a new user would, on a clean Debian 12:
# makes a minimal bookworm root file system with debootstrap, copies the
# committed tree (git HEAD) into it, and runs `scripts/demo.sh` and then
# `scripts/test.sh` inside it as root (chroot). Not part of CI: it downloads
# about 1.5 GB of packages and takes 30-60 minutes on 2 cores.
#
#   sudo scripts/clean-debian-check.sh [ROOTFS_DIR]    (default /var/tmp/ratchet-clean-debian)
#   RATCHET_CLEAN_CHECK_STEPS=demo sudo scripts/clean-debian-check.sh   (only the demo)
#   RATCHET_CLEAN_CHECK_REUSE=1 ...   keep an existing ROOTFS_DIR (packages already
#                                     installed there stay): for a rerun, not a clean check
# Behind a TLS-intercepting proxy, the caller's NODE_EXTRA_CA_CERTS (a CA file)
# is copied into the root file system and set there, so npm can fetch GPT-2's
# vocabulary as it does outside.
#
# The mirror is the first `deb.debian.org`-style URI in apt's configured
# sources (or $RATCHET_DEBIAN_MIRROR). ROOTFS_DIR is deleted and made anew.
# Output: each step's log under ROOTFS_DIR.logs/, a summary line per command,
# exit 0 only when both commands succeeded.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

if [ "$(id -u)" -ne 0 ]; then
  echo "clean-debian-check.sh: run as root (debootstrap, chroot, mount)" >&2
  exit 1
fi
rootfs=${1:-/var/tmp/ratchet-clean-debian}
case $rootfs in
  / | /usr | /var | /tmp | /root | "") echo "clean-debian-check.sh: refusing ROOTFS_DIR '$rootfs'" >&2; exit 2 ;;
esac
logs=$rootfs.logs
git -C "$src" rev-parse --verify HEAD >/dev/null 2>&1 || {
  echo "clean-debian-check.sh: $src is not a git checkout (the committed tree is what gets copied)" >&2
  exit 2
}

scripts/install-deps.sh clean-check

mirror=${RATCHET_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # deb822 (.sources: "URIs: http://...") or one-line ("deb http://... bookworm main")
  mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
             /etc/apt/sources.list.d/*.list |
           grep -oE 'https?://[^ ]*/debian/?( |$)' | head -n1 | tr -d ' ' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
echo "clean-debian-check.sh: mirror $mirror, root file system $rootfs, tree $(git -C "$src" rev-parse --short HEAD)"

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind <what> <where inside rootfs> [mount args...]
  local what=$1 where=$rootfs$2
  shift 2
  mkdir -p "$where"
  mount "$@" "$what" "$where"
  mounted+=("$where")
  # a recursive bind must not pass its unmount back to the host's /dev or /sys
  case " $* " in *" --rbind "*) mount --make-rslave "$where" ;; esac
}

# A previous run killed before its cleanup may have left /dev or /proc bound
# inside: unmount before deleting, never delete through a mount.
while read -r _ where _; do
  case $where in "$rootfs"/*) umount -l "$where" ;; esac
done < <(sort -r -k2 /proc/mounts)
if grep -q " $rootfs/" /proc/mounts; then
  echo "clean-debian-check.sh: mounts remain under $rootfs; unmount them first" >&2
  exit 1
fi
start=$(date +%s)
if [ "${RATCHET_CLEAN_CHECK_REUSE:-0}" = 1 ] && [ -f "$rootfs/etc/debian_version" ]; then
  echo "== reusing $rootfs (RATCHET_CLEAN_CHECK_REUSE=1: not a clean check)"
  rm -rf "$rootfs/root/ratchet"
  mkdir -p "$logs"
else
  rm -rf "$rootfs" "$logs"
  mkdir -p "$logs"
  echo "== debootstrap bookworm (log: $logs/debootstrap.log)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$logs/debootstrap.log" 2>&1
fi
# What a fresh Debian 12 machine also has: the updates and security suites,
# a resolver, sudo-less root. Daemons installed by packages (munge) must not
# start inside the chroot's package scripts; the tests start their own.
security=${mirror%/debian*}/debian-security
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
extra_env=()
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  mkdir -p "$rootfs/etc/ssl"
  cp "$NODE_EXTRA_CA_CERTS" "$rootfs/etc/ssl/extra-ca.crt"
  extra_env=(NODE_EXTRA_CA_CERTS=/etc/ssl/extra-ca.crt)
fi
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod 755 "$rootfs/usr/sbin/policy-rc.d"
bind proc /proc -t proc
# rbind: with the cgroup file system under /sys/fs/cgroup, which slurmd needs
bind /sys /sys --rbind
bind /dev /dev --rbind
bind devpts /dev/pts -t devpts
bind tmpfs /run -t tmpfs
bind tmpfs /dev/shm -t tmpfs
echo "== debootstrap: $(($(date +%s) - start)) s"

mkdir -p "$rootfs/root/ratchet"
git -C "$src" archive HEAD | tar -x -C "$rootfs/root/ratchet"

status=0
for cmd in ${RATCHET_CLEAN_CHECK_STEPS:-demo test}; do
  t0=$(date +%s)
  echo "== chroot: scripts/$cmd.sh (log: $logs/$cmd.log)"
  if chroot "$rootfs" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
       LANG=C.UTF-8 TERM=dumb ${extra_env[@]+"${extra_env[@]}"} /bin/bash -c "cd /root/ratchet && scripts/$cmd.sh" >"$logs/$cmd.log" 2>&1; then
    echo "== scripts/$cmd.sh: OK in $(($(date +%s) - t0)) s"
  else
    rc=$?
    echo "== scripts/$cmd.sh: FAILED (exit $rc) after $(($(date +%s) - t0)) s; last lines of $logs/$cmd.log:"
    tail -n 30 "$logs/$cmd.log"
    status=1
  fi
done
echo "== clean-debian-check.sh: $([ $status -eq 0 ] && echo PASSED || echo FAILED) in $(($(date +%s) - start)) s"
exit $status
