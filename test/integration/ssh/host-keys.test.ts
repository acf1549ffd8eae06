import { expect } from 'chai';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import ssh2 from 'ssh2';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

// ssh2 is CommonJS: its Server is not a named export to ESM.
const { Server, utils } = ssh2;
const PASSWORD = 'Hunter2-stored-secret';
/** The key the stored profile holds, and the one the stand-in accepts. */
/**
 * An ed25519 pair from ssh2's generator that ssh2 itself can read back: about one in 256 is not
 * (it strips a leading zero byte of the public key; mscdex/ssh2#1390, #1513), so try again.
 */
function ed25519Pair(): ReturnType<typeof utils.generateKeyPairSync> {
  for (;;) {
    const pair = utils.generateKeyPairSync('ed25519');
    if (!(utils.parseKey(pair.private) instanceof Error) && !(utils.parseKey(pair.public) instanceof Error)) return pair;
  }
}

const CLIENT_KEY = ed25519Pair();

/** The fingerprint OpenSSH prints for a public key (what hangar records and compares). */
function fingerprintOf(publicKey: string): string {
  const parsed = utils.parseKey(publicKey);
  if (parsed instanceof Error) throw parsed;
  return `SHA256:${createHash('sha256').update(parsed.getPublicSSH()).digest('base64').replace(/=+$/, '')}`;
}

/**
 * A stand-in for the machine's sshd (no sshd can run here without docker): the ssh2 package's SSH
 * server, speaking the real protocol to hangar's client. It records every authentication attempt,
 * accepts the test's key, refuses passwords, and runs no command.
 */
class RecordingSshServer {
  readonly attempts: string[] = [];
  private server!: InstanceType<typeof Server>;
  port = 0;

  constructor(
    readonly hostKey = ed25519Pair(),
    private readonly acceptedKey = utils.parseKey(CLIENT_KEY.public) as ReturnType<typeof utils.parseKey> & { getPublicSSH(): Buffer; verify(data: Buffer, sig: Buffer, algo?: string): boolean },
  ) {}

  get fingerprint(): string {
    return fingerprintOf(this.hostKey.public);
  }

