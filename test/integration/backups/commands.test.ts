import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { docker } from '../../../lab/docker.js';
import { randomToken } from '../../../core/ids.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { dockerOnlyPath, hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../../support/identity.js';
import { holdingRestic } from '../../support/holding-restic.js';
import { requireService } from '../../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, s3Availability, sharedS3Server, type S3Bucket, type S3Server } from '../../support/s3-server.js';
import { stays } from '../../support/stays.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';
import { BIN, hangarCli } from '../runner/support.js';

const PLUGINS = ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'swarms', 'volumes', 'compute', 'backups'];

/** Where restic is on this machine (Debian's package), or null. */
function resticPath(): string | null {
  return spawnSync('sh', ['-c', 'command -v restic'], { encoding: 'utf8' }).stdout.trim() || null;
}


/**
 * A backup's pre and post commands run in a compute instance's container on the host engine's
 * swarm (a real agent runs `docker exec` there), and a backup's progress in bytes while restic
 * reads, through HTTP and the CLI, against the real S3 server.
 */
describeEachDialect('backups: pre and post commands in a workload’s container, progress in bytes', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  let s3: S3Server;
  let bucket: S3Bucket;
  let work: string;
  let folder: string;
  let volumeId: string;
  let targetId: string;
  let instanceId: string;
  let instanceName: string;
  let hold: string;
  const run = randomToken(6);
  const named = (n: string) => `${n}-${dialect.name.slice(0, 2)}-${run}`;
  const services: string[] = [];

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const backups = async (volume = volumeId) => (await api('GET', `/v1/volumes/${volume}/backups`)).json.data as Array<Record<string, any>>;
  const ended = (runId: string, volume = volumeId) =>
    waitFor(async () => (await backups(volume)).find((r) => r.id === runId && r.status !== 'running') ?? null, { timeoutMs: 120_000, intervalMs: 300, what: `backup ${runId} to end` });
  const cliEnv = () => {
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    return { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
  };
  const sh = (script: string) => ['sh', '-c', script];
  /** Lets a held backup go on and waits until no backup of the volume runs. */
  const release = async () => {
    rmSync(hold, { force: true });
    await waitFor(async () => !(await backups()).some((r) => r.status === 'running'), { timeoutMs: 120_000, intervalMs: 300, what: 'the volume’s backups to end' });
  };

  before(async function () {
    this.timeout(Math.max(S3_START_TIMEOUT_MS, 180_000));
    const s3ok = s3Availability();
    requireService(this, s3ok.ok, s3ok.why);
    const restic = resticPath();
    requireService(this, !!restic, 'restic on this machine (apt-get install restic; .ci/run installs it)');
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    s3 = await sharedS3Server();
    bucket = await s3.bucket(`commands-${dialect.name.slice(0, 2)}-${run}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-backup-commands-'));
    const bin = path.join(work, 'bin');
    mkdirSync(bin);
    hold = path.join(work, 'hold');
    holdingRestic(bin, restic!, hold);
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { ...SWARM_TEST_OVERRIDES, tasks: { poll_wait_seconds: 5 }, backups: { schedule_check_seconds: 1, min_schedule_seconds: 120 } } });
    admin = await bootstrapAdmin(t);
    // The host's agent manages the host engine's swarm and finds the docker CLI and (the holding) restic on its PATH.
    member = await hostSwarmMember(t, admin, named('bk'), { path: `${bin}:${dockerOnlyPath()}` });
    await waitFor(async () => (await api('GET', `/v1/nodes/${member.nodeId}`)).json.data.restic?.present === true, { timeoutMs: 30_000, what: 'the node to report restic' });

    folder = path.join(work, 'data');
    mkdirSync(folder);
    writeFileSync(path.join(folder, 'app.db'), randomBytes(256 * 1024));
    const volume = await api('POST', '/v1/volumes', { name: named('db'), node_id: member.nodeId, folder, type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    volumeId = volume.json.data.id;
    await waitFor(async () => (await api('GET', `/v1/volumes/${volumeId}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: 'the volume to be ready' });
    const target = await api('POST', '/v1/backups/targets', { name: named('t'), endpoint: s3.endpoint, bucket: bucket.name, prefix: 'commands', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey });
    expect(target.status, target.text).to.equal(201);
    targetId = target.json.data.id;

    // The database's stand-in: an instance mounting the volume at /data, in which the commands run.
    instanceName = named('db');
    const instance = await api('POST', '/v1/compute/instances', { name: instanceName, swarm_id: member.swarmId, image: TEST_IMAGE, type: 'nano', replicas: 1, volumes: [`${volumeId}:/data`], command: stays() });
    expect(instance.status, instance.text).to.equal(202);
    instanceId = instance.json.data.id;
    services.push(instance.json.data.runtime_name);
    await waitFor(async () => (await api('GET', `/v1/compute/instances/${instanceId}`)).json.data.running === 1, { timeoutMs: 90_000, intervalMs: 300, what: 'the instance to run' });
  });

  after(async function () {
    this.timeout(60_000);
    for (const name of services) await docker(['service', 'rm', name]);
    await cleanupAgents();
    await t?.stop();
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('runs the pre command before the snapshot (its dump is in it) and the post command after, keeping their exit codes and output', async function () {
    this.timeout(120_000);
    const res = await api('POST', `/v1/volumes/${volumeId}/backups`, {
      target_id: targetId,
      pre: { workload: instanceName, command: sh('echo "dumping app"; echo "-- dump" > /data/dump.sql; echo "a warning" >&2') },
      post: { workload: instanceId, command: ['rm', '/data/dump.sql'], timeout_s: 60 },
    });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.backup).to.include({ status: 'running', phase: 'pre' });
    expect(res.json.data.backup.pre).to.include({ status: 'running', node_id: member.nodeId });
    const done = await ended(res.json.data.backup.id);
    expect(done.status, done.error).to.equal('succeeded');
    expect(done.error).to.equal(null);
    // The dump the pre command wrote was backed up with the database; the post command removed it afterwards.
    expect(done.files).to.equal(2);
    expect(readdirSync(folder)).to.deep.equal(['app.db']);
    expect(done.pre).to.include({ status: 'succeeded', exit_code: 0, timed_out: false, node_id: member.nodeId, truncated: false, timeout_s: 600 });
    expect(done.pre.output).to.contain('dumping app').and.to.contain('a warning');
    expect(done.pre.workload).to.deep.equal({ type: 'instance', id: instanceId, name: instanceName });
    expect(done.pre.command).to.deep.equal(sh('echo "dumping app"; echo "-- dump" > /data/dump.sql; echo "a warning" >&2'));
    expect(done.post).to.include({ status: 'succeeded', exit_code: 0, timeout_s: 60 });
    expect(done).to.include({ phase: null, bytes_done: null, bytes_total: null });
  });

  it('fails the backup when the pre command fails: nothing is snapshotted, the reason and output are kept, and the post command still runs', async function () {
    this.timeout(120_000);
    const before = (await backups()).filter((r) => r.snapshot_id).length;
    const res = await api('POST', `/v1/volumes/${volumeId}/backups`, {
      target_id: targetId,
      pre: { workload: instanceName, command: sh('echo "pg_dump: connection refused" >&2; exit 3') },
      post: { workload: instanceName, command: sh('echo cleaned up') },
    });
    expect(res.status, res.text).to.equal(202);
    const done = await ended(res.json.data.backup.id);
    expect(done.status).to.equal('failed');
    expect(done.snapshot_id).to.equal(null);
    expect(done.error).to.contain('the pre command failed: it exited with 3 (pg_dump: connection refused)').and.to.contain('nothing was backed up');
    expect(done.pre).to.include({ status: 'failed', exit_code: 3 });
    expect(done.post).to.include({ status: 'succeeded', exit_code: 0 });
    expect(done.post.output).to.contain('cleaned up');
    expect((await backups()).filter((r) => r.snapshot_id).length).to.equal(before);
  });

  it('kills a command at its timeout and fails the backup saying so', async function () {
    this.timeout(120_000);
    const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId, pre: { workload: instanceName, command: sh('echo started; sleep 300'), timeout_s: 1 } });
    expect(res.status, res.text).to.equal(202);
    const done = await ended(res.json.data.backup.id);
    expect(done.status).to.equal('failed');
    expect(done.pre).to.include({ status: 'failed', timed_out: true, exit_code: null });
    expect(done.pre.output).to.contain('started');
    expect(done.error).to.contain('it was still running after 1 s and was killed');
  });

  it('refuses commands it cannot run: 400 naming the field, 404 for an unknown workload, another project’s workload as the rest of the API does', async function () {
    this.timeout(60_000);
    const cases: Array<[Record<string, unknown>, number, string]> = [
      [{ pre: { workload: instanceName, command: [] } }, 400, 'body.pre.command'],
      [{ pre: { workload: instanceName } }, 400, 'body.pre'],
      [{ post: { workload: instanceName, command: ['true'], timeout_s: 0 } }, 400, 'body.post.timeout_s'],
      [{ pre: { workload: instanceName, command: ['true'], shell: true } }, 400, 'body.pre'],
      [{ consistency: 'stop', pre: { workload: instanceName, command: ['true'] } }, 400, 'body.pre: pre and post commands are not run with consistency stop'],
      [{ pre: { workload: 'nothing-like-it', command: ['true'] } }, 404, 'No workload nothing-like-it'],
    ];
    for (const [over, status, says] of cases) {
      const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId, ...over });
      expect(res.status, `${JSON.stringify(over)} → ${res.text}`).to.equal(status);
      expect(res.json.message, JSON.stringify(over)).to.contain(says);
    }
    // A volume of another project: its maintainer does not see the instance (404); an installation admin is told the two are of different projects (400).
    const other = await api('POST', '/v1/projects', { name: named('other') });
    expect(other.status, other.text).to.equal(201);
    const otherFolder = path.join(work, 'other');
    mkdirSync(otherFolder);
    const volume = await api('POST', '/v1/volumes', { name: named('other'), node_id: member.nodeId, folder: otherFolder, type: 'local', project_id: other.json.data.id });
    expect(volume.status, volume.text).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/volumes/${volume.json.data.id}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: 'the other volume' });
    const target = await api('POST', '/v1/backups/targets', {
      name: named('ot'),
      endpoint: s3.endpoint,
      bucket: bucket.name,
      prefix: 'other',
      access_key_id: s3.credentials.accessKeyId,
      secret_access_key: s3.credentials.secretAccessKey,
      project_id: other.json.data.id,
    });
    expect(target.status, target.text).to.equal(201);
    const ollie = await createUser(t, admin, { username: `ollie${run}`.toLowerCase(), role: 'user' });
    expect((await api('PUT', `/v1/projects/${other.json.data.id}/members/${ollie.userId}`, { role: 'maintainer' })).status).to.equal(201);
    const body = { target_id: target.json.data.id, pre: { workload: instanceId, command: ['true'] } };
    const asMember = await t.request('POST', `/v1/volumes/${volume.json.data.id}/backups`, { body, headers: bearer(ollie.token) });
    expect(asMember.status, asMember.text).to.equal(404);
    expect(asMember.json.message).to.equal(`No instance ${instanceId}`);
    const asAdmin = await api('POST', `/v1/volumes/${volume.json.data.id}/backups`, body);
    expect(asAdmin.status, asAdmin.text).to.equal(400);
    expect(asAdmin.json.message).to.contain('body.pre.workload').and.to.contain('another project');
    expect((await backups(volume.json.data.id)).length, 'nothing recorded').to.equal(0);
    // An admin's key limited to backing volumes up runs no command in a workload (it cannot deploy it).
    const key = await api('POST', `/v1/iam/users/${admin.userId}/keys`, { permissions: ['volumes:backup', 'backups:read'] });
    expect(key.status, key.text).to.equal(201);
    const backupOnly = { accessKeyId: key.json.data.access_key_id as string, secretAccessKey: key.json.data.secret_access_key as string };
    const before = (await backups()).length;
    const withCommand = await signed(t, backupOnly, 'POST', `/v1/volumes/${volumeId}/backups`, { body: { target_id: targetId, pre: { workload: instanceId, command: ['true'] } } });
    console.log(`      a key limited to volumes:backup naming a pre command → ${withCommand.status} ${withCommand.json.message}`);
    expect(withCommand.status, withCommand.text).to.equal(404);
    expect(withCommand.json.message).to.equal(`No instance ${instanceId}`);
    expect((await backups()).length, 'nothing recorded').to.equal(before);
  });

  it('shows the bytes restic has read of its total while it backs up (the agent’s task progress)', async function () {
    this.timeout(120_000);
    writeFileSync(path.join(folder, 'big.bin'), randomBytes(24 * 1024 * 1024));
    const total = 24 * 1024 * 1024 + 256 * 1024;
    writeFileSync(hold, String(total));
    try {
      const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId });
      expect(res.status, res.text).to.equal(202);
      const runId = res.json.data.backup.id;
      // restic is held once it has scanned the folder: its last report before that has the whole total.
      const running = await waitFor(async () => (await backups()).find((r) => r.id === runId && r.bytes_total === total) ?? null, { timeoutMs: 60_000, intervalMs: 200, what: 'the backup to report its progress' });
      expect(running).to.include({ status: 'running', phase: 'backup' });
      expect(running.bytes_done).to.be.a('number').within(0, total);
      await release();
      const done = await ended(runId);
      expect(done.status, done.error).to.equal('succeeded');
      expect(done).to.include({ size: total, bytes_done: null, bytes_total: null });
    } finally {
      await release();
      rmSync(path.join(folder, 'big.bin'), { force: true });
    }
  });

  it('the CLI: volume backup with --pre-… and --post-… flags and --wait, a progress bar while restic reads; volume backups shows the commands', async function () {
    this.timeout(120_000);
    writeFileSync(path.join(folder, 'big.bin'), randomBytes(8 * 1024 * 1024));
    // Held once restic has scanned the database, the dump the pre command writes (8 bytes) and this file.
    writeFileSync(hold, String(8 * 1024 * 1024 + 256 * 1024 + 8));
    let cli: ReturnType<typeof spawn> | undefined;
    try {
      cli = spawn(
        process.execPath,
        [BIN, 'volume', 'backup', named('db'), '--target', named('t'), '--pre-workload', instanceName, '--pre-command', `sh -c 'echo "-- dump" > /data/dump.sql'`, '--post-workload', instanceName, '--post-command', 'rm /data/dump.sql', '--wait'],
        { env: { ...process.env, ...cliEnv() }, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      const out = { code: null as number | null, stdout: '', stderr: '' };
      cli.stdout!.on('data', (c: Buffer) => (out.stdout += c.toString()));
      cli.stderr!.on('data', (c: Buffer) => (out.stderr += c.toString()));
      const exited = new Promise<void>((resolve) => cli!.on('close', (code) => resolve(void (out.code = code))));
      // restic is held mid-backup until the CLI has drawn its bar.
      await waitFor(async () => /%/.test(out.stderr) || out.code !== null, { timeoutMs: 60_000, intervalMs: 100, what: 'the CLI’s progress bar' });
      expect(out.stderr, `${out.stdout}${out.stderr}`).to.match(/%/);
      await release();
      await exited;
      expect(out.code, out.stderr).to.equal(0);
      expect(out.stdout).to.match(new RegExp(`^backing up volume ${named('db')} to target ${named('t')} as bak-\\S+ \\(task task-\\S+\\)\\n`)).and.to.match(/backed up volume .* as bak-\S+: snapshot [0-9a-f]{8}/);
      expect(out.stderr).to.contain('running the pre command in instance').and.to.match(/\[#*-*\] +\d+% {2}[\d.]+ MB of 8\.\d MB/);
      expect(readdirSync(folder).sort()).to.deep.equal(['app.db', 'big.bin']);
      const list = await hangarCli(['volume', 'backups', named('db')], { env: cliEnv() });
      expect(list.code, list.stderr).to.equal(0);
      expect(list.stdout).to.contain('pre exit 0, post exit 0');
      const failing = await hangarCli(['volume', 'backup', named('db'), '--target', named('t'), '--pre-workload', instanceName, '--pre-command', 'false', '--wait'], { env: cliEnv(), timeoutMs: 100_000 });
      expect(failing.code).to.equal(1);
      expect(failing.stderr).to.contain('the pre command failed: it exited with 1');
    } finally {
      cli?.kill();
      await release();
      rmSync(path.join(folder, 'big.bin'), { force: true });
    }
  });

  describe('a restore’s progress: the bytes restic has written of the snapshot’s size', function () {
    let filesVolume: string;
    let filesFolder: string;
    let backupId: string;
    const size = 6 * 2 ** 20;
    const restores = async () => (await api('GET', `/v1/volumes/${filesVolume}/restores`)).json.data as Array<Record<string, any>>;
    /** Lets a held restore go on and waits until none of the volume runs. */
    const releaseRestore = async () => {
      rmSync(hold, { force: true });
      await waitFor(async () => !(await restores()).some((r) => r.status === 'running'), { timeoutMs: 120_000, intervalMs: 300, what: 'the volume’s restores to end' });
    };

    before(async function () {
      this.timeout(120_000);
      // A volume no workload uses, holding one file of 6 MiB, backed up (nothing held).
      filesFolder = path.join(work, 'files');
      mkdirSync(filesFolder);
      writeFileSync(path.join(filesFolder, 'blob.bin'), randomBytes(size));
      const volume = await api('POST', '/v1/volumes', { name: named('files'), node_id: member.nodeId, folder: filesFolder, type: 'local' });
      expect(volume.status, volume.text).to.equal(202);
      filesVolume = volume.json.data.id;
      await waitFor(async () => (await api('GET', `/v1/volumes/${filesVolume}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: 'the volume to be ready' });
      const backup = await api('POST', `/v1/volumes/${filesVolume}/backups`, { target_id: targetId });
      expect(backup.status, backup.text).to.equal(202);
      backupId = backup.json.data.backup.id;
      const done = await ended(backupId, filesVolume);
      expect(done.status, done.error).to.equal('succeeded');
    });

    it('shows them in the restore run while it runs (the agent’s task progress), null once it ended', async function () {
      this.timeout(120_000);
      writeFileSync(path.join(filesFolder, 'blob.bin'), 'changed since');
      // restic is stopped once it has written 1 MiB (the restored file's bytes, past its cache of the repository's trees).
      writeFileSync(hold, String(2 ** 20));
      try {
        const res = await api('POST', `/v1/volumes/${filesVolume}/restore`, { snapshot_id: backupId });
        expect(res.status, res.text).to.equal(202);
        const runId = res.json.data.restore.id;
        expect(res.json.data.restore).to.include({ status: 'running', bytes_done: null, bytes_total: null });
        const running = await waitFor(async () => (await restores()).find((r) => r.id === runId && r.bytes_done >= 2 ** 20) ?? null, { timeoutMs: 60_000, intervalMs: 200, what: 'the restore to report its progress' });
        expect(running).to.include({ status: 'running', bytes_total: size });
        expect(running.bytes_done).to.be.at.most(size);
        await releaseRestore();
        const done = (await restores()).find((r) => r.id === runId)!;
        expect(done.status, done.error).to.equal('succeeded');
        expect(done).to.include({ bytes_done: null, bytes_total: null });
        expect(readdirSync(filesFolder)).to.deep.equal(['blob.bin']);
        expect(statSync(path.join(filesFolder, 'blob.bin')).size).to.equal(size);
      } finally {
        await releaseRestore();
      }
    });

    it('the CLI: volume restore --wait draws a progress bar of the bytes written and says when it is restored', async function () {
      this.timeout(120_000);
      writeFileSync(hold, String(2 ** 20));
      let cli: ReturnType<typeof spawn> | undefined;
      try {
        cli = spawn(process.execPath, [BIN, 'volume', 'restore', named('files'), backupId, '--wait'], { env: { ...process.env, ...cliEnv() }, stdio: ['ignore', 'pipe', 'pipe'] });
        const out = { code: null as number | null, stdout: '', stderr: '' };
        cli.stdout!.on('data', (c: Buffer) => (out.stdout += c.toString()));
        cli.stderr!.on('data', (c: Buffer) => (out.stderr += c.toString()));
        const exited = new Promise<void>((resolve) => cli!.on('close', (code) => resolve(void (out.code = code))));
        // restic is stopped mid-restore until the CLI has drawn its bar.
        await waitFor(async () => /\[#*-*\] +\d+%/.test(out.stderr) || out.code !== null, { timeoutMs: 60_000, intervalMs: 100, what: 'the CLI’s progress bar' });
        expect(out.stderr, `${out.stdout}${out.stderr}`).to.match(/\[#*-*\] +\d+% {2}[\d.]+ MB of 6\.3 MB/);
        await releaseRestore();
        await exited;
        expect(out.code, out.stderr).to.equal(0);
        expect(out.stdout).to.match(new RegExp(`^restoring volume ${named('files')} from ${backupId} as rst-\\S+ \\(task task-\\S+\\)\\n`));
        expect(out.stdout).to.match(new RegExp(`restored volume ${named('files')} from snapshot [0-9a-f]{8} as rst-\\S+ in [\\d.]+ s`));
      } finally {
        cli?.kill();
        await releaseRestore();
      }
    });
  });

  it('a schedule runs its commands around each backup', async function () {
    this.timeout(120_000);
    const created = await api('POST', '/v1/backups/schedules', {
      name: named('nightly'),
      target_id: targetId,
      volume_ids: [volumeId],
      every_seconds: 3600,
      pre: { workload: instanceName, command: sh('echo "-- dump" > /data/dump.sql') },
      post: { workload: instanceName, command: ['rm', '/data/dump.sql'] },
    });
    expect(created.status, created.text).to.equal(201);
    expect(created.json.data.pre).to.deep.equal({ workload: { type: 'instance', id: instanceId, name: instanceName }, command: sh('echo "-- dump" > /data/dump.sql'), timeout_s: 600 });
    const done = await waitFor(async () => (await backups()).find((r) => r.schedule_id === created.json.data.id && r.status !== 'running') ?? null, { timeoutMs: 90_000, intervalMs: 300, what: 'the scheduled backup' });
    expect(done.status, done.error).to.equal('succeeded');
    expect(done.files).to.equal(2);
    expect(done.pre).to.include({ status: 'succeeded', exit_code: 0 });
    expect(done.post).to.include({ status: 'succeeded', exit_code: 0 });
    expect(existsSync(path.join(folder, 'dump.sql'))).to.equal(false);
    expect((await api('POST', '/v1/backups/schedules', { name: named('bad'), target_id: targetId, volume_ids: [volumeId], every_seconds: 3600, pre: { workload: 'nothing-like-it', command: ['true'] } })).status).to.equal(404);
    expect((await api('DELETE', `/v1/backups/schedules/${created.json.data.id}`)).status).to.equal(204);
  });

  it('refuses a pre command when its workload runs no container (409), recording nothing', async function () {
    this.timeout(120_000);
    const count = (await backups()).length;
    expect((await api('POST', `/v1/compute/instances/${instanceId}/stop`)).status).to.be.oneOf([200, 202]);
    await waitFor(async () => (await api('GET', `/v1/compute/instances/${instanceId}`)).json.data.running === 0, { timeoutMs: 60_000, intervalMs: 300, what: 'the instance to stop' });
    const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId, pre: { workload: instanceName, command: ['true'] } });
    expect(res.status, res.text).to.equal(409);
    expect(res.json.message).to.contain(`instance ${instanceName} has no running container`);
    expect((await backups()).length).to.equal(count);
  });
});
