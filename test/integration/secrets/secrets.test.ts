import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { randomToken } from '../../../core/ids.js';
import { docker } from '../../../lab/docker.js';
import { secretsOf, SecretUsersPoint, type ObjectKind } from '../../../plugins/secrets/api.js';
import { cleanupAgents } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';
import { TaskQueued } from '../../../core/tasks/queue.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/** What the engine holds of a secret or config: its labels, or null when there is no such object. */
async function runtimeObject(kind: ObjectKind, name: string): Promise<{ labels: Record<string, string>; data?: string } | null> {
  const res = await docker([kind, 'inspect', name]);
  if (res.code !== 0) return null;
  const spec = JSON.parse(res.stdout)[0].Spec as { Labels: Record<string, string>; Data?: string };
  return { labels: spec.Labels ?? {}, data: spec.Data };
}

/**
 * Secrets and configs through the API, created as real objects on this host's swarm by a real
 * agent (the host engine's swarm; see test/support/host-swarm.ts). Every object is named per run
 * and removed at the end.
 */
describeEachDialect('secrets and configs: encrypted at rest, versioned objects on a real swarm', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let reader: Credentials;
  let member: SwarmMember;
  const run = randomToken(6);
  const named = (n: string) => `${n}-${run}`;
  const PLAIN = `s3cr3t-value-${run}`;
  /** What the fake services plugin reports: object id → services using it; and the redeploys it was asked for. */
  const using = new Map<string, Array<{ id: string; name: string }>>();
  const redeployed: string[] = [];
  const failRedeploy = new Set<string>();

  const api = (method: string, p: string, body?: unknown, creds: Credentials = admin) => t.request(method, p, { body, headers: bearer(creds.token) });

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, !missing, missing ?? '');
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: SWARM_TEST_OVERRIDES });
    admin = await bootstrapAdmin(t);
    reader = await createUser(t, admin, { username: 'reader', role: 'user' });
    t.hangar.services.provided.contribute(SecretUsersPoint, {
      usersOf: async (_kind, ids) => new Map(ids.map((id) => [id, using.get(id) ?? []])),
      redeploy: async (serviceId) => {
        if (failRedeploy.has(serviceId)) throw new Error(`service ${serviceId} refused the update`);
        redeployed.push(serviceId);
      },
    });
    member = await hostSwarmMember(t, admin, named('sec'));
  });

  after(async function () {
    this.timeout(60_000);
    for (const kind of ['secret', 'config']) {
      const res = await docker([kind, 'ls', '--format', '{{.Name}}']);
      const ours = res.stdout.split('\n').filter((n) => n.includes(run));
      if (ours.length) await docker([kind, 'rm', ...ours]);
    }
    await cleanupAgents();
    await t?.stop();
  });

  it('refuses bad input: neither or both of swarm_id/cluster_id, a namespace on a swarm, a bad name, data that is not base64, empty or too large (400)', async () => {
    const base = { name: named('bad'), swarm_id: member.swarmId, data: b64('x') };
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ name: base.name, data: base.data }, 'exactly one of swarm_id and cluster_id'],
      [{ ...base, cluster_id: 'cls-1' }, 'exactly one of swarm_id and cluster_id'],
      [{ ...base, namespace: 'default' }, 'applies to Kubernetes clusters only'],
      [{ ...base, name: '.dot' }, 'Validation failed'],
      [{ ...base, name: `a${'b'.repeat(63)}` }, 'Validation failed'],
      [{ ...base, name: `a${'b'.repeat(61)}` }, 'must be at most 64 characters'],
      [{ ...base, data: 'not base64!' }, 'must be base64'],
      [{ ...base, data: 'abc' }, 'must be base64'],
      [{ ...base, data: '' }, 'must not be empty'],
      [{ ...base, data: randomBytes(500 * 1024).toString('base64') }, 'must be smaller than 500 KB'],
      [{ ...base, extra: true }, 'Validation failed'],
    ];
    for (const [body, message] of cases) {
      for (const kind of ['secrets', 'configs']) {
        const res = await api('POST', `/v1/${kind}`, body);
        expect(res.status, `${kind} ${JSON.stringify(body).slice(0, 200)}`).to.equal(400);
        expect(res.json.message).to.contain(message);
      }
    }
    expect((await api('POST', '/v1/secrets', { ...base, swarm_id: 'swarm-0000000000000000' })).status).to.equal(404);
    // cluster_id names a Kubernetes cluster: neither an unknown one nor this swarm (test/integration/kube/api-secrets.test.ts has the clusters).
    for (const cluster_id of ['cluster-0000000000000000', member.swarmId]) {
      expect((await api('POST', '/v1/secrets', { name: base.name, cluster_id, data: base.data })).status).to.equal(404);
    }
    expect((await api('GET', '/v1/secrets/nope')).status).to.equal(404);
    expect((await api('GET', '/v1/configs/sec-0000000000000000')).status).to.equal(404);
    // Only admins write; any authenticated user reads.
    expect((await api('POST', '/v1/secrets', base, reader)).status).to.equal(403);
    expect((await api('GET', '/v1/secrets', undefined, reader)).status).to.equal(200);
  });

  it('creates a secret: a runtime object <name>-v1 with hangar’s labels; the value encrypted at rest and never returned', async function () {
    this.timeout(30_000);
    const res = await api('POST', '/v1/secrets', { name: named('db-password'), swarm_id: member.swarmName, data: b64(PLAIN) });
    expect(res.status, res.text).to.equal(201);
    const s = res.json.data;
    expect(s.id).to.match(/^sec-/);
    expect(s).to.include({ name: named('db-password'), swarm_id: member.swarmId, version: 1, runtime_name: `${named('db-password')}-v1`, cluster_id: null });
    expect(s.services).to.deep.equal([]);
    expect(s).not.to.have.property('data');
    expect(await runtimeObject('secret', `${named('db-password')}-v1`)).to.deep.include({ labels: { 'io.hangar.object': s.id, 'io.hangar.version': '1' } });

    const got = await api('GET', `/v1/secrets/${s.id}`);
    const byName = await api('GET', `/v1/secrets/${named('db-password')}`);
    const list = await api('GET', `/v1/secrets?swarm_id=${member.swarmId}`);
    expect(byName.json.data).to.deep.equal(got.json.data);
    expect(list.json.data.map((x: { id: string }) => x.id)).to.include(s.id);
    // The swarm by name lists the same (it was an empty list); a filter naming no swarm is a 400.
    expect((await api('GET', `/v1/secrets?swarm_id=${member.swarmName}`)).json.data).to.deep.equal(list.json.data);
    const unknown = await api('GET', `/v1/secrets?swarm_id=no-such-swarm`);
    expect(unknown.status).to.equal(400);
    expect(unknown.json.message).to.contain('query.swarm_id names no swarm (no-such-swarm)');
    for (const r of [res, got, byName, list]) {
      expect(r.text).not.to.contain(PLAIN);
      expect(r.text).not.to.contain(b64(PLAIN));
    }
    const row = await t.hangar.services.db.knex('secrets').where({ id: s.id }).first();
    expect(row.data_sealed).to.match(/^v1:/);
    expect(JSON.stringify(row)).not.to.contain(PLAIN);
    expect(JSON.stringify(row)).not.to.contain(b64(PLAIN));
    expect(t.logs.join('\n')).not.to.contain(b64(PLAIN));
    // The services plugin resolves compose names to the current version.
    expect(await secretsOf(t.hangar.services).resolve('secret', member.swarmId, named('db-password'))).to.deep.equal({
      id: s.id,
      name: named('db-password'),
      runtime_name: `${named('db-password')}-v1`,
      version: 1,
    });
    expect(await secretsOf(t.hangar.services).resolve('config', member.swarmId, named('db-password'))).to.equal(null);
  });

  it('keeps the value out of the store outside its sealed column: the task that carried it to the agent is sealed too (db, WAL, every table)', async function () {
    this.timeout(30_000);
    const value = `wal-probe-${run}`;
    // Each task as the store holds it, read the moment it is queued (the plugin deletes it once done).
    const stored: Array<Promise<unknown>> = [];
    const unsubscribe = t.hangar.services.events.subscribe(TaskQueued, (task) => {
      // `.then` runs the query now (a knex query is lazy), while the row is there.
      stored.push(t.hangar.services.db.knex('tasks').where({ id: task.id }).first('payload').then((row) => row));
    });
    let res;
    try {
      res = await api('POST', '/v1/secrets', { name: named('at-rest'), swarm_id: member.swarmId, data: b64(value) });
    } finally {
      unsubscribe();
    }
    expect(res.status, res.text).to.equal(201);
    const rows = (await Promise.all(stored)).filter(Boolean);
    expect(rows.length, 'the value went to the agent in a task').to.be.greaterThan(0);
    for (const needle of [value, b64(value)]) expect(JSON.stringify(rows)).not.to.contain(needle);
    if (dialect.name === 'sqlite') {
      // What is on disk, old page copies in the WAL included.
      const file = path.join(t.hangar.services.config.data_dir, 'hangar.db');
      for (const f of [file, `${file}-wal`, `${file}-shm`].filter((f) => existsSync(f))) {
        const bytes = readFileSync(f);
        for (const needle of [value, b64(value)]) expect(bytes.includes(needle), `${needle} in ${f}`).to.equal(false);
      }
    } else {
      const knex = t.hangar.services.db.knex;
      const tables = (await knex.raw('select tablename from pg_tables where schemaname = current_schema()')).rows as Array<{ tablename: string }>;
      for (const { tablename } of tables) {
        const rows = (await knex.raw(`select t::text as row from "${tablename}" t`)).rows as Array<{ row: string }>;
        for (const needle of [value, b64(value)]) expect(rows.some((r) => r.row.includes(needle)), `${needle} in ${tablename}`).to.equal(false);
      }
    }
  });

  it('creates a config whose value is returned; the same name may be a secret and a config, not two secrets (409)', async function () {
    this.timeout(30_000);
    const text = 'listen 8080;\n';
    const res = await api('POST', '/v1/configs', { name: named('db-password'), swarm_id: member.swarmId, data: b64(text) });
    expect(res.status, res.text).to.equal(201);
    expect(res.json.data.id).to.match(/^cfg-/);
    expect(res.json.data.data).to.equal(b64(text));
    expect((await api('GET', `/v1/configs/${named('db-password')}`)).json.data.data).to.equal(b64(text));
    expect(await runtimeObject('config', `${named('db-password')}-v1`)).to.deep.equal({ labels: { 'io.hangar.object': res.json.data.id, 'io.hangar.version': '1' }, data: b64(text) });
    const dup = await api('POST', '/v1/secrets', { name: named('db-password'), swarm_id: member.swarmId, data: b64('other') });
    expect(dup.status).to.equal(409);
    expect(dup.json.message).to.contain(`A secret named ${named('db-password')} exists on swarm ${member.swarmName}`);
  });

  it('rotates: PUT makes version 2, redeploys the services using it, then removes version 1', async function () {
    this.timeout(30_000);
    const s = (await api('GET', `/v1/secrets/${named('db-password')}`)).json.data;
    using.set(s.id, [{ id: 'svc-web', name: 'web' }]);
    expect((await api('GET', `/v1/secrets/${s.id}`)).json.data.services).to.deep.equal(['web']);
    expect((await api('PUT', `/v1/secrets/${s.id}`, { data: 'not base64' })).status).to.equal(400);
    const res = await api('PUT', `/v1/secrets/${s.id}`, { data: b64(`${PLAIN}-2`) });
    expect(res.status, res.text).to.equal(200);
    expect(res.json.data).to.include({ version: 2, runtime_name: `${named('db-password')}-v2` });
    expect(res.json.data.redeployed).to.deep.equal(['web']);
    expect(res.json.data).not.to.have.property('data');
    expect(redeployed).to.deep.equal(['svc-web']);
    expect(await runtimeObject('secret', `${named('db-password')}-v2`)).to.deep.include({ labels: { 'io.hangar.object': s.id, 'io.hangar.version': '2' } });
    expect(await runtimeObject('secret', `${named('db-password')}-v1`)).to.equal(null);
    expect((await secretsOf(t.hangar.services).resolve('secret', member.swarmName, named('db-password')))?.runtime_name).to.equal(`${named('db-password')}-v2`);
  });

  it('keeps the old version when a redeploy fails (409 naming the service), and removes it at the next successful rotation', async function () {
    this.timeout(30_000);
    const s = (await api('GET', `/v1/secrets/${named('db-password')}`)).json.data;
    using.set(s.id, [{ id: 'svc-web', name: 'web' }, { id: 'svc-api', name: 'api' }]);
    failRedeploy.add('svc-api');
    const res = await api('PUT', `/v1/secrets/${s.id}`, { data: b64(`${PLAIN}-3`) });
    expect(res.status).to.equal(409);
    expect(res.json.message).to.contain('Version 3').and.contain('api (service svc-api refused the update)');
    expect(res.json.details).to.deep.equal([{ id: 'svc-api', name: 'api', error: 'service svc-api refused the update' }]);
    expect(await runtimeObject('secret', `${named('db-password')}-v2`)).not.to.equal(null);
    expect(await runtimeObject('secret', `${named('db-password')}-v3`)).not.to.equal(null);

    failRedeploy.clear();
    const next = await api('PUT', `/v1/secrets/${s.id}`, { data: b64(`${PLAIN}-4`) });
    expect(next.status, next.text).to.equal(200);
    expect(next.json.data).to.include({ version: 4 });
    expect(next.json.data.redeployed).to.have.members(['web', 'api']);
    for (const v of [2, 3]) expect(await runtimeObject('secret', `${named('db-password')}-v${v}`)).to.equal(null);
    expect(await runtimeObject('secret', `${named('db-password')}-v4`)).not.to.equal(null);
  });

  it('runs concurrent rotations one after the other: each gets its own version, the last one’s value is current', async function () {
    this.timeout(30_000);
    const created = await api('POST', '/v1/configs', { name: named('conc'), swarm_id: member.swarmId, data: b64('v1') });
    expect(created.status, created.text).to.equal(201);
    const [a, b] = await Promise.all([api('PUT', `/v1/configs/${named('conc')}`, { data: b64('a') }), api('PUT', `/v1/configs/${named('conc')}`, { data: b64('b') })]);
    expect([a.status, b.status]).to.deep.equal([200, 200]);
    expect([a.json.data.version, b.json.data.version].sort()).to.deep.equal([2, 3]);
    const last = a.json.data.version === 3 ? 'a' : 'b';
    const current = (await api('GET', `/v1/configs/${named('conc')}`)).json.data;
    expect(current).to.include({ version: 3, data: b64(last) });
    expect((await runtimeObject('config', `${named('conc')}-v3`))?.data).to.equal(b64(last));
    for (const v of [1, 2]) expect(await runtimeObject('config', `${named('conc')}-v${v}`)).to.equal(null);
    expect((await api('DELETE', `/v1/configs/${created.json.data.id}`)).status).to.equal(200);
  });

  it('refuses to delete while a service uses it (409 listing them); deletes the runtime object and the record', async function () {
    this.timeout(30_000);
    const s = (await api('GET', `/v1/secrets/${named('db-password')}`)).json.data;
    const busy = await api('DELETE', `/v1/secrets/${s.id}`);
    expect(busy.status).to.equal(409);
    expect(busy.json.message).to.equal(`Secret ${named('db-password')} is used by services web, api`);
    expect(busy.json.details.map((d: { name: string }) => d.name)).to.deep.equal(['web', 'api']);
    using.delete(s.id);
    const res = await api('DELETE', `/v1/secrets/${named('db-password')}`);
    expect(res.status, res.text).to.equal(200);
    expect(res.json.data).to.deep.equal({ id: s.id, deleted: true });
    expect(await runtimeObject('secret', `${named('db-password')}-v4`)).to.equal(null);
    expect((await api('GET', `/v1/secrets/${s.id}`)).status).to.equal(404);
    const config = await api('DELETE', `/v1/configs/${named('db-password')}`);
    expect(config.status).to.equal(200);
    expect(await runtimeObject('config', `${named('db-password')}-v1`)).to.equal(null);
  });

  it('takes a name for the id only when one object of the kind has it (409 when ambiguous); the swarm’s objects go with the swarm', async function () {
    this.timeout(30_000);
    const created = await api('POST', '/v1/secrets', { name: named('shared'), swarm_id: member.swarmId, data: b64('one') });
    expect(created.status, created.text).to.equal(201);
    // A second swarm group (no members: nothing can be created on it through the API) holding the same name.
    const other = await api('POST', '/v1/swarms', { name: named('other') });
    const { created_at: _c, updated_at: _u, ...row } = await t.hangar.services.db.knex('secrets').where({ id: created.json.data.id }).first();
    const now = new Date().toISOString();
    await t.hangar.services.db.knex('secrets').insert({ ...row, id: 'sec-second', cluster_id: other.json.data.id, created_at: now, updated_at: now });
    const ambiguous = await api('GET', `/v1/secrets/${named('shared')}`);
    expect(ambiguous.status).to.equal(409);
    expect(ambiguous.json.message).to.equal(`2 secrets are named ${named('shared')}; use the id`);
    expect((await api('GET', '/v1/secrets/sec-second')).json.data.swarm_id).to.equal(other.json.data.id);
    expect((await api('DELETE', `/v1/secrets/${named('shared')}`)).status).to.equal(409);
    // Deleting the empty swarm group drops its objects' records.
    expect((await api('DELETE', `/v1/swarms/${other.json.data.id}`)).status).to.equal(200);
    expect((await api('GET', '/v1/secrets/sec-second')).status).to.equal(404);
    expect((await api('GET', `/v1/secrets/${named('shared')}`)).json.data.id).to.equal(created.json.data.id);
    expect((await api('DELETE', `/v1/secrets/${named('shared')}`)).status).to.equal(200);
  });
});
