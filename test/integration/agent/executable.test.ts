import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';

const DIST = path.resolve('dist/agent');
const built = () => existsSync(path.join(DIST, 'manifest.json')) && existsSync(path.join(DIST, 'hangar-agent-linux-amd64'));

/** The running watchdogs of the agent of `dataDir` (`hangar-agent --update-watchdog <dataDir> <id>`); an ended one has no command line. */
function watchdogsOf(dataDir: string): string[] {
  return readdirSync('/proc').filter((pid) => {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      return /^\d+$/.test(pid) && args.includes('--update-watchdog') && args.includes(dataDir);
    } catch {
      return false;
    }
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describeEachDialect('agent executable (npm run build)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let child: ChildProcess | undefined;
  const dirs: string[] = [];
  before(async function () {
    requireService(this, built(), 'the agent executables (run npm run build)');
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal'],
      overrides: { nodes: { heartbeat_interval_seconds: 1 }, tasks: { poll_wait_seconds: 5 } },
    });
    admin = await bootstrapAdmin(t);
  });
  after(async () => {
    child?.kill('SIGKILL');
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    await t?.stop();
  });

  it('is served per architecture with its version and checksum in the headers', async function () {
    this.timeout(90_000); // three downloads of ~100 MB per architecture
    const manifest = JSON.parse(readFileSync(path.join(DIST, 'manifest.json'), 'utf8'));
    for (const arch of Object.keys(manifest.executables)) {
      const res = await httpRequest(`${t.url}/v1/agent/binary?arch=${arch}`, { ca: t.caPem });
      expect(res.status, arch).to.equal(200);
      expect(res.headers['x-hangar-agent-version']).to.equal(manifest.version);
      expect(res.headers['x-checksum-sha256']).to.equal(createHash('sha256').update(res.raw).digest('hex'));
      expect(res.raw.length).to.equal(manifest.executables[arch].size);
      expect(res.headers['content-encoding'], 'not compressed unless asked').to.equal(undefined);
      // Asked for brotli (as the agent asks when it updates itself): a third of the bytes on the
      // wire, the same executable once decoded, the same checksum.
      const packed = await httpRequest(`${t.url}/v1/agent/binary?arch=${arch}`, { ca: t.caPem, headers: { 'accept-encoding': 'gzip, br' } });
      expect(packed.status, arch).to.equal(200);
      expect(packed.headers['content-encoding']).to.equal('br');
      expect(Number(packed.headers['content-length'])).to.equal(manifest.executables[arch].compressed.size).and.to.be.below(manifest.executables[arch].size / 2);
      expect(packed.headers['x-checksum-sha256']).to.equal(manifest.executables[arch].sha256);
      expect(createHash('sha256').update(packed.raw).digest('hex')).to.equal(manifest.executables[arch].sha256);
    }
    const refused = await httpRequest(`${t.url}/v1/agent/binary?arch=amd64`, { ca: t.caPem, headers: { 'accept-encoding': 'br;q=0, gzip' } });
    expect(refused.headers['content-encoding'], 'br;q=0 refuses brotli').to.equal(undefined);
    expect(refused.raw.length).to.equal(manifest.executables.amd64.size);
    expect(Object.keys(manifest.executables)).to.include('amd64');
    const bad = await httpRequest(`${t.url}/v1/agent/binary?arch=sparc`, { ca: t.caPem });
    expect(bad.status).to.equal(400);
  });

  it('is an arm64 ELF for arm64 and runs here for amd64', function () {
    const manifest = JSON.parse(readFileSync(path.join(DIST, 'manifest.json'), 'utf8'));
    if (manifest.executables.arm64) {
      const head = readFileSync(path.join(DIST, 'hangar-agent-linux-arm64')).subarray(0, 20);
      expect(head.subarray(0, 4).toString('latin1')).to.equal('\x7fELF');
      expect(head.readUInt16LE(18), 'e_machine is AArch64').to.equal(183);
    }
    const res = spawnSync(path.join(DIST, 'hangar-agent-linux-amd64'), ['--version'], { encoding: 'utf8' });
    expect(res.status).to.equal(0);
    expect(res.stdout.trim()).to.equal(manifest.version);
  });

  it('joins, turns the node ready, and updates itself on update-agent (the previous executable kept; the update confirmed by the new one’s heartbeat)', async function () {
    this.timeout(60_000);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-exe-'));
    dirs.push(dir);
    // A copy, because the update replaces the executable it runs from.
    const exe = path.join(dir, 'hangar-agent');
    copyFileSync(path.join(DIST, 'hangar-agent-linux-amd64'), exe);
    const token = await t.request('POST', '/v1/nodes/token', { headers: bearer(admin.token), body: {} });
    child = spawn(exe, ['--join', '--token', token.json.data.token, '--api', t.url, '--data-dir', path.join(dir, 'data')], { stdio: 'ignore' });
    const node = await until('the node to be ready', async () => {
      const list = await t.request('GET', '/v1/nodes', { headers: bearer(admin.token) });
      return list.json.data.find((n: { status: string }) => n.status === 'ready');
    });
    expect(node.architecture).to.equal('amd64');
    const exited = new Promise<number | null>((resolve) => child!.once('exit', resolve));
    const queued = await t.request('POST', `/v1/nodes/${node.id}/update-agent`, { headers: bearer(admin.token), body: { grace_seconds: 15 } });
    expect(queued.status).to.equal(202);
    expect(await exited, 'the agent exits 75 so its supervisor starts the new executable').to.equal(75);
    expect(existsSync(`${exe}.previous`), 'the previous executable is kept beside the new one').to.equal(true);
    expect(existsSync(path.join(dir, 'data', 'update-pending.json')), 'the update waits for the new agent to get through').to.equal(true);
    const task = await t.hangar.services.tasks.get(queued.json.data.task_id);
    expect(task?.status).to.equal('completed');
    const manifest = JSON.parse(readFileSync(path.join(DIST, 'manifest.json'), 'utf8'));
    expect(task?.result).to.deep.include({ updated_to: manifest.version, sha256: manifest.executables.amd64.sha256 });
    expect(createHash('sha256').update(readFileSync(exe)).digest('hex')).to.equal(manifest.executables.amd64.sha256);
    // The replaced executable resumes with the stored identity.
    child = spawn(exe, ['--data-dir', path.join(dir, 'data')], { stdio: 'ignore' });
    const again = await until('the restarted agent to heartbeat', async () => {
      const res = await t.request('GET', `/v1/nodes/${node.id}`, { headers: bearer(admin.token) });
      return res.json.data.last_heartbeat_at > node.last_heartbeat_at && res.json.data.status === 'ready' ? res.json.data : null;
    });
    expect(again.id).to.equal(node.id);
    // Its first answered heartbeat confirmed the update: the watchdog finds nothing to put back.
    await until('the update confirmed', async () => !existsSync(path.join(dir, 'data', 'update-pending.json')));
    // The watchdog waits out the grace period, finds the update confirmed and ends: what it left is what stays.
    expect(watchdogsOf(path.join(dir, 'data')), 'the update’s watchdog runs').to.have.length(1);
    await until('the watchdog to end after the grace period', async () => watchdogsOf(path.join(dir, 'data')).length === 0, 30_000);
    expect(createHash('sha256').update(readFileSync(exe)).digest('hex'), 'the new executable stays').to.equal(manifest.executables.amd64.sha256);
    expect(existsSync(path.join(dir, 'data', 'update-rolled-back.json'))).to.equal(false);
  });

  it('puts the previous executable back by itself when the new one does not reach the control plane within grace_seconds (under its supervisor loop)', async function () {
    this.timeout(90_000);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-exe-'));
    dirs.push(dir);
    const exe = path.join(dir, 'hangar-agent');
    copyFileSync(path.join(DIST, 'hangar-agent-linux-amd64'), exe);
    const data = path.join(dir, 'data');
    // A control plane serving a broken "agent": an executable that exits at once (sleep, refusing the agent's options).
    const brokenDir = path.join(dir, 'broken');
    mkdirSync(brokenDir);
    copyFileSync('/usr/bin/sleep', path.join(brokenDir, 'hangar-agent-linux-amd64'));
    const brokenSha = createHash('sha256').update(readFileSync(path.join(brokenDir, 'hangar-agent-linux-amd64'))).digest('hex');
    const size = readFileSync(path.join(brokenDir, 'hangar-agent-linux-amd64')).length;
    writeFileSync(path.join(brokenDir, 'manifest.json'), JSON.stringify({ version: '99.0.0', node_version: process.versions.node, built_at: new Date().toISOString(), executables: { amd64: { file: 'hangar-agent-linux-amd64', sha256: brokenSha, size } } }));
    const t2 = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal'], overrides: { nodes: { heartbeat_interval_seconds: 1 }, tasks: { poll_wait_seconds: 5 }, system: { agent_binary_dir: brokenDir } } });
    let supervisor: ChildProcess | undefined;
    try {
      const admin2 = await bootstrapAdmin(t2);
      const token = await t2.request('POST', '/v1/nodes/token', { headers: bearer(admin2.token), body: {} });
      const joining = spawn(exe, ['--join', '--token', token.json.data.token, '--api', t2.url, '--data-dir', data], { stdio: 'ignore' });
      const node = await until('the node to be ready', async () => (await t2.request('GET', '/v1/nodes', { headers: bearer(admin2.token) })).json.data.find((n: { status: string }) => n.status === 'ready'));
      const stopped = new Promise((resolve) => joining.once('exit', resolve));
      joining.kill('SIGTERM');
      await stopped;
      // The supervisor of machines without systemd (plugins/provisioning/remote.ts): restarts the agent unless it exits 0.
      supervisor = spawn('sh', ['-c', `while :; do "${exe}" --data-dir "${data}"; [ $? -eq 0 ] && exit 0; sleep 1; done`], { stdio: 'ignore', detached: true });
      const first = node.last_heartbeat_at as string;
      await until('the supervised agent to heartbeat', async () => ((await t2.request('GET', `/v1/nodes/${node.id}`, { headers: bearer(admin2.token) })).json.data.last_heartbeat_at > first ? true : null));
      const before = (await t2.request('GET', `/v1/nodes/${node.id}`, { headers: bearer(admin2.token) })).json.data;

      const queued = await t2.request('POST', `/v1/nodes/${node.id}/update-agent`, { headers: bearer(admin2.token), body: { grace_seconds: 15 } });
      expect(queued.status, queued.text).to.equal(202);
      await until('the update to be taken', async () => (await t2.hangar.services.tasks.get(queued.json.data.task_id))?.status === 'completed');
      // The broken executable crash-loops under the supervisor; after the grace period the watchdog puts the previous one back.
      await until('the previous executable back in place', async () => createHash('sha256').update(readFileSync(exe)).digest('hex') !== brokenSha, 40_000);
      const back = await until(
        'the previous agent heartbeating again',
        async () => {
          const res = await t2.request('GET', `/v1/nodes/${node.id}`, { headers: bearer(admin2.token) });
          return res.json.data.status === 'ready' && res.json.data.last_heartbeat_at > before.last_heartbeat_at ? res.json.data : null;
        },
        40_000,
      );
      expect(back.agent_version, 'the agent that came back is the previous one').to.equal(before.agent_version);
      const manifest = JSON.parse(readFileSync(path.join(DIST, 'manifest.json'), 'utf8'));
      expect(createHash('sha256').update(readFileSync(exe)).digest('hex')).to.equal(manifest.executables.amd64.sha256);
      expect(existsSync(path.join(data, 'update-pending.json'))).to.equal(false);
      // It says so in its log (the note the watchdog left, read once).
      await until('the rollback in the agent log', async () => readFileSync(path.join(data, 'agent.log'), 'utf8').includes('did not reach the control plane in time'));
    } finally {
      if (supervisor?.pid) process.kill(-supervisor.pid, 'SIGKILL');
      spawnSync('pkill', ['-KILL', '-f', exe]);
      await t2.stop();
    }
  });
});

