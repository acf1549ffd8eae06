import { expect } from 'chai';
import { TASKS } from '../../../core/tasks/migrations.js';
import { SERVICES } from '../../../plugins/services/migrations.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

// The services API's checks, which all happen before anything is deployed. The swarm here is a
// record with a manager no agent answers for: any deployment would be left as a pending task, and
// the tests assert that none is queued.
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const SWARM = 'swarm-servicesapitest';
const GOOD = 'services:\n  web:\n    image: busybox\n';

describeEachDialect('services API: validation, 404 and 409 before anything is deployed', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  let emptySwarm: string;

  const api = (method: string, path: string, body?: unknown, who: Credentials = admin) => t.request(method, path, { body, headers: bearer(who.token) });
  const create = (body: Record<string, unknown>) => api('POST', '/v1/services', { name: 'shop', swarm_id: SWARM, ...body });
  const tasksQueued = async () => Number((await t.hangar.store.knex(TASKS).count({ n: '*' }).first())?.n ?? 0);

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'compute', 'services'] });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'viewer', role: 'user' });
    const now = new Date().toISOString();
    await t.hangar.store.knex('clusters').insert({ id: SWARM, name: 'lab', backend: 'swarm', status: 'active', manager_node_id: 'node-nobodyanswers', runtime_id: 'c', error: null, created_at: now, updated_at: now });
    await t.hangar.store.knex('clusters').insert({ id: 'cluster-k8s', name: 'kube', backend: 'k8s', status: 'active', manager_node_id: 'node-nobodyanswers', runtime_id: null, error: null, created_at: now, updated_at: now });
    emptySwarm = (await api('POST', '/v1/swarms', { name: 'empty' })).json.data.id;
  });
  after(() => t?.stop());

  it('takes exactly one backend: compose (swarm_id + compose_file) or a manifest on a Kubernetes cluster (cluster_id + manifest), each checked', async () => {
    const both = await create({ compose_file: b64(GOOD), cluster_id: 'cls-1', manifest: 'x' });
    expect(both.status).to.equal(400);
    expect(both.json.message).to.contain('not both');
    const neither = await api('POST', '/v1/services', { name: 'shop' });
    expect(neither.status).to.equal(400);
    expect(neither.json.message).to.contain('give either swarm_id and compose_file');
    const manifest = 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: shop}\nspec: {replicas: 2}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n';
    const k8sCases: Array<[Record<string, unknown>, number, string]> = [
      [{ cluster_id: 'cls-1', manifest: 'apiVersion: v1' }, 400, 'Validation failed: manifest is not base64 (give the YAML file base64-encoded)'],
      [{ cluster_id: 'cls-1' }, 400, 'Validation failed: body.manifest is required'],
      [{ manifest: b64(manifest) }, 400, 'Validation failed: body.cluster_id is required'],
      [{ cluster_id: 'cluster-k8s', manifest: b64('kind: [\n') }, 400, 'Validation failed: manifest document 1 is not valid YAML: line 2, column 1: Flow sequence in block collection must be sufficiently indented and end with a ]'],
      [{ cluster_id: 'kube', manifest: b64(`${manifest}---\njust: text\n`) }, 400, 'Validation failed: manifest document 3 is not a Kubernetes object (it needs apiVersion, kind and metadata.name)'],
      [{ cluster_id: 'cls-1', manifest: b64(manifest) }, 404, 'No cluster cls-1'],
      [{ cluster_id: SWARM, manifest: b64(manifest) }, 404, `No cluster ${SWARM} (it is a swarm: name it with swarm_id)`],
    ];
    for (const [body, status, message] of k8sCases) {
      const k8s = await api('POST', '/v1/services', { name: 'shop', ...body });
      expect(k8s.status, JSON.stringify(body)).to.equal(status);
      expect(k8s.json.message, JSON.stringify(body)).to.equal(message);
    }
    expect(await tasksQueued(), 'nothing queued for a refused service').to.equal(0);
    const noFile = await create({});
    expect(noFile.status).to.equal(400);
    expect(noFile.json.details).to.deep.equal([{ path: 'body.compose_file', message: 'is required' }]);
    const noSwarm = await api('POST', '/v1/services', { name: 'shop', compose_file: b64(GOOD) });
    expect(noSwarm.json.details).to.deep.equal([{ path: 'body.swarm_id', message: 'is required' }]);
    const badName = await create({ name: 'Shop_1', compose_file: b64(GOOD) });
    expect(badName.status).to.equal(400);
    expect(badName.json.message).to.match(/^Validation failed: body.name/);
  });

  it('checks the compose file: base64, YAML (naming the line), services with images, hangar secrets and configs, x-hangar', async () => {
    const cases: Array<[string, string]> = [
      ['%%% not base64 %%%', 'compose_file is not base64'],
      [b64('services:\n  web:\n    image: busybox\n   command: [oops\n'), 'compose_file is not valid YAML: line 4, column'],
      [b64('version: "3.8"\n'), 'needs a non-empty services: map'],
      [b64('services:\n  web:\n    command: sleep 1\n'), 'service web has no image'],
      [b64('services:\n  web: {image: busybox, secrets: [db]}\nsecrets:\n  db:\n    file: ./db.txt\n'), 'compose secrets must be hangar secrets: create it with POST /v1/secrets'],
      [b64('services:\n  web: {image: busybox, secrets: [db]}\nsecrets:\n  db: {name: db-password}\n'), 'secret db names no hangar secret "db-password" on this swarm'],
      [b64('services:\n  web: {image: busybox}\nconfigs:\n  site: {}\n'), 'config site names no hangar config "site" on this swarm: create it with POST /v1/configs first'],
      [b64('services:\n  web: {image: busybox, x-hangar: {domain: shop.test}}\n'), 'x-hangar.port'],
    ];
    for (const [file, message] of cases) {
      const res = await create({ compose_file: file });
      expect(res.status, `${message}: ${res.text}`).to.equal(400);
      expect(res.json.message).to.contain(message);
    }
    const whole = b64('services:\n  web:\n    image: busybox\n   command: [oops\n');
    expect((await create({ compose_file: whole })).json.details[0].path).to.equal('body.compose_file');
  });

  it('answers 404 for an unknown swarm and 409 for a swarm without a manager', async () => {
    const unknown = await create({ swarm_id: 'swarm-nope', compose_file: b64(GOOD) });
    expect(unknown.status).to.equal(404);
    const empty = await create({ swarm_id: emptySwarm, compose_file: b64(GOOD) });
    expect(empty.status).to.equal(409);
    expect(empty.json.message).to.contain('has no manager yet');
  });

  it('has deployed nothing after all those refusals: no service, no task', async () => {
    expect((await api('GET', '/v1/services')).json).to.deep.equal({ data: [], next_cursor: null });
    expect(await tasksQueued()).to.equal(0);
  });

  it('answers 404 for unknown services and log tasks, 403 to non-admins for changes, and lets any user read', async () => {
    for (const [method, path] of [
      ['GET', '/v1/services/svc-unknown'],
      ['PUT', '/v1/services/svc-unknown'],
      ['DELETE', '/v1/services/svc-unknown'],
      ['POST', '/v1/services/svc-unknown/stop'],
      ['POST', '/v1/services/svc-unknown/start'],
      ['POST', '/v1/services/svc-unknown/logs'],
      ['GET', '/v1/services/svc-unknown/logs/task-unknown'],
    ] as const) {
      const res = await api(method, path, method === 'PUT' ? { compose_file: b64(GOOD) } : undefined);
      expect(res.status, `${method} ${path}`).to.equal(404);
    }
    expect((await api('POST', '/v1/services', { name: 'x', swarm_id: SWARM, compose_file: b64(GOOD) }, user)).status).to.equal(403);
    expect((await api('GET', '/v1/services', undefined, user)).status).to.equal(200);
    const logs = await api('POST', '/v1/services/svc-unknown/logs?lines=20000');
    expect(logs.status, 'lines at most 10000').to.equal(400);
  });

  it('refuses a domain another workload on the swarm routes: a service after an instance, an instance after a service (409 naming it)', async () => {
    const routed = (domain: string) => b64(`services:\n  web: {image: busybox, x-hangar: {domain: ${domain}, port: 80}}\n`);
    const front = await api('POST', '/v1/compute/instances', { name: 'front', swarm_id: SWARM, image: 'busybox', ports: ['8080:80'], domain: 'front.example.test' });
    expect(front.status, front.text).to.equal(202);
    const clash = await create({ name: 'clash', compose_file: routed('front.example.test') });
    expect(clash.status, clash.text).to.equal(409);
    expect(clash.json.message).to.equal(`Domain front.example.test is already routed to instance ${front.json.data.id}`);
    const own = await create({ name: 'own', compose_file: routed('own.example.test') });
    expect(own.status, own.text).to.equal(202);
    const back = await api('POST', '/v1/compute/instances', { name: 'back', swarm_id: SWARM, image: 'busybox', ports: ['8081:80'], domain: 'own.example.test' });
    expect(back.status, back.text).to.equal(409);
    expect(back.json.message).to.equal(`Domain own.example.test is already routed to service ${own.json.data.id}`);
    // No agent answers here: the deploy would fail in the end, which lets the file be replaced.
    await t.hangar.store.knex(SERVICES).where({ id: own.json.data.id }).update({ status: 'failed' });
    const again = await api('PUT', `/v1/services/${own.json.data.id}`, { compose_file: routed('own.example.test') });
    expect(again.status, `a service keeps its own domain when its file is replaced: ${again.text}`).to.equal(202);
  });
});
