import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../core/http/client.js';
import { randomToken } from '../../core/ids.js';
import { FailNow, until as waitUntil } from '../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../support/control-plane.js';
import { TEST_MASTER_KEY, TestDialect } from '../support/dialects.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { PG_URL, postgresAvailable, requireService } from '../support/requirements.js';
import { S3_START_TIMEOUT_MS, type S3Bucket, S3Server } from '../support/s3-server.js';
import { stays } from '../support/stays.js';
import { hangarCli } from '../integration/runner/support.js';
import { Lab, type Machine } from './lab/lab.js';
import { requireLab } from './lab/requirements.js';
import { freePort } from '../support/ports.js';

/** test/support/agents.ts until(): FailNow or a failed assertion ends the wait at once. */
const until = <T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 120_000): Promise<T> => waitUntil(what, probe, timeoutMs, 500);

/**
 * The control plane's restore drill (issue 28, "Done when"): a fleet on lab machines is running — two
 * machines with agents deployed over SSH, a swarm of both, an instance of two replicas, a volume
 * backed up with restic — and its control plane (`hangar serve` with the default plugins, as an
 * operator runs it, on SQLite) is backed up to the real S3 server with `hangar backup create
 * --target`. Then the control plane is stopped and its data dir deleted; `hangar restore --from
 * s3://… --data-dir NEW` rebuilds it and `hangar serve` starts it at the same address: the agents
 * come back by themselves (the same CA), the swarm and the instance are there and observed running
 * by the new control plane, nothing on the machines was redeployed (the swarm service's id and
 * version, its tasks and their containers are the same), it manages them (a scale), and the volume
 * backup taken before the loss restores. Then the same again into PostgreSQL: the restored control
 * plane backed up, stopped, restored from the bucket into a new database (a master key) and started
 * at the same address. Kubernetes clusters are not drilled here (their lab needs the Kubernetes build
 * and minutes more).
 */
