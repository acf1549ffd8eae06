import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { GOOD_PASSWORD } from '../../support/identity.js';
import { BIN, hangarCli, TempDirs, type CliResult } from './support.js';

describeEachDialect('hangar configure + endpoint against a running control plane', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let home: string;
  let bootstrap: { username: string; user_id: string; access_key_id: string; secret_access_key: string; api_url: string; ca_pem: string };
  let bootstrapFile: string;
  let configured: CliResult;

  /** The CLI as the operator whose config dir is `home`, with no HANGAR_* connection overrides. */
  const cli = (args: string[], env: Record<string, string | undefined> = {}, input?: string): Promise<CliResult> =>
    hangarCli(args, {
      env: { XDG_CONFIG_HOME: home, HANGAR_API_URL: undefined, HANGAR_ACCESS_KEY: undefined, HANGAR_SECRET_KEY: undefined, HANGAR_CA_FILE: undefined, ...env },
      input,
    });

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam'] });
    home = temp.make('hangar-home-');
    const res = await t.request('POST', '/v1/bootstrap', { body: { password: GOOD_PASSWORD, email: 'admin@example.test' } });
    expect(res.status).to.equal(201);
    bootstrap = res.json.data;
    bootstrapFile = path.join(temp.make(), 'connection.json');
    writeFileSync(bootstrapFile, res.text);
    // Every test below uses this stored connection; the first one checks it.
    configured = await cli(['configure', '--from', bootstrapFile]);
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  it('configure --from stores the bootstrap output in the config dir with mode 0600', async () => {
    const res = configured;
    expect(res.code, res.stderr).to.equal(0);
    const file = path.join(home, 'hangar', 'connection.json');
    expect(res.stdout).to.equal(`connection saved to ${file} (mode 0600): ${t.url} with key ${bootstrap.access_key_id}, CA pinned\n`);
    expect(statSync(file).mode & 0o777).to.equal(0o600);
    expect(statSync(path.dirname(file)).mode & 0o777).to.equal(0o700);
    expect(JSON.parse(readFileSync(file, 'utf8'))).to.deep.equal({
      api_url: t.url,
      access_key_id: bootstrap.access_key_id,
      secret_access_key: bootstrap.secret_access_key,
      ca_pem: t.caPem,
      username: bootstrap.username,
      user_id: bootstrap.user_id,
    });
    const show = await cli(['configure', '--show']);
    expect(show.stdout).to.contain(`api_url:           ${t.url}`).and.contain('secret_access_key: (set, hidden)');
    expect(show.stdout).not.to.contain(bootstrap.secret_access_key);
  });

  it('signs a bare path with the configured key and prints the status and pretty JSON', async () => {
    const res = await cli(['endpoint', 'GET', '/v1/iam/users?limit=5']);
    expect(res.stderr).to.equal('');
    expect(res.code).to.equal(0);
    const [status, ...rest] = res.stdout.split('\n');
    expect(status).to.equal('HTTP 200 OK');
    const body = JSON.parse(rest.join('\n'));
    expect(rest[0]).to.equal('{');
    expect(body.data.map((u: { username: string }) => u.username)).to.deep.equal(['admin']);
  });

  it('signs a full URL on the control plane too, and a body (JSON, or @file); --raw prints the body only', async () => {
    const full = await cli(['endpoint', 'get', `${t.url}/v1/iam/users/${bootstrap.user_id}`, '--raw']);
    expect(full.code, full.stderr).to.equal(0);
    expect(JSON.parse(full.stdout).data.username).to.equal('admin');
    const post = await cli(['endpoint', 'POST', `/v1/iam/users/${bootstrap.user_id}/properties`, '--body', '{"name":"team","value":"ops"}']);
    expect(post.code, post.stdout).to.equal(0);
    expect(post.stdout).to.match(/^HTTP 201 Created\n/);
    expect(JSON.parse(post.stdout.slice(post.stdout.indexOf('\n'))).data).to.include({ name: 'team', value: 'ops' });
    const bodyFile = path.join(temp.make(), 'body.json');
    writeFileSync(bodyFile, JSON.stringify({ name: 'from-file', value: 'yes' }));
    const fromFile = await cli(['endpoint', 'POST', `/v1/iam/users/${bootstrap.user_id}/properties`, '--body', `@${bodyFile}`, '--raw']);
    expect(JSON.parse(fromFile.stdout).data).to.include({ name: 'from-file', value: 'yes' });
    const fromStdin = await cli(['endpoint', 'POST', `/v1/iam/users/${bootstrap.user_id}/properties`, '--body', '@-', '--raw'], {}, '{"name":"stdin","value":"piped"}');
    expect(JSON.parse(fromStdin.stdout).data).to.include({ name: 'stdin', value: 'piped' });
  });

  it('refuses a --body that is not valid JSON before sending it, saying where (exit 2); another Content-Type is sent as it is', async () => {
    const url = `/v1/iam/users/${bootstrap.user_id}/properties`;
    const properties = async () => JSON.parse((await cli(['endpoint', 'GET', `/v1/iam/users/${bootstrap.user_id}`, '--raw'])).stdout).data.properties.length as number;
    const before = await properties();
    const [inline, multiline, unclosed, truncated, typed, text] = await Promise.all([
      cli(['endpoint', 'POST', url, '--body', "{name: 'team'}"]),
      cli(['endpoint', 'POST', url, '--body', '@-'], {}, '{\n  "name": "team",\n  "value": "ops",\n}\n'),
      cli(['endpoint', 'POST', url, '--body', '{"name": "team"']),
      cli(['endpoint', 'POST', url, '--body', '{"name": ']),
      cli(['endpoint', 'POST', url, '--body', '{oops', '--header', 'Content-Type: application/merge-patch+json']),
      cli(['endpoint', 'POST', url, '--body', 'name=team', '--header', 'Content-Type: text/plain']),
    ]);
    for (const res of [inline, multiline, unclosed, truncated, typed]) {
      expect(res.code, res.stderr).to.equal(2);
      expect(res.stdout).to.equal('');
    }
    expect(inline.stderr).to.equal(`hangar endpoint: --body is not valid JSON (line 1, column 2: Expected property name or '}'); fix it, or send another type with --header "Content-Type: …"\n`);
    expect(multiline.stderr).to.contain('--body @- is not valid JSON (line 4, column 1: ');
    expect(unclosed.stderr).to.contain(`--body is not valid JSON (line 1, column 16: Expected ',' or '}' after property value)`);
    expect(truncated.stderr).to.contain('--body is not valid JSON (line 1, column 10: the JSON ends too early)');
    expect(typed.stderr).to.contain('--body is not valid JSON (line 1, column 2: ');
    // Nothing was sent: no property was added.
    expect(await properties()).to.equal(before);
    // A body the operator types as something else goes as it is: the server answers it.
    expect(text.code).to.equal(1);
    expect(text.stdout).to.match(/^HTTP 415 Unsupported Media Type\n/);
  });

  it('an explicit Authorization header wins over signing', async () => {
    const login = await t.request('POST', '/v1/iam/login', { body: { username: 'admin', password: GOOD_PASSWORD } });
    const token = login.json.data.token as string;
    const good = await cli(['endpoint', 'GET', '/v1/iam/users', '--header', `Authorization: Bearer ${token}`]);
    expect(good.code, good.stdout).to.equal(0);
    // Had the request also been signed, the valid signature would have been accepted or refused for another reason.
    const bad = await cli(['endpoint', 'GET', '/v1/iam/users', '--header', 'authorization: Bearer not-a-token']);
    expect(bad.code).to.equal(1);
    expect(bad.stdout).to.match(/^HTTP 401 Unauthorized\n/);
    const headers = await cli(['endpoint', 'GET', '/healthz', '-i', '--header', 'X-Request-Id: runner-test-1']);
    expect(headers.stdout).to.match(/^HTTP 200 OK\n(.+: .+\n)+\n\{/);
  });

  it('exits 1 on 4xx and 5xx answers, still printing them', async () => {
    const missing = await cli(['endpoint', 'GET', '/v1/iam/users/00000000-0000-4000-8000-000000000000']);
    expect(missing.code).to.equal(1);
    expect(missing.stdout).to.match(/^HTTP 404 Not Found\n/);
    expect(JSON.parse(missing.stdout.slice(missing.stdout.indexOf('\n'))).error).to.equal('Not Found');
    const invalid = await cli(['endpoint', 'POST', `/v1/iam/users/${bootstrap.user_id}/properties`, '--body', '{"nope":1}']);
    expect(invalid.code).to.equal(1);
    expect(invalid.stdout).to.match(/^HTTP 400 Bad Request\n/);
    const wrongSecret = await cli(['endpoint', 'GET', '/v1/iam/users'], { HANGAR_SECRET_KEY: 'wrong-secret' });
    expect(wrongSecret.code).to.equal(1);
    expect(wrongSecret.stdout).to.match(/^HTTP 401 Unauthorized\n/).and.contain('The access key or the signature is not valid');
  });

  it('takes the connection from HANGAR_API_URL, HANGAR_ACCESS_KEY, HANGAR_SECRET_KEY and HANGAR_CA_FILE alone', async () => {
    const ca = path.join(temp.make(), 'ca.pem');
    writeFileSync(ca, t.caPem);
    const res = await hangarCli(['endpoint', 'GET', '/v1/iam/users', '--raw'], {
      env: {
        XDG_CONFIG_HOME: temp.make('hangar-empty-home-'),
        HANGAR_API_URL: t.url,
        HANGAR_ACCESS_KEY: bootstrap.access_key_id,
        HANGAR_SECRET_KEY: bootstrap.secret_access_key,
        HANGAR_CA_FILE: ca,
      },
    });
    expect(res.code, res.stderr).to.equal(0);
    expect(JSON.parse(res.stdout).data[0].username).to.equal('admin');
  });
});

