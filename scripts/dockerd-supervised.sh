#!/usr/bin/env bash
# Runs dockerd the way systemd's docker.service does on a real machine (Restart=always): when it
# exits without being asked to, its log is kept and it starts again. scripts/services.sh starts
# this in its own session, so nothing that signals the test run's process group reaches dockerd.
#
#   bash scripts/dockerd-supervised.sh      (services.sh runs it in the background)
#
# Logs: /var/log/hangar-dockerd.log (the running dockerd), and for each exit that was not asked
# for, /var/log/hangar-dockerd-exits.log: when, how, and the lines that say why (a Go "fatal
# error"/"panic" with its first goroutine, or its last warnings and errors). .ci/run prints what
# it gained after the tests. SIGTERM or SIGINT to this script stops dockerd and the script.
set -u

LOG=/var/log/hangar-dockerd.log
EXITS=/var/log/hangar-dockerd-exits.log
stopping=0
child=0

stop() {
  stopping=1
  [ "$child" -gt 0 ] && kill -TERM "$child" 2>/dev/null
}
trap stop TERM INT

# The lines of a dockerd log that say why it ended.
why() {
  if grep -qE '^(fatal error|panic):' "$1"; then
    grep -m 1 -A 40 -E '^(fatal error|panic):' "$1"
  else
    grep -v 'level=info' "$1" | tail -n 30
  fi
}

restarts=0
quick=0 # exits in a row within 10 s of starting: 5 of them and it gives up (systemd's start limit)
while :; do
  started=$(date +%s)
  dockerd >"$LOG" 2>&1 </dev/null &
  child=$!
  wait "$child"
  code=$?
  # A trapped signal interrupts `wait`; wait again for dockerd itself to end.
  while kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done
  [ "$stopping" = 1 ] && exit 0
  restarts=$((restarts + 1))
  ran=$(($(date +%s) - started))
  if [ "$ran" -lt 10 ]; then quick=$((quick + 1)); else quick=0; fi
  {
    echo "=== $(date -u +%FT%TZ): dockerd (pid $child) exited with status $code after $ran s ==="
    why "$LOG"
    [ "$quick" -ge 5 ] && echo "=== it exited within 10 s of starting 5 times in a row: not started again ==="
  } >>"$EXITS"
  cp "$LOG" "$LOG.exit-$restarts"
  [ "$quick" -ge 5 ] && exit 1
  sleep 1
done
