/**
 * A stand-in for restic on an agent's PATH that IS the real restic, except that it can hold a backup
 * mid-way, so that a test sees a backup while restic is at it (its progress) without timing anything.
 */
import { chmodSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * restic as the agent runs it, held while the file `hold` exists: a backup's output stops after its
 * first status line whose total is the number of bytes `hold` holds (the folder scanned; restic then
 * blocks writing, mid-backup), so that the test sees the run while restic is at it. Everything else
 * is the real restic, as it is.
 */
export function holdingRestic(dir: string, restic: string, hold: string): void {
  writeFileSync(
    path.join(dir, 'restic'),
    `#!/bin/sh
[ "$3" = backup ] && [ -e '${hold}' ] || exec '${restic}' "$@"
PATH="$PATH:/usr/bin:/bin"
export RESTIC_PROGRESS_FPS=60
total=$(cat '${hold}')
code='${dir}/code.'$$
{ '${restic}' "$@"; echo $? > "$code"; } | {
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