describe('hangar configure + endpoint: what to fix', () => {
  const temp = new TempDirs();
  after(() => temp.cleanup());
  const noOverrides = { HANGAR_API_URL: undefined, HANGAR_ACCESS_KEY: undefined, HANGAR_SECRET_KEY: undefined, HANGAR_CA_FILE: undefined };

  it('says what to fix when there is no connection, no key, or no server', async () => {
    const home = temp.make('hangar-empty-home-');
    const env = { ...noOverrides, XDG_CONFIG_HOME: home };
    const [none, noKey, down, notAUrl] = await Promise.all([
      hangarCli(['endpoint', 'GET', '/v1/iam/users'], { env }),
      hangarCli(['endpoint', 'GET', '/v1/iam/users'], { env: { ...env, HANGAR_API_URL: 'https://127.0.0.1:1' } }),
      hangarCli(['endpoint', 'GET', 'http://127.0.0.1:1/v1/version'], { env }),
      hangarCli(['endpoint', 'GET', 'nowhere'], { env }),
    ]);
    expect(none.code).to.equal(2);
    expect(none.stderr).to.contain('no control plane configured').and.contain('hangar configure');
    expect(noKey.code).to.equal(2);
    expect(noKey.stderr).to.contain('no API key configured');
    expect(down.code).to.equal(3);
    expect(down.stderr).to.contain('cannot reach http://127.0.0.1:1');
    expect(notAUrl.code).to.equal(2);
    expect(notAUrl.stderr).to.contain('is neither a path (/v1/…) nor a URL');
  });

  it('configure by options, with a CA file; refuses incomplete input', async () => {
    const home = temp.make('hangar-home-');
    const env = { ...noOverrides, XDG_CONFIG_HOME: home };
    const ca = path.join(home, 'ca.pem');
    writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    const res = await hangarCli(['configure', '--api-url', 'https://cp.example.test:8443/', '--access-key', 'HKEXAMPLE', '--secret-key', 's3cret', '--ca-file', ca], { env });
    expect(res.code, res.stderr).to.equal(0);
    const stored = JSON.parse(readFileSync(path.join(home, 'hangar', 'connection.json'), 'utf8'));
    expect(stored).to.deep.equal({ api_url: 'https://cp.example.test:8443', access_key_id: 'HKEXAMPLE', secret_access_key: 's3cret', ca_pem: readFileSync(ca, 'utf8') });
    const notPemFile = path.join(home, 'not.pem');
    writeFileSync(notPemFile, 'not a certificate\n');
    const [partial, notPem, nothing] = await Promise.all([
      hangarCli(['configure', '--api-url', 'https://cp.example.test:8443'], { env: { ...env, XDG_CONFIG_HOME: temp.make() } }),
      hangarCli(['configure', '--from', path.join(home, 'hangar', 'connection.json'), '--ca-file', notPemFile], { env }),
      hangarCli(['configure'], { env }),
    ]);
    expect(partial.code).to.equal(2);
    expect(partial.stderr).to.contain('lacks access_key_id, secret_access_key');
    expect(notPem.code).to.equal(2);
    expect(notPem.stderr).to.contain('holds no PEM certificate');
    expect(nothing.code).to.equal(2);
    expect(nothing.stderr).to.contain('give --from <connection.json>');
  });
});

