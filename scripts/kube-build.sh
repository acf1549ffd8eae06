#!/usr/bin/env bash
# Builds the real upstream Kubernetes from the Go module proxy: lab/kube, one multi-call
# executable `kube` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy, kubectl, kwok, and our control-plane and k3s-stand-in commands), and beside it
# `hangar-ingress` (lab/kube/ingress: the lab's ingress controller, a small static executable that
# goes into an image), into a cache outside the checkout.
#
#   bash scripts/kube-build.sh            build if needed; the executable's path is the last line
#   bash scripts/kube-build.sh --path     only print where the executable is (or would be); exit 1 if not built
#
# The cache (HANGAR_KUBE_CACHE, default /var/cache/hangar-kube, or ~/.cache/hangar-kube when that
# is not writable) holds:
#   <kubernetes>-<kwok>-<hash>/kube   the executable; the hash covers lab/kube (go.mod, go.sum,
#                                     sources) and this script, so a change rebuilds and nothing
#                                     else does
#   <kubernetes>-<kwok>-<hash>/hangar-ingress
#   gomod/, gocache/                  this build's own GOMODCACHE and GOCACHE (a rebuild after a
#                                     change to our own sources recompiles only those)
#   build-<key>.log                   the full output of the last build of that key
# One build at a time (flock); a second caller waits for the first and then finds its result.
# A cold build (empty cache) downloads ~800 MB of modules and compiles ~2,500 packages: measured
# times are in docs/kubernetes.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$ROOT/lab/kube"
CACHE=${HANGAR_KUBE_CACHE:-/var/cache/hangar-kube}
if ! mkdir -p "$CACHE" 2>/dev/null || [ ! -w "$CACHE" ]; then
  CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/hangar-kube"
  mkdir -p "$CACHE"
fi

module_version() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$SRC/go.mod"; }
KUBERNETES=$(module_version k8s.io/kubernetes)
KWOK=$(module_version sigs.k8s.io/kwok)
HASH=$(cd "$SRC" && cat go.mod go.sum ./*.go ./ingress/*.go "$ROOT/scripts/kube-build.sh" | sha256sum | cut -c1-12)
KEY="$KUBERNETES-kwok-$KWOK-$HASH"
OUT="$CACHE/$KEY"
EXE="$OUT/kube"

if [ "${1:-}" = "--path" ]; then
  echo "$EXE"
  [ -x "$EXE" ]
  exit
fi
if [ -x "$EXE" ]; then
  echo "$EXE"
  exit 0
fi

exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  echo "[kube build] another build is running (lock $CACHE/build.lock); waiting for it" >&2
  flock 9
fi
if [ -x "$EXE" ]; then
  echo "[kube build] built meanwhile by the build that held the lock" >&2
  echo "$EXE"
  exit 0
fi
command -v go >/dev/null || { echo "[kube build] go is not installed (Debian: apt-get install golang-go; needs Go >= 1.24)" >&2; exit 1; }

LOG="$CACHE/build-$KEY.log"
echo "[kube build] Kubernetes $KUBERNETES and kwok $KWOK ($KEY) with $(go version | cut -d' ' -f3); log $LOG" >&2
started=$(date +%s)
export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
minor=${KUBERNETES#v1.}
minor=${minor%%.*}
# What `kube-apiserver --version` and /version report (a module build has no git to ask).
version_flags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_flags+=" -X $pkg.gitVersion=$KUBERNETES -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
rm -rf "$OUT.partial"
mkdir -p "$OUT.partial"
# The time the build took, and the CPU it used (independent of how busy the machine was).
TIMEFORMAT="wall %0R s, cpu %0U s user + %0S s system"
build() {
  (cd "$SRC" && go build -trimpath -ldflags "-s -w$version_flags" -o "$OUT.partial/kube" . &&
    go build -trimpath -ldflags "-s -w" -o "$OUT.partial/hangar-ingress" ./ingress) >"$LOG" 2>&1
}
if ! { time build; } 2>"$CACHE/build-$KEY.time"; then
  echo "[kube build] FAILED after $(($(date +%s) - started)) s; the end of $LOG:" >&2
  rm -f "$CACHE/build-$KEY.time"
  tail -n 30 "$LOG" | sed 's/^/    /' >&2
  rm -rf "$OUT.partial"
  exit 1
fi
mv "$OUT.partial" "$OUT"
# Executables of earlier keys go, but for the two newest (other checkouts may use them); the
# module and build caches stay: they make the next build fast.
ls -dt "$CACHE"/v*-kwok-*/ 2>/dev/null | tail -n +4 | while read -r old; do
  old=${old%/}
  rm -rf "$old" "$CACHE/build-$(basename "$old").log"
done
echo "[kube build] built $EXE ($(du -m "$EXE" | cut -f1) MB): $(cat "$CACHE/build-$KEY.time")" >&2
cat "$CACHE/build-$KEY.time" >>"$LOG"
rm -f "$CACHE/build-$KEY.time"
echo "$EXE"
