import { spawnSync } from 'node:child_process';
import { accessSync, chmodSync, chownSync, constants, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fromRoot } from '../../core/paths.js';
import { versionInfo } from '../../core/version.js';
import { renderEnvFile } from './envfile.js';
import { failure, usageError } from './errors.js';
import { DEFAULT_SCHEDULE, markerOf, renderUnit, servicePaths, TEMPLATES, writtenByHangar, type ServicePaths, type ServiceSpec, type ServiceUser, type Template } from './templates.js';

/** bin/hangar.mjs of this installation: what installed command lines run. */
export const HANGAR_BIN = fromRoot('bin', 'hangar.mjs');

/** What `hangar install` records in `<prefix>/etc/hangar/services/<name>.json` (no secret values). */
export interface Manifest {
  name: string;
  template: Template;
  method: string;
  args: string[];
  rootdir: string;
  bootstrap: string | null;
  schedule: string | null;
  env_file: string;
  env_keys: string[];
  unit_file: string;
  command: string[];
  /** The account it runs as (`--user`); null: root. Absent in manifests of older versions. */
  user?: string | null;
  installed_at: string;
  hangar_version: string;
}

export interface InstallRequest {
  name: string;
  template: Template;
  method: string;
  args: string[];
  env: Record<string, string>;
  rootdir: string;
  bootstrap: string | null;
  schedule: string | null;
  force: boolean;
  /** Also replace unit and env files that hangar did not write (no marker line). */
  replaceForeign: boolean;
  user: ServiceUser | null;
  rootPrefix: string;
}

/** Notices for the operator (what was done to the init system, or why not). */
export type Say = (line: string) => void;

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

export function checkName(name: string): void {
  if (!NAME.test(name)) {
    throw usageError(`service name "${name}" is not valid: use letters, digits, - and _ (up to 64, starting with a letter or digit; no dots, cron ignores such files)`);
  }
}

export function checkTemplate(template: string): Template {
  if (!(TEMPLATES as readonly string[]).includes(template)) throw usageError(`--template must be one of ${TEMPLATES.join(', ')} (got "${template}")`);
  return template as Template;
}

/** install and uninstall change the system: refuse unless root. */
export function requireRoot(command: string): void {
  const uid = typeof process.getuid === 'function' ? process.getuid() : 0;
  if (uid !== 0) {
    throw failure(`must be run as root: it writes under /etc and talks to the init system (try: sudo hangar ${command} …)`);
  }
}

function writeAtomic(file: string, text: string, mode: number, owner: ServiceUser | null = null): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
  const tmp = `${file}.hangar-tmp-${process.pid}`;
  writeFileSync(tmp, text, { mode });
  chmodSync(tmp, mode);
  if (owner) chownSync(tmp, owner.uid, owner.gid);
  renameSync(tmp, file);
}

const USER_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$/;

/** One `name:x:uid:gid:gecos:home:shell` line of a passwd database for `name`, or null. */
function passwdEntry(name: string, rootPrefix: string): string[] | null {
  const file = path.join(rootPrefix, 'etc/passwd');
  // An image prepared under --root-prefix has its own users; otherwise this system's (NSS: LDAP too).
  const text =
    rootPrefix !== '/' && existsSync(file)
      ? readFileSync(file, 'utf8')
      : (spawnSync('getent', ['passwd', name], { encoding: 'utf8', timeout: 10_000 }).stdout ?? '');
  const line = text.split('\n').find((l) => l.split(':')[0] === name);
  return line ? line.split(':') : null;
}

function groupName(gid: number, rootPrefix: string): string | null {
  const file = path.join(rootPrefix, 'etc/group');
  const text =
    rootPrefix !== '/' && existsSync(file) ? readFileSync(file, 'utf8') : (spawnSync('getent', ['group', String(gid)], { encoding: 'utf8', timeout: 10_000 }).stdout ?? '');
  return text.split('\n').find((l) => l.split(':')[2] === String(gid))?.split(':')[0] ?? null;
}

