import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { Browserish, startHangarWithProvider, type TestProvider } from '../../support/oidc-provider.js';
import { BIN, hangarCli, TempDirs } from '../runner/support.js';

/**
 * `hangar login --sso` as an operator runs it: the real CLI process against a control plane in this
 * process configured with a real OpenID provider (oidc-provider, in-process on loopback); the user
 * approves the device login through the provider's own pages, driven over HTTP. The CLI then works
 * with the key it stored, as the SSO user with the role its groups give.
 */
describeEachDialect('hangar login --sso (device flow) against a real provider', (dialect) => {
  const temp = new TempDirs();
  let idp: TestProvider;
  let t: TestHangar;
  let admin: Credentials;
  let caFile: string;

  before(async function () {
    this.timeout(30_000);
    ({ idp, t } = await startHangarWithProvider(dialect, {
      plugins: ['system', 'iam', 'projects', 'audit'],
      oidc: { roles: [{ group: 'audit', role: 'auditor' }], projects: [{ group: 'team-a-dev', project: 'team-a', role: 'deployer' }], cli_key_lifetime_hours: 2 },
    }));
    const dir = temp.make('hangar-cli-sso-');
    admin = await bootstrapAdmin(t);
    expect((await t.request('POST', '/v1/projects', { body: { name: 'team-a' }, headers: bearer(admin.token) })).status).to.equal(201);
    caFile = path.join(dir, 'ca.pem');
    writeFileSync(caFile, t.caPem);
  });
  after(async () => {
    await t?.stop();
    await idp?.stop();
    temp.cleanup();
  });

  it('prints where to approve and the code, polls, and stores an expiring key of the SSO user that the CLI then uses', async function () {
    this.timeout(60_000);
    idp.accounts.set('sam', { groups: ['audit', 'team-a-dev'], name: 'Sam SSO' });
    const home = temp.make('hangar-cli-sso-home-');
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...process.env, XDG_CONFIG_HOME: home })) if (v !== undefined && !k.startsWith('HANGAR_')) env[k] = v;
    const child = spawn(process.execPath, [BIN, 'login', '--sso', '--api-url', t.url, '--ca-file', caFile], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    try {
      const deadline = Date.now() + 30_000;
      while (!/confirm the code/.test(stdout) && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
      const url = /open (\S+)/.exec(stdout)?.[1];
      expect(url, stdout + stderr).to.be.a('string');
      expect(url!.startsWith(idp.issuer)).to.equal(true);
      const code = /the code (\S+)/.exec(stdout)![1]!;
      expect(new URL(url!).searchParams.get('user_code')).to.equal(code);
      expect(stdout, 'the device code stays on the server').not.to.match(/device_code|device_request/);
      const done = await new Browserish().approveDevice(url!, 'sam');
      expect(done).to.match(/success|signed in|sign-in/i);
      expect(await exited, stderr).to.equal(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    expect(stdout).to.match(/logged in as sam \(auditor\); its API key HK\w+ expires \S+, saved to /);
    const file = path.join(home, 'hangar', 'connection.json');
    expect(statSync(file).mode & 0o777).to.equal(0o600);
    const stored = JSON.parse(readFileSync(file, 'utf8'));
    expect(stored).to.include({ api_url: t.url, username: 'sam' });
    expect(stored.secret_access_key).to.be.a('string');
    expect(stored.ca_pem).to.equal(t.caPem);
    expect(readFileSync(file, 'utf8')).not.to.contain(idp.clientSecret);

    // The CLI signs with it, as sam, the role and membership its groups gave.
    const cliEnv = { XDG_CONFIG_HOME: home, HANGAR_API_URL: '', HANGAR_ACCESS_KEY: '', HANGAR_SECRET_KEY: '', HANGAR_CA_FILE: '' };
    const who = await hangarCli(['whoami'], { env: cliEnv, timeoutMs: 30_000 });
    expect(who.code, who.stderr).to.equal(0);
    expect(who.stdout).to.match(/^user:\s+sam /m);
    expect(who.stdout).to.match(/^role:\s+auditor:/m);
    const expires = Date.parse(/expires (\S+)/.exec(who.stdout)![1]!);
    expect(expires - Date.now()).to.be.within(2 * 3600_000 - 120_000, 2 * 3600_000 + 1000);
    const projects = await hangarCli(['project', 'list'], { env: cliEnv, timeoutMs: 30_000 });
    expect(projects.stdout).to.match(/\| team-a\s*\| deployer\s*\|/);
    expect(t.logs.join('')).not.to.contain(stored.secret_access_key);
  });

  it('answers 202 while the login waits for approval, and refuses an unknown or spent handle', async function () {
    this.timeout(20_000);
    const started = await t.request('POST', '/v1/auth/oidc/device', { body: {} });
    expect(started.status, started.text).to.equal(201);
    expect(started.text).not.to.contain('device_code');
    const handle = started.json.data.device_request;
    const pending = await t.request('POST', '/v1/auth/oidc/device/token', { body: { device_request: handle } });
    expect(pending.status, pending.text).to.equal(202);
    expect(pending.json.data).to.deep.equal({ status: 'pending', interval: started.json.data.interval });
    const unknown = await t.request('POST', '/v1/auth/oidc/device/token', { body: { device_request: 'not-a-handle' } });
    expect(unknown.status).to.equal(400);
    expect(unknown.json.message).to.contain('hangar login --sso again');
  });
});
