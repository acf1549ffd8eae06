import { expect } from 'chai';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
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
