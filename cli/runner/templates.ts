import path from 'node:path';
import { CRON_SHAPE, cronProblems } from '../../core/cron.js';

/** The init systems `hangar install` writes for. */
export const TEMPLATES = ['systemd', 'upstart', 'initd', 'crond'] as const;
export type Template = (typeof TEMPLATES)[number];

export const DEFAULT_SCHEDULE = '* * * * *';

/** Where a service's files live under a root prefix (`/` unless --root-prefix says otherwise). */
export interface ServicePaths {
  /** The unit or job file of each template. */
  unit: Record<Template, string>;
  env: string;
  manifest: string;
  manifestDir: string;
  pid: string;
  log: string;
}

export function servicePaths(prefix: string, name: string): ServicePaths {
  const at = (...parts: string[]) => path.join(prefix, ...parts);
  return {
    unit: {
      systemd: at('etc/systemd/system', `${name}.service`),
      upstart: at('etc/init', `${name}.conf`),
      initd: at('etc/init.d', name),
      crond: at('etc/cron.d', `hangar-${name}`),
    },
    env: at('etc/hangar', `${name}.env`),
    manifestDir: at('etc/hangar/services'),
    manifest: at('etc/hangar/services', `${name}.json`),
    pid: at('run', `hangar-${name}.pid`),
    log: at('var/log/hangar', `${name}.log`),
  };
}

/** The account a service runs as (`--user`), as the target system's user database has it. */
export interface ServiceUser {
  name: string;
  uid: number;
  gid: number;
  /** Its primary group's name, when the group database names it (upstart's setgid needs a name). */
  group: string | null;
  home: string;
}

/** What a template is rendered from. */
export interface ServiceSpec {
  name: string;
  template: Template;
  /** `Class::method` as given. */
  method: string;
  /** The command line that runs it, absolute: node, bin/hangar.mjs, `run`, the method, its arguments. */
  argv: string[];
  rootdir: string;
  schedule: string;
  paths: ServicePaths;
  /** The account it runs as; null: root. */
  user: ServiceUser | null;
}

