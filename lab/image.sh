#!/usr/bin/env bash
# hangar machine lab: builds the machine image from Debian bookworm and `docker import`s it.
#
#   bash lab/image.sh <tag>        e.g. hangar-lab:0123456789ab
#
# Normally run by lab/image.ts (ensureLabImage), which computes the tag from a hash of this
# file and of lab/rootfs/, so an unchanged recipe reuses the cached image and a changed one
# rebuilds. Needs root, debootstrap and a running dockerd; reaches deb.debian.org (or
# HANGAR_LAB_MIRROR). Downloaded .debs are kept in HANGAR_LAB_CACHE (default
# /var/cache/hangar-lab) so a rebuild does not download them again.
#
# Output: one "[lab image] step i/n: …" line per step; the full log goes to
# $HANGAR_LAB_CACHE/build-<tag>.log. A failure names the failed step and prints the end of the log.
set -euo pipefail

TAG=${1:?usage: lab/image.sh <tag>}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MIRROR=${HANGAR_LAB_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
CACHE=${HANGAR_LAB_CACHE:-/var/cache/hangar-lab}
# restic: the backup program (issue 28) backs machines' folders up to S3 (docs/lab.md).
# containernetworking-plugins: the CNI plugins of the k3s stand-in's real nodes (containerd and runc come with docker.io).
PACKAGES=docker.io,openssh-server,sudo,iproute2,iptables,ca-certificates,procps,wireguard-tools,wireguard-go,iputils-ping,curl,netcat-openbsd,busybox-static,haproxy,restic,containernetworking-plugins
STEPS=7

# fd 3 is the caller's stdout: steps send their own output to the log, progress goes to fd 3.
exec 3>&1
say() { echo "[lab image] $*" >&3; }
step_no=0
step_name="start"
step() {
  step_no=$((step_no + 1))
  step_name=$*
  say "step $step_no/$STEPS: $step_name"
  echo "=== step $step_no/$STEPS: $step_name ===" >>"$LOG"
}

mkdir -p "$CACHE/debs"
LOG="$CACHE/build-${TAG//[:\/]/-}.log"
: >"$LOG"
WORK=""

on_exit() {
  local rc=$?
  exec 1>&3 2>&3
  if [ -n "$WORK" ] && [ -d "$WORK" ]; then
    # Anything still mounted under the rootfs (a failed chroot step) is unmounted first.
    for m in proc sys dev/pts dev; do umount -l "$WORK/rootfs/$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$WORK"
  fi
  if [ $rc -ne 0 ]; then
    say "FAILED at step $step_no/$STEPS: $step_name (exit code $rc)"
    say "the end of $LOG:"
    tail -n 40 "$LOG" | sed 's/^/    /'
  fi
  exit $rc
}
trap on_exit EXIT

step "check the build machine"
[ "$(id -u)" = 0 ] || { say "needs root (debootstrap and chroot)"; exit 1; }
command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install -y debootstrap"; exit 1; }
docker info >/dev/null 2>&1 || { say "dockerd is not answering (docker info failed); start it (scripts/services.sh)"; exit 1; }
# One build at a time on this machine; a build that waited may find the image made meanwhile.
exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  say "another lab image build is running; waiting for it"
  flock 9
fi
if docker image inspect "$TAG" >/dev/null 2>&1; then
  say "$TAG exists already (built by the build that held the lock)"
  exit 0
fi
WORK=$(mktemp -d /var/tmp/hangar-lab-build.XXXXXX)
ROOT="$WORK/rootfs"
say "tag $TAG, mirror $MIRROR, work dir $WORK, log $LOG"

step "debootstrap $SUITE (minbase + $PACKAGES)"
# debootstrap is verbose: only its milestones are shown, everything goes to the log.
debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE/debs" \
  "$SUITE" "$ROOT" "$MIRROR" 2>&1 | tee -a "$LOG" |
  { grep --line-buffered -E '^(I: (Retrieving Release|Retrieving Packages|Resolving dependencies|Checking component|Installing core|Unpacking the base|Configuring the base|Base system installed)|E: |W: )' || true; } |
  sed -u 's/^/    /'

step "install the lab files (lab/rootfs: init, service-image scripts, sshd config, sudoers)"
# Every file under lab/rootfs lands at the same path, owned by root, with a mode decided here
# (not by the checkout): programs 0755, sudoers 0440, the rest 0644.
(cd "$HERE/rootfs" && find . -type f | sort) | while read -r file; do
  case "$file" in
    ./usr/local/sbin/* | ./usr/local/bin/*) mode=0755 ;;
    ./etc/sudoers.d/*) mode=0440 ;;
    *) mode=0644 ;;
  esac
  install -D -o root -g root -m "$mode" "$HERE/rootfs/$file" "$ROOT/$file"
  echo "installed /${file#./} ($mode)" >>"$LOG"
done
cat >>"$ROOT/etc/ssh/sshd_config" <<'SSHD'

# hangar machine lab: pwuser has a password and no key (see sshd_config.d/hangar-lab.conf).
Match User pwuser
    PasswordAuthentication yes
    PubkeyAuthentication no
    AuthenticationMethods password
SSHD

step "configure users (root, deployer, pwuser)"
{
  chroot "$ROOT" /bin/sh -euxc '
    useradd --create-home --shell /bin/bash deployer
    useradd --create-home --shell /bin/bash pwuser
    # root and deployer log in with keys only: "*" means "no password" without locking the
    # account (sshd may refuse even keys to a locked "!" account). pwuser gets its password at start.
    usermod --password "*" root
    usermod --password "*" deployer
    visudo -c
  '
} >>"$LOG" 2>&1

step "configure the system (host keys removed, hostname, apt cleaned)"
{
  # Host keys are generated at container start (lab-init), so each machine has its own.
  rm -f "$ROOT"/etc/ssh/ssh_host_*
  rm -f "$ROOT/etc/hostname"
  echo "hangar lab machine ($SUITE, built $(date -u +%Y-%m-%dT%H:%M:%SZ), tag $TAG)" >"$ROOT/etc/hangar-lab-release"
  # The package cache lives outside the image; docs, manuals and apt lists are not needed.
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* \
    "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/var/log/*.log
  echo "deb $MIRROR $SUITE main" >"$ROOT/etc/apt/sources.list"
} >>"$LOG" 2>&1

step "check the rootfs"
{
  for bin in sshd dockerd docker containerd containerd-shim-runc-v2 ctr runc sudo ip bridge iptables wg wireguard-go ping curl nc busybox haproxy restic ssh-keygen lab-init lab-busybox-image lab-haproxy-image lab-minio-standin-image lab-k8s-images; do
    chroot "$ROOT" /bin/sh -c "command -v $bin" || { echo "missing in the rootfs: $bin"; exit 1; }
  done
  for plugin in bridge host-local portmap loopback; do
    [ -x "$ROOT/usr/lib/cni/$plugin" ] || { echo "missing in the rootfs: the CNI plugin /usr/lib/cni/$plugin"; exit 1; }
  done
  # sshd accepts the configuration (with a throwaway host key).
  chroot "$ROOT" /bin/sh -euc 'mkdir -p /run/sshd; ssh-keygen -q -t ed25519 -N "" -f /tmp/hk; sshd -t -h /tmp/hk; rm -f /tmp/hk /tmp/hk.pub'
} >>"$LOG" 2>&1

step "docker import as $TAG"
size=$(du -sm "$ROOT" | cut -f1)
say "rootfs is ${size} MB"
tar -C "$ROOT" --numeric-owner -cf - . 2>>"$LOG" |
  docker import \
    --change 'CMD ["/usr/local/sbin/lab-init"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL hangar-lab.image=$TAG" \
    --message "hangar machine lab ($SUITE)" \
    - "$TAG" >>"$LOG" 2>&1
say "built $TAG"
