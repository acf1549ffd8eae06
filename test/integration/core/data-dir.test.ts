import { expect } from 'chai';
import { chmodSync, existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar } from '../../support/hangar.js';
import { bootstrapAdmin } from '../../support/identity.js';

const mode = (file: string) => statSync(file).mode & 0o777;

describeEachDialect('the data dir on disk', (dialect) => {
  it('is 0700, and the database files and generated secrets 0600, also when they were opened up before', async () => {
    const storage = dialect.freshStorage();
    const dir = storage.dataDir;
    const sqlite = ['hangar.db', 'hangar.db-wal', 'hangar.db-shm'].map((f) => path.join(dir, f));
    const check = () => {
      expect(mode(dir), 'data dir').to.equal(0o700);
      expect(mode(path.join(dir, 'pki')), 'pki').to.equal(0o700);
      // On PostgreSQL the JWT secret and the CA live in the store, sealed with the master key (core/pki/keyring.ts).
      const secrets = dialect.name === 'sqlite' ? ['jwt-secret', 'pki/ca.key', 'pki/server.key'] : ['pki/server.key'];
      for (const secret of secrets) expect(mode(path.join(dir, secret)), secret).to.equal(0o600);
      if (dialect.name === 'sqlite') for (const file of sqlite) expect(mode(file), file).to.equal(0o600);
    };
    chmodSync(dir, 0o755);
    let t = await startHangar(dialect, { plugins: ['system', 'iam'], storage });
    try {
      await bootstrapAdmin(t);
      if (dialect.name === 'sqlite') expect(sqlite.every((f) => existsSync(f)), readdirSync(dir).join(' ')).to.equal(true);
      check();
    } finally {
      await t.stop();
    }
    // Opened up by hand (a restore, a copy): the next start closes them again.
    chmodSync(dir, 0o755);
    for (const file of sqlite.filter((f) => existsSync(f))) chmodSync(file, 0o644);
    t = await startHangar(dialect, { plugins: ['system', 'iam'], storage });
    try {
      await t.request('GET', '/healthz');
      check();
    } finally {
      await t.stop();
    }
  });
});