  listen(port = 0): Promise<void> {
    this.server = new Server({ hostKeys: [this.hostKey.private] }, (client) => {
      client.on('error', () => undefined);
      client.on('authentication', (ctx) => {
        this.attempts.push(ctx.method === 'password' ? `password:${ctx.password}` : ctx.method);
        if (ctx.method === 'publickey' && ctx.key.data.equals(this.acceptedKey.getPublicSSH())) {
          if (!ctx.signature) return ctx.accept();
          return this.acceptedKey.verify(ctx.blob!, ctx.signature, ctx.hashAlgo) ? ctx.accept() : ctx.reject();
        }
        ctx.reject(['publickey', 'password']);
      });
      client.on('ready', () => {
        client.on('session', (accept) => {
          accept().on('exec', (acceptExec) => {
            const stream = acceptExec();
            stream.stderr.write('this stand-in runs no commands\n');
            stream.exit(1);
            stream.end();
          });
        });
      });
    });
    return new Promise((resolve) => this.server.listen(port, '127.0.0.1', () => {
      this.port = (this.server.address() as AddressInfo).port;
      resolve();
    }));
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

describeEachDialect('SSH to a node hangar did not deploy: its host key, and the key before the password', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let nodeId: string;
  let sshd: RecordingSshServer;
  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const outcome = async (kinds: string[], after: number) =>
    waitFor(
      async () => ((await api('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as any[]).find((e) => e.id > after && kinds.includes(e.kind)),
      { timeoutMs: 15_000, what: `one of ${kinds.join(', ')}` },
    );
  const lastEventId = async () => Math.max(0, ...((await api('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as any[]).map((e) => e.id));

  before(async function () {
    this.timeout(30_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning'] });
    admin = await bootstrapAdmin(t);
    sshd = new RecordingSshServer();
    await sshd.listen();
    // A machine joins with a token and claims an address: hangar never connected to it.
    const token = (await api('POST', '/v1/nodes/token', {})).json.data.token;
    const publicKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const joined = await t.request('POST', '/v1/nodes/join', { body: { token, hostname: 'claimed', public_key: publicKey, architecture: 'x86_64', ip_address: '127.0.0.1' } });
    expect(joined.status, joined.text).to.equal(201);
    nodeId = joined.json.data.node_id;
    const profile = await api('POST', '/v1/ssh-profiles', { name: 'stored', user: 'root', port: sshd.port, key: CLIENT_KEY.private, password: PASSWORD });
    expect(profile.status, profile.text).to.equal(201);
  });
  after(async () => {
    await sshd?.close();
    await t?.stop();
  });

  it('offers no credentials to an unknown host key: start and update-ssh fail naming the presented key', async function () {
    this.timeout(30_000);
    for (const [verb, failed] of [['start', 'agent_start_failed'], ['update-ssh', 'ssh_update_failed']] as const) {
      const after = await lastEventId();
      const res = await api('POST', `/v1/nodes/${nodeId}/${verb}`, { ssh_profile: 'stored' });
      expect(res.status, res.text).to.equal(202);
      const event = await outcome([failed], after);
      expect(event.message).to.contain(`no host key is recorded for 127.0.0.1:${sshd.port}`).and.contain(`it presented ${sshd.fingerprint}`).and.contain('ssh_host_key');
    }
    expect(sshd.attempts, 'authentication attempts the machine saw').to.deep.equal([]);
    expect(t.logs.join('\n')).not.to.contain(PASSWORD);
  });

  it('with the host key given: connects, offers the key first and never the password when the key is accepted; the key is pinned from then on', async function () {
    this.timeout(30_000);
    let after = await lastEventId();
    expect((await api('POST', `/v1/nodes/${nodeId}/start`, { ssh_profile: 'stored', ssh_host_key: sshd.fingerprint })).status).to.equal(202);
    // The stand-in runs no command, so the job fails after logging in, at detecting the machine.
    let event = await outcome(['agent_start_failed'], after);
    expect(event.message).not.to.contain('host key');
    expect(sshd.attempts.length).to.be.greaterThan(0);
    expect(sshd.attempts[0]).to.equal('publickey');
    expect(sshd.attempts.filter((a) => a.startsWith('password')), 'the password is never sent').to.deep.equal([]);

    // Recorded: the next start needs no ssh_host_key.
    const seen = sshd.attempts.length;
    after = await lastEventId();
    expect((await api('POST', `/v1/nodes/${nodeId}/start`, { ssh_profile: 'stored' })).status).to.equal(202);
    event = await outcome(['agent_start_failed'], after);
    expect(event.message).not.to.contain('host key');
    expect(sshd.attempts.length).to.be.greaterThan(seen);

    // Another machine answering at that address (another host key) is refused.
    const port = sshd.port;
    await sshd.close();
    const impostor = new RecordingSshServer();
    await impostor.listen(port);
    try {
      after = await lastEventId();
      expect((await api('POST', `/v1/nodes/${nodeId}/start`, { ssh_profile: 'stored' })).status).to.equal(202);
      event = await outcome(['agent_start_failed'], after);
      expect(event.message).to.contain(`the host key of 127.0.0.1:${port} changed`);
      expect(impostor.attempts).to.deep.equal([]);
    } finally {
      await impostor.close();
      sshd = new RecordingSshServer(sshd.hostKey);
      await sshd.listen(port);
    }
  });

  it('runs one SSH job on a node at a time: a second update-ssh (or a start) while one runs is a 409 naming it; once its outcome is recorded, the next is accepted', async function () {
    this.timeout(30_000);
    // A machine that accepts the connection and never says a word: the first job waits there until the test lets go.
    const sockets: Socket[] = [];
    const silent = createServer((socket) => {
      socket.on('error', () => undefined);
      sockets.push(socket);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const body = { ssh_user: 'root', ssh_port: (silent.address() as AddressInfo).port, ssh_key: CLIENT_KEY.private, ssh_host_key: sshd.fingerprint };
    try {
      const after = await lastEventId();
      const both = await Promise.all([api('POST', `/v1/nodes/${nodeId}/update-ssh`, body), api('POST', `/v1/nodes/${nodeId}/update-ssh`, body)]);
      expect(both.map((r) => r.status).sort(), both.map((r) => r.text).join('\n')).to.deep.equal([202, 409]);
      const refused = both.find((r) => r.status === 409)!;
      expect(refused.json.message).to.match(new RegExp(`^Node ${nodeId} has an SSH job running already \\(update-ssh, asked for at .+\\): wait for its outcome \\(node event ssh_update_completed or ssh_update_failed\\), then ask again$`));
      const start = await api('POST', `/v1/nodes/${nodeId}/start`, body);
      expect(start.status, start.text).to.equal(409);
      expect(start.json.message).to.contain('(update-ssh,');
      await waitFor(async () => sockets.length > 0, { timeoutMs: 10_000, what: 'the job connecting' });
      expect(sockets, 'one job connected').to.have.length(1);

      // The machine hangs up: the job fails, and from its outcome on the node takes the next one.
      for (const socket of sockets) socket.destroy();
      const failed = await outcome(['ssh_update_failed'], after);
      const next = await api('POST', `/v1/nodes/${nodeId}/start`, body);
      expect(next.status, next.text).to.equal(202);
      await waitFor(async () => sockets.length > 1, { timeoutMs: 10_000, what: 'the start connecting' });
      for (const socket of sockets) socket.destroy();
      await outcome(['agent_start_failed'], failed.id);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('runs one deploy at a time to a new address: of two at once, one is a 409 naming the running deploy, and one node is made for the machine', async function () {
    this.timeout(30_000);
    const sockets: Socket[] = [];
    const silent = createServer((socket) => {
      socket.on('error', () => undefined);
      sockets.push(socket);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.2', resolve));
    const body = { ip_address: '127.0.0.2', ssh_user: 'root', ssh_port: (silent.address() as AddressInfo).port, ssh_key: CLIENT_KEY.private, ssh_host_key: sshd.fingerprint };
    try {
      const both = await Promise.all([api('POST', '/v1/nodes/deploy', body), api('POST', '/v1/nodes/deploy', body)]);
      expect(both.map((r) => r.status).sort(), both.map((r) => r.text).join('\n')).to.deep.equal([202, 409]);
      const accepted = both.find((r) => r.status === 202)!.json.data;
      const refused = both.find((r) => r.status === 409)!;
      expect(refused.json.message).to.match(new RegExp(`^Node ${accepted.node_id} has an SSH job running already \\(deploy, asked for at .+\\): wait for its outcome \\(node event deploy_completed or deploy_failed\\), then ask again$`));
      const atAddress = ((await api('GET', '/v1/nodes?limit=1000')).json.data as Array<{ id: string; ip_address: string }>).filter((n) => n.ip_address === '127.0.0.2');
      expect(atAddress.map((n) => n.id), 'one node for the machine').to.deep.equal([accepted.node_id]);
      await waitFor(async () => sockets.length > 0, { timeoutMs: 10_000, what: 'the deploy connecting' });
      expect(sockets, 'one deploy connected').to.have.length(1);
      for (const socket of sockets) socket.destroy();
      await waitFor(
        async () => ((await api('GET', `/v1/nodes/events?node_id=${accepted.node_id}`)).json.data as any[]).find((e) => e.kind === 'deploy_failed'),
        { timeoutMs: 15_000, what: 'deploy_failed' },
      );
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('refuses a path as ssh_key on deploy, update-ssh and start (400), as the profile endpoint does', async () => {
    const path = '/root/.ssh/id_ed25519';
    const answers = [
      await api('POST', '/v1/nodes/deploy', { ip_address: '192.0.2.9', ssh_key: path }),
      await api('POST', `/v1/nodes/${nodeId}/update-ssh`, { ssh_key: path }),
      await api('POST', `/v1/nodes/${nodeId}/start`, { ssh_key: path }),
      await api('POST', '/v1/ssh-profiles', { name: 'pathy', key: path }),
    ];
    expect(answers.map((r) => r.status)).to.deep.equal([400, 400, 400, 400]);
    for (const res of answers.slice(0, 3)) {
      expect(res.json.message).to.equal('Validation failed: body.ssh_key must be a private key (PEM or OpenSSH), not a path');
      expect(res.json.details).to.deep.equal([{ path: 'body.ssh_key', message: 'must be private key content' }]);
    }
    expect(answers[3]!.json.message).to.contain('body.key must be a private key');
    expect((await api('GET', '/v1/nodes?limit=100')).json.data.some((n: { ip_address: string }) => n.ip_address === '192.0.2.9'), 'no node was made for the refused deploy').to.equal(false);
  });
});