describe('the control plane destroyed and restored from the bucket while a fleet runs in the machine lab [sqlite, then postgres]', function () {
  /** The PostgreSQL schema (and data dir) the last leg restores into. */
  const postgres = new TestDialect('postgres');
  let lab: Lab;
  let machines: Machine[];
  let m1: Machine;
  let m2: Machine;
  let s3: S3Server;
  let bucket: S3Bucket;
  let work: string;
  let configFile: string;
  let passphraseFile: string;
  let port: number;
  let caPem: string;
  let cp: ControlPlane;
  let admin: Credentials;
  const nodeOf = new Map<string, string>();
  let swarmId: string;
  let instanceId: string;
  /** What runs on the machines for the instance, before the control plane is lost. */
  let runtimeBefore: string;
  let volumeBackupId: string;
  const folder = '/srv/hangar-data/app';
  /** sha256 and path of every file under a folder of m2, sorted. */
  const listing = (dir: string) => m2.sh(`cd ${dir} && find . -type f -exec sha256sum {} + | sort`);

  before(async function () {
    this.timeout(Math.max(S3_START_TIMEOUT_MS, 600_000));
    await requireLab(this, { agents: true, s3: true });
    lab = new Lab({ name: 'cp-restore', subnet: '172.31.84.0/24', log: () => undefined });
    machines = await lab.start({ machines: 2 });
    [m1, m2] = machines as [Machine, Machine];
    // On the lab's gateway: the machines' restic reaches it for the volume backup.
    s3 = await S3Server.start({ host: lab.gateway });
    bucket = await s3.bucket(`drill-${randomToken(6).toLowerCase()}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-cp-drill-'));
    passphraseFile = path.join(work, 'passphrase');
    writeFileSync(passphraseFile, `drill-${randomToken(16)}\n`, { mode: 0o600 });
    port = await freePort('0.0.0.0');
    // The operator's configuration: every default plugin, at a fixed address the machines reach (the host's on the lab network).
    configFile = path.join(work, 'hangar.yaml');
    writeFileSync(
      configFile,
      JSON.stringify({
        api: { host: '0.0.0.0', port },
        nodes: { heartbeat_interval_seconds: 2, offline_after_seconds: 10 },
        tasks: { poll_wait_seconds: 10 },
        // The lab kernel has no IPVS: host ports and DNS round robin; members reached at their own addresses.
        clusters: { observe_interval_seconds: 2, advertise: 'address' },
        swarms: { publish_mode: 'host', endpoint_mode: 'dnsrr' },
      }),
    );
    const dataDir = path.join(work, 'data');
    mkdirSync(dataDir, { mode: 0o700 });
    cp = await serve('original', dataDir);
    admin = await bootstrapAdmin(cp.client);
    await Promise.all(machines.map((m) => m.sh('lab-busybox-image lab/busybox:latest')));
  });

  after(async function () {
    this.timeout(120_000);
    // A hook that failed (or a case not run) shows what the control plane logged as an error, as afterEach does for a failed case.
    if (cp && this.test?.parent?.tests.some((t) => t.state !== 'passed')) printErrors();
    await stop(cp);
    await postgres.cleanup();
    await lab?.teardown();
    await s3?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed' && cp) printErrors();
  });
  function printErrors(): void {
    for (const line of cp.output().split('\n').filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-20)) console.log(`    control plane: ${line.trim().slice(0, 1500)}`);
  }

  /** `hangar serve --config <file> --data-dir <dir>` at the fixed address. */
  async function serve(name: string, dataDir: string, config = configFile): Promise<ControlPlane> {
    const started = await serveControlPlane({ name, schema: null, port, dataDir, args: ['--config', config], env: { HANGAR_API__HOST: '0.0.0.0' }, caPem: () => caPem });
    // On PostgreSQL the CA is in the store (sealed with the master key), not a data-dir file: as the server hands it out.
    const file = path.join(dataDir, 'pki', 'ca.crt');
    caPem = existsSync(file) ? readFileSync(file, 'utf8') : (await httpRequest(`${started.url}/v1/ca`, { ca: false })).text;
    return started;
  }
  async function stop(plane: ControlPlane | undefined): Promise<void> {
    if (!plane || plane.child.exitCode !== null) return;
    const exited = new Promise((resolve) => plane.child.once('exit', resolve));
    plane.child.kill('SIGTERM');
    await exited;
  }
  const api = (method: string, p: string, body?: unknown) => cp.client.request(method, p, { headers: bearer(admin.token), body });
  const get = async (p: string) => {
    const res = await api('GET', p);
    expect(res.status, `${p}: ${res.text}`).to.equal(200);
    return res.json.data;
  };
  const cli = (args: string[], env: Record<string, string> = {}) => hangarCli(args, { env: { NODE_ENV: 'test', ...env }, timeoutMs: 180_000 });
  /** The instance's swarm service (id, version, update time), its running tasks and their containers on every machine. */
  const runtime = async () => {
    const service = await m1.sh("docker service inspect inst-web --format '{{.ID}} {{.Version.Index}} {{.UpdatedAt}}'");
    const tasks = await m1.sh("docker service ps inst-web --filter desired-state=running --format '{{.ID}} {{.Node}}' | sort");
    const containers = await Promise.all(machines.map((m) => m.sh("docker ps --no-trunc --filter label=com.docker.swarm.service.name=inst-web --format '{{.ID}} {{.CreatedAt}}' | sort")));
    return [service, tasks, ...containers.map((c, i) => `${machines[i]!.name}: ${c}`)].join('\n');
  };

  /** `hangar restore --from` the bucket into `dataDir` (`env`: the new installation's store), then `hangar serve` on it at the same port; when it started. */
  async function restoreFromBucket(name: string, dataDir: string, env: Record<string, string> = {}): Promise<string> {
    const keys = { AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey };
    const restored = await cli(['restore', '--from', `s3://${bucket.name}/prod`, '--endpoint', s3.endpoint, '--passphrase-file', passphraseFile, '--data-dir', dataDir], { ...keys, ...env });
    expect(restored.code, restored.stderr).to.equal(0);
    const config = path.join(dataDir, 'restored-config.yaml');
    expect(restored.stdout).to.include(`start it with: hangar serve --config ${config}`);
    const caBefore = caPem;
    const restartedAt = new Date().toISOString();
    cp = await serve(name, dataDir, config);
    expect(caPem, 'the same CA').to.equal(caBefore);
    return restartedAt;
  }
  /**
   * The fleet as the control plane started at `restartedAt` finds it: the agents reconnected on their own (their
   * client certificates verified against the restored CA) and ready; the swarm and its members as its manager
   * reports them; the instance observed running twice (a reconcile after the first observation had its chance to
   * redeploy); and on the machines the same service at the same version, the same tasks, the same containers.
   */
  async function fleetCameBack(restartedAt: string, replicas: number): Promise<void> {
    for (const m of machines) {
      await until(`${m.name}'s agent to heartbeat to the restored control plane`, async () => {
        const node = await get(`/v1/nodes/${nodeOf.get(m.name)}`);
        return node.status === 'ready' && node.last_heartbeat_at > restartedAt;
      });
    }
    const swarm = await get(`/v1/swarms/${swarmId}`);
    expect(swarm.status).to.equal('active');
    expect(swarm.manager.node_id).to.equal(nodeOf.get('m1'));
    const members = await get(`/v1/swarms/${swarmId}/members`);
    expect(members.map((m: { hostname: string; state: string }) => `${m.hostname} ${m.state}`).sort()).to.deep.equal(['m1 ready', 'm2 ready']);
    const first = await until('the instance observed by the restored control plane', async () => {
      const i = await get(`/v1/compute/instances/${instanceId}`);
      return i.observed_at > restartedAt ? i : null;
    });
    const second = await until('a second observation', async () => {
      const i = await get(`/v1/compute/instances/${instanceId}`);
      return i.observed_at > first.observed_at ? i : null;
    });
    for (const seen of [first, second]) expect(seen, JSON.stringify(seen)).to.include({ status: 'running', running: replicas, desired_state: 'running' });
    expect(await runtime()).to.equal(runtimeBefore);
  }

  it('runs a fleet: two machines with agents deployed over SSH, a swarm of both, an instance of two replicas', async function () {
    this.timeout(600_000);
    const deploys = await Promise.all(machines.map((m) => api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey })));
    for (const [i, res] of deploys.entries()) {
      expect(res.status, res.text).to.equal(202);
      nodeOf.set(machines[i]!.name, res.json.data.node_id);
    }
    for (const m of machines) {
      await until(`${m.name} to be ready`, async () => {
        const node = await get(`/v1/nodes/${nodeOf.get(m.name)}`);
        const failed = ((await get(`/v1/nodes/events?node_id=${node.id}`)) as Array<{ kind: string; message: string }>).find((e) => e.kind === 'deploy_failed');
        if (failed) throw new FailNow(`deploying ${m.name} failed: ${failed.message}`);
        return node.status === 'ready';
      }, 240_000);
    }
    const swarm = await api('POST', '/v1/swarms', { name: 'prod' });
    expect(swarm.status, swarm.text).to.equal(201);
    swarmId = swarm.json.data.id;
    expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get('m1') })).status).to.equal(202);
    await until('the manager', async () => (await get(`/v1/swarms/${swarmId}`)).manager?.status === 'active');
    expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get('m2') })).status).to.equal(202);
    await until('two active members', async () => {
      const s = await get(`/v1/swarms/${swarmId}`);
      return s.members.length === 2 && s.members.every((m: { status: string }) => m.status === 'active');
    });
    const instance = await api('POST', '/v1/compute/instances', { name: 'web', swarm_id: swarmId, image: 'lab/busybox:latest', replicas: 2, command: stays() });
    expect(instance.status, instance.text).to.equal(202);
    instanceId = instance.json.data.id;
    await until('the instance running on both machines', async () => {
      const i = await get(`/v1/compute/instances/${instanceId}`);
      if (i.status === 'failed') throw new FailNow(`the instance failed: ${i.reason}`);
      return i.status === 'running' && i.running === 2 && new Set(i.placement.map((p: { node_id: string }) => p.node_id)).size === 2;
    }, 180_000);
  });

  it('backs a volume on a machine up to a backup target (restic, its repository password sealed in the store)', async function () {
    this.timeout(300_000);
    const target = await api('POST', '/v1/backups/targets', { name: 'offsite', endpoint: s3.endpoint, bucket: bucket.name, prefix: 'prod', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey });
    expect(target.status, target.text).to.equal(201);
    const volume = await api('POST', '/v1/volumes', { name: 'app', node_id: nodeOf.get('m2'), folder, type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    const volumeId = volume.json.data.id;
    await until('the volume to be ready', async () => (await get(`/v1/volumes/${volumeId}`)).status === 'ready');
    await m2.sh(`mkdir -p ${folder}/conf && echo "port: 8080" >${folder}/conf/app.yaml && head -c 200000 /dev/urandom >${folder}/data.bin`);
    const backup = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: target.json.data.id });
    expect(backup.status, backup.text).to.equal(202);
    volumeBackupId = backup.json.data.backup.id;
    const done = await until('the volume backup', async () => {
      const run = ((await get(`/v1/volumes/${volumeId}/backups`)) as Array<{ id: string; status: string; error: string | null }>).find((r) => r.id === volumeBackupId);
      return run && run.status !== 'running' ? run : null;
    }, 180_000);
    expect(done.status, done.error ?? '').to.equal('succeeded');
  });

  it('backs the control plane up to a backup target with hangar backup create --target while it serves', async function () {
    this.timeout(180_000);
    const res = await cli(['backup', 'create', '--config', configFile, '--data-dir', cp.dataDir, '--target', 'offsite', '--passphrase-file', passphraseFile]);
    expect(res.code, res.stderr).to.equal(0);
    expect(res.stdout).to.match(new RegExp(`^control-plane backup written to target offsite: s3://${bucket.name}/prod/hangar-control-plane/hangar-control-plane-\\S+\\.hcpb`));
    expect(await bucket.list('prod/hangar-control-plane/')).to.have.length(1);
  });

  it('loses the control plane (stopped, its data dir deleted); the workloads on the machines run on', async function () {
    this.timeout(120_000);
    runtimeBefore = await runtime();
    await stop(cp);
    rmSync(cp.dataDir, { recursive: true, force: true });
    expect(runtimeBefore).to.match(/m1: \S+/).and.to.match(/m2: \S+/);
    expect(await runtime(), 'the swarm runs the instance without its control plane').to.equal(runtimeBefore);
  });

  it('restores a new control plane from the bucket (hangar restore --from … --data-dir NEW) and starts it at the same address: the agents come back by themselves, the swarm and the instance are observed running, nothing was redeployed', async function () {
    this.timeout(300_000);
    const restartedAt = await restoreFromBucket('restored', path.join(work, 'restored'));
    await fleetCameBack(restartedAt, 2);
  });

  it('manages the fleet from the restored control plane: the instance scales to three; the volume backup taken before the loss restores into a new volume', async function () {
    this.timeout(300_000);
    const scaled = await api('POST', `/v1/compute/instances/${instanceId}/scale`, { replicas: 3 });
    expect(scaled.status, scaled.text).to.equal(202);
    await until('three running', async () => {
      const i = await get(`/v1/compute/instances/${instanceId}`);
      return i.status === 'running' && i.running === 3;
    });
    expect(await m1.sh("docker service inspect inst-web --format '{{.Spec.Mode.Replicated.Replicas}}'")).to.equal('3');
    // restic opens the repository with the password the restored store unseals.
    const copy = await api('POST', '/v1/volumes', { name: 'app-copy', node_id: nodeOf.get('m2'), folder: `${folder}-copy`, type: 'local', restore_from: { snapshot_id: volumeBackupId } });
    expect(copy.status, copy.text).to.equal(202);
    await until('the restored volume', async () => {
      const v = await get(`/v1/volumes/${copy.json.data.id}`);
      if (v.status === 'failed') throw new FailNow(`the restored volume failed: ${v.error}`);
      return v.status === 'ready';
    }, 180_000);
    expect(await listing(`${folder}-copy`)).to.equal(await listing(folder));
  });

  it('moves it to PostgreSQL the same way: backed up again, restored from the bucket into a new database, started at the same address; the agents come back, nothing redeployed', async function () {
    this.timeout(300_000);
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const pg = postgres.freshStorage();
    const backup = await cli(['backup', 'create', '--config', path.join(cp.dataDir, 'restored-config.yaml'), '--data-dir', cp.dataDir, '--target', 'offsite', '--passphrase-file', passphraseFile]);
    expect(backup.code, backup.stderr).to.equal(0);
    runtimeBefore = await runtime();
    await stop(cp);
    // A SQLite archive restored into PostgreSQL: a master key seals the CA and the secrets there (written to the restored configuration).
    const restartedAt = await restoreFromBucket('postgres', pg.dataDir, { HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: pg.schema!, HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY });
    expect((await cp.client.request('GET', '/healthz')).json.data.store).to.equal('postgres');
    await fleetCameBack(restartedAt, 3);
  });
});
