import { expect } from 'chai';
import type { Knex } from 'knex';
import type { TestDialect } from '../../support/dialects.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { swarmDouble } from '../../support/swarm-double.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/** Makes every write of an earlier version's value fail in the store (as a disk error or a crash would), or stops doing so. */
async function refuseKeptVersions(knex: Knex, dialect: TestDialect, refuse: boolean): Promise<void> {
  if (dialect.name === 'sqlite') {
    if (refuse) await knex.raw(`create trigger refuse_kept_versions before insert on secret_versions begin select raise(abort, 'the store failed'); end`);
    else await knex.raw('drop trigger refuse_kept_versions');
    return;
  }
  if (refuse) {
    await knex.raw(`create function refuse_kept_versions() returns trigger as $$ begin raise exception 'the store failed'; end $$ language plpgsql`);
    await knex.raw('create trigger refuse_kept_versions before insert on secret_versions for each row execute function refuse_kept_versions()');
  } else {
    await knex.raw('drop trigger refuse_kept_versions on secret_versions');
    await knex.raw('drop function refuse_kept_versions()');
  }
}

/**
 * A rotation records the new version and keeps the value it replaces (for a rollback to a revision
 * that used it) in one transaction: when keeping it fails, the object stays at its version with
 * its value, and the runtime object made for the new version goes. On a swarm whose manager is a
 * test double.
 */
describeEachDialect('secrets: a rotation keeps the replaced value with the new version, or changes nothing (HTTP)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  const onSwarm = new Map<string, string>();

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const called = (method: string) => manager.calls.filter((c) => c.method === method);

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
    manager = await swarmDouble(t, admin.token, {
      answers: {
        // As the engine: an object of a name that exists is answered as it is.
        createObject: (input: { name: string; data: string }) => void (onSwarm.has(input.name) || onSwarm.set(input.name, input.data)),
        removeObject: (input: { name: string }) => void onSwarm.delete(input.name),
      },
    });
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
  });

  it('a rotation whose replaced value cannot be kept fails and leaves the config at its version and value; the next one makes the version with its own value', async function () {
    this.timeout(30_000);
    const knex = t.hangar.services.db.knex;
    const created = await api('POST', '/v1/configs', { name: 'site', swarm_id: manager.swarmId, data: b64('first') });
    expect(created.status, created.text).to.equal(201);
    const id = created.json.data.id as string;

    await refuseKeptVersions(knex, dialect, true);
    const failed = await api('PUT', `/v1/configs/${id}`, { data: b64('second') });
    await refuseKeptVersions(knex, dialect, false);
    // A failure of the store (its lease on the object, taken first, was written: a 503 says to read it again).
    expect(failed.status, failed.text).to.be.oneOf([500, 503]);
    expect(failed.text).not.to.include('secret_versions');
    expect((await api('GET', `/v1/configs/${id}`)).json.data, 'nothing of the rotation recorded').to.include({ version: 1, runtime_name: 'site-v1', data: b64('first') });
    expect(called('removeObject').map((c) => c.input.name)).to.deep.equal(['site-v2']);
    expect([...onSwarm.keys()]).to.deep.equal(['site-v1']);

    const rotated = await api('PUT', `/v1/configs/${id}`, { data: b64('third') });
    expect(rotated.status, rotated.text).to.equal(200);
    expect(rotated.json.data).to.include({ version: 2, runtime_name: 'site-v2', data: b64('third') });
    expect(onSwarm.get('site-v2'), 'the new version’s object holds its value').to.equal(b64('third'));
  });
});
