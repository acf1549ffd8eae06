import { expect } from 'chai';
import { agentTaskKinds } from '../../../agent/executors/index.js';
import { isDriverCall } from '../../../core/tasks/kinds.js';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { TestDialect } from '../../support/dialects.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { postgresAvailable, requireService } from '../../support/requirements.js';

const RUNTIME_NODE = 'fake-runtime-node';
/** Short enough for a test, long enough for a loaded machine. */
const OBSERVE_SECONDS = 1;
const OP_LEASE_SECONDS = 4;
const SETTINGS = { observe_interval_seconds: OBSERVE_SECONDS, op_lease_seconds: OP_LEASE_SECONDS, call_timeout_seconds: 60, pickup_timeout_seconds: 30 };

/**
 * Two control planes on one PostgreSQL: B in this process, A a `hangar serve` of its own (its own
 * data dir, so its own holder of leadership leases; the CA and secrets shared through the keyring)
 * that the test kills. A test double stands in for the swarm manager's agent (it answers the orchestrator
 * calls, and holds the first deploy it is given without answering it).
 */
describe('two control planes on one PostgreSQL: loops that run once, operations taken over from a killed process', function () {
  this.timeout(120_000);
  const dialect = new TestDialect('postgres');
  let b: TestHangar;
  let a: ControlPlane | undefined;
  let admin: Credentials;
  let agent: FakeAgent;
  let swarmId = '';
  let stopping = false;
  let loop: Promise<void> | undefined;
  /** Every orchestrator call the manager's agent received: driver method, input, when. */
  const calls: Array<{ method: string; input: any; at: number }> = [];
  /** The deploy the agent holds (never answers). */
  let held: string | null = null;
  const deployed = new Map<string, { name: string; image: string; replicas: number; labels: Record<string, string> }>();

  const viaB = (method: string, p: string, body?: unknown) => b.request(method, p, { body, headers: bearer(admin.token) });
  const viaA = (method: string, p: string, body?: unknown) => a!.client.request(method, p, { body, headers: bearer(admin.token) });

  const workloadState = (w: { name: string; image: string; replicas: number; labels: Record<string, string> }) => ({
    name: w.name,
    labels: w.labels,
    image: w.image,
    replicas: w.replicas,
    running: w.replicas,
    tasks: Array.from({ length: w.replicas }, () => ({ runtime_node_id: RUNTIME_NODE, state: 'running', desired_state: 'running', message: null, error: null, updated_at: new Date().toISOString() })),
    ports: [],
    limits: { cpus: null, memoryMb: null },
    stack: null,
  });

  function answer(method: string, input: any): unknown {
    switch (method) {
      case 'init':
        return { cluster_id: 'fake-cluster', runtime_node_id: RUNTIME_NODE };
      case 'members':
        return { members: [{ runtime_node_id: RUNTIME_NODE, hostname: 'fake-host', address: null, role: 'manager', state: 'ready', availability: 'active', leader: true }] };
      case 'inspectWorkloads':
        return { workloads: [...deployed.values()].filter((w) => !input.names || input.names.includes(w.name)).map(workloadState) };
      case 'deployWorkload': {
        const w = { name: input.spec.name, image: input.spec.image, replicas: input.spec.replicas, labels: input.spec.labels ?? {} };
        deployed.set(w.name, w);
        return workloadState(w);
      }
      default:
        return undefined;
    }
  }

  before(async function () {
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const storage = dialect.freshStorage();
    b = await startHangar(dialect, { storage, overrides: { clusters: SETTINGS } });
    admin = await bootstrapAdmin(b);
    a = await serveControlPlane({
      name: 'a',
      schema: storage.schema!,
      caPem: () => b.caPem,
      env: {
        HANGAR_CLUSTERS__OBSERVE_INTERVAL_SECONDS: String(SETTINGS.observe_interval_seconds),
        HANGAR_CLUSTERS__OP_LEASE_SECONDS: String(SETTINGS.op_lease_seconds),
        HANGAR_CLUSTERS__CALL_TIMEOUT_SECONDS: String(SETTINGS.call_timeout_seconds),
        HANGAR_CLUSTERS__PICKUP_TIMEOUT_SECONDS: String(SETTINGS.pickup_timeout_seconds),
      },
    });

    const node = await viaB('POST', '/v1/nodes', { name: 'manager', ip_address: '192.0.2.10' });
    expect(node.status, node.text).to.equal(201);
    agent = await FakeAgent.forNode(b, node.json.data.id);
    expect((await agent.heartbeat()).status).to.equal(200);
    const kinds = agentTaskKinds();
    loop = (async () => {
      while (!stopping) {
        const res = await agent.poll(1).catch(() => null);
        for (const task of (res?.json?.data ?? []) as Array<{ task_id: string; kind: string; payload: any }>) {
          const kind = kinds.get(task.kind);
          const { backend: _backend, ...input } = task.payload ?? {};
          const method = kind && isDriverCall(kind) ? kind.method : task.kind;
          calls.push({ method, input, at: Date.now() });
          if (method === 'deployWorkload' && held === null) {
            held = task.task_id;
            continue;
          }
          const output = answer(method, input) ?? {};
          await agent.report(task.task_id, { status: 'completed', output });
        }
      }
    })();

    const swarm = await viaB('POST', '/v1/swarms', { name: 'shared' });
    swarmId = swarm.json.data.id;
    expect((await viaB('POST', `/v1/swarms/${swarmId}/join`, { node_id: node.json.data.id })).status).to.equal(202);
    await waitFor(async () => (await viaB('GET', `/v1/swarms/${swarmId}`)).json.data.status === 'active', { timeoutMs: 30_000, intervalMs: 200, what: 'the swarm to be active' });
  });

  after(async function () {
    this.timeout(60_000);
    stopping = true;
    a?.child.kill('SIGKILL');
    await loop;
    await b?.stop();
    await dialect.cleanup();
  });

  it('observes each cluster once per interval between them, not once per control plane', async () => {
    const windowMs = 8_000;
    const from = Date.now();
    await new Promise((resolve) => setTimeout(resolve, windowMs));
    const observations = calls.filter((c) => c.method === 'inspectWorkloads' && !c.input.names && c.at >= from && c.at < from + windowMs).length;
    const intervals = windowMs / (OBSERVE_SECONDS * 1000);
    // Two observers would ask about twice per interval; one asks at most once (a loaded machine may skip some).
    expect(observations, `${observations} observations in ${intervals} intervals`).to.be.at.least(2).and.at.most(intervals + 1);
  });

  it('a deploy started on A, whose process is killed, is taken over by B once A’s lease expires, and completes once', async () => {
    const created = await viaA('POST', '/v1/compute/instances', { name: 'web', swarm_id: swarmId, image: 'nginx:1' });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    await waitFor(async () => held, { timeoutMs: 30_000, intervalMs: 100, what: 'A’s deploy to reach the agent' });
    const holder = await b.hangar.services.db.knex('compute_instances').where({ id }).first('op', 'op_id');
    expect(holder.op).to.equal('deploy');

    a!.child.kill('SIGKILL');
    const killedAt = Date.now();
    const running = await waitFor(
      async () => {
        const i = (await viaB('GET', `/v1/compute/instances/${id}`)).json.data;
        return i.status === 'running' ? i : null;
      },
      { timeoutMs: 60_000, intervalMs: 250, what: 'B to take the deploy over and finish it' },
    );
    expect(running).to.include({ name: 'web', status: 'running' });
    const deploys = calls.filter((c) => c.method === 'deployWorkload');
    expect(deploys, 'the held deploy and the one B ran').to.have.length(2);
    expect(deploys[1]!.at - killedAt, 'not before A’s lease ran out').to.be.at.least((OP_LEASE_SECONDS - 1) * 1000);
    const after = await b.hangar.services.db.knex('compute_instances').where({ id }).first('op', 'op_id');
    expect(after.op, 'no operation holds it any more').to.equal(null);
    // Completed once: no third deploy comes.
    await new Promise((resolve) => setTimeout(resolve, OP_LEASE_SECONDS * 1000));
    expect(calls.filter((c) => c.method === 'deployWorkload')).to.have.length(2);
  });
});
