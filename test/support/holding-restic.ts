/**
 * A stand-in for restic on an agent's PATH that IS the real restic, except that it can hold a backup
 * or a restore mid-way, so that a test sees it while restic is at it (its progress) without timing anything.
 */
import { chmodSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * restic as the agent runs it, held while the file `hold` exists: a backup uploads at most 2 MiB/s
 * (so that it writes status lines after its scan: a fast one could end before any names the whole
 * folder's size) and its output stops after its first status line whose total is the number of bytes
 * `hold` holds (the folder scanned; restic then blocks writing, mid-backup); a restore reads at most 1 MiB/s (restic writes as it reads) and is
 * stopped (SIGSTOP, then SIGCONT once `hold` is gone) when the restic process has written at least
 * that many bytes (its /proc/<pid>/io, which the agent reads too: the wrapper execs restic, keeping
 * its process id). Everything else is the real restic, as it is.
 */
export function holdingRestic(dir: string, restic: string, hold: string): void {
  writeFileSync(
    path.join(dir, 'restic'),
    `#!/bin/sh
PATH="$PATH:/usr/bin:/bin"
# restic's command: its first argument that is not an option (nor an option's value: -o s3.region=…, only for targets with a region).
cmd=
skip=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$a" in -o|-r|--repo|--password-file) skip=1 ;; -*) ;; *) cmd=$a; break ;; esac
done
if [ "$cmd" = restore ] && [ -e '${hold}' ]; then
  pid=$$
  least=$(cat '${hold}')
  (
    while [ -e '${hold}' ]; do
      written=$(sed -n 's/^wchar: //p' /proc/$pid/io 2>/dev/null)
      [ -n "$written" ] || exit 0
      if [ "$written" -ge "$least" ]; then
        kill -STOP $pid
        while [ -e '${hold}' ]; do sleep 0.1; done
        kill -CONT $pid
        exit 0
      fi
      sleep 0.05
    done
  ) >/dev/null 2>&1 </dev/null &
  exec '${restic}' "$@" --limit-download 1024
fi
[ "$cmd" = backup ] && [ -e '${hold}' ] || exec '${restic}' "$@"
export RESTIC_PROGRESS_FPS=60
total=$(cat '${hold}')
code='${dir}/code.'$$
{ '${restic}' "$@" --limit-upload 2048; echo $? > "$code"; } | {
  held=
  while IFS= read -r line; do
    printf '%s\\n' "$line"
    case "$held$line" in
      *'"message_type":"status"'*'"total_bytes":'"$total"[,}]*) held=1; while [ -e '${hold}' ]; do sleep 0.1; done ;;
    esac
  done
}
read status < "$code"; rm -f "$code"; exit "$status"
`,
  );
  chmodSync(path.join(dir, 'restic'), 0o755);
}
