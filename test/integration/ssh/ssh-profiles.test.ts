import { expect } from 'chai';
import { generateKeyPairSync } from 'node:crypto';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { sshProfilesOf } from '../../../plugins/ssh-profiles/api.js';

const PRIVATE_KEY = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const PASSWORD = 'pr0file-Secret-pw';

describeEachDialect('SSH profiles', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'ssh-profiles'] });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());
  const call = (method: string, path: string, body?: unknown) => t.request(method, path, { headers: bearer(admin.token), body });

  it('stores credentials encrypted and never returns them, only has_key and has_password', async () => {
    const created = await call('POST', '/v1/ssh-profiles', { name: 'lab-deployer', user: 'deployer', port: 2222, key: PRIVATE_KEY, password: PASSWORD });
    expect(created.status).to.equal(201);
    expect(created.json.data).to.include({ name: 'lab-deployer', user: 'deployer', port: 2222, has_key: true, has_password: true });
    expect(created.json.data.id).to.match(/^sshp-/);
    const keyOnly = await call('POST', '/v1/ssh-profiles', { name: 'root-key', key: PRIVATE_KEY });
    expect(keyOnly.json.data).to.include({ user: 'root', port: 22, has_key: true, has_password: false });

    const list = await call('GET', '/v1/ssh-profiles');
    expect(list.json.data.map((p: { name: string }) => p.name)).to.have.members(['lab-deployer', 'root-key']);
    const narrowed = await call('GET', '/v1/ssh-profiles?name_prefix=lab-');
    expect(narrowed.json.data.map((p: { name: string }) => p.name)).to.deep.equal(['lab-deployer']);
    const byName = await call('GET', '/v1/ssh-profiles/lab-deployer');
    const byId = await call('GET', `/v1/ssh-profiles/${created.json.data.id}`);
    expect(byName.json.data).to.deep.equal(byId.json.data);
    for (const res of [created, keyOnly, list, byName]) {
      expect(res.text).not.to.contain('PRIVATE KEY');
      expect(res.text).not.to.contain(PASSWORD);
    }
    const rows = await t.hangar.store.knex('ssh_profiles').select('key_sealed', 'password_sealed');
    for (const row of rows) {
      expect(String(row.key_sealed)).to.match(/^v1:/).and.not.contain('PRIVATE KEY');
      if (row.password_sealed) expect(row.password_sealed).not.to.contain(PASSWORD);
    }
    expect(t.logs.join('\n')).not.to.contain(PASSWORD);
  });

  it('resolves credentials: inline values over the profile’s, 400 for an unknown profile', async () => {
    const api = sshProfilesOf(t.hangar.services);
    const fromProfile = await api.resolve({ ssh_profile: 'lab-deployer' });
    expect(fromProfile).to.include({ username: 'deployer', port: 2222, password: PASSWORD, profile: 'lab-deployer' });
    expect(fromProfile.privateKey).to.equal(PRIVATE_KEY);
    const overridden = await api.resolve({ ssh_profile: 'lab-deployer', ssh_user: 'ops', ssh_port: 22, ssh_password: 'inline' });
    expect(overridden).to.include({ username: 'ops', port: 22, password: 'inline' });
    expect(await api.resolve({})).to.deep.include({ username: 'root', port: 22, privateKey: undefined, password: undefined });
    const unknown = await api.resolve({ ssh_profile: 'nope' }).catch((e) => e);
    expect(unknown.status).to.equal(400);
    expect(unknown.message).to.contain('Unknown SSH profile nope');
  });

  it('refuses a duplicate name, a key path instead of key content, and deletes by name', async () => {
    expect((await call('POST', '/v1/ssh-profiles', { name: 'root-key', key: PRIVATE_KEY })).status).to.equal(409);
    const path = await call('POST', '/v1/ssh-profiles', { name: 'by-path', key: '/root/.ssh/id_ed25519' });
    expect(path.status).to.equal(400);
    expect(path.json.message).to.contain('not a path');
    expect((await call('DELETE', '/v1/ssh-profiles/root-key')).status).to.equal(200);
    expect((await call('GET', '/v1/ssh-profiles/root-key')).status).to.equal(404);
    expect((await call('DELETE', '/v1/ssh-profiles/root-key')).status).to.equal(404);
  });
});