describe('hangar serve with the runner connection variables set', () => {
  it('starts: HANGAR_API_URL, HANGAR_ACCESS_KEY, HANGAR_SECRET_KEY and HANGAR_CA_FILE do not break the configuration', async function () {
    const temp = new TempDirs();
    const dataDir = temp.make();
    const child = spawn(process.execPath, [BIN, 'serve', '--data-dir', dataDir], {
      env: {
        ...process.env,
        NODE_ENV: 'test',
        HANGAR_LOG__LEVEL: 'info',
        HANGAR_API_URL: 'https://127.0.0.1:8443',
        HANGAR_ACCESS_KEY: 'HKEXAMPLE',
        HANGAR_SECRET_KEY: 'secret',
        HANGAR_CA_FILE: '/nonexistent/ca.pem',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const started = await new Promise<string>((resolve, reject) => {
        let seen = '';
        const timer = setTimeout(() => reject(new Error(`serve did not start: ${seen}`)), 20_000);
        const onData = (chunk: Buffer) => {
          seen += chunk.toString();
          if (seen.includes('hangar started')) {
            clearTimeout(timer);
            resolve(seen);
          }
        };
        child.stdout.on('data', onData);
        child.stderr.on('data', onData);
        child.once('exit', (code) => reject(new Error(`serve exited with ${code}: ${seen}`)));
      });
      expect(started).to.contain('hangar started');
      expect(started).not.to.contain('secret"');
    } finally {
      child.kill('SIGKILL');
      temp.cleanup();
    }
  });
});
