import { expect } from 'chai';
import { ClusterMemberJoined, ClusterMemberLeft } from '../../../core/clusters/topics.js';
import { REACTIONS } from '../../../core/reactions.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin } from '../../support/identity.js';

/**
 * The volumes plugin's reaction to a member leaving (plugins/volumes/index.ts, afterLeaving) forgets
 * what was staged through the node for its whole cluster (Kubernetes: recorded on the node). Run
 * late — a retry after a failure — once the node has joined the cluster again, it leaves that alone:
 * the node is a member again. The cluster, its member and the volume are written to the store as
 * the kubernetes and volumes plugins would (no agent: nothing is asked of one).
 */
describeEachDialect('volumes: a member-left reaction run after the node joined again', (dialect) => {
  let t: TestHangar;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'kubernetes', 'volumes'], overrides: { clusters: { op_lease_seconds: 60 } } });
  });
  after(async () => {
    await t?.stop();
  });

  it('keeps the volume’s definition recorded on the node for the cluster', async function () {
    this.timeout(30_000);
    const admin = await bootstrapAdmin(t);
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'server', ip_address: '192.0.2.60' }, headers: bearer(admin.token) });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const { clusters, db, events } = t.hangar.services;
    const now = new Date().toISOString();
    const lease = { op: null, op_id: null, op_lease_until: null, op_rev: 0 };
    await clusters.clusters.insert({ id: 'cls-late', name: 'late', backend: 'k8s', status: 'active', manager_node_id: nodeId, runtime_id: null, error: null, ...lease, created_at: now, updated_at: now });
    const member = { cluster_id: 'cls-late', node_id: nodeId, role: 'manager' as const, status: 'active' as const, runtime_node_id: null, advertise_address: null, error: null, ...lease, created_at: now, updated_at: now };
    const first = await clusters.members.insert({ id: 'member-late-1', ...member });
    await db.knex('volumes').insert({ id: 'vol-late', name: 'late', node_id: nodeId, folder: '/srv/late', type: 'nfs', status: 'ready', created_at: now, updated_at: now });
    await db.knex('volume_definitions').insert({ id: 'def-late', volume_id: 'vol-late', node_id: nodeId, backend: 'k8s', created_at: now });

    // It leaves (its reaction kept with the change), joins again, and only then does the reaction run.
    await clusters.memberLeft(first);
    await clusters.members.insert({ id: 'member-late-2', ...member });
    events.publish(ClusterMemberLeft, { clusterId: 'cls-late', nodeId });

    await waitFor(async () => !(await db.knex(REACTIONS).where({ op: 'volumes:member-left' }).first()) || !(await db.knex('volume_definitions').where({ id: 'def-late' }).first()), {
      timeoutMs: 20_000,
      what: 'the member-left reaction to run',
    });
    expect(await db.knex('volume_definitions').where({ id: 'def-late' }).first(), 'the definition recorded on the node').to.include({ volume_id: 'vol-late', node_id: nodeId });
  });
});

/**
 * The other way round: the reaction to a member joining (plugins/volumes/index.ts,
 * volumes:member-joined) stages the cluster's NFS volumes on the node. Run late — a retry after a
 * failure — once the node has left the cluster, it asks nothing of it.
 */
describeEachDialect('volumes: a member-joined reaction run after the node left again', (dialect) => {
  let t: TestHangar;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes'], overrides: { clusters: { op_lease_seconds: 60 } } });
  });
  after(async () => {
    await t?.stop();
  });

  it('stages no volume on the node and queues it no task', async function () {
    this.timeout(30_000);
    const admin = await bootstrapAdmin(t);
    const nodeIds: string[] = [];
    for (const [name, ip] of [['holder', '192.0.2.61'], ['visitor', '192.0.2.62']]) {
      const node = await t.request('POST', '/v1/nodes', { body: { name, ip_address: ip }, headers: bearer(admin.token) });
      expect(node.status, node.text).to.equal(201);
      nodeIds.push(node.json.data.id as string);
    }
    const [holder, visitor] = nodeIds as [string, string];
    const { clusters, db, events } = t.hangar.services;
    const now = new Date().toISOString();
    const lease = { op: null, op_id: null, op_lease_until: null, op_rev: 0 };
    await clusters.clusters.insert({ id: 'swm-late', name: 'late', backend: 'swarm', status: 'active', manager_node_id: holder, runtime_id: null, error: null, ...lease, created_at: now, updated_at: now });
    const member = { cluster_id: 'swm-late', role: 'worker' as const, status: 'joining' as const, runtime_node_id: null, advertise_address: null, error: null, ...lease, created_at: now, updated_at: now };
    await clusters.members.insert({ id: 'member-holder', ...member, node_id: holder, role: 'manager', status: 'active' });
    const joining = await clusters.members.insert({ id: 'member-visitor', ...member, node_id: visitor });
    await db.knex('volumes').insert({ id: 'vol-held', name: 'held', node_id: holder, folder: '/srv/held', type: 'nfs', status: 'ready', server_ip: '192.0.2.61', created_at: now, updated_at: now });

    // It joins (its reaction kept with the change), leaves again, and only then does the reaction run.
    await clusters.memberJoined(joining, {});
    await clusters.members.remove(joining.id);
    events.publish(ClusterMemberJoined, { clusterId: 'swm-late', nodeId: visitor });

    await waitFor(async () => !(await db.knex(REACTIONS).where({ op: 'volumes:member-joined' }).first()) || Boolean(await db.knex('tasks').where({ node_id: visitor }).first()), {
      timeoutMs: 20_000,
      what: 'the member-joined reaction to run',
    });
    expect(await db.knex('tasks').where({ node_id: visitor }).select('kind'), 'tasks for the node that left').to.deep.equal([]);
    expect(await db.knex('volume_definitions').where({ node_id: visitor }).first(), 'a definition on it').to.equal(undefined);
  });
});
