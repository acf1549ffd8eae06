import { expect } from 'chai';
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { hangarCli, runProcess, systemdEnvFile, systemdSplit, TempDirs, unitValue, waitFor, waitForFile } from './support.js';

const PROBE_MJS = `
import { writeFileSync } from 'node:fs';
export class Probe {
  static record(file, ...args) {
    writeFileSync(file, JSON.stringify({ args, env: process.env.PROBE_ENV ?? null, cwd: process.cwd() }));
    return 'recorded';
  }
}
`;

/** Characters that shells, systemd and cron each treat specially. */
const TRICKY_ARG = `it's $HOME 100% "q" \\back`;
const TRICKY_ENV = 'va"l $x `y` \\z 100%';

const mode = (file: string) => statSync(file).mode & 0o777;

/** Alive and not a zombie (nothing reaps orphans in this sandbox). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** The files under a directory, relative, sorted. */
function tree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, entry.name);
      if (entry.isDirectory()) walk(full);
      else out.push(path.relative(dir, full));
    }
  };
  if (existsSync(dir)) walk(dir);
  return out.sort();
}

describe('hangar install / uninstall / services (into a temporary root)', () => {
  const temp = new TempDirs();
  let root: string;
  let app: string;
  let work: string;
  const minimalEnv = { PATH: '/usr/local/bin:/usr/bin:/bin' };

  const install = (template: string, name: string, out: string, extra: string[] = []) =>
    hangarCli([
      'install', `--template=${template}`, name, '--class', 'probe.mjs#Probe::record', '--rootdir', app,
      '--arg', out, '--arg', '42', '--arg', TRICKY_ARG, '--arg', '{"a":[1,2]}',
      '--env', `PROBE_ENV=${TRICKY_ENV}`, '--env', 'OTHER=1', '--root-prefix', root, ...extra,
    ]);

  /** What the probe writes when the installed command line really ran, with its arguments and environment. */
  const expectProbe = (out: string) =>
    expect(JSON.parse(readFileSync(out, 'utf8'))).to.deep.equal({ args: [42, TRICKY_ARG, { a: [1, 2] }], env: TRICKY_ENV, cwd: app });

  const expectEnvFile = (name: string) => {
    const file = path.join(root, 'etc/hangar', `${name}.env`);
    expect(mode(file)).to.equal(0o600);
    expect(systemdEnvFile(readFileSync(file, 'utf8'))).to.deep.equal({ PROBE_ENV: TRICKY_ENV, OTHER: '1' });
    return file;
  };

  before(() => {
    root = temp.make('hangar-root-');
    app = temp.make('hangar-app-');
    work = temp.make('hangar-out-');
    writeFileSync(path.join(app, 'probe.mjs'), PROBE_MJS);
  });
  /** Daemons the init script started: stopped after the suite even when a test failed half-way. */
  const daemons: number[] = [];
  after(() => {
    for (const pid of daemons) if (alive(pid)) process.kill(pid, 'SIGKILL');
    temp.cleanup();
  });

  it('systemd: a unit with restart policy and EnvironmentFile; its ExecStart runs the method', async () => {
    const out = path.join(work, 'systemd.json');
    const res = await install('systemd', 'probe-systemd', out);
    expect(res.stderr).to.equal('');
    expect(res.code).to.equal(0);
    const unitFile = path.join(root, 'etc/systemd/system/probe-systemd.service');
    expect(res.stdout).to.contain(unitFile).and.contain('systemctl start|stop|status|restart probe-systemd');
    expect(mode(unitFile)).to.equal(0o644);
    const unit = readFileSync(unitFile, 'utf8');
    expect(unit).to.contain('[Service]\nType=simple').and.contain('Restart=on-failure').and.contain('WantedBy=multi-user.target');
    const envFile = expectEnvFile('probe-systemd');
    expect(unitValue(unit, 'EnvironmentFile')).to.equal(envFile);
    expect(unitValue(unit, 'WorkingDirectory')).to.equal(app);
    const argv = systemdSplit(unitValue(unit, 'ExecStart'));
    expect(argv.slice(0, 4)).to.deep.equal([process.execPath, path.resolve('bin/hangar.mjs'), 'run', 'probe.mjs#Probe::record']);
    // What systemd does: environment from the file, the working directory, the split command line.
    const env = { ...minimalEnv, ...systemdEnvFile(readFileSync(envFile, 'utf8')) };
    const ran = await runProcess(argv[0]!, argv.slice(1), { env, cwd: unitValue(unit, 'WorkingDirectory') });
    expect(ran.stderr).to.equal('');
    expect(ran.stdout).to.equal('recorded\n');
    expectProbe(out);
  });

  it('upstart: a respawning job whose script sources the env file and runs the method', async () => {
    const out = path.join(work, 'upstart.json');
    const res = await install('upstart', 'probe-upstart', out);
    expect(res.code, res.stderr).to.equal(0);
    const job = readFileSync(path.join(root, 'etc/init/probe-upstart.conf'), 'utf8');
    expect(job).to.contain('start on runlevel [2345]').and.contain('stop on runlevel [!2345]').and.match(/^respawn$/m);
    expectEnvFile('probe-upstart');
    const script = /^script\n([\s\S]*?)^end script$/m.exec(job)![1]!;
    // upstart runs a script block with sh -e.
    const ran = await runProcess('/bin/sh', ['-e', '-c', script], { env: minimalEnv });
    expect(ran.stdout).to.equal('recorded\n');
    expectProbe(out);
  });

  it('initd: an LSB init script (0755) answering start/stop/status/restart; start runs the method', async () => {
    const out = path.join(work, 'initd.json');
    const res = await install('initd', 'probe-initd', out);
    expect(res.code, res.stderr).to.equal(0);
    const script = path.join(root, 'etc/init.d/probe-initd');
    expect(mode(script)).to.equal(0o755);
    const text = readFileSync(script, 'utf8');
    expect(text).to.match(/^#!\/bin\/sh\n### BEGIN INIT INFO\n# Provides: +probe-initd\n/);
    expect(text).to.contain('# Default-Start:     2 3 4 5');
    expectEnvFile('probe-initd');
    const start = await runProcess(script, ['start'], { env: minimalEnv });
    expect(start.code).to.equal(0);
    expect(start.stdout).to.match(/^started probe-initd \(pid \d+\)\n$/);
    await waitForFile(out);
    await waitFor(() => readFileSync(out, 'utf8').length > 0, 'probe output');
    expectProbe(out);
    const usage = await runProcess(script, ['bogus']);
    expect(usage.code).to.equal(2);
    expect(usage.stderr).to.contain('Usage:').and.contain('{start|stop|status|restart}');
  });

  it('crond: a cron.d entry every minute by default (or --schedule); its command runs the method', async () => {
    const out = path.join(work, 'crond.json');
    const res = await install('crond', 'probe-crond', out);
    expect(res.code, res.stderr).to.equal(0);
    const file = path.join(root, 'etc/cron.d/hangar-probe-crond');
    expect(mode(file)).to.equal(0o644);
    expectEnvFile('probe-crond');
    const line = readFileSync(file, 'utf8').split('\n').find((l) => /^[^#A-Z]/.test(l))!;
    const fields = line.split(' ');
    expect(fields.slice(0, 6)).to.deep.equal(['*', '*', '*', '*', '*', 'root']);
    // cron turns an unescaped % into a newline and \% into %, then hands the rest to /bin/sh.
    const command = fields.slice(6).join(' ');
    expect(command.replace(/\\%/g, '')).not.to.contain('%');
    const ran = await runProcess('/bin/sh', ['-c', command.replace(/\\%/g, '%')], { env: minimalEnv });
    expect(ran.code, ran.stderr).to.equal(0);
    expectProbe(out);
    expect(readFileSync(path.join(root, 'var/log/hangar/probe-crond.log'), 'utf8')).to.equal('recorded\n');

    const scheduled = await hangarCli(['install', '--template=crond', 'every-five', '--class', 'Clock::now', '--schedule', '*/5  * * * 1-5', '--root-prefix', root]);
    expect(scheduled.code, scheduled.stderr).to.equal(0);
    expect(readFileSync(path.join(root, 'etc/cron.d/hangar-every-five'), 'utf8')).to.match(/^\*\/5 \* \* \* 1-5 root cd /m);
    const badSchedule = await hangarCli(['install', '--template=crond', 'bad', '--class', 'Clock::now', '--schedule', 'often', '--root-prefix', root]);
    expect(badSchedule.code).to.equal(2);
    expect(badSchedule.stderr).to.contain('--schedule "often" is not a cron schedule');
    const notCron = await hangarCli(['install', '--template=systemd', 'bad', '--class', 'Clock::now', '--schedule', '@daily', '--root-prefix', root]);
    expect(notCron.code).to.equal(2);
    expect(notCron.stderr).to.contain('--schedule applies to --template=crond only');
  });

  it('services --only-names prints the bare names, sorted, one per line; services shows the table', async () => {
    const names = await hangarCli(['services', '--only-names', '--root-prefix', root]);
    expect(names.code).to.equal(0);
    expect(names.stderr).to.equal('');
    expect(names.stdout).to.equal('every-five\nprobe-crond\nprobe-initd\nprobe-systemd\nprobe-upstart\n');
    const table = await hangarCli(['services', '--root-prefix', root]);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).to.match(/^NAME +TEMPLATE +CLASS +SCHEDULE +STATUS$/);
    expect(lines.find((l) => l.startsWith('every-five'))).to.match(/^every-five +crond +Clock::now +\*\/5 \* \* \* 1-5 +scheduled$/);
    expect(lines.find((l) => l.startsWith('probe-systemd'))).to.match(/^probe-systemd +systemd +probe\.mjs#Probe::record +- +unknown$/);
    const json = await hangarCli(['services', '--json', '--root-prefix', root]);
    const upstart = (JSON.parse(json.stdout) as Array<Record<string, unknown>>).find((s) => s.name === 'probe-upstart')!;
    expect(upstart).to.include({ template: 'upstart', method: 'probe.mjs#Probe::record', rootdir: app });
    expect(upstart.env_keys).to.deep.equal(['PROBE_ENV', 'OTHER']);
    expect(JSON.stringify(upstart)).not.to.contain(TRICKY_ENV);
    const empty = await hangarCli(['services', '--only-names', '--root-prefix', temp.make()]);
    expect(empty.stdout).to.equal('');
  });

  it('refuses to overwrite an installed service without --force; --force replaces it', async () => {
    const again = await hangarCli(['install', '--template=systemd', 'probe-systemd', '--class', 'Clock::now', '--root-prefix', root]);
    expect(again.code).to.equal(1);
    expect(again.stderr).to.contain('service probe-systemd is already installed').and.contain('--force');
    const forced = await hangarCli(['install', '--template=crond', 'probe-systemd', '--class', 'Clock::now', '--force', '--root-prefix', root]);
    expect(forced.code, forced.stderr).to.equal(0);
    expect(existsSync(path.join(root, 'etc/systemd/system/probe-systemd.service'))).to.equal(false);
    expect(readFileSync(path.join(root, 'etc/cron.d/hangar-probe-systemd'), 'utf8')).to.contain("run Clock::now --rootdir");
    expect(readFileSync(path.join(root, 'etc/hangar/probe-systemd.env'), 'utf8')).not.to.contain('PROBE_ENV');
  });

  it('refuses to overwrite a unit or env file hangar did not write, with or without --force, and says so; --replace-foreign replaces it', async function () {
    this.timeout(90_000);
    const own = temp.make('hangar-root-');
    const unitFile = path.join(own, 'etc/systemd/system/foreign.service');
    const operators = "[Unit]\nDescription=the operator's own unit\n[Service]\nExecStart=/usr/bin/true\n";
    mkdirSync(path.dirname(unitFile), { recursive: true });
    writeFileSync(unitFile, operators);
    const attempt = (...extra: string[]) => hangarCli(['install', '--template=systemd', 'foreign', '--class', 'Clock::now', '--root-prefix', own, ...extra]);
    for (const extra of [[], ['--force']]) {
      const refused = await attempt(...extra);
      expect(refused.code, refused.stdout).to.equal(1);
      expect(refused.stderr).to.contain(`${unitFile} exists and was not written by hangar (no "# hangar service foreign:" line)`);
      expect(refused.stderr).to.contain('service foreign is not installed by hangar').and.contain('--replace-foreign');
      expect(refused.stderr, 'not "already installed"').not.to.contain('already installed');
      expect(readFileSync(unitFile, 'utf8')).to.equal(operators);
      expect(tree(own)).to.deep.equal(['etc/systemd/system/foreign.service']);
    }
    const replaced = await attempt('--replace-foreign');
    expect(replaced.code, replaced.stderr).to.equal(0);
    expect(replaced.stdout).to.contain(`replaced ${unitFile}, which hangar had not written (--replace-foreign)`);
    expect(readFileSync(unitFile, 'utf8')).to.match(/^# hangar service foreign: Clock::now \(written by hangar install --template=systemd; /);
    // hangar's own files: --force replaces them.
    const again = await attempt('--force');
    expect(again.code, again.stderr).to.equal(0);

    // An env file of the name that hangar did not write is refused the same way.
    const envFile = path.join(own, 'etc/hangar/other.env');
    writeFileSync(envFile, 'SECRET=operator\n');
    const env = await hangarCli(['install', '--template=crond', 'other', '--class', 'Clock::now', '--force', '--root-prefix', own]);
    expect(env.code).to.equal(1);
    expect(env.stderr).to.contain(`${envFile} exists and was not written by hangar`);
    expect(readFileSync(envFile, 'utf8')).to.equal('SECRET=operator\n');

    // A unit hangar installed, replaced by the operator since: --force refuses it, uninstall leaves it.
    writeFileSync(unitFile, operators);
    const edited = await attempt('--force');
    expect(edited.code).to.equal(1);
    expect(edited.stderr).to.contain(`${unitFile} (named by hangar’s manifest, but changed since) exists and was not written by hangar`);
    expect(edited.stderr).to.contain('service foreign is installed by hangar, but not in these files');
    const un = await hangarCli(['uninstall', 'foreign', '--root-prefix', own]);
    expect(un.code, un.stderr).to.equal(0);
    expect(un.stdout).to.contain(`left ${unitFile}: hangar did not write it`);
    expect(readFileSync(unitFile, 'utf8')).to.equal(operators);
    expect(existsSync(path.join(own, 'etc/hangar/foreign.env'))).to.equal(false);
    expect(existsSync(path.join(own, 'etc/hangar/services/foreign.json'))).to.equal(false);
  });

  it('refuses a cron schedule whose fields are out of range, naming each; writes nothing', async function () {
    this.timeout(90_000);
    const own = temp.make('hangar-root-');
    const schedule = (value: string) => hangarCli(['install', '--template=crond', 'ranged', '--class', 'Clock::now', '--schedule', value, '--root-prefix', own]);
    const cases: Array<[string, string]> = [
      ['61 25 * * *', '--schedule "61 25 * * *": minute 61 is out of range (0-59); hour 25 is out of range (0-23)'],
      ['0 0 0 13 8', '--schedule "0 0 0 13 8": day of month 0 is out of range (1-31); month 13 is out of range (1-12); day of week 8 is out of range (0-7)'],
      ['*/0 * * * *', 'minute step /0 is out of range (1-59)'],
      ['50-10 * * * *', 'minute range 50-10 runs backwards'],
      ['0 3 * * mon-fri', 'day of week "mon-fri" is not a cron field'],
      ['0 3 * * 1,60', 'day of week 60 is out of range (0-7)'],
    ];
    for (const [value, message] of cases) {
      const res = await schedule(value);
      expect(res.code, value).to.equal(2);
      expect(res.stderr, value).to.contain(message);
    }
    expect(tree(own), 'nothing written').to.deep.equal([]);
    for (const value of ['0 3 * jan mon', '*/15 0-23/2 1,15 * 0', '59 23 31 12 7', '@daily']) {
      const res = await hangarCli(['install', '--template=crond', 'ranged', '--class', 'Clock::now', '--schedule', value, '--force', '--root-prefix', own]);
      expect(res.code, `${value}: ${res.stderr}`).to.equal(0);
    }
  });

  describe('--user: the service runs as that user', function () {
    this.timeout(60_000);
    const WHO_MJS = `
import { writeFileSync } from 'node:fs';
export class Who {
  static record(file) {
    writeFileSync(file, JSON.stringify({ uid: process.getuid(), gid: process.getgid(), env: process.env.PROBE_ENV ?? null, home: process.env.HOME ?? null }));
    return 'recorded';
  }
}
`;
    const NOBODY = { uid: 65534, gid: 65534 };
    let own: string;
    let whoApp: string;
    let out: string;
    const installAs = (template: string, name: string, file: string, extra: string[] = []) =>
      hangarCli(['install', `--template=${template}`, name, '--class', 'who.mjs#Who::record', '--rootdir', whoApp, '--arg', file, '--env', 'PROBE_ENV=as-user', '--user', 'nobody', '--root-prefix', own, ...extra]);
    const recorded = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as { uid: number; gid: number; env: string | null; home: string | null };

    before(() => {
      own = temp.make('hangar-root-');
      chmodSync(own, 0o755); // as / is: the user reaches its env file under etc/hangar
      whoApp = temp.make('hangar-app-');
      out = temp.make('hangar-out-');
      writeFileSync(path.join(whoApp, 'who.mjs'), WHO_MJS);
      // The user reads the service's code and writes its output.
      chmodSync(whoApp, 0o755);
      chmodSync(out, 0o777);
    });

    it('systemd: User= in the unit, the env file the user’s (0600); its ExecStart as that user runs the method', async () => {
      const file = path.join(out, 'systemd.json');
      const res = await installAs('systemd', 'who-systemd', file);
      expect(res.code, res.stderr).to.equal(0);
      expect(res.stdout).to.contain('installed systemd service who-systemd (who.mjs#Who::record), running as nobody');
      const unit = readFileSync(path.join(own, 'etc/systemd/system/who-systemd.service'), 'utf8');
      expect(unitValue(unit, 'User')).to.equal('nobody');
      const envFile = path.join(own, 'etc/hangar/who-systemd.env');
      expect(mode(envFile)).to.equal(0o600);
      expect({ uid: statSync(envFile).uid, gid: statSync(envFile).gid }).to.deep.equal(NOBODY);
      const argv = systemdSplit(unitValue(unit, 'ExecStart'));
      const ran = await runProcess(argv[0]!, argv.slice(1), { ...NOBODY, env: { ...minimalEnv, HOME: '/tmp', ...systemdEnvFile(readFileSync(envFile, 'utf8')) }, cwd: whoApp });
      expect(ran.stdout, ran.stderr).to.equal('recorded\n');
      expect(recorded(file)).to.include({ uid: 65534, env: 'as-user' });
      const manifest = JSON.parse((await hangarCli(['services', '--json', '--root-prefix', own])).stdout) as Array<{ name: string; user: string }>;
      expect(manifest.find((m) => m.name === 'who-systemd')?.user).to.equal('nobody');
    });

    it('initd: start (as root) runs the method as the user, with its HOME', async () => {
      const file = path.join(out, 'initd.json');
      const res = await installAs('initd', 'who-initd', file);
      expect(res.code, res.stderr).to.equal(0);
      const started = await runProcess(path.join(own, 'etc/init.d/who-initd'), ['start'], { env: minimalEnv });
      expect(started.code, started.stderr).to.equal(0);
      await waitFor(() => existsSync(file) && readFileSync(file, 'utf8').length > 0, 'the method to run');
      expect(recorded(file)).to.deep.equal({ uid: 65534, gid: 65534, env: 'as-user', home: '/nonexistent' });
    });

    it('crond: the entry’s user field; its command, run by cron as that user, reads the env file and appends to the log', async () => {
      const file = path.join(out, 'crond.json');
      const res = await installAs('crond', 'who-crond', file);
      expect(res.code, res.stderr).to.equal(0);
      const line = readFileSync(path.join(own, 'etc/cron.d/hangar-who-crond'), 'utf8').split('\n').find((l) => /^[^#A-Z]/.test(l))!;
      const fields = line.split(' ');
      expect(fields.slice(0, 6)).to.deep.equal(['*', '*', '*', '*', '*', 'nobody']);
      const ran = await runProcess('/bin/sh', ['-c', fields.slice(6).join(' ').replace(/\\%/g, '%')], { ...NOBODY, env: { ...minimalEnv, HOME: '/tmp' } });
      expect(ran.code, ran.stderr).to.equal(0);
      expect(recorded(file)).to.include({ uid: 65534, env: 'as-user' });
      expect(readFileSync(path.join(own, 'var/log/hangar/who-crond.log'), 'utf8')).to.equal('recorded\n');
    });

    it('upstart: setuid and setgid stanzas; the job’s script runs as that user', async () => {
      const file = path.join(out, 'upstart.json');
      const res = await installAs('upstart', 'who-upstart', file);
      expect(res.code, res.stderr).to.equal(0);
      const job = readFileSync(path.join(own, 'etc/init/who-upstart.conf'), 'utf8');
      expect(job).to.match(/^setuid nobody$/m).and.match(/^setgid nogroup$/m);
      const script = /^script\n([\s\S]*?)^end script$/m.exec(job)![1]!;
      const ran = await runProcess('/bin/sh', ['-e', '-c', script], { ...NOBODY, env: { ...minimalEnv, HOME: '/tmp' } });
      expect(ran.stdout, ran.stderr).to.equal('recorded\n');
      expect(recorded(file)).to.include({ uid: 65534, env: 'as-user' });
    });

    it('refuses a user the system does not have, writing nothing', async () => {
      const before = tree(own);
      const res = await hangarCli(['install', '--template=systemd', 'who-nobody', '--class', 'Clock::now', '--user', 'no-such-user-here', '--root-prefix', own]);
      expect(res.code).to.equal(2);
      expect(res.stderr).to.contain('--user no-such-user-here: no such user in this system (getent passwd)');
      expect(tree(own)).to.deep.equal(before);
    });
  });

  it('checks the method before writing anything', async () => {
    const before = tree(root);
    const results = await Promise.all([
      hangarCli(['install', '--template=systemd', 'broken', '--class', 'Nope::x', '--root-prefix', root]),
      hangarCli(['install', '--template=systemd', 'broken', '--class', 'Runner::add', '--arg', '1', '--root-prefix', root]),
      hangarCli(['install', '--template=systemd', 'bad.name', '--class', 'Clock::now', '--root-prefix', root]),
      hangarCli(['install', '--template=launchd', 'broken', '--class', 'Clock::now', '--root-prefix', root]),
    ]);
    expect(results.map((r) => r.code)).to.deep.equal([2, 2, 2, 2]);
    expect(results[0]!.stderr).to.contain('unknown class "Nope"');
    expect(results[1]!.stderr).to.contain('Runner::add(a, b) takes 2 arguments, 1 given');
    expect(results[2]!.stderr).to.contain('service name "bad.name" is not valid');
    expect(results[3]!.stderr).to.contain('Invalid values').and.contain('launchd');
    expect(tree(root)).to.deep.equal(before);
  });

  it('requires root for install and uninstall', async () => {
    const asNobody = { uid: 65534, gid: 65534, env: { HOME: '/tmp' }, cwd: '/tmp' };
    const res = await hangarCli(['install', '--template=crond', 'x', '--class', 'Clock::now', '--root-prefix', root], asNobody);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.equal('hangar install: must be run as root: it writes under /etc and talks to the init system (try: sudo hangar install …)\n');
    const un = await hangarCli(['uninstall', 'probe-crond', '--root-prefix', root], asNobody);
    expect(un.code).to.equal(1);
    expect(un.stderr).to.contain('hangar uninstall: must be run as root');
  });

  it('initd daemon: start, status, restart and stop through the init script; uninstall stops it and removes everything', async () => {
    const beats = path.join(work, 'beats.log');
    const res = await hangarCli(['install', '--template=initd', 'beat', '--class', 'Runner::heartbeat', '--arg', beats, '--arg', '50', '--root-prefix', root]);
    expect(res.code, res.stderr).to.equal(0);
    const script = path.join(root, 'etc/init.d/beat');
    const pidFile = path.join(root, 'run/hangar-beat.pid');
    const stopped = await runProcess(script, ['status']);
    expect(stopped.code).to.equal(3);
    expect((await runProcess(script, ['start'])).code).to.equal(0);
    const pid = Number(readFileSync(pidFile, 'utf8'));
    daemons.push(pid);
    await waitFor(() => existsSync(beats) && readFileSync(beats, 'utf8').split('\n').length > 2, 'heartbeats');
    const status = await runProcess(script, ['status']);
    expect(status.code).to.equal(0);
    expect(status.stdout).to.equal(`beat is running (pid ${pid})\n`);
    const listed = await hangarCli(['services', '--root-prefix', root]);
    expect(listed.stdout).to.match(/^beat +initd +Runner::heartbeat +- +running$/m);
    expect((await runProcess(script, ['restart'])).code).to.equal(0);
    const newPid = Number(readFileSync(pidFile, 'utf8'));
    daemons.push(newPid);
    expect(newPid).not.to.equal(pid);
    expect(alive(pid)).to.equal(false);
    expect(alive(newPid)).to.equal(true);
    const stop = await runProcess(script, ['stop']);
    expect(stop.stdout).to.equal('stopped beat\n');
    expect(alive(newPid)).to.equal(false);
    expect((await runProcess(script, ['status'])).code).to.equal(3);
    const count = readFileSync(beats, 'utf8').length;
    await sleep(200);
    expect(readFileSync(beats, 'utf8').length).to.equal(count);

    expect((await runProcess(script, ['start'])).code).to.equal(0);
    const running = Number(readFileSync(pidFile, 'utf8'));
    daemons.push(running);
    await waitFor(() => alive(running), 'daemon');
    const un = await hangarCli(['uninstall', 'beat', '--root-prefix', root]);
    expect(un.code, un.stderr).to.equal(0);
    expect(un.stdout).to.contain(`ran: ${script} stop`).and.contain('removed initd service beat');
    expect(alive(running)).to.equal(false);
    expect(tree(root).filter((f) => f.includes('beat'))).to.deep.equal(['var/log/hangar/beat.log']);
  });

  it('uninstall removes the unit or job, the env file and the manifest of every template (--purge: the log too)', async () => {
    const names = ['probe-systemd', 'probe-upstart', 'probe-initd', 'probe-crond', 'every-five'];
    const results = await Promise.all(names.map((name) => hangarCli(['uninstall', name, '--root-prefix', root, ...(name === 'probe-crond' ? ['--purge'] : [])])));
    results.forEach((res, i) => expect(res.code, `${names[i]}: ${res.stderr}`).to.equal(0));
    expect(tree(root)).to.deep.equal(['var/log/hangar/beat.log', 'var/log/hangar/probe-initd.log']);
    const listed = await hangarCli(['services', '--only-names', '--root-prefix', root]);
    expect(listed.stdout).to.equal('');
    const unknown = await hangarCli(['uninstall', 'probe-systemd', '--root-prefix', root]);
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.contain('no service named probe-systemd was installed by hangar');
  });
});