/** `--user NAME`: the account as the target system has it, or a usage error naming what is wrong. */
export function lookupUser(name: string, rootPrefix: string): ServiceUser {
  if (!USER_NAME.test(name)) throw usageError(`--user "${name}" is not a user name`);
  const entry = passwdEntry(name, rootPrefix);
  if (!entry || entry.length < 6) {
    const where = rootPrefix !== '/' && existsSync(path.join(rootPrefix, 'etc/passwd')) ? path.join(rootPrefix, 'etc/passwd') : 'this system (getent passwd)';
    throw usageError(`--user ${name}: no such user in ${where}; create it first (useradd --system ${name})`);
  }
  const uid = Number(entry[2]);
  const gid = Number(entry[3]);
  return { name, uid, gid, group: groupName(gid, rootPrefix), home: entry[5] || '/' };
}

/** Whether `file` exists and hangar install wrote it for service `name` (its marker line). */
function isOurs(file: string, name: string): boolean {
  try {
    return writtenByHangar(readFileSync(file, 'utf8'), name);
  } catch {
    return false;
  }
}

function which(command: string): string | null {
  for (const dir of (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':')) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

/** systemd is the running init system (sd_booted()), not merely installed. */
function systemdRunning(): boolean {
  return existsSync('/run/systemd/system') && which('systemctl') !== null;
}

function tool(say: Say, command: string, args: string[]): boolean {
  const res = spawnSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
  if (res.status === 0) {
    say(`ran: ${command} ${args.join(' ')}`);
    return true;
  }
  const why = (res.stderr || res.stdout || res.error?.message || `exit ${res.status}`).trim().split('\n')[0];
  say(`warning: ${command} ${args.join(' ')} failed: ${why}`);
  return false;
}

export function readManifest(paths: ServicePaths): Manifest | null {
  if (!existsSync(paths.manifest)) return null;
  try {
    return JSON.parse(readFileSync(paths.manifest, 'utf8')) as Manifest;
  } catch (err) {
    throw failure(`cannot read ${paths.manifest}: ${(err as Error).message}`);
  }
}

export function commandLine(req: Pick<InstallRequest, 'method' | 'args' | 'rootdir' | 'bootstrap'>): string[] {
  return [
    process.execPath,
    HANGAR_BIN,
    'run',
    req.method,
    ...req.args.map((a) => `--arg=${a}`),
    '--rootdir',
    req.rootdir,
    ...(req.bootstrap ? ['--bootstrap', req.bootstrap] : []),
  ];
}

const CONTROL: Record<Template, (name: string, paths: ServicePaths, schedule: string) => string> = {
  systemd: (name) => `control it with: systemctl start|stop|status|restart ${name}`,
  upstart: (name) => `control it with: initctl start|stop|status|restart ${name} (or service ${name} …)`,
  initd: (name, paths) => `control it with: service ${name} start|stop|status|restart (or ${paths.unit.initd} start|stop|status|restart)`,
  crond: (_name, paths, schedule) => `cron runs it on the schedule "${schedule}"; its output is appended to ${paths.log}`,
};

export function installService(req: InstallRequest, say: Say): Manifest {
  const paths = servicePaths(req.rootPrefix, req.name);
  const unitFile = paths.unit[req.template];
  const previous = readManifest(paths);
  // What is in the way: the files this install writes, and the previous install's unit (another template's).
  const inTheWay = [...new Set([unitFile, paths.env, ...(previous ? [previous.unit_file] : [])])].filter((f) => existsSync(f));
  const foreign = inTheWay.filter((f) => !isOurs(f, req.name));
  if (foreign.length && !req.replaceForeign) {
    const what = foreign.map((f) => `${f}${f === previous?.unit_file ? ' (named by hangar’s manifest, but changed since)' : ''}`).join(' and ');
    throw failure(
      `${what} ${foreign.length === 1 ? 'exists and was' : 'exist and were'} not written by hangar (no "${markerOf(req.name).trim()}" line): ` +
        `hangar will not overwrite ${foreign.length === 1 ? 'it' : 'them'}${previous ? ` (service ${req.name} is installed by hangar, but not in these files)` : ` (service ${req.name} is not installed by hangar)`}; ` +
        `choose another name, move ${foreign.length === 1 ? 'it' : 'them'} away, or add --replace-foreign to replace ${foreign.length === 1 ? 'it' : 'them'}`,
    );
  }
  const existing = previous ? previous.unit_file : inTheWay[0];
  if (existing && !req.force && !req.replaceForeign) {
    throw failure(
      `service ${req.name} is already installed (${existing}); add --force to replace it, or remove it first with hangar uninstall ${req.name}`,
    );
  }
  if (previous) uninstallService(req.name, req.rootPrefix, false, () => undefined, { replaceForeign: req.replaceForeign });
  const schedule = req.template === 'crond' ? (req.schedule ?? DEFAULT_SCHEDULE) : null;
  const argv = commandLine(req);
  const spec: ServiceSpec = { name: req.name, template: req.template, method: req.method, argv, rootdir: req.rootdir, schedule: schedule ?? '', paths, user: req.user };
  const unit = renderUnit(spec);
  // The service's user reads its own env file (cron, upstart's setuid and setpriv source it as that user).
  writeAtomic(paths.env, renderEnvFile(req.name, req.env), 0o600, req.user);
  if (req.template === 'initd' || req.template === 'crond') mkdirSync(path.dirname(paths.log), { recursive: true, mode: 0o755 });
  // A cron job appends to its log as its user: the file is the user's.
  if (req.template === 'crond' && req.user) {
    if (!existsSync(paths.log)) writeFileSync(paths.log, '', { mode: 0o640 });
    chownSync(paths.log, req.user.uid, req.user.gid);
  }
  writeAtomic(unitFile, unit.text, unit.mode);
  const manifest: Manifest = {
    name: req.name,
    template: req.template,
    method: req.method,
    args: req.args,
    rootdir: req.rootdir,
    bootstrap: req.bootstrap,
    schedule,
    env_file: paths.env,
    env_keys: Object.keys(req.env),
    unit_file: unitFile,
    command: argv,
    user: req.user?.name ?? null,
    installed_at: new Date().toISOString(),
    hangar_version: versionInfo.version,
  };
  writeAtomic(paths.manifest, `${JSON.stringify(manifest, null, 2)}\n`, 0o644);
  say(`installed ${req.template} service ${req.name} (${req.method})${req.user ? `, running as ${req.user.name}` : ''}`);
  for (const f of foreign) say(`  replaced ${f}, which hangar had not written (--replace-foreign)`);
  say(`  ${unitFile}`);
  say(`  ${paths.env} (mode 0600${req.user ? `, owned by ${req.user.name}` : ''}, ${Object.keys(req.env).length} variable${Object.keys(req.env).length === 1 ? '' : 's'})`);
  if (req.rootPrefix === '/') enableService(req.template, req.name, say);
  say(CONTROL[req.template](req.name, paths, schedule ?? ''));
  return manifest;
}

function enableService(template: Template, name: string, say: Say): void {
  switch (template) {
    case 'systemd':
      if (systemdRunning()) {
        if (tool(say, 'systemctl', ['daemon-reload'])) tool(say, 'systemctl', ['enable', `${name}.service`]);
      } else say(`note: systemd is not running here; once it is: systemctl daemon-reload && systemctl enable ${name}`);
      return;
    case 'upstart':
      if (which('initctl')) tool(say, 'initctl', ['reload-configuration']);
      else say('note: initctl not found; upstart reads /etc/init when it starts');
      return;
    case 'initd':
      if (which('update-rc.d')) tool(say, 'update-rc.d', [name, 'defaults']);
      else if (which('chkconfig')) tool(say, 'chkconfig', ['--add', name]);
      else say(`note: neither update-rc.d nor chkconfig found; link /etc/init.d/${name} into the runlevel directories yourself to start it at boot`);
      return;
    case 'crond':
      return;
  }
}

/** Stops (where possible) and removes a service's unit or job, env file and manifest. Returns what was removed. */
export function uninstallService(name: string, rootPrefix: string, purge: boolean, say: Say, options: { replaceForeign?: boolean } = {}): string[] {
  const paths = servicePaths(rootPrefix, name);
  const manifest = readManifest(paths);
  if (!manifest) {
    throw failure(`no service named ${name} was installed by hangar (no ${paths.manifest}); hangar services lists them`);
  }
  const system = rootPrefix === '/';
  switch (manifest.template) {
    case 'systemd':
      if (system && systemdRunning()) tool(say, 'systemctl', ['disable', '--now', `${name}.service`]);
      break;
    case 'upstart':
      if (system && which('initctl')) tool(say, 'initctl', ['stop', name]);
      break;
    case 'initd':
      if (existsSync(manifest.unit_file)) {
        const res = spawnSync(manifest.unit_file, ['stop'], { encoding: 'utf8', timeout: 60_000 });
        say(res.status === 0 ? `ran: ${manifest.unit_file} stop` : `warning: ${manifest.unit_file} stop failed: ${(res.stderr || res.stdout || '').trim()}`);
      }
      if (system && which('update-rc.d')) tool(say, 'update-rc.d', ['-f', name, 'remove']);
      else if (system && which('chkconfig')) tool(say, 'chkconfig', ['--del', name]);
      break;
    case 'crond':
      break;
  }
  const removed: string[] = [];
  // The unit and env file only if they are still hangar's: one an operator put in their place stays.
  const marked = [manifest.unit_file, manifest.env_file || paths.env].filter((file) => {
    if (!existsSync(file) || options.replaceForeign || isOurs(file, name)) return true;
    say(`left ${file}: hangar did not write it (no "${markerOf(name).trim()}" line)`);
    return false;
  });
  const files = [...marked, paths.pid, paths.manifest, ...(purge ? [paths.log] : [])];
  for (const file of files) {
    if (existsSync(file)) {
      rmSync(file, { force: true });
      removed.push(file);
    }
  }
  if (system && manifest.template === 'systemd' && systemdRunning()) tool(say, 'systemctl', ['daemon-reload']);
  say(`removed ${manifest.template} service ${name}`);
  for (const file of removed) say(`  ${file}`);
  return removed;
}

export interface ServiceStatus extends Manifest {
  status: string;
}

function statusOf(manifest: Manifest, rootPrefix: string): string {
  if (!existsSync(manifest.unit_file)) return 'missing';
  const system = rootPrefix === '/';
  switch (manifest.template) {
    case 'systemd': {
      if (!system || !systemdRunning()) return 'unknown';
      const res = spawnSync('systemctl', ['is-active', `${manifest.name}.service`], { encoding: 'utf8', timeout: 10_000 });
      return res.stdout.trim() || 'unknown';
    }
    case 'upstart': {
      if (!system || !which('initctl')) return 'unknown';
      const res = spawnSync('initctl', ['status', manifest.name], { encoding: 'utf8', timeout: 10_000 });
      if (/start\/running/.test(res.stdout)) return 'running';
      if (/stop\/waiting/.test(res.stdout)) return 'stopped';
      return 'unknown';
    }
    case 'initd': {
      const res = spawnSync(manifest.unit_file, ['status'], { encoding: 'utf8', timeout: 10_000 });
      return res.status === 0 ? 'running' : res.status === 3 ? 'stopped' : res.status === 1 ? 'dead' : 'unknown';
    }
    case 'crond':
      return 'scheduled';
  }
}

/** Every service hangar installed under the prefix, by name, with its status from the init system. */
export function listServices(rootPrefix: string, withStatus = true): ServiceStatus[] {
  const dir = servicePaths(rootPrefix, 'x').manifestDir;
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => {
      const manifest = readManifest(servicePaths(rootPrefix, f.slice(0, -5)))!;
      return { ...manifest, status: withStatus ? statusOf(manifest, rootPrefix) : '' };
    });
}
