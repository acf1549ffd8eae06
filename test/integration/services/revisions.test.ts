import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';
import { swarmDouble } from '../../support/swarm-double.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'compute', 'services'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const SECRET_VALUE = 'hunter2-first';
const ROTATED_VALUE = 'hunter2-rotated';
const compose = (image: string, mode: string) => `services:
  web:
    image: ${image}
    environment:
      MODE: ${mode}
    secrets: [db]
secrets:
  db: {}
`;

/**
 * Spec revisions and rollback of instances and services (issue 29), through HTTP and the CLI, on
 * a swarm whose manager is a test double: it answers every orchestrator call (and holds a bundle
 * deploy when asked to, to see a busy service refuse a rollback). What a real swarm does with a
 * rolled-back spec is the swarm suites' business (test/integration/swarms/compute.test.ts).
 */
describeEachDialect('revisions and rollback of instances and services (HTTP and CLI)', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  let swarmId = '';
  let env: Record<string, string | undefined>;
  /** While set, bundle deploys wait for it (the service stays deploying). */
  let hold: Promise<void> | null = null;

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const called = (method: string) => manager.calls.filter((c) => c.method === method);
  const cli = async (args: string[]) => {
    const res = await hangarCli(args, { env, timeoutMs: 60_000 });
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(0);
    return res.stdout;
  };

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { clusters: { observe_interval_seconds: 1 } } });
    admin = await bootstrapAdmin(t);
    manager = await swarmDouble(t, admin.token, {
      answers: {
        deployBundle: async (input) => {
          await hold;
          return { name: input.name, services: [] };
        },
      },
    });
    swarmId = manager.swarmId;
    const dir = temp.make('hangar-revisions-');
    writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
    env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: path.join(dir, 'ca.pem'), HANGAR_CLI_POLL_MS: '100' };
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
    temp.cleanup();
  });

  describe('instances', function () {
    this.timeout(120_000);
    let id = '';
    const settled = () => waitFor(async () => ((await api('GET', `/v1/compute/instances/${id}`)).json.data.status === 'running' ? true : null), { timeoutMs: 30_000, intervalMs: 100, what: 'the instance to run' });
    const patch = async (body: Record<string, unknown>) => {
      const res = await api('PATCH', `/v1/compute/instances/${id}`, body);
      expect(res.status, res.text).to.equal(202);
      await settled();
      return res.json.data;
    };
    const revisions = async () => (await api('GET', `/v1/compute/instances/${id}/revisions`)).json.data;

    it('keeps a revision per change of the spec: number, time, who, and the JSON paths it changed', async () => {
      const created = await api('POST', '/v1/compute/instances', { name: 'web', swarm_id: swarmId, image: 'app:1', env: { MODE: 'a' } });
      expect(created.status, created.text).to.equal(202);
      id = created.json.data.id;
      await settled();
      await patch({ image: 'app:2' });
      await patch({ env: { MODE: 'b', EXTRA: 'x' } });
      const healthy = await patch({ health: { http: { path: '/healthz', port: 8080 }, interval_s: 5, retries: 2 } });
      expect(healthy.health).to.deep.equal({ http: { path: '/healthz', port: 8080 }, interval_s: 5, retries: 2 });
      // Scaling changes no spec: no revision.
      expect((await api('POST', `/v1/compute/instances/${id}/scale`, { replicas: 2 })).status).to.equal(202);
      await settled();

      const list = await revisions();
      expect(list.map((r: any) => r.number)).to.deep.equal([4, 3, 2, 1]);
      for (const r of list) {
        expect(r.who).to.have.property('id', admin.userId);
        expect(r.who.name).to.be.a('string').and.not.equal('');
        expect(Date.parse(r.time), r.time).to.be.a('number').and.not.NaN;
      }
      expect(list[2].changes).to.deep.equal([{ path: 'image', old: 'app:1', new: 'app:2' }]);
      expect(list[1].changes).to.deep.equal([
        { path: 'env.EXTRA', old: null, new: 'x' },
        { path: 'env.MODE', old: 'a', new: 'b' },
      ]);
      expect(list[0].changes).to.deep.equal([{ path: 'health', old: null, new: { http: { path: '/healthz', port: 8080 }, interval_s: 5, retries: 2 } }]);
      expect(list[3].changes).to.deep.include({ path: 'image', old: null, new: 'app:1' });
      // The health check reached the driver with the workload.
      expect(called('deployWorkload').at(-1)!.input.spec.health).to.deep.equal({ http: { path: '/healthz', port: 8080 }, interval_s: 5, retries: 2 });
    });

    it('rolls a revision out again as a new one equal to its spec (HTTP), and through the CLI', async () => {
      const res = await api('POST', `/v1/compute/instances/${id}/rollback`, { revision: 1 });
      expect(res.status, res.text).to.equal(202);
      await settled();
      const got = (await api('GET', `/v1/compute/instances/${id}`)).json.data;
      expect(got).to.deep.include({ image: 'app:1', env: { MODE: 'a' }, health: null, replicas: 2 });
      const spec = called('deployWorkload').at(-1)!.input.spec;
      expect(spec).to.deep.include({ image: 'app:1', env: { MODE: 'a' } });
      expect(spec).to.not.have.property('health');
      const [latest] = await revisions();
      expect(latest).to.include({ number: 5, rollback_of: 1 });
      expect(latest.changes.map((c: any) => c.path)).to.deep.equal(['env.EXTRA', 'env.MODE', 'health', 'image']);

      const history = await cli(['instance', 'history', 'web']);
      expect(history.split('\n')[0]).to.match(/^revision \| time\s+\| who\s+\| rollback of \| changes\s*$/);
      expect(history).to.contain('image: "app:1" → "app:2"');
      const back = await cli(['instance', 'rollback', id, '--revision', '2', '--wait']);
      expect(back).to.contain(`instance web (${id}) is running`);
      expect((await api('GET', `/v1/compute/instances/${id}`)).json.data).to.deep.include({ image: 'app:2', env: { MODE: 'a' } });
      const json = JSON.parse(await cli(['instance', 'history', id, '--json']));
      expect(json[0]).to.include({ number: 6, rollback_of: 2 });
    });

    it('keeps the last 10 revisions: the oldest go, and rolling back to one of them is a 404 naming what is kept', async () => {
      for (let n = 7; n <= 12; n++) await patch({ env: { MODE: 'a', COUNT: String(n) } });
      const list = await revisions();
      expect(list.map((r: any) => r.number)).to.deep.equal([12, 11, 10, 9, 8, 7, 6, 5, 4, 3]);
      const gone = await api('POST', `/v1/compute/instances/${id}/rollback`, { revision: 2 });
      expect(gone.status).to.equal(404);
      expect(gone.json.message).to.equal('Instance web has no revision 2 (it keeps revisions 3-12)');
    });

    it('answers bad input with a 4xx naming the field, and changes nothing', async () => {
      const cases: Array<[string, string, unknown, number, string]> = [
        ['POST', 'rollback', { revision: 0 }, 400, 'revision'],
        ['POST', 'rollback', { revision: 'one' }, 400, 'revision'],
        ['POST', 'rollback', {}, 400, 'revision'],
        ['PATCH', '', {}, 400, 'Validation failed'],
        ['PATCH', '', { name: 'other' }, 400, 'name'],
        ['PATCH', '', { health: { http: { path: '/', port: 80 }, tcp: { port: 80 } } }, 400, 'body.health: give exactly one of http, tcp and command (got http and tcp)'],
        ['PATCH', '', { health: { interval_s: 5 } }, 400, 'body.health: give exactly one of http, tcp and command (got none)'],
        ['PATCH', '', { health: { tcp: { port: 80 }, interval_s: 2, timeout_s: 5 } }, 400, 'body.health.timeout_s'],
        ['PATCH', '', { health: { tcp: { port: 70000 } } }, 400, 'body.health.tcp.port'],
        ['PATCH', '', { health: { http: { path: 'no-slash', port: 80 } } }, 400, 'body.health.http.path'],
      ];
      for (const [method, verb, body, status, says] of cases) {
        const res = await api(method, `/v1/compute/instances/${id}${verb ? `/${verb}` : ''}`, body);
        expect(res.status, `${method} ${verb} ${JSON.stringify(body)} → ${res.text}`).to.equal(status);
        expect(res.json.message, JSON.stringify(body)).to.contain(says);
      }
      const create = await api('POST', '/v1/compute/instances', { name: 'bad', swarm_id: swarmId, image: 'app:1', health: { command: ['true'], tcp: { port: 1 } } });
      expect(create.status).to.equal(400);
      expect(create.json.message).to.contain('body.health');
      expect((await api('POST', '/v1/compute/instances/inst-unknown/rollback', { revision: 1 })).status).to.equal(404);
      expect((await api('GET', '/v1/compute/instances/inst-unknown/revisions')).status).to.equal(404);
      expect((await revisions())[0].number).to.equal(12);
    });

    it('updates an instance through the CLI (hangar instance update): only what is given changes, as a new revision; none clears; a flag it cannot read is a usage error (exit 2), a field the API refuses exit 1, both naming it', async function () {
      this.timeout(180_000);
      const before = (await api('GET', `/v1/compute/instances/${id}`)).json.data;
      const out = await cli(['instance', 'update', 'web', '--image', 'app:3', '--env', 'MODE=c', '--rollout', '{"parallelism":2,"monitor_s":3}', '--health', '{"tcp":{"port":80}}', '--wait']);
      expect(out).to.contain(`instance web (${id}) is running`);
      const got = (await api('GET', `/v1/compute/instances/${id}`)).json.data;
      expect(got).to.deep.include({ image: 'app:3', env: { MODE: 'c' }, rollout: { parallelism: 2, monitor_s: 3 }, health: { tcp: { port: 80 } }, replicas: before.replicas, type: before.type });
      expect(called('deployWorkload').at(-1)!.input.spec.rollout).to.deep.equal({ parallelism: 2, monitor_s: 3 });
      const [latest] = await revisions();
      expect(latest.number).to.equal(13);
      expect(latest.changes.map((c: any) => c.path)).to.deep.equal(['env.COUNT', 'env.MODE', 'health', 'image', 'rollout']);

      await cli(['instance', 'update', id, '--rollout', 'none', '--health', 'none', '--wait']);
      expect((await api('GET', `/v1/compute/instances/${id}`)).json.data).to.deep.include({ image: 'app:3', rollout: null, health: null });

      const usage: Array<[string[], string]> = [
        [['--rollout', '{not json'], '--rollout takes a JSON object or none (got "{not json")'],
        [['--http-port', 'eighty'], '--http-port takes a port number or none'],
        [[], 'name what to change: --image'],
      ];
      for (const [flags, says] of usage) {
        const res = await hangarCli(['instance', 'update', id, ...flags], { env, timeoutMs: 60_000 });
        expect(res.code, `${flags.join(' ')}: ${res.stderr}`).to.equal(2);
        expect(res.stderr).to.contain(says);
      }
      const refused = await hangarCli(['instance', 'update', id, '--rollout', '{"monitor_s":0}'], { env, timeoutMs: 60_000 });
      expect(refused.code, refused.stderr).to.equal(1);
      expect(refused.stderr).to.contain('400').and.to.contain('body.rollout.monitor_s');
      expect((await revisions())[0].number, 'nothing refused made a revision').to.equal(14);
    });

    it('forgets the revisions of a terminated instance', async () => {
      expect((await api('DELETE', `/v1/compute/instances/${id}`)).status).to.equal(202);
      await waitFor(async () => ((await api('GET', `/v1/compute/instances/${id}`)).status === 404 ? true : null), { timeoutMs: 30_000, intervalMs: 100, what: 'the instance to go' });
      expect(await t.hangar.services.db.knex('spec_revisions').where({ resource_id: id }).count({ n: '*' }).first()).to.satisfy((r: any) => Number(r.n) === 0);
    });
  });

  describe('services', function () {
    this.timeout(120_000);
    let id = '';
    let secretId = '';
    const settled = () => waitFor(async () => ((await api('GET', `/v1/services/${id}`)).json.data.status === 'running' ? true : null), { timeoutMs: 30_000, intervalMs: 100, what: 'the service to run' });
    const revisions = async () => (await api('GET', `/v1/services/${id}/revisions`)).json.data;

    it('keeps a revision per new compose file, with the secret versions it used and never a value', async () => {
      const secret = await api('POST', '/v1/secrets', { name: 'db', swarm_id: swarmId, data: b64(SECRET_VALUE) });
      expect(secret.status, secret.text).to.equal(201);
      secretId = secret.json.data.id;
      const created = await api('POST', '/v1/services', { name: 'shop', swarm_id: swarmId, compose_file: b64(compose('shop:1', 'a')) });
      expect(created.status, created.text).to.equal(202);
      id = created.json.data.id;
      await settled();
      expect((await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:2', 'a')) })).status).to.equal(202);
      await settled();
      const rotated = await api('PUT', `/v1/secrets/${secretId}`, { data: b64(ROTATED_VALUE) });
      expect(rotated.status, rotated.text).to.equal(200);
      await settled();
      expect((await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:2', 'b')) })).status).to.equal(202);
      await settled();

      const res = await api('GET', `/v1/services/${id}/revisions`);
      for (const value of [SECRET_VALUE, ROTATED_VALUE]) {
        expect(res.text).to.not.contain(value);
        expect(res.text).to.not.contain(b64(value));
      }
      const list = res.json.data;
      expect(list.map((r: any) => r.number)).to.deep.equal([3, 2, 1]);
      expect(list[1].changes).to.deep.equal([{ path: 'compose_file.services.web.image', old: 'shop:1', new: 'shop:2' }]);
      expect(list[0].changes).to.deep.equal([
        { path: 'compose_file.services.web.environment.MODE', old: 'a', new: 'b' },
        { path: 'objects.secret.db', old: 1, new: 2 },
      ]);
      expect(list[0].objects).to.deep.equal([{ kind: 'secret', id: secretId, name: 'db', version: 2 }]);
      expect(list[2].objects).to.deep.equal([{ kind: 'secret', id: secretId, name: 'db', version: 1 }]);
      expect(list[0].who).to.have.property('id', admin.userId);
    });

    it('rolls back to a revision (CLI): a new revision whose compose file is the old one, deployed', async () => {
      const history = await cli(['service', 'history', 'shop']);
      expect(history).to.contain('compose_file.services.web.image: "shop:1" → "shop:2"');
      await cli(['service', 'rollback', 'shop', '--revision', '1', '--wait']);
      const got = (await api('GET', `/v1/services/${id}`)).json.data;
      expect(got.compose_file).to.equal(compose('shop:1', 'a'));
      expect(called('deployBundle').at(-1)!.input.spec).to.equal(compose('shop:1', 'a'));
      const [latest] = await revisions();
      expect(latest).to.include({ number: 4, rollback_of: 1 });
      // The secret version revision 1 used comes back with it (the secret itself stays at version 2).
      expect(latest.changes).to.deep.equal([
        { path: 'compose_file.services.web.environment.MODE', old: 'b', new: 'a' },
        { path: 'compose_file.services.web.image', old: 'shop:2', new: 'shop:1' },
        { path: 'objects.secret.db', old: 2, new: 1 },
      ]);
      expect(got.pinned_objects).to.deep.equal([{ kind: 'secret', id: secretId, name: 'db', version: 1 }]);
      expect(called('deployBundle').at(-1)!.input.objects).to.deep.equal([{ kind: 'secret', key: 'db', name: 'db-v1' }]);
      expect(called('createObject').at(-1)!.input).to.deep.include({ kind: 'secret', name: 'db-v1' });
      expect((await api('GET', `/v1/secrets/${secretId}`)).json.data).to.include({ version: 2 });
    });

    it('takes health checks by part: checked, sent with the bundle, kept in revisions and restored by a rollback', async () => {
      const bad: Array<[unknown, string]> = [
        [{ api: { tcp: { port: 80 } } }, 'Validation failed: body.health.api: compose_file has no part api (its parts: web)'],
        [{ web: { tcp: { port: 80 }, command: ['true'] } }, 'Validation failed: body.health.web: give exactly one of http, tcp and command (got tcp and command)'],
        [{ web: { tcp: { port: 0 } } }, 'body.health.web.tcp.port'],
      ];
      for (const [health, message] of bad) {
        const res = await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:1', 'a')), health });
        expect(res.status, res.text).to.equal(400);
        expect(res.json.message).to.contain(message);
      }
      const before = (await revisions())[0].number;
      const check = { http: { path: '/ready', port: 8080 }, retries: 5 };
      const res = await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:1', 'a')), health: { web: check } });
      expect(res.status, res.text).to.equal(202);
      expect(res.json.data.health).to.deep.equal({ web: check });
      await settled();
      expect(called('deployBundle').at(-1)!.input.health).to.deep.equal({ web: check });
      const [latest] = await revisions();
      expect(latest.number).to.equal(before + 1);
      expect(latest.changes).to.deep.equal([
        { path: 'health.web.http.path', old: null, new: '/ready' },
        { path: 'health.web.http.port', old: null, new: 8080 },
        { path: 'health.web.retries', old: null, new: 5 },
        // A new spec runs the current versions again.
        { path: 'objects.secret.db', old: 1, new: 2 },
      ]);
      expect(res.json.data.pinned_objects).to.deep.equal([]);
      // A PUT without health keeps it; a rollback to the revision before it clears it.
      expect((await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:2', 'a')) })).json.data.health).to.deep.equal({ web: check });
      await settled();
      expect((await api('POST', `/v1/services/${id}/rollback`, { revision: before })).status).to.equal(202);
      await settled();
      expect((await api('GET', `/v1/services/${id}`)).json.data.health).to.equal(null);
      expect(called('deployBundle').at(-1)!.input).to.not.have.property('health');
    });

    it('refuses a rollback while the service deploys (409, as a PUT is), and a revision it does not keep (404)', async () => {
      let release!: () => void;
      hold = new Promise((resolve) => (release = resolve));
      try {
        expect((await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:3', 'a')) })).status).to.equal(202);
        const busy = await api('POST', `/v1/services/${id}/rollback`, { revision: 2 });
        expect(busy.status).to.equal(409);
        expect(busy.json.message).to.equal('Service shop is deploying; roll back to a revision of it once that has finished');
      } finally {
        release();
        hold = null;
      }
      await settled();
      const unknown = await api('POST', `/v1/services/${id}/rollback`, { revision: 99 });
      expect(unknown.status).to.equal(404);
      expect(unknown.json.message).to.equal('Service shop has no revision 99 (it keeps revisions 1-8)');
      expect((await api('POST', `/v1/services/${id}/rollback`, { revision: -1 })).status).to.equal(400);
    });
  });
});