describeEachDialect('agent executable missing (a control plane started without the build)', (dialect) => {
  let t: TestHangar;
  let empty: string;
  before(async () => {
    empty = mkdtempSync(path.join(os.tmpdir(), 'hangar-no-agent-'));
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal'], overrides: { system: { agent_binary_dir: empty } } });
  });
  after(async () => {
    await t?.stop();
    rmSync(empty, { recursive: true, force: true });
  });

  it('answers 503 (a part of this control plane is missing, not the resource) saying how to build it', async () => {
    for (const arch of ['amd64', 'arm64']) {
      const res = await t.request('GET', `/v1/agent/binary?arch=${arch}`);
      expect(res.status, arch).to.equal(503);
      expect(res.json.message).to.equal(
        `No agent executable for ${arch} has been built on this control plane: run npm run build there (both architectures; npm start builds only its own machine's), or node scripts/build.mjs agent ${arch}`,
      );
    }
  });
});

describe('npm start: the agent executable of this machine', () => {
  it('is built by `npm start` when missing (its script runs build.mjs agent --if-missing), and left as it is when dist/agent has it', function () {
    this.timeout(60_000);
    const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
    expect(pkg.scripts.start.split(' && ')).to.include('node scripts/build.mjs agent --if-missing');
    const current = built() && JSON.parse(readFileSync(path.join(DIST, 'manifest.json'), 'utf8')).version === pkg.version;
    requireService(this, current, `the agent executables of hangar ${pkg.version} (run npm run build)`);
    const before = readFileSync(path.join(DIST, 'manifest.json'), 'utf8');
    const res = spawnSync(process.execPath, ['scripts/build.mjs', 'agent', '--if-missing'], { encoding: 'utf8' });
    expect(res.status, res.stderr).to.equal(0);
    expect(res.stdout).to.contain(`build: dist/agent has the amd64 executable of hangar ${pkg.version}`);
    expect(readFileSync(path.join(DIST, 'manifest.json'), 'utf8'), 'not rebuilt').to.equal(before);
  });
});
