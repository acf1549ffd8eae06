#!/usr/bin/env bash
# Builds a real S3 server from the Go module proxy: lab/s3, which makes two static executables —
# `weed`, SeaweedFS's own command (Apache-2.0; `weed server -s3` is master, volume server, filer
# and S3 gateway in one process), and `minio-standin`, the lab's MinIO stand-in that runs weed
# behind MinIO's command line (lab/s3/minio_standin.go) — into a cache outside the checkout.
#
#   bash scripts/s3-build.sh            build if needed; weed's path is the last line
#   bash scripts/s3-build.sh --path     only print where weed is (or would be); exit 1 if not built
#
# Both executables are in the same folder (the lab mounts that folder into its machines).
# The cache (HANGAR_S3_CACHE, default /var/cache/hangar-s3, or ~/.cache/hangar-s3 when that is
# not writable) holds:
#   seaweedfs-<version>-<hash>/weed, …/minio-standin
#                                     the executables; the hash covers lab/s3 (go.mod, go.sum,
#                                     sources) and this script, so a change rebuilds and nothing
#                                     else does
#   gomod/, gocache/                  this build's own GOMODCACHE and GOCACHE
#   build-<key>.log                   the full output of the last build of that key
# One build at a time (flock); a second caller waits for the first and then finds its result.
# A cold build downloads ~800 MB of modules (the SeaweedFS module graph is wide: cloud SDKs,
# databases, message queues) and compiles them: measured times are in docs/lab.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC="$ROOT/lab/s3"
CACHE=${HANGAR_S3_CACHE:-/var/cache/hangar-s3}
if ! mkdir -p "$CACHE" 2>/dev/null || [ ! -w "$CACHE" ]; then
  CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/hangar-s3"
  mkdir -p "$CACHE"
fi

MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS=$(awk -v m="$MODULE" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$SRC/go.mod")
GO_NEEDED=$(awk '$1 == "go" { print $2; exit }' "$SRC/go.mod")
HASH=$(cd "$SRC" && cat go.mod go.sum ./*.go "$ROOT/scripts/s3-build.sh" | sha256sum | cut -c1-12)
KEY="seaweedfs-$SEAWEEDFS-$HASH"
OUT="$CACHE/$KEY"
EXE="$OUT/weed"

built() { [ -x "$OUT/weed" ] && [ -x "$OUT/minio-standin" ]; }
if [ "${1:-}" = "--path" ]; then
  echo "$EXE"
  built
  exit
fi
if built; then
  echo "[s3 build] cached: $OUT" >&2
  echo "$EXE"
  exit 0
fi

exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  echo "[s3 build] another build is running (lock $CACHE/build.lock); waiting for it" >&2
  flock 9
fi
if built; then
  echo "[s3 build] built meanwhile by the build that held the lock" >&2
  echo "$EXE"
  exit 0
fi
command -v go >/dev/null || { echo "[s3 build] go is not installed (needs Go >= $GO_NEEDED: .ci/run fetches the official toolchain from the Go module proxy)" >&2; exit 1; }
have=$(go env GOVERSION)
if [ "$(printf '%s\n' "go$GO_NEEDED" "$have" | sort -V | head -n 1)" != "go$GO_NEEDED" ]; then
  echo "[s3 build] $have is too old: SeaweedFS $SEAWEEDFS needs Go >= $GO_NEEDED" >&2
  exit 1
fi

LOG="$CACHE/build-$KEY.log"
echo "[s3 build] SeaweedFS $SEAWEEDFS ($KEY) with $have; log $LOG" >&2
started=$(date +%s)
export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
# What `weed version` reports (a module build has no git to ask): the pseudo-version's commit.
commit=${SEAWEEDFS##*-}
rm -rf "$OUT.partial"
mkdir -p "$OUT.partial"
# The time the build took, and the CPU it used (independent of how busy the machine was).
TIMEFORMAT="wall %0R s, cpu %0U s user + %0S s system"
build() {
  cd "$SRC"
  go build -trimpath -ldflags "-s -w -X $MODULE/weed/util/version.COMMIT=$commit" -o "$OUT.partial/weed" "$MODULE/weed"
  go build -trimpath -ldflags "-s -w" -o "$OUT.partial/minio-standin" .
}
if ! { time (build >"$LOG" 2>&1); } 2>"$CACHE/build-$KEY.time"; then
  echo "[s3 build] FAILED after $(($(date +%s) - started)) s; the end of $LOG:" >&2
  rm -f "$CACHE/build-$KEY.time"
  tail -n 30 "$LOG" | sed 's/^/    /' >&2
  rm -rf "$OUT.partial"
  exit 1
fi
mv "$OUT.partial" "$OUT"
# Executables of earlier keys go, but for the two newest (other checkouts may use them); the
# module and build caches stay: they make the next build fast.
ls -dt "$CACHE"/seaweedfs-*/ 2>/dev/null | tail -n +4 | while read -r old; do
  old=${old%/}
  rm -rf "$old" "$CACHE/build-$(basename "$old").log"
done
echo "[s3 build] built $OUT: weed $(du -m "$OUT/weed" | cut -f1) MB, minio-standin $(du -m "$OUT/minio-standin" | cut -f1) MB; $(cat "$CACHE/build-$KEY.time")" >&2
cat "$CACHE/build-$KEY.time" >>"$LOG"
rm -f "$CACHE/build-$KEY.time"
echo "$EXE"
