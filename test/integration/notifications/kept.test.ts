import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { FORCED, failOutboxInserts } from './outbox-failure.js';

const WRONG_PASSWORD = 'Wrong-password-kept-123!';

/**
 * An audit entry and a node event are written with their notification's outbox rows, in one
 * transaction; when the outbox write fails (here: a trigger aborting every insert into it, as a full
 * disk or a lost connection at that point would), the record is written alone, the lost
 * notification logged: an audit entry wins over its notification (a refused login's entry was lost
 * with it), and a node event's caller, whose change is committed already, does not fail (creating
 * a node answered 500 after the node was made).
 */
describeEachDialect('notifications: a record is kept when its notification cannot be written', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'audit', 'nodes', 'notifications'], overrides: { notifications: { allow_http: true, allow_private_addresses: true } } });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'kept-user' });
    const api = (p: string, body: unknown) => t.request('POST', p, { body, headers: bearer(admin.token) });
    const channel = await api('/v1/notifications/channels', { name: 'ops', kind: 'webhook', url: 'http://127.0.0.1:9/hook' });
    expect(channel.status, channel.text).to.equal(201);
    const sub = await api('/v1/notifications/subscriptions', { channel_id: 'ops', event_types: ['audit.other', 'audit.nodes', 'node.created'] });
    expect(sub.status, sub.text).to.equal(201);
    await failOutboxInserts(t.hangar.services.db.knex, dialect.name, true);
  });
  after(async function () {
    this.timeout(30_000);
    await t?.stop();
  });

  const lost = (what: string) => t.logs.filter((l) => l.includes(what) && l.includes(FORCED));

  it("a refused login's audit entry (settled: the login writes) is recorded when its notification's outbox insert fails", async () => {
    const login = await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: WRONG_PASSWORD }, headers: { 'x-request-id': 'req-kept-login' } });
    expect(login.status, login.text).to.equal(401);
    const audit = await t.request('GET', '/v1/audit', { headers: bearer(admin.token) });
    expect(audit.status, audit.text).to.equal(200);
    expect((audit.json.data as any[]).find((e) => e.request_id === 'req-kept-login')).to.include({ route: '/v1/iam/login', status: 401, principal_id: null });
    const lines = lost('the notification of an entry was not written');
    expect(lines.filter((l) => l.includes('req-kept-login'))).to.have.length(1);
    expect(lines.join('\n')).not.to.include(WRONG_PASSWORD);
    const deliveries = await t.request('GET', '/v1/notifications/deliveries', { headers: bearer(admin.token) });
    expect(deliveries.json.data).to.deep.equal([]);
  });

  it("a refused write's audit entry (a request that wrote nothing: appended) is recorded when its notification's outbox insert fails", async () => {
    const refused = await t.request('POST', '/v1/nodes', { body: { name: 'not-made' }, headers: { ...bearer(user.token), 'x-request-id': 'req-kept-403' } });
    expect(refused.status, refused.text).to.equal(403);
    const audit = await t.request('GET', '/v1/audit', { headers: bearer(admin.token) });
    expect((audit.json.data as any[]).find((e) => e.request_id === 'req-kept-403')).to.include({ route: '/v1/nodes', status: 403, principal_id: user.userId });
    expect(lost('the notification of an entry was not written').filter((l) => l.includes('req-kept-403'))).to.have.length(1);
  });

  it('creating a node succeeds, its event recorded, when the node.created notification cannot be written', async () => {
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'kept-node' }, headers: { ...bearer(admin.token), 'x-request-id': 'req-kept-create' } });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const events = await t.request('GET', `/v1/nodes/events?node_id=${nodeId}`, { headers: bearer(admin.token) });
    expect(events.status, events.text).to.equal(200);
    expect((events.json.data as any[]).map((e) => e.kind)).to.include('node_created');
    expect(lost('the notification of a node event was not written').filter((l) => l.includes(nodeId))).to.have.length(1);
    // The audit entry of the creation (written with the node, pending until its answer) is settled without its notification.
    const audit = await t.request('GET', '/v1/audit', { headers: bearer(admin.token) });
    const entry = (audit.json.data as any[]).find((e) => e.request_id === 'req-kept-create');
    expect(entry).to.include({ status: 201, resource_id: nodeId });
    expect(lost('the notification of an entry was not written').filter((l) => l.includes('req-kept-create'))).to.have.length(1);
    // No notification of either was written (none half-written).
    expect((await t.request('GET', '/v1/notifications/deliveries', { headers: bearer(admin.token) })).json.data).to.deep.equal([]);
  });
});
