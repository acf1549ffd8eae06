import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomToken } from '../../../core/ids.js';
import { cleanupAgents, FAST_NODES, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, type S3Server, s3Availability, sharedS3Server, type S3Bucket } from '../../support/s3-server.js';
import { hangarCli } from '../runner/support.js';

const PLUGINS = ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'volumes', 'backups'];

interface Backup {
  id: string;
  volume_id: string;
  target_id: string;
  snapshot_id: string;
  status: string;
  verified: boolean | null;
  size: number | null;
  time: string;
}

/**
 * `hangar backup list` and `GET /v1/backups`: every volume's backups at once, against the real S3
 * server with a real agent on this host (restic on its PATH) taking them. Three volumes (one of
 * another project) backed up to three targets; the CLI's table, `--json`, `--volume`, `--target`
 * and `--status`; a project's maintainer sees only its project's; a deleted volume's backups are
 * still listed (they restore into a new volume).
 */
describeEachDialect('hangar backup list: every volume’s backups at once', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let s3: S3Server;
  let bucket: S3Bucket;
  let work: string;
  let nodeId: string;
  const run = randomToken(6).toLowerCase();
  const named = (n: string) => `${n}-${run}`;
  const made: Record<string, { volume: string; target: string; backups: string[] }> = {};

  const api = (method: string, p: string, body?: unknown, token = admin.token) => t.request(method, p, { body, headers: bearer(token) });
  const cliEnv = () => {
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    return { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
  };
  const cli = async (args: string[], code = 0) => {
    const res = await hangarCli(['backup', 'list', ...args], { env: cliEnv(), timeoutMs: 60_000 });
    expect(res.code, `hangar backup list ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(code);
    return res;
  };
  const listed = async (args: string[]) => (JSON.parse((await cli([...args, '--json'])).stdout) as Backup[]).map((b) => b.id);

  /** A volume of one file on the node, in `project` (default: the default project), with a target of its own and `count` backups to it (the first verified). */
  async function volumeWithBackups(name: string, count: number, project?: string): Promise<void> {
    const target = await api('POST', '/v1/backups/targets', {
      name: named(`t-${name}`),
      endpoint: s3.endpoint,
      bucket: bucket.name,
      prefix: name,
      access_key_id: s3.credentials.accessKeyId,
      secret_access_key: s3.credentials.secretAccessKey,
      ...(project ? { project_id: project } : {}),
    });
    expect(target.status, target.text).to.equal(201);
    const folder = path.join(work, name);
    mkdirSync(folder);
    writeFileSync(path.join(folder, 'data.txt'), `${name}\n`);
    const volume = await api('POST', '/v1/volumes', { name: named(name), node_id: nodeId, folder, type: 'local', ...(project ? { project_id: project } : {}) });
    expect(volume.status, volume.text).to.equal(202);
    const volumeId = volume.json.data.id as string;
    await waitFor(async () => (await api('GET', `/v1/volumes/${volumeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: `volume ${name} to be ready` });
    const backups: string[] = [];
    for (let i = 0; i < count; i++) {
      const started = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: target.json.data.id, verify: i === 0 });
      expect(started.status, started.text).to.equal(202);
      const id = started.json.data.backup.id as string;
      const done = await waitFor(async () => ((await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Backup[]).find((b) => b.id === id && b.status !== 'running'), {
        timeoutMs: 60_000,
        intervalMs: 200,
        what: `backup ${i + 1} of ${name}`,
      });
      expect(done.status).to.equal('succeeded');
      backups.push(id);
    }
    made[name] = { volume: volumeId, target: target.json.data.id, backups };
  }

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    const restic = spawnSync('sh', ['-c', 'command -v restic'], { encoding: 'utf8' }).stdout.trim();
    requireService(this, !!restic, 'restic on this machine (apt-get install restic; .ci/run installs it)');
    s3 = await sharedS3Server();
    bucket = await s3.bucket(`list-${run}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-backup-list-'));
    const bin = path.join(work, 'bin');
    mkdirSync(bin);
    symlinkSync(restic, path.join(bin, 'restic'));
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { ...FAST_NODES, tasks: { poll_wait_seconds: 5 } } });
    admin = await bootstrapAdmin(t);
    const token = await api('POST', '/v1/nodes/token', {});
    nodeId = await joinedNodeId(spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: bin }));
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the node to be ready' });
    const other = await api('POST', '/v1/projects', { name: named('other') });
    expect(other.status, other.text).to.equal(201);
    await volumeWithBackups('app', 2);
    await volumeWithBackups('db', 1);
    await volumeWithBackups('theirs', 1, other.json.data.id);
  });

  after(async function () {
    this.timeout(60_000);
    await cleanupAgents();
    await t?.stop();
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('lists every volume’s backups at once, oldest first, in a table and as JSON', async function () {
    this.timeout(60_000);
    const all = JSON.parse((await cli(['--json'])).stdout) as Backup[];
    expect(all.map((b) => b.id)).to.deep.equal([...made.app!.backups, ...made.db!.backups, ...made.theirs!.backups]);
    expect(all.map((b) => b.volume_id)).to.deep.equal([made.app!.volume, made.app!.volume, made.db!.volume, made.theirs!.volume]);
    for (const b of all) {
      expect(b.status).to.equal('succeeded');
      expect(b.snapshot_id).to.match(/^[0-9a-f]{8,64}$/);
      expect(b.size).to.be.greaterThan(0);
    }
    expect(all.map((b) => b.verified)).to.deep.equal([true, null, true, true]);

    // The table: a header, a rule, a row per backup and the count.
    const lines = (await cli([])).stdout.trimEnd().split('\n');
    const cells = (line: string) => line.split('|').map((c) => c.trim());
    expect(cells(lines[0]!)).to.deep.equal(['volume', 'id', 'snapshot', 'time', 'size', 'status', 'verified', 'target', 'error']);
    expect(lines.slice(2, -1)).to.have.length(4);
    expect(lines.at(-1)).to.equal('(4 rows)');
    expect(cells(lines[2]!)).to.deep.equal([made.app!.volume, made.app!.backups[0], all[0]!.snapshot_id, all[0]!.time, String(all[0]!.size), 'succeeded', 'yes', made.app!.target, '-']);
    expect(cells(lines[3]!).slice(5, 7)).to.deep.equal(['succeeded', '-']);
  });

  it('--volume and --target (by name or id) and --status narrow it', async function () {
    this.timeout(60_000);
    expect(await listed(['--volume', named('app')])).to.deep.equal(made.app!.backups);
    expect(await listed(['--volume', made.db!.volume])).to.deep.equal(made.db!.backups);
    expect(await listed(['--target', named('t-db')])).to.deep.equal(made.db!.backups);
    expect(await listed(['--volume', named('app'), '--target', named('t-app'), '--status', 'succeeded'])).to.deep.equal(made.app!.backups);
    expect((await cli(['--volume', named('app'), '--target', named('t-db')])).stdout).to.equal('no backups\n');
    expect((await cli(['--status', 'failed'])).stdout).to.equal('no backups\n');
    expect((await cli(['--volume', named('nothing')], 1)).stderr).to.contain(`no volume "${named('nothing')}"`);
    const bad = await api('GET', '/v1/backups?status=lost');
    expect(bad.status, bad.text).to.equal(400);
    expect(bad.json.message).to.contain('query.status');
  });

  it('a project’s maintainer lists its project’s backups only', async function () {
    this.timeout(60_000);
    const otherId = (await api('GET', `/v1/projects/${named('other')}`)).json.data.id as string;
    const ollie = await createUser(t, admin, { username: `ollie${run}`, role: 'user' });
    expect((await api('PUT', `/v1/projects/${otherId}/members/${ollie.userId}`, { role: 'maintainer' })).status).to.equal(201);
    const theirs = await api('GET', '/v1/backups', undefined, ollie.token);
    expect(theirs.status, theirs.text).to.equal(200);
    expect((theirs.json.data as Backup[]).map((b) => b.id)).to.deep.equal(made.theirs!.backups);
    const narrowed = await api('GET', `/v1/backups?volume_id=${made.app!.volume}`, undefined, ollie.token);
    expect(narrowed.json.data, 'another project’s volume: nothing').to.deep.equal([]);
  });

  it('keeps listing a deleted volume’s backups (they restore into a new volume)', async function () {
    this.timeout(60_000);
    const deleted = await api('DELETE', `/v1/volumes/${made.db!.volume}`);
    expect(deleted.status, deleted.text).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/volumes/${made.db!.volume}`)).status === 404, { timeoutMs: 30_000, what: 'the volume to be gone' });
    expect(await listed(['--target', named('t-db')])).to.deep.equal(made.db!.backups);
  });
});