const SH_SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** One word for sh: bare when safe, else single-quoted. */
export function shQuote(word: string): string {
  if (word !== '' && SH_SAFE.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** A value systemd must not expand: `%` specifiers and `$` variables escaped. */
function systemdLiteral(text: string): string {
  return text.replace(/%/g, '%%');
}

/**
 * One word of an ExecStart= line (systemd.service(5), "Command lines"): bare when safe, else in
 * double quotes with C escapes; `%` doubled (specifiers) and `$` doubled (variable expansion).
 */
export function systemdQuote(word: string): string {
  if (word === ';') return '\\;'; // a lone semicolon would separate commands
  const escaped = word.replace(/%/g, '%%').replace(/\$/g, '$$$$');
  if (word !== '' && /^[A-Za-z0-9_@+=:,./-]+$/.test(word)) return escaped;
  return `"${escaped.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n').replace(/\t/g, '\\t')}"`;
}

/** A crontab command: `%` means newline to cron unless escaped. */
function cronEscape(command: string): string {
  return command.replace(/%/g, '\\%');
}

/**
 * Every file hangar install writes (unit, job, init script, cron entry, env file) has a comment line
 * starting with this: how install and uninstall tell their own files from an operator's.
 */
export const markerOf = (name: string) => `# hangar service ${name}: `;

/** Whether `text` (a unit file's or env file's) carries hangar's marker for service `name`. */
export function writtenByHangar(text: string, name: string): boolean {
  return text.split('\n').some((line) => line.startsWith(markerOf(name)));
}

const HEADER = (spec: ServiceSpec) =>
  `${markerOf(spec.name).slice(2)}${spec.method} (written by hangar install --template=${spec.template}; remove it with hangar uninstall ${spec.name})`;

function systemdUnit(spec: ServiceSpec): string {
  return `# ${HEADER(spec)}
[Unit]
Description=${systemdLiteral(`hangar: ${spec.method} (${spec.name})`)}
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
${spec.user ? `User=${spec.user.name}\n` : ''}WorkingDirectory=${systemdLiteral(spec.rootdir)}
EnvironmentFile=${systemdLiteral(spec.paths.env)}
ExecStart=${spec.argv.map(systemdQuote).join(' ')}
Restart=on-failure
RestartSec=5s
TimeoutStopSec=30s

[Install]
WantedBy=multi-user.target
`;
}

function sourceEnv(spec: ServiceSpec, indent: string): string {
  return [`cd ${shQuote(spec.rootdir)} || exit 1`, 'set -a', `. ${shQuote(spec.paths.env)}`, 'set +a'].map((l) => indent + l).join('\n');
}

function upstartJob(spec: ServiceSpec): string {
  return `# ${HEADER(spec)}
description "hangar: ${spec.method.replace(/["\\]/g, "'")} (${spec.name})"

start on runlevel [2345]
stop on runlevel [!2345]

respawn
respawn limit 10 5
${spec.user ? `\nsetuid ${spec.user.name}\n${spec.user.group ? `setgid ${spec.user.group}\n` : ''}` : ''}
script
${sourceEnv(spec, '  ')}
  exec ${spec.argv.map(shQuote).join(' ')}
end script
`;
}

/**
 * The init script's command line: as root, or through setpriv (util-linux) as the service's user —
 * it execs in place, so the pid file names the service's own process — with the HOME, USER and
 * LOGNAME a login would give it.
 */
function asUser(spec: ServiceSpec): string[] {
  const user = spec.user;
  if (!user) return spec.argv;
  return [
    'env', `HOME=${user.home}`, `USER=${user.name}`, `LOGNAME=${user.name}`,
    'setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--init-groups', '--', ...spec.argv,
  ];
}

function initScript(spec: ServiceSpec): string {
  return `#!/bin/sh
### BEGIN INIT INFO
# Provides:          ${spec.name}
# Required-Start:    $remote_fs $syslog $network
# Required-Stop:     $remote_fs $syslog $network
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: hangar: ${spec.method.replace(/\n/g, ' ')}
# Description:       Runs hangar run ${spec.method.replace(/\n/g, ' ')} as a service.
### END INIT INFO
# ${HEADER(spec)}

NAME=${shQuote(spec.name)}
PID_FILE=${shQuote(spec.paths.pid)}
LOG_FILE=${shQuote(spec.paths.log)}

is_running() {
  [ -f "$PID_FILE" ] || return 1
  pid=$(cat "$PID_FILE" 2>/dev/null)
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  kill -0 "$pid" 2>/dev/null || return 1
  # An exited process nobody has reaped yet (a zombie) is not running.
  if [ -r "/proc/$pid/stat" ]; then
    [ "$(sed 's/^.*) \\(.\\).*$/\\1/' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  fi
  return 0
}

do_start() {
  if is_running; then
    echo "$NAME is already running (pid $(cat "$PID_FILE"))"
    return 0
  fi
  mkdir -p "$(dirname "$PID_FILE")" "$(dirname "$LOG_FILE")"
  (
${sourceEnv(spec, '    ')}
    exec ${asUser(spec).map(shQuote).join(' ')}
  ) >>"$LOG_FILE" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  echo "started $NAME (pid $!)"
}

do_stop() {
  if ! is_running; then
    rm -f "$PID_FILE"
    echo "$NAME is not running"
    return 0
  fi
  pid=$(cat "$PID_FILE")
  kill -TERM "$pid" 2>/dev/null
  i=0
  while is_running; do
    i=$((i + 1))
    if [ "$i" -ge 300 ]; then
      kill -KILL "$pid" 2>/dev/null
      break
    fi
    sleep 0.1 2>/dev/null || sleep 1
  done
  rm -f "$PID_FILE"
  echo "stopped $NAME"
}

do_status() {
  if is_running; then
    echo "$NAME is running (pid $(cat "$PID_FILE"))"
    return 0
  fi
  if [ -f "$PID_FILE" ]; then
    echo "$NAME is not running (stale pid file $PID_FILE)"
    return 1
  fi
  echo "$NAME is not running"
  return 3
}

case "$1" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  restart|force-reload) do_stop && do_start ;;
  *)
    echo "Usage: $0 {start|stop|status|restart}" >&2
    exit 2
    ;;
esac
`;
}

function cronEntry(spec: ServiceSpec): string {
  const command = [
    `cd ${shQuote(spec.rootdir)}`,
    'set -a',
    `. ${shQuote(spec.paths.env)}`,
    'set +a',
    `exec ${spec.argv.map(shQuote).join(' ')} >>${shQuote(spec.paths.log)} 2>&1`,
  ].join(' && ');
  return `# ${HEADER(spec)}
SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
${spec.schedule} ${spec.user?.name ?? 'root'} ${cronEscape(command)}
`;
}

/** The unit or job file's text and mode. */
export function renderUnit(spec: ServiceSpec): { text: string; mode: number } {
  switch (spec.template) {
    case 'systemd':
      return { text: systemdUnit(spec), mode: 0o644 };
    case 'upstart':
      return { text: upstartJob(spec), mode: 0o644 };
    case 'initd':
      return { text: initScript(spec), mode: 0o755 };
    case 'crond':
      return { text: cronEntry(spec), mode: 0o644 };
  }
}

/**
 * A crontab schedule: five fields or one of the @ macros. Returns it normalised or throws a message
 * naming each field that is out of range: cron skips a line it cannot read (and logs it only to
 * syslog), so a schedule like `61 25 * * *` would never run.
 */
export function checkSchedule(schedule: string): string {
  const { normalised, problems, wrongShape } = cronProblems(schedule);
  if (wrongShape) throw new Error(`--schedule "${schedule}" is not a cron schedule: give ${CRON_SHAPE}`);
  if (problems.length) throw new Error(`--schedule "${schedule}": ${problems.join('; ')}`);
  return normalised;
}
