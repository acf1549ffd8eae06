import { expect } from 'chai';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { answerTasks, FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { swarmDouble } from '../../support/swarm-double.js';
import { failOutboxInserts } from './outbox-failure.js';
import { Receiver } from './receiver.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'compute', 'volumes', 'backups', 'notifications'];
const LOOPBACK = { allow_http: true, allow_private_addresses: true, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100, timeout_seconds: 5 };
const EVENT_TYPES = ['task.failed', 'workload.failed', 'cluster.member.joined', 'cluster.member.left', 'volume.backup.succeeded', 'volume.backup.failed', 'volume.backup.verify_failed'];
/** The bus topics those events were once carried by, from the change to the notifications plugin. */
const TOPICS = ['task.failed', 'resource.troubled', 'cluster.member.joined', 'cluster.member.left', 'volume.backup.succeeded', 'volume.backup.failed', 'volume.backup.verify_failed'];

/** An S3 endpoint that keeps what it is given in memory: enough for a backup target's check (bucket, write, read back, delete). */
async function memoryS3(): Promise<{ url: string; close(): Promise<void> }> {
  const objects = new Map<string, Buffer>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const key = new URL(req.url ?? '/', 'http://s3').pathname;
      if (req.method === 'PUT') objects.set(key, Buffer.concat(chunks));
      if (req.method === 'DELETE') objects.delete(key);
      if (req.method === 'GET' && !objects.has(key)) return res.writeHead(404).end();
      res.writeHead(req.method === 'DELETE' ? 204 : 200).end(req.method === 'GET' ? objects.get(key) : undefined);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * Every event family the in-process bus once carried to the notifications plugin (issue 31) is
 * written to the outbox in the transaction of its change: here the control plane's bus drops every
 * publish of those topics — what a control plane that died right after the change's COMMIT would
 * never have done — and each event still reaches a real receiver, exactly once: a member joining and
 * leaving a swarm, a deploy the swarm refuses (the instance failed, its task failed), a volume backup
 * that succeeds, one whose restore drill fails, and one that fails. The swarm's manager and the
 * volume's node are test doubles answering their tasks (their agents' side of the API).
 */
describeEachDialect('notifications: every event written with its change, none carried by the bus', (dialect) => {
  const receiver = new Receiver();
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  let s3: Awaited<ReturnType<typeof memoryS3>>;
  const dropped: string[] = [];
  /** What the volume's node answers a backup: a result, or a failure (its error). */
  let backupAnswer: Record<string, unknown> | string = {};
  let volumeAgent: ReturnType<typeof answerTasks> | undefined;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const received = (type: string, about: (body: any) => boolean) => receiver.requests.filter((r) => r.event === type && about(r.body));

  /** The one delivery of `type` that `about` picks, once it arrived; none other arrives in the next second. */
  async function deliveredOnce(type: string, about: (body: any) => boolean) {
    const [first] = await waitFor(() => (received(type, about).length ? received(type, about) : null), { timeoutMs: 30_000, intervalMs: 100, what: `${type} at the receiver` });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(received(type, about), `${type} delivered once`).to.have.length(1);
    expect(first!.verified).to.equal(true);
    return first!.body;
  }

  before(async function () {
    this.timeout(90_000);
    await receiver.start();
    s3 = await memoryS3();
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { clusters: { observe_interval_seconds: 1 }, notifications: LOOPBACK, backups: { schedule_check_seconds: 1 } } });
    admin = await bootstrapAdmin(t);
    const bus = t.hangar.services.events;
    const publish = bus.publish.bind(bus);
    bus.publish = (topic, payload) => {
      if (TOPICS.includes(topic.name)) dropped.push(topic.name);
      else publish(topic, payload);
    };
    const channel = await api('POST', '/v1/notifications/channels', { name: 'ops', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    expect((await api('POST', '/v1/notifications/subscriptions', { channel_id: 'ops', event_types: EVENT_TYPES })).status).to.equal(201);
    manager = await swarmDouble(t, admin.token, {
      refusals: { deployWorkload: (input) => (String(input.spec.image).startsWith('missing/') ? `No such image: ${input.spec.image}` : undefined) },
    });
  });
  after(async function () {
    this.timeout(30_000);
    await volumeAgent?.stop();
    await manager?.stop();
    await t?.stop();
    await receiver.stop();
    await s3?.close();
  });

  it('a node joining a swarm: cluster.member.joined', async function () {
    this.timeout(60_000);
    const body = await deliveredOnce('cluster.member.joined', (b) => b.resource?.id === manager.swarmId);
    expect(body.resource).to.deep.equal({ type: 'swarm', id: manager.swarmId });
    expect(body.data).to.deep.equal({ cluster_id: manager.swarmId, node_id: manager.nodeId });
    expect(dropped).to.include('cluster.member.joined');
  });

  it('a deploy the swarm refuses: workload.failed for the instance, task.failed for its task', async function () {
    this.timeout(60_000);
    const created = await api('POST', '/v1/compute/instances', { name: 'broken', swarm_id: manager.swarmId, image: 'missing/app:1' });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const failed = await deliveredOnce('workload.failed', (b) => b.resource?.id === id);
    expect(failed).to.deep.include({ severity: 'critical' });
    expect(failed.message).to.contain('No such image: missing/app:1');
    const task = await deliveredOnce('task.failed', (b) => String(b.data?.error).includes('missing/app:1'));
    expect(task.resource).to.deep.equal({ type: 'node', id: manager.nodeId });
    expect((await api('GET', `/v1/compute/instances/${id}`)).json.data.status).to.equal('failed');
    expect(dropped).to.include.members(['resource.troubled', 'task.failed']);
  });

  it('volume backups: succeeded, verify_failed (the drill failed), failed, and a run never queued failed by the next one', async function () {
    this.timeout(90_000);
    const node = await api('POST', '/v1/nodes', { name: 'volume-node', ip_address: '192.0.2.30' });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const agent = await FakeAgent.forNode(t, nodeId);
    expect((await agent.heartbeat({ restic: { present: true } })).status).to.equal(200);
    volumeAgent = answerTasks(agent, {
      answers: { 'volume.backup': () => (typeof backupAnswer === 'string' ? undefined : backupAnswer) },
      refusals: { 'volume.backup': () => (typeof backupAnswer === 'string' ? backupAnswer : undefined) },
    });
    const target = await api('POST', '/v1/backups/targets', { name: 'mem', endpoint: s3.url, bucket: 'backups', access_key_id: 'key', secret_access_key: 'secret-key' });
    expect(target.status, target.text).to.equal(201);
    const volume = await api('POST', '/v1/volumes', { name: 'data', node_id: nodeId, folder: '/srv/data', type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    const volumeId = volume.json.data.id as string;
    await waitFor(async () => (await api('GET', `/v1/volumes/${volumeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, intervalMs: 200, what: 'the volume to be ready' });

    const backUp = async (verify: boolean) => {
      const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: target.json.data.id, ...(verify ? { verify: true } : {}) });
      expect(res.status, res.text).to.equal(202);
      return res.json.data.backup.id as string;
    };
    const result = { snapshot_id: 'abc123', files: 1, bytes: 10, bytes_added: 10, duration_seconds: 1, restic_version: 'restic 0.16.4' };
    backupAnswer = result;
    const ok = await backUp(false);
    const succeeded = await deliveredOnce('volume.backup.succeeded', (b) => b.data?.id === ok);
    expect(succeeded).to.deep.include({ severity: 'info', resource: { type: 'volume', id: volumeId } });

    backupAnswer = { ...result, verified: false, verified_at: new Date().toISOString(), verify_error: 'restored files differ' };
    const unverified = await backUp(true);
    const drill = await deliveredOnce('volume.backup.verify_failed', (b) => b.data?.id === unverified);
    expect(drill).to.deep.include({ severity: 'critical', resource: { type: 'volume', id: volumeId } });
    expect(drill.message).to.contain('restored files differ');
    await deliveredOnce('volume.backup.succeeded', (b) => b.data?.id === unverified);

    backupAnswer = 'restic: repository is locked';
    const broken = await backUp(false);
    const failed = await deliveredOnce('volume.backup.failed', (b) => b.data?.id === broken);
    expect(failed).to.deep.include({ severity: 'critical' });
    expect(failed.message).to.contain('restic: repository is locked');

    // A run recorded by a control plane that stopped before queueing its task (a row as it leaves it, older than a
    // lease) is failed by the next backup's busy check: that failure is announced too.
    const long = new Date(Date.now() - 3600_000).toISOString();
    await t.hangar.services.db.knex('backup_runs').insert({ id: 'bak-neverqueued', operation: 'backup', volume_id: volumeId, target_id: target.json.data.id, node_id: nodeId, status: 'running', started_at: long, created_at: long, updated_at: long });
    await backUp(false);
    const abandoned = await deliveredOnce('volume.backup.failed', (b) => b.data?.id === 'bak-neverqueued');
    expect(abandoned.message).to.contain('its control plane stopped before queueing its task');
    expect(dropped).to.include.members(['volume.backup.succeeded', 'volume.backup.verify_failed', 'volume.backup.failed']);
  });

  it('a failure whose notification cannot be written is still recorded (the loss logged), and nothing is delivered', async function () {
    this.timeout(60_000);
    await failOutboxInserts(t.hangar.services.db.knex, dialect.name, true, `new.event_type = 'workload.failed'`);
    try {
      const created = await api('POST', '/v1/compute/instances', { name: 'unheard', swarm_id: manager.swarmId, image: 'missing/app:2' });
      expect(created.status, created.text).to.equal(202);
      const id = created.json.data.id as string;
      await waitFor(async () => (await api('GET', `/v1/compute/instances/${id}`)).json.data.status === 'failed', { timeoutMs: 30_000, intervalMs: 200, what: 'the instance to fail' });
      await waitFor(() => t.logs.some((l) => l.includes('resource.troubled') && l.includes('was not written')), { timeoutMs: 10_000, what: 'the loss logged' });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(received('workload.failed', (b) => b.resource?.id === id)).to.deep.equal([]);
    } finally {
      await failOutboxInserts(t.hangar.services.db.knex, dialect.name, false);
    }
  });

  it('a node leaving a swarm (the swarm deleted): cluster.member.left', async function () {
    this.timeout(60_000);
    // Forced: its (failed) instances are removed first.
    const deleted = await api('DELETE', `/v1/swarms/${manager.swarmId}?force=true`);
    expect(deleted.status, deleted.text).to.be.oneOf([200, 202]);
    const body = await deliveredOnce('cluster.member.left', (b) => b.resource?.id === manager.swarmId);
    expect(body.data).to.deep.equal({ cluster_id: manager.swarmId, node_id: manager.nodeId });
    expect(dropped).to.include('cluster.member.left');
  });
});
