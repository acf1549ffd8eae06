#!/usr/bin/env bash
# Installs schemathesis (the OpenAPI fuzzer test/integration/fuzz runs) from PyPI, pinned, into a
# virtualenv cached outside the checkout and keyed by version, and points
# /var/cache/hangar-ci/schemathesis at it. Does nothing when that version is installed already.
set -euo pipefail

VERSION=4.32.5
CACHE=${HANGAR_CI_CACHE:-/var/cache/hangar-ci}
TARGET="$CACHE/schemathesis-$VERSION"

if [ -f "$TARGET/.installed" ]; then
  echo "schemathesis: $VERSION is installed ($TARGET)"
else
  mkdir -p "$CACHE"
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    # Debian keeps venv's ensurepip in a package of its own.
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
  fi
  rm -rf "$TARGET"
  python3 -m venv "$TARGET"
  "$TARGET/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$VERSION"
  "$TARGET/bin/st" --version | grep -q "$VERSION"
  touch "$TARGET/.installed"
  echo "schemathesis: installed $VERSION into $TARGET"
fi
ln -sfn "$TARGET" "$CACHE/schemathesis"
