import { expect } from 'chai';
import { TASKS } from '../../../core/tasks/migrations.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

// The object store API's checks, which all happen before anything is deployed. The swarm and the
// volumes are records only (a manager no agent answers for, volumes on a node outside the swarm):
// the tests assert that no task is ever queued.
const SWARM = 'swarm-s3apitest';

describeEachDialect('object stores API: validation, 404 and 409 before anything is deployed', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  let emptySwarm: string;

  const api = (method: string, path: string, body?: unknown, who: Credentials = admin) => t.request(method, path, { body, headers: bearer(who.token) });
  const create = (body: Record<string, unknown>) => api('POST', '/v1/s3/instances', { name: 'photos', swarm_id: SWARM, volume_id: 'vol-ready', ...body });
  const tasksQueued = async () => Number((await t.hangar.store.knex(TASKS).count({ n: '*' }).first())?.n ?? 0);

  before(async () => {
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 's3'],
      overrides: { s3: { image: 'lab/minio-standin:latest' } },
    });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'viewer', role: 'user' });
    const now = new Date().toISOString();
    const knex = t.hangar.store.knex;
    await knex('clusters').insert({ id: SWARM, name: 'lab', backend: 'swarm', status: 'active', manager_node_id: 'node-nobodyanswers', runtime_id: 'c', error: null, created_at: now, updated_at: now });
    const volume = { node_id: 'node-elsewhere', type: 'local', server_ip: null, error: null, nfs_export: null, created_at: now, updated_at: now };
    await knex('volumes').insert({ ...volume, id: 'vol-ready', name: 'ready', folder: '/srv/ready', status: 'ready' });
    await knex('volumes').insert({ ...volume, id: 'vol-preparing', name: 'preparing', folder: '/srv/preparing', status: 'preparing' });
    emptySwarm = (await api('POST', '/v1/swarms', { name: 'empty' })).json.data.id;
  });
  after(() => t?.stop());

  it('checks the body: name a DNS label, swarm and volume required, a password of 8 to 40 characters', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ name: 'Photos_1' }, 'body.name'],
      [{ swarm_id: undefined }, 'body.swarm_id'],
      [{ volume_id: undefined }, 'body.volume_id'],
      [{ password: 'short' }, 'body.password'],
      [{ password: 'x'.repeat(41) }, 'body.password'],
      [{ unknown: true }, 'body.unknown'],
    ];
    for (const [body, path] of cases) {
      const res = await create(body);
      expect(res.status, res.text).to.equal(400);
      expect(res.json.message).to.match(/^Validation failed:/);
      expect(res.json.details.map((d: { path: string }) => d.path)).to.include(path);
    }
  });

  it('answers 404 for an unknown swarm or volume, 409 for a swarm without a manager and for a volume it cannot use', async () => {
    expect((await create({ swarm_id: 'swarm-nope' })).status).to.equal(404);
    const noVolume = await create({ volume_id: 'vol-nope' });
    expect(noVolume.status).to.equal(404);
    expect(noVolume.json.message).to.contain('vol-nope');
    const empty = await create({ swarm_id: emptySwarm });
    expect(empty.status).to.equal(409);
    expect(empty.json.message).to.contain('has no manager yet');
    const preparing = await create({ volume_id: 'preparing' });
    expect(preparing.status).to.equal(409);
    expect(preparing.json.message).to.contain('is not ready');
    const elsewhere = await create({});
    expect(elsewhere.status).to.equal(409);
    expect(elsewhere.json.message).to.contain('not a member of swarm lab');
  });

  it('has deployed nothing after those refusals: no store, no task', async () => {
    expect((await api('GET', '/v1/s3/instances')).json).to.deep.equal({ data: [], next_cursor: null });
    expect(await tasksQueued()).to.equal(0);
  });

  it('answers 404 for unknown stores, 403 to non-admins for changes, and lets any user read', async () => {
    expect((await api('GET', '/v1/s3/instances/s3-unknown')).status).to.equal(404);
    expect((await api('DELETE', '/v1/s3/instances/s3-unknown')).status).to.equal(404);
    expect((await api('POST', '/v1/s3/instances', { name: 'x', swarm_id: SWARM, volume_id: 'vol-ready' }, user)).status).to.equal(403);
    expect((await api('DELETE', '/v1/s3/instances/s3-unknown', undefined, user)).status).to.equal(403);
    expect((await api('GET', '/v1/s3/instances', undefined, user)).status).to.equal(200);
  });
});
