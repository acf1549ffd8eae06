#!/usr/bin/env bash
# The egress counter: counts the packets this host forwards out of any interface that is not a
# docker bridge (the uplink) to a private or special-purpose IPv4 range — what a lab machine or a
# test's container would send off the machine if its network were not sealed (lab/seal.ts).
# .ci/run starts it before the tests and fails when `report` finds a packet.
#
#   bash scripts/egress-counter.sh start    install the counter (or zero it when installed)
#   bash scripts/egress-counter.sh report   print the counts; exit status 1 when a leak was counted
#   bash scripts/egress-counter.sh stop     remove it
#
# It lives in the mangle table's POSTROUTING, which sees a forwarded packet only after the filter
# table (docker's rules and the seal's) let it through, and before any address translation, so a
# packet the seal refuses is not counted and a counted one carries its sender's own address.
# Locally generated packets (the host's own traffic) are not counted. DNS to the host's resolvers
# (/etc/resolv.conf), the one exception the seal allows, is counted apart and not a failure.
# Needs root and iptables. HANGAR_EGRESS_CHAIN names the chain (default HANGAR-EGRESS).
set -euo pipefail

CHAIN=${HANGAR_EGRESS_CHAIN:-HANGAR-EGRESS}
RANGES=(10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 169.254.0.0/16)
DOCKER_BRIDGES=(docker0 docker_gwbridge br-+ lo)
ipt() { iptables -w 10 -t mangle "$@"; }

resolvers() {
  awk '$1 == "nameserver" && $2 ~ /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/ && $2 !~ /^127\./ { print $2 }' /etc/resolv.conf 2>/dev/null | sort -u
}

start() {
  if ipt -S "$CHAIN" >/dev/null 2>&1; then
    ipt -Z "$CHAIN"
    echo "egress counter: zeroed ($CHAIN)"
    return
  fi
  ipt -N "$CHAIN"
  for bridge in "${DOCKER_BRIDGES[@]}"; do ipt -A "$CHAIN" -o "$bridge" -j RETURN; done
  for ip in $(resolvers); do
    for proto in udp tcp; do ipt -A "$CHAIN" -d "$ip/32" -p "$proto" --dport 53 -m comment --comment "dns $ip" -j RETURN; done
  done
  for range in "${RANGES[@]}"; do ipt -A "$CHAIN" -d "$range" -m comment --comment "leak $range" -j RETURN; done
  ipt -I POSTROUTING -m addrtype ! --src-type LOCAL -j "$CHAIN"
  echo "egress counter: counting forwarded packets to ${RANGES[*]} out of non-docker interfaces ($CHAIN)"
}

# Prints "<kind> <destination> <packets>" for each counting rule (kind: leak or dns).
counts() {
  ipt -L "$CHAIN" -n -v -x | awk '{ if (match($0, /\/\* (leak|dns) [^ ]+ \*\//)) { split(substr($0, RSTART + 3, RLENGTH - 6), c, " "); print c[1], c[2], $1 } }'
}

report() {
  if ! ipt -S "$CHAIN" >/dev/null 2>&1; then
    echo "egress counter: not installed (bash scripts/egress-counter.sh start)"
    return 1
  fi
  local leaked=0 dns=0 kind dest packets details=()
  while read -r kind dest packets; do
    if [ "$kind" = leak ]; then
      leaked=$((leaked + packets))
      [ "$packets" -gt 0 ] && details+=("$dest: $packets")
    else
      dns=$((dns + packets))
    fi
  done < <(counts)
  if [ "$leaked" -gt 0 ]; then
    echo "egress counter: $leaked packet(s) forwarded off this machine to private ranges (${details[*]}); DNS to the host's resolvers: $dns"
    return 1
  fi
  echo "egress counter: 0 packets forwarded off this machine to private ranges; DNS to the host's resolvers: $dns"
}

stop() {
  while ipt -D POSTROUTING -m addrtype ! --src-type LOCAL -j "$CHAIN" 2>/dev/null; do :; done
  if ipt -S "$CHAIN" >/dev/null 2>&1; then ipt -F "$CHAIN"; ipt -X "$CHAIN"; fi
  echo "egress counter: removed ($CHAIN)"
}

case "${1:-}" in
  start) start ;;
  report) report ;;
  stop) stop ;;
  *) echo "usage: $0 start|report|stop" >&2; exit 2 ;;
esac
