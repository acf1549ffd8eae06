import { expect } from 'chai';
import os from 'node:os';
import { httpRequest } from '../../../core/http/client.js';
import { reachableLocalAddresses } from '../../../plugins/nodes/join-command.js';
import { cleanupAgents, FAST_NODES, joinedNodeId, NODE_PLUGINS, spawnAgent, waitForExit } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { freePort } from '../../support/ports.js';

/**
 * How a machine is told to reach the control plane: the join token's answer names the URL and the
 * command (api.public_url, api.public_addresses, else an address of this host a machine can reach —
 * never the loopback address an operator's browser used), the agent explains a certificate that
 * does not name the address it joined with, and tokens carry the port the API really listens on.
 */
describeEachDialect('joining: the address a machine is told, and a certificate that does not name it', (dialect) => {
  const started: TestHangar[] = [];
  const start = async (api: Record<string, unknown>) => {
    const started_ = await startHangar(dialect, { plugins: NODE_PLUGINS, storage: dialect.freshStorage(), overrides: { ...FAST_NODES, api: { host: '127.0.0.1', port: 0, ...api } } });
    started.push(started_);
    // Asked where it listens (another loopback address, whose name the certificate may lack: the test's own calls do not check it).
    const url = started_.hangar.url('control', (api.host as string | undefined) ?? '127.0.0.1');
    const t: TestHangar = { ...started_, url, request: (method, p, options = {}) => httpRequest(`${url}${p}`, { ...options, ca: false, method }) };
    return { t, admin: await bootstrapAdmin(t) };
  };
  const token = async (t: TestHangar, admin: Credentials) => {
    const res = await t.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(admin.token) });
    expect(res.status, res.text).to.equal(201);
    return res.json.data as { token: string; api_url: string; api_urls: string[]; join_commands: { amd64: string; arm64: string } };
  };
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    for (const t of started) await t.stop();
    await dialect.cleanup();
  });

  it('tells a machine the first of api.public_addresses, with a compressed download in a command per architecture', async function () {
    this.timeout(30_000);
    const { t, admin } = await start({ public_addresses: ['cp.example.test', '203.0.113.9'] });
    const port = t.hangar.listeners.get('control')!.port;
    const answer = await token(t, admin);
    expect(answer.api_url).to.equal(`https://cp.example.test:${port}`);
    expect(answer.api_urls).to.deep.equal([`https://cp.example.test:${port}`, `https://203.0.113.9:${port}`]);
    for (const arch of ['amd64', 'arm64'] as const) {
      expect(answer.join_commands[arch]).to.equal(
        `curl -fsSLk --compressed -o hangar-agent 'https://cp.example.test:${port}/v1/agent/binary?arch=${arch}' && chmod +x hangar-agent && ` +
          `echo '${answer.token}' | sudo ./hangar-agent --join --token-stdin --api 'https://cp.example.test:${port}' --data-dir /var/lib/hangar-agent`,
      );
    }
  });

  it('without public addresses, tells an address of this host a machine can reach, not the loopback the request came in on', async function () {
    this.timeout(30_000);
    const { t, admin } = await start({});
    const port = t.hangar.listeners.get('control')!.port;
    const answer = await token(t, admin);
    const reachable = reachableLocalAddresses();
    if (reachable.length === 0) {
      expect(answer.api_url, 'only loopback on this machine').to.equal(`https://127.0.0.1:${port}`);
      return;
    }
    expect(answer.api_urls).to.deep.equal(reachable.map((a) => `https://${a}:${port}`));
    expect(answer.api_url).to.not.match(/127\.0\.0\.1/);
    expect(answer.join_commands.amd64).to.contain(`--api '${answer.api_url}' `);
  });

  it('names the request’s address only when it is one: a Host header that is no address or DNS name never reaches the command', async function () {
    this.timeout(30_000);
    const { t, admin } = await start({});
    const res = await t.request('POST', '/v1/nodes/token', { body: {}, headers: { ...bearer(admin.token), host: "evil.test';touch${IFS}x;'" } });
    expect(res.status, res.text).to.equal(201);
    for (const command of Object.values(res.json.data.join_commands as Record<string, string>)) expect(command).to.not.contain('evil');
    const named = await t.request('POST', '/v1/nodes/token', { body: {}, headers: { ...bearer(admin.token), host: 'cp.example.test:8443' } });
    expect(named.json.data.api_url).to.equal(`https://cp.example.test:${t.hangar.listeners.get('control')!.port}`);
  });

  it('api.public_url wins over everything', async function () {
    this.timeout(30_000);
    const { t, admin } = await start({ public_url: 'https://hangar.example.test/', public_addresses: ['203.0.113.9'] });
    const answer = await token(t, admin);
    expect(answer.api_urls).to.deep.equal(['https://hangar.example.test']);
    expect(answer.join_commands.arm64).to.contain("'https://hangar.example.test/v1/agent/binary?arch=arm64'");
  });

  it('an agent joining through an address the certificate does not name is told what to do; named in api.public_addresses it joins', async function () {
    this.timeout(60_000);
    // 127.0.0.2 reaches this machine but is no address of an interface: the certificate does not name it.
    const plain = await start({ host: '127.0.0.2' });
    const refused = spawnAgent({ join: { token: (await token(plain.t, plain.admin)).token, api: plain.t.url } });
    const exit = await waitForExit(refused);
    expect(exit.code, refused.output()).to.equal(1);
    expect(refused.output()).to.contain("the control plane's server certificate does not name 127.0.0.2 (it names ");
    expect(refused.output()).to.contain('add 127.0.0.2 to api.public_addresses');
    expect(refused.nodeId(), 'no identity stored').to.equal(null);

    const named = await start({ host: '127.0.0.2', public_addresses: ['127.0.0.2'] });
    const answer = await token(named.t, named.admin);
    expect(answer.api_url).to.equal(named.t.url);
    const joined = spawnAgent({ join: { token: answer.token, api: answer.api_url } });
    expect(await joinedNodeId(joined)).to.match(/^node-/);
  });

  it('issues JWTs whose issuer carries the port the API listens on (not always 8443)', async function () {
    this.timeout(30_000);
    const port = await freePort();
    const { admin } = await start({ port });
    const claims = JSON.parse(Buffer.from(admin.token.split('.')[1]!, 'base64url').toString('utf8'));
    expect(claims.iss).to.equal(`https://${os.hostname()}:${port}`);
  });
});
