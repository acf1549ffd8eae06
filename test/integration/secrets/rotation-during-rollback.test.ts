import { expect } from 'chai';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { swarmDouble } from '../../support/swarm-double.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'services'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const compose = (image: string, secret: string | null) =>
  secret
    ? `services:
  web:
    image: ${image}
    secrets: [${secret}]
secrets:
  ${secret}: {}
`
    : `services:
  web:
    image: ${image}
`;

/**
 * A secret rotated while a rollback to an earlier version of it is under way (issue 29's pinned
 * versions): the rotation came last, so it wins. On a swarm whose manager is a test double, which
 * holds one call (the rotation's new version, a service's deploy) until the test lets it go, to
 * order the rotation and the rollback. Orchestrator calls keep their default timeout (180 s): the
 * tests' own are far shorter, so a rotation and a deploy waiting on each other fail them.
 */
describeEachDialect('secrets: a rotation while a rollback to an earlier version deploys (HTTP)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  /** While set, the double answers this call (by method and the name in its input) once `release` is called. */
  let held: { method: string; name: string; gate: Promise<void> } | null = null;
  let release = () => {};
  const hold = (method: string, name: string) => {
    held = { method, name, gate: new Promise<void>((resolve) => (release = resolve)) };
  };
  const answer =
    (method: string, result: (input: { name: string }) => unknown) =>
    async (input: { name: string }) => {
      if (held?.method === method && held.name === input.name) await held.gate;
      return result(input);
    };

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const called = (method: string) => manager.calls.filter((c) => c.method === method);
  const service = async (id: string) => (await api('GET', `/v1/services/${id}`)).json.data;
  const settled = (id: string) =>
    waitFor(
      async () => {
        const s = await service(id);
        if (s.status === 'failed') throw new Error(`the service failed: ${s.error}`);
        return s.status === 'running' ? s : null;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: 'the service to run' },
    );
  const createService = async (name: string, spec: string) => {
    const created = await api('POST', '/v1/services', { name, swarm_id: manager.swarmId, compose_file: b64(spec) });
    expect(created.status, created.text).to.equal(202);
    await settled(created.json.data.id);
    return created.json.data.id as string;
  };
  const createSecret = async (name: string, value: string) => {
    const secret = await api('POST', '/v1/secrets', { name, swarm_id: manager.swarmId, data: b64(value) });
    expect(secret.status, secret.text).to.equal(201);
    return secret.json.data.id as string;
  };
  const rotate = (id: string, value: string) => api('PUT', `/v1/secrets/${id}`, { data: b64(value) });
  /** The service's oldest revision, which used version 1 of the secret. */
  const firstRevision = async (id: string, secretId: string, secret: string) => {
    const first = ((await api('GET', `/v1/services/${id}/revisions`)).json.data as Array<{ number: number; objects: unknown[] }>).at(-1)!;
    expect(first.objects).to.deep.equal([{ kind: 'secret', id: secretId, name: secret, version: 1 }]);
    return first.number;
  };
  const rollBack = async (id: string, revision: number) => {
    const back = await api('POST', `/v1/services/${id}/rollback`, { revision });
    expect(back.status, back.text).to.equal(202);
    return back.json.data;
  };
  /** The secrets on the double's swarm, by runtime name. */
  const onSwarm = new Set<string>();

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
    manager = await swarmDouble(t, admin.token, {
      answers: {
        createObject: answer('createObject', (input) => void onSwarm.add(input.name)),
        removeObject: (input: { name: string }) => void onSwarm.delete(input.name),
        deployBundle: answer('deployBundle', (input) => ({ name: input.name, services: [] })),
      },
    });
  });
  afterEach(() => {
    release();
    held = null;
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
  });

  it('a rotation while the rollback deploys: 200, the service runs the newest version, pinned to none, the older versions removed', async function () {
    this.timeout(45_000);
    const secretId = await createSecret('db', 'first');
    const id = await createService('shop', compose('shop:1', 'db'));
    expect((await rotate(secretId, 'second')).status).to.equal(200);
    await settled(id);
    const first = await firstRevision(id, secretId, 'db');

    // The rotation to version 3 is under way (its runtime object held) when the rollback to revision 1 (version 1) begins.
    hold('createObject', 'db-v3');
    const rotation = rotate(secretId, 'third');
    await waitFor(async () => called('createObject').some((c) => c.input.name === 'db-v3') || null, { timeoutMs: 10_000, intervalMs: 50, what: 'the rotation to make db-v3' });
    expect((await rollBack(id, first)).pinned_objects).to.deep.equal([{ kind: 'secret', id: secretId, name: 'db', version: 1 }]);
    release();

    const rotated = await rotation;
    expect(rotated.status, rotated.text).to.equal(200);
    expect(rotated.json.data).to.include({ version: 3, runtime_name: 'db-v3' });
    expect(rotated.json.data.redeployed).to.deep.equal(['shop']);
    const after = await settled(id);
    expect(after.pinned_objects).to.deep.equal([]);
    expect(after.compose_file).to.equal(compose('shop:1', 'db'));
    // The rollback's deploy made version 1 again (after the rotation's version 3), and the rotation's redeploy followed it with version 3.
    const made = called('createObject').map((c) => c.input.name);
    expect(made.slice(made.indexOf('db-v3'))).to.include('db-v1');
    expect(called('deployBundle').at(-1)!.input.objects).to.deep.equal([{ kind: 'secret', key: 'db', name: 'db-v3' }]);
    // Nothing uses the earlier versions any more: they left the swarm.
    expect([...onSwarm].filter((n) => n.startsWith('db-'))).to.deep.equal(['db-v3']);
    const got = (await api('GET', `/v1/secrets/${secretId}`)).json.data;
    expect(got).to.include({ version: 3, runtime_name: 'db-v3' });
    expect(got.services).to.deep.equal(['shop']);
  });

  it('a rollback begun while a rotation redeploys keeps its version on the swarm until the next rotation', async function () {
    this.timeout(45_000);
    const secretId = await createSecret('token', 'first');
    const back = await createService('back', compose('back:1', 'token'));
    // front used the secret in its first revision only: the rotation does not redeploy it.
    const front = await createService('front', compose('front:1', 'token'));
    expect((await api('PUT', `/v1/services/${front}`, { compose_file: b64(compose('front:2', null)) })).status).to.equal(202);
    await settled(front);
    const first = await firstRevision(front, secretId, 'token');

    // The rotation redeploys back (held); meanwhile front rolls back to its first revision, pinned to version 1.
    hold('deployBundle', 'hangar-back');
    const rotation = rotate(secretId, 'second');
    await waitFor(async () => called('deployBundle').some((c) => c.input.name === 'hangar-back' && c.input.objects[0]?.name === 'token-v2') || null, {
      timeoutMs: 10_000,
      intervalMs: 50,
      what: 'the rotation to redeploy back',
    });
    expect((await rollBack(front, first)).pinned_objects).to.deep.equal([{ kind: 'secret', id: secretId, name: 'token', version: 1 }]);
    release();

    const rotated = await rotation;
    expect(rotated.status, rotated.text).to.equal(200);
    expect(rotated.json.data).to.include({ version: 2 });
    expect(rotated.json.data.redeployed).to.deep.equal(['back']);
    const rolled = await settled(front);
    expect(rolled.pinned_objects).to.deep.equal([{ kind: 'secret', id: secretId, name: 'token', version: 1 }]);
    expect(called('deployBundle').filter((c) => c.input.name === 'hangar-front').at(-1)!.input.objects).to.deep.equal([{ kind: 'secret', key: 'token', name: 'token-v1' }]);
    expect([...onSwarm].filter((n) => n.startsWith('token-')), 'front runs version 1: it stays on the swarm').to.have.members(['token-v1', 'token-v2']);

    // The next rotation moves front to the newest version too, and removes both earlier ones.
    const next = await rotate(secretId, 'third');
    expect(next.status, next.text).to.equal(200);
    expect([...next.json.data.redeployed].sort()).to.deep.equal(['back', 'front']);
    expect((await settled(front)).pinned_objects).to.deep.equal([]);
    expect([...onSwarm].filter((n) => n.startsWith('token-'))).to.deep.equal(['token-v3']);
    await settled(back);
  });
});
