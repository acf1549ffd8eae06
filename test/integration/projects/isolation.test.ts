import { expect } from 'chai';
import { loadConfig } from '../../../core/config.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { Stream } from '../../support/event-stream.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../../support/identity.js';

/**
 * Issue 30, "isolation everywhere data flows": the live events (stream and list), the gateway's
 * routing table, workloads' logs and the audit log answer a caller only within its projects, and an
 * open stream follows a membership's removal.
 */
describeEachDialect('isolation by project: events, the gateway, logs, the audit log', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let audrey: Credentials;
  let alice: Credentials;
  let bob: Credentials;
  let carol: Credentials;
  let bobKey: { accessKeyId: string; secretAccessKey: string };
  const projects: Record<'a' | 'b', string> = { a: '', b: '' };
  const streams: Stream[] = [];

  const as = (creds: Credentials) => (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(creds.token) });
  const api = (method: string, p: string, body?: unknown) => as(admin)(method, p, body);
  const open = async (creds: Credentials) => {
    const s = await Stream.open(t, bearer(creds.token));
    expect(s.status).to.equal(200);
    streams.push(s);
    return s;
  };
  const changed = (id: string) => (d: { id?: string }) => d.id === id;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins });
    admin = await bootstrapAdmin(t);
    audrey = await createUser(t, admin, { username: 'audrey', role: 'auditor' });
    alice = await createUser(t, admin, { username: 'alice', role: 'user' });
    bob = await createUser(t, admin, { username: 'bob', role: 'user' });
    carol = await createUser(t, admin, { username: 'carol', role: 'user' });
    for (const p of ['a', 'b'] as const) {
      const res = await api('POST', '/v1/projects', { name: `iso-${p}` });
      expect(res.status, res.text).to.equal(201);
      projects[p] = res.json.data.id;
    }
    expect((await api('PUT', '/v1/projects/iso-a/members/alice', { role: 'viewer' })).status).to.equal(201);
    expect((await api('PUT', '/v1/projects/iso-b/members/bob', { role: 'deployer' })).status).to.equal(201);
    const key = await as(bob)('POST', `/v1/iam/users/${bob.userId}/keys`, { description: 'ci of b', project: 'iso-b', role: 'viewer' });
    expect(key.status, key.text).to.equal(201);
    bobKey = { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key };
    // Each project: a swarm, a service on it, and its load balancer (records only: no machine is needed to read them).
    const knex = t.hangar.services.db.knex;
    const now = new Date().toISOString();
    for (const p of ['a', 'b'] as const) {
      await knex('clusters').insert({ id: `swm-iso${p}`, name: `iso-swarm-${p}`, backend: 'swarm', status: 'empty', project_id: projects[p], created_at: now, updated_at: now });
      await knex('services').insert({ id: `svc-iso${p}`, name: `iso-svc-${p}`, cluster_id: `swm-iso${p}`, backend: 'swarm', status: 'failed', spec: 'services: {}', secret_refs: '[]', config_refs: '[]', replicas: '{}', routes: '[]', created_at: now, updated_at: now });
      await knex('load_balancers').insert({ id: `lb-iso${p}`, name: `lb-iso-swarm-${p}`, cluster_id: `swm-iso${p}`, runtime_name: `iso-lb-${p}`, image: 'x', http_port: 80, status: 'failed', routes: '[]', created_at: now, updated_at: now });
    }
  });
  after(async () => {
    for (const s of streams) s.close();
    await t?.stop();
  });

  it('answers each caller, on the stream and in GET /v1/events, the events of its projects’ resources and of the installation things it may list', async function () {
    this.timeout(30_000);
    const asAlice = await open(alice);
    const asBob = await open(bob);
    expect((await api('PATCH', '/v1/projects/iso-a', { description: 'first' })).status).to.equal(200);
    const removing = await api('DELETE', '/v1/services/svc-isob');
    expect(removing.status, removing.text).to.be.below(300);
    const node = await api('POST', '/v1/nodes', { name: 'iso-node' });
    const nodeId = node.json.data.id as string;
    expect((await api('PATCH', '/v1/projects/iso-b', { description: 'second' })).status).to.equal(200);

    const ours = new Set([projects.a, projects.b, 'svc-isob', nodeId]);
    const listed = async (headers: Record<string, string>) => {
      const res = await t.request('GET', '/v1/events?types=resource.changed', { headers });
      expect(res.status, res.text).to.equal(200);
      return res.json.data.map((e: { data: Record<string, unknown> }) => e.data).filter((d: { id: string }) => ours.has(d.id));
    };
    const seen = async (headers: Record<string, string>) => [...new Set((await listed(headers)).map((d: { id: string }) => d.id))].sort();
    // Every change is journalled once the last one is: they keep their order.
    await waitFor(async () => (await seen(bearer(admin.token))).includes(projects.b), { what: 'the last change journalled' });
    const all = [projects.a, projects.b, 'svc-isob', nodeId].sort();
    expect(await seen(bearer(admin.token)), 'admin').to.deep.equal(all);
    expect(await seen(bearer(audrey.token)), 'auditor').to.deep.equal(all);
    expect(await seen(bearer(alice.token)), 'a viewer of a').to.deep.equal([projects.a, nodeId].sort());
    expect(await seen(bearer(bob.token)), 'a deployer of b').to.deep.equal([projects.b, 'svc-isob', nodeId].sort());
    // A key of a project holds its project's kinds only: the journal (an installation kind) is not among them.
    const byKey = await signed(t, bobKey, 'GET', '/v1/events?types=resource.changed');
    expect([byKey.status, byKey.json.message]).to.deep.equal([403, 'Insufficient permissions: this needs events:read, and this credential is limited to other permissions']);
    expect(await seen(bearer(carol.token)), 'a member of nothing').to.deep.equal([nodeId]);
    // A project's resource says its project; an installation thing says none.
    const data = await listed(bearer(admin.token));
    expect(data.find((d: { id: string }) => d.id === 'svc-isob')).to.include({ type: 'service', project_id: projects.b });
    expect(data.find((d: { id: string }) => d.id === projects.a)).to.include({ type: 'project', project_id: projects.a });
    expect(data.find((d: { id: string }) => d.id === nodeId)).to.not.have.property('project_id');

    // The streams carry the same, in order: what came before the last event each may see has arrived.
    await asAlice.until('the node, for a viewer of a', 'resource.changed', changed(nodeId));
    expect(asAlice.of('resource.changed', changed(projects.a))).to.have.length.above(0);
    expect(asAlice.of('resource.changed', changed('svc-isob'))).to.deep.equal([]);
    await asBob.until('project b’s change, for a deployer of b', 'resource.changed', changed(projects.b));
    expect(asBob.of('resource.changed', changed('svc-isob'))).to.have.length.above(0);
    expect(asBob.of('resource.changed', changed(projects.a))).to.deep.equal([]);
  });

  it('an open stream follows a membership: removed, it stops carrying the project’s events; added again, it carries them again', async function () {
    this.timeout(60_000);
    const asAlice = await open(alice);
    let round = 0;
    /** Changes project a, then adds a node: whether alice's stream carried a's change before the node (which it always sees). */
    const carriesA = async () => {
      round++;
      const before = asAlice.of('resource.changed', changed(projects.a)).length;
      expect((await api('PATCH', '/v1/projects/iso-a', { description: `round ${round}` })).status).to.equal(200);
      const mark = await api('POST', '/v1/nodes', { name: `iso-mark-${round}` });
      await asAlice.until(`the mark of round ${round}`, 'resource.changed', changed(mark.json.data.id));
      return asAlice.of('resource.changed', changed(projects.a)).length > before;
    };
    expect(await carriesA(), 'a member').to.equal(true);
    expect((await api('DELETE', '/v1/projects/iso-a/members/alice')).status).to.equal(200);
    // The removal reaches the stream with its store notice: from then on, never again.
    await waitFor(async () => !(await carriesA()), { timeoutMs: 20_000, intervalMs: 10, what: 'the stream to stop carrying project a' });
    expect(await carriesA(), 'removed').to.equal(false);
    expect(asAlice.of('end'), 'the stream goes on').to.deep.equal([]);
    expect((await api('PUT', '/v1/projects/iso-a/members/alice', { role: 'viewer' })).status).to.equal(201);
    await waitFor(() => carriesA(), { timeoutMs: 20_000, intervalMs: 10, what: 'the stream to carry project a again' });
  });

  it('GET /v1/gateway answers the routing table and balancers of the caller’s projects (?project= narrows)', async () => {
    const balancers = async (headers: Record<string, string>, query = '') => {
      const res = await t.request('GET', `/v1/gateway${query}`, { headers });
      expect(res.status, res.text).to.equal(200);
      return res.json.data.load_balancers.map((lb: { id: string }) => lb.id).filter((id: string) => id.startsWith('lb-iso')).sort();
    };
    expect(await balancers(bearer(admin.token))).to.deep.equal(['lb-isoa', 'lb-isob']);
    expect(await balancers(bearer(audrey.token))).to.deep.equal(['lb-isoa', 'lb-isob']);
    expect(await balancers(bearer(alice.token))).to.deep.equal(['lb-isoa']);
    expect(await balancers(bearer(bob.token))).to.deep.equal(['lb-isob']);
    expect(await balancers(bearer(carol.token))).to.deep.equal([]);
    expect((await signed(t, bobKey, 'GET', '/v1/gateway')).json.data.load_balancers.map((lb: { id: string }) => lb.id)).to.deep.equal(['lb-isob']);
    expect(await balancers(bearer(admin.token), '?project=iso-a')).to.deep.equal(['lb-isoa']);
    const other = await t.request('GET', '/v1/gateway?project=iso-b', { headers: bearer(alice.token) });
    expect([other.status, other.json.message]).to.deep.equal([400, 'Validation failed: query.project: no project iso-b']);
  });

  it('reads workloads’ logs within the project (another’s is 404, a viewer’s 403) and keeps the audit log installation roles’', async () => {
    const logs = async (creds: Credentials, id: string) => {
      const res = await as(creds)('POST', `/v1/services/${id}/logs`);
      return [res.status, res.json.message];
    };
    expect(await logs(bob, 'svc-isoa'), 'a deployer of b on a’s service').to.deep.equal([404, 'No service svc-isoa']);
    // A viewer holds services:logs nowhere: refused before anything is looked up.
    expect(await logs(alice, 'svc-isoa')).to.deep.equal([403, 'Insufficient permissions: this needs services:logs, and role user does not grant it']);
    for (const creds of [alice, bob, carol]) expect((await as(creds)('GET', '/v1/audit')).status).to.equal(403);
    expect((await signed(t, bobKey, 'GET', '/v1/audit')).status).to.equal(403);
    expect((await as(audrey)('GET', '/v1/audit')).status).to.equal(200);
  });
});
