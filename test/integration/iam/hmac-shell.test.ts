import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bootstrapAdmin, type Credentials } from '../../support/identity.js';

const run = promisify(execFile);
const SCRIPT = path.resolve('docs/examples/hmac-request.sh');

describeEachDialect('HMAC worked example (openssl + curl, docs/examples/hmac-request.sh)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let env: Record<string, string>;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam'] });
    admin = await bootstrapAdmin(t);
    const ca = path.join(t.hangar.services.config.data_dir, 'ca-for-shell.pem');
    writeFileSync(ca, t.caPem);
    env = { ...process.env, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca } as Record<string, string>;
  });
  after(() => t?.stop());

  it('signs a GET with a query the way the server checks it', async () => {
    const { stdout } = await run('bash', [SCRIPT, 'get', '/v1/iam/users?limit=5&cursor='], { env });
    const body = JSON.parse(stdout);
    expect(body.data.map((u: { username: string }) => u.username)).to.include('admin');
  });

  it('signs a POST with a JSON body', async () => {
    const { stdout } = await run('bash', [SCRIPT, 'POST', `/v1/iam/users/${admin.userId}/properties`, '{"name":"shell","value":"signed"}'], { env });
    expect(JSON.parse(stdout).data).to.include({ name: 'shell', value: 'signed' });
  });

  it('is refused with a wrong secret', async () => {
    const { stdout } = await run('bash', [SCRIPT, 'GET', '/v1/iam/users'], { env: { ...env, HANGAR_SECRET_KEY: 'wrong' } });
    expect(JSON.parse(stdout)).to.include({ error: 'Unauthorized' });
  });
});
