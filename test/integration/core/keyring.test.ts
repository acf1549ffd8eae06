import { expect } from 'chai';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect, TEST_MASTER_KEY } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, signed } from '../../support/identity.js';

const OTHER_MASTER_KEY = Buffer.alloc(32, 'another-master-key').toString('base64');
const withKey = (masterKey: string | null) => ({ secrets: { master_key: masterKey } });

async function startFails(run: () => Promise<TestHangar>): Promise<string> {
  try {
    const t = await run();
    await t.stop();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('the control plane started');
}

describeEachDialect('the keyring: JWT secret, CA and sealing key shared through the store', (dialect) => {
  const plugins = ['system', 'iam'];

  it('two control planes with their own data dirs on one store (same master key) share the CA, tokens and sealed API keys', async () => {
    const a = dialect.freshStorage();
    // A second data dir on the same store: on SQLite the same database file.
    const b = { ...dialect.freshStorage(), schema: a.schema };
    const database = dialect.name === 'sqlite' ? { sqlite_file: path.join(a.dataDir, 'hangar.db') } : {};
    const overrides = { ...withKey(TEST_MASTER_KEY), database };
    const first = await startHangar(dialect, { plugins, storage: a, overrides });
    const second = await startHangar(dialect, { plugins, storage: b, overrides });
    try {
      expect(second.caPem).to.equal(first.caPem);
      const admin = await bootstrapAdmin(first);
      // A JWT signed by the first is accepted by the second.
      const me = await second.request('GET', `/v1/iam/users/${admin.userId}`, { headers: bearer(admin.token) });
      expect(me.status, me.text).to.equal(200);
      // An API key secret sealed by the first is opened by the second (HMAC needs it in clear).
      const res = await signed(second, admin, 'GET', `/v1/iam/users/${admin.userId}`);
      expect(res.status, res.text).to.equal(200);
      // Neither data dir holds the JWT secret or the CA key: they are in the store, sealed.
      for (const dir of [a.dataDir, b.dataDir]) {
        expect(existsSync(path.join(dir, 'jwt-secret')), dir).to.equal(false);
        expect(existsSync(path.join(dir, 'pki', 'ca.key')), dir).to.equal(false);
      }
      const rows: Array<{ name: string; sealed: string }> = await first.hangar.store.knex('keyring').select('name', 'sealed');
      expect(rows.map((r) => r.name).sort()).to.deep.equal(['ca', 'jwt-secret', 'sealing-root']);
      for (const row of rows) expect(row.sealed).to.match(/^v1:/).and.not.contain('PRIVATE KEY');
    } finally {
      await second.stop();
      await first.stop();
    }
  });

  it('refuses to start with a master key that does not open the stored secrets, saying so', async () => {
    const storage = dialect.freshStorage();
    const first = await startHangar(dialect, { plugins, storage, overrides: withKey(TEST_MASTER_KEY) });
    await first.stop();
    const message = await startFails(() => startHangar(dialect, { plugins, storage, overrides: withKey(OTHER_MASTER_KEY) }));
    expect(message).to.contain('secrets.master_key').and.contain('same master key');
  });

  it('refuses a master key that is not base64 of 32 bytes', async () => {
    const message = await startFails(() => startHangar(dialect, { plugins, overrides: withKey('c2hvcnQ=') }));
    expect(message).to.contain('secrets.master_key').and.contain('32 bytes');
  });

  if (dialect.name === 'postgres') {
    it('refuses PostgreSQL without a master key, saying what to set', async () => {
      const message = await startFails(() => startHangar(dialect, { plugins, overrides: withKey(null) }));
      expect(message).to.contain('HANGAR_SECRETS__MASTER_KEY').and.contain('docs/high-availability.md');
    });
  }

  if (dialect.name === 'sqlite') {
    it('without a master key keeps its secrets in the data dir; given one later, moves them into the store and loses nothing', async () => {
      const storage = dialect.freshStorage();
      const before = await startHangar(dialect, { plugins, storage });
      let admin;
      try {
        admin = await bootstrapAdmin(before);
      } finally {
        await before.stop();
      }
      const caFile = readFileSync(path.join(storage.dataDir, 'pki', 'ca.crt'), 'utf8');
      expect(before.caPem).to.equal(caFile);
      expect(existsSync(path.join(storage.dataDir, 'jwt-secret'))).to.equal(true);

      const after = await startHangar(dialect, { plugins, storage, overrides: withKey(TEST_MASTER_KEY) });
      try {
        expect(after.caPem, 'the same CA').to.equal(caFile);
        expect(after.logs.join('')).to.contain('moved a secret from the data dir into the store');
        // The token issued before still works: the same JWT secret.
        const me = await after.request('GET', `/v1/iam/users/${admin.userId}`, { headers: bearer(admin.token) });
        expect(me.status, me.text).to.equal(200);
        // The API key sealed under the CA-derived key still opens (and signs requests).
        const res = await signed(after, admin, 'GET', `/v1/iam/users/${admin.userId}`);
        expect(res.status, res.text).to.equal(200);
        // A key made now is sealed under the new root and works too.
        const key = await after.request('POST', `/v1/iam/users/${admin.userId}/keys`, { body: {}, headers: bearer(admin.token) });
        expect(key.status, key.text).to.equal(201);
        const fresh = { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key };
        expect((await signed(after, fresh, 'GET', `/v1/iam/users/${admin.userId}`)).status).to.equal(200);
      } finally {
        await after.stop();
      }
    });
  }
});
