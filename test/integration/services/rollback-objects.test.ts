import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { docker, dockerOk } from '../../../lab/docker.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { composeWithObjects, stays } from '../../support/stays.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';

const RUN = randomBytes(3).toString('hex');
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/**
 * A rollback of a service restores the secret and config versions its revision used (issue 29):
 * a compose stack deployed through a real agent into the host engine's swarm reads the value of
 * the version its revision recorded, made again on the swarm when a rotation had removed it; the
 * next rotation moves it to the newest. Two earlier versions are kept (clusters.revisions_kept 2):
 * a rollback to a version no longer kept is a 409 naming it.
 */
describeEachDialect('services: a rollback restores the secret and config versions of its revision (host swarm)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  const name = `rb${dialect.name[0]}${RUN}`;
  const stack = `hangar-${name}`;
  const secretName = `rdb-${dialect.name}-${RUN}`;
  const configName = `rsite-${dialect.name}-${RUN}`;
  let serviceId = '';
  let secretId = '';
  let configId = '';

  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });
  const service = async () => (await api('GET', `/v1/services/${serviceId}`)).json.data;
  const running = () =>
    waitFor(
      async () => {
        const s = await service();
        if (s.status === 'failed') throw new Error(`the service failed: ${s.error}`);
        return s.status === 'running' ? s : null;
      },
      { timeoutMs: 60_000, intervalMs: 300, what: `service ${name} to run` },
    );
  /** The secret and config runtime objects the stack's app service mounts. */
  const mounted = async () => {
    const spec = JSON.parse(await dockerOk(['service', 'inspect', '--format', '{{json .Spec.TaskTemplate.ContainerSpec}}', `${stack}_app`])) as {
      Secrets?: Array<{ SecretName: string }>;
      Configs?: Array<{ ConfigName: string }>;
    };
    return [...(spec.Secrets ?? []).map((s) => s.SecretName), ...(spec.Configs ?? []).map((c) => c.ConfigName)];
  };
  /** What the one running container of the app service reads from its secret and config files, once it is `want`. */
  const reads = (want: string) =>
    waitFor(
      async () => {
        const ids = (await dockerOk(['ps', '-q', '--filter', `label=com.docker.swarm.service.name=${stack}_app`])).split('\n').filter(Boolean);
        if (ids.length !== 1) return null;
        const res = await docker(['exec', ids[0]!, 'sh', '-c', 'echo "$(cat /run/secrets/db_password) $(cat /etc/site.conf)"']);
        return res.code === 0 && res.stdout.trim() === want ? true : null;
      },
      { timeoutMs: 60_000, intervalMs: 500, what: `the app's container to read "${want}"` },
    );
  const exists = async (kind: 'secret' | 'config', runtimeName: string) => (await docker([kind, 'inspect', runtimeName])).code === 0;
  const rotate = async (kind: 'secrets' | 'configs', id: string, value: string) => {
    const res = await api('PUT', `/v1/${kind}/${id}`, { data: b64(value) });
    expect(res.status, res.text).to.equal(200);
    expect(res.json.data.redeployed).to.deep.equal([name]);
    return res.json.data;
  };

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'services'], overrides: { ...SWARM_TEST_OVERRIDES, clusters: { revisions_kept: 2 } } });
    admin = await bootstrapAdmin(t);
    member = await hostSwarmMember(t, admin, `sw${dialect.name[0]}${RUN}r`);
  });
  after(async function () {
    this.timeout(60_000);
    await docker(['stack', 'rm', stack]);
    for (const kind of ['secret', 'config']) {
      const ours = (await docker([kind, 'ls', '--format', '{{.Name}}'])).stdout.split('\n').filter((n) => n.includes(RUN) && n.includes(dialect.name));
      if (ours.length) await waitFor(async () => (await docker([kind, 'rm', ...ours])).code === 0 || null, { timeoutMs: 30_000, what: `our ${kind}s to be removed` }).catch(() => undefined);
    }
    await t?.stop();
    await cleanupAgents();
  });

  it('rotate, roll back: the container reads the old values again; rotate again: it reads the new one', async function () {
    this.timeout(300_000);
    const secret = await api('POST', '/v1/secrets', { name: secretName, swarm_id: member.swarmId, data: b64('first-password') });
    expect(secret.status, secret.text).to.equal(201);
    secretId = secret.json.data.id;
    const config = await api('POST', '/v1/configs', { name: configName, swarm_id: member.swarmId, data: b64('first-config') });
    expect(config.status, config.text).to.equal(201);
    configId = config.json.data.id;
    const compose = composeWithObjects(TEST_IMAGE, stays(), { secret: secretName, config: configName });
    const created = await api('POST', '/v1/services', { name, swarm_id: member.swarmId, compose_file: b64(compose) });
    expect(created.status, created.text).to.equal(202);
    serviceId = created.json.data.id;
    await running();
    await reads('first-password first-config');

    await rotate('secrets', secretId, 'second-password');
    await rotate('configs', configId, 'second-config');
    await reads('second-password second-config');
    expect(await exists('secret', `${secretName}-v1`), 'a rotation removes the old version from the swarm').to.equal(false);

    const [first] = (await api('GET', `/v1/services/${serviceId}/revisions`)).json.data;
    expect(first.objects.map((o: { name: string; version: number }) => [o.name, o.version])).to.have.deep.members([
      [secretName, 1],
      [configName, 1],
    ]);
    const back = await api('POST', `/v1/services/${serviceId}/rollback`, { revision: first.number });
    expect(back.status, back.text).to.equal(202);
    const rolled = await running();
    expect(rolled.pinned_objects).to.have.deep.members([
      { kind: 'secret', id: secretId, name: secretName, version: 1 },
      { kind: 'config', id: configId, name: configName, version: 1 },
    ]);
    expect(await mounted()).to.have.members([`${secretName}-v1`, `${configName}-v1`]);
    await reads('first-password first-config');
    const [latest] = (await api('GET', `/v1/services/${serviceId}/revisions`)).json.data;
    expect(latest).to.include({ rollback_of: first.number });
    // It records the versions it deployed (those of revision 1: rotations make no revision, so nothing changed against it).
    expect(latest.objects.map((o: { name: string; version: number }) => [o.name, o.version])).to.have.deep.members([
      [secretName, 1],
      [configName, 1],
    ]);
    // The secret itself stays at its newest version: new services get it.
    expect((await api('GET', `/v1/secrets/${secretId}`)).json.data).to.include({ version: 2, runtime_name: `${secretName}-v2` });

    // A rotation moves the service to the newest version of what it rotates, and removes the older ones.
    await rotate('secrets', secretId, 'third-password');
    await reads('third-password first-config');
    const after = await service();
    expect(after.pinned_objects).to.deep.equal([{ kind: 'config', id: configId, name: configName, version: 1 }]);
    expect(await mounted()).to.have.members([`${secretName}-v3`, `${configName}-v1`]);
    expect(await exists('secret', `${secretName}-v1`)).to.equal(false);
    expect(await exists('secret', `${secretName}-v2`)).to.equal(false);
  });

  it('answers 409 naming a version no longer kept, and changes nothing', async function () {
    this.timeout(120_000);
    // Two earlier versions are kept: version 4 leaves 2 and 3.
    await rotate('secrets', secretId, 'fourth-password');
    await reads('fourth-password first-config');
    const revisions = (await api('GET', `/v1/services/${serviceId}/revisions`)).json.data;
    const usingFirst = revisions.find((r: { objects: Array<{ id: string; version: number }> }) => r.objects.some((o) => o.id === secretId && o.version === 1));
    expect(usingFirst, 'a kept revision used version 1').to.not.equal(undefined);
    const refused = await api('POST', `/v1/services/${serviceId}/rollback`, { revision: usingFirst.number });
    expect(refused.status, refused.text).to.equal(409);
    expect(refused.json.message).to.equal(`Version 1 of secret ${secretName} is no longer kept (it keeps versions 2, 3 and the current 4)`);
    expect((await api('GET', `/v1/services/${serviceId}/revisions`)).json.data.map((r: { number: number }) => r.number)).to.deep.equal(revisions.map((r: { number: number }) => r.number));
    expect(await service()).to.include({ status: 'running' });
    await reads('fourth-password first-config');
  });

  it('deletes the kept versions with the secret: no sealed value of it is left', async function () {
    this.timeout(120_000);
    expect((await api('DELETE', `/v1/services/${serviceId}`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/services/${serviceId}`)).status === 404, { timeoutMs: 60_000, what: 'the service to go' });
    const knex = t.hangar.services.db.knex;
    expect((await knex('secret_versions').where({ object_id: secretId })).length, 'earlier versions kept while the secret exists').to.equal(2);
    const deleted = await api('DELETE', `/v1/secrets/${secretId}`);
    expect(deleted.status, deleted.text).to.equal(200);
    expect(await knex('secret_versions').where({ object_id: secretId })).to.deep.equal([]);
    for (const version of [2, 3, 4]) expect(await exists('secret', `${secretName}-v${version}`), `version ${version} on the swarm`).to.equal(false);
    expect((await api('DELETE', `/v1/configs/${configId}`)).status).to.equal(200);
    expect(await exists('config', `${configName}-v1`)).to.equal(false);
  });
});
