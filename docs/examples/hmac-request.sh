#!/usr/bin/env bash
# Signs and sends one request to the hangar control API with openssl and curl: the worked example
# of docs/api-auth.md. Usage:
#   HANGAR_API_URL=https://cp:8443 HANGAR_ACCESS_KEY=HK… HANGAR_SECRET_KEY=… HANGAR_CA_FILE=ca.pem \
#     hmac-request.sh METHOD PATH_AND_QUERY [BODY]
# The query must already be percent-encoded (RFC 3986: only A-Z a-z 0-9 - _ . ~ left as they are).
set -euo pipefail
method=$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')
target=$2
body=${3:-}

path=${target%%\?*}
query=""
if [[ "$target" == *\?* ]]; then query=${target#*\?}; fi
# Canonical query: name=value pairs sorted bytewise, joined by "&".
canonical_query=$(printf '%s' "$query" | tr '&' '\n' | LC_ALL=C sort | paste -sd '&' -)

timestamp=$(date +%s)
nonce=$(openssl rand -hex 12)
body_hash=$(printf '%s' "$body" | openssl dgst -sha256 -hex | sed 's/^.* //')

canonical=$(printf 'HANGAR-HMAC-SHA256\n%s\n%s\n%s\n%s\n%s\n%s' \
  "$timestamp" "$nonce" "$method" "$path" "$canonical_query" "$body_hash")
signature=$(printf '%s' "$canonical" | openssl dgst -sha256 -hmac "$HANGAR_SECRET_KEY" -hex | sed 's/^.* //')

args=(-sS --cacert "$HANGAR_CA_FILE" -X "$method" "$HANGAR_API_URL$target"
  -H "X-Access-Key: $HANGAR_ACCESS_KEY" -H "X-Timestamp: $timestamp" -H "X-Nonce: $nonce" -H "X-Signature: $signature")
if [ -n "$body" ]; then args+=(-H 'Content-Type: application/json' --data-binary "$body"); fi
curl "${args[@]}"
