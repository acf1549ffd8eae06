import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { answerTasks, FakeAgent } from '../../support/agents.js';
import { bootstrapAdmin, GOOD_PASSWORD, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs, type CliResult } from '../runner/support.js';

/**
 * `hangar node`, `hangar user`, `hangar key` and `hangar ssh-profile` as an operator runs them (the
 * real bin/hangar.mjs against a control plane in this process, signed with an admin's API key),
 * and names accepted where the API takes ids only (nodes, users, keys), here and in the other
 * resource commands (volume create --node). A node's agent, where one must answer (logs), is a
 * test double (FakeAgent).
 */
describeEachDialect('hangar node, user, key and ssh-profile against a running control plane', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let env: Record<string, string | undefined>;
  let dir: string;

  const cli = (args: string[], input?: string, extra: Record<string, string> = {}): Promise<CliResult> => hangarCli(args, { env: { ...env, ...extra }, input, timeoutMs: 60_000 });
  const ok = async (args: string[], input?: string): Promise<string> => {
    const res = await cli(args, input);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(0);
    expect(res.stderr).to.equal('');
    return res.stdout;
  };
  /** Exit 1 with `message` on stderr; answers stderr. */
  const fails = async (args: string[], message: string | RegExp, input?: string): Promise<string> => {
    const res = await cli(args, input);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(1);
    if (typeof message === 'string') expect(res.stderr).to.contain(message);
    else expect(res.stderr).to.match(message);
    return res.stderr;
  };
  const json = async (args: string[], input?: string) => JSON.parse(await ok([...args, '--json'], input));
  const idIn = (line: string, prefix: string) => line.match(new RegExp(`\\((${prefix}-[0-9a-z]+)\\)`))![1]!;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning', 'swarms', 'volumes'] });
    admin = await bootstrapAdmin(t);
    dir = temp.make('hangar-cli-nodes-');
    const ca = path.join(dir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  describe('hangar node', function () {
    this.timeout(120_000);
    let web: string;

    it('create, list and get, by id or by name', async () => {
      const created = await ok(['node', 'create', 'web-1', '--ip', '10.1.2.3']);
      expect(created).to.match(/^created node web-1 \(node-[0-9a-z]+\)\n$/);
      web = idIn(created, 'node');
      const [table, byName, byId] = await Promise.all([ok(['node', 'list']), json(['node', 'get', 'web-1']), ok(['node', 'get', web])]);
      expect(table.split('\n')[0]).to.match(/^id\s+\| name\s+\| status\s+\| hostname \| ip_address \| overlay_ip \| architecture \| agent$/);
      expect(table).to.match(new RegExp(`\n${web} \\| web-1 \\| pending \\| -\\s+\\| 10\\.1\\.2\\.3\\s+\\|`));
      expect(byName).to.include({ id: web, name: 'web-1', ip_address: '10.1.2.3', availability: 'active' });
      expect(byId).to.match(new RegExp(`^id: +${web}\n`));
      expect(await json(['node', 'list', '--status', 'pending', '--status', 'ready'])).to.have.length(1);
      expect(await ok(['node', 'list', '--status', 'offline'])).to.equal('no nodes\n');
    });

    it('an unknown name, an ambiguous one, and an id that is not there say which', async () => {
      const [a, b] = [idIn(await ok(['node', 'create', 'twin']), 'node'), idIn(await ok(['node', 'create', 'twin']), 'node')];
      const [ambiguous, unknown, missing] = await Promise.all([
        fails(['node', 'get', 'twin'], 'give the id of the one you mean'),
        fails(['node', 'cordon', 'ghost'], 'no node "ghost"'),
        fails(['node', 'get', 'node-0missing'], 'HTTP 404'),
      ]);
      expect(ambiguous).to.be.oneOf([
        `hangar node get: 2 nodes are named "twin" (${a}, ${b}): give the id of the one you mean\n`,
        `hangar node get: 2 nodes are named "twin" (${b}, ${a}): give the id of the one you mean\n`,
      ]);
      expect(unknown).to.equal('hangar node cordon: no node "ghost": it is not a node id, and no node has that name (hangar node list shows them)\n');
      expect(missing).to.match(/^hangar node get: GET \/v1\/nodes\/node-0missing: HTTP 404: /);
      expect(await ok(['node', 'remove', a])).to.equal(`removing node twin (${a}): removing; follow with: hangar node get ${a}\n`);
      // Once one of them is being removed the name is still two nodes' until its record goes.
      const gone = await ok(['node', 'remove', b, '--wait', '--timeout', '60']);
      expect(gone).to.match(new RegExp(`^removing node twin \\(${b}\\): removing\n(· .*\n)*node ${b} is gone\n$`));
    });

    it('cordon, drain and uncordon by name; the API’s 409 surfaces', async () => {
      expect(await ok(['node', 'cordon', 'web-1'])).to.equal(`cordoned node web-1 (${web})\n`);
      expect(await json(['node', 'get', web])).to.include({ availability: 'cordoned' });
      expect(await ok(['node', 'drain', 'web-1'])).to.equal(`drained node web-1 (${web})\n`);
      expect(await json(['node', 'get', web])).to.include({ availability: 'drained' });
      expect(await ok(['node', 'uncordon', 'web-1'])).to.equal(`uncordoned node web-1 (${web})\n`);
      await fails(['node', 'uncordon', 'web-1'], `HTTP 409: Node ${web} is not cordoned or drained`);
    });

    it('rename by name, then the new name finds it', async () => {
      expect(await ok(['node', 'rename', 'web-1', 'web-one'])).to.equal(`renamed node ${web} to web-one\n`);
      expect(await json(['node', 'get', 'web-one'])).to.include({ id: web, name: 'web-one' });
      await fails(['node', 'get', 'web-1'], 'no node "web-1"');
    });

    it('token prints a join token once with how to join; bound to a node by name; revoke', async () => {
      const out = await ok(['node', 'token', '--node', 'web-one', '--ttl', '600']);
      const lines = out.trimEnd().split('\n');
      expect(lines[0]).to.match(/^created join token tok-[0-9a-z]+: valid until \d{4}-\d\d-\d\dT[\d:.]+Z, overlay address [\d.]+$/);
      expect(lines[1]).to.match(/^token: hjt1\S+$/);
      // How to join: the control plane's command per architecture (download the agent compressed, join with the token on stdin).
      const token = lines[1]!.slice('token: '.length);
      expect(lines.slice(2, -1).map((l) => l.replace(/https:\/\/[^/' ]+/g, 'URL'))).to.deep.equal(
        ['amd64', 'arm64'].map(
          (arch) => `join a machine (${arch}): curl -fsSLk --compressed -o hangar-agent 'URL/v1/agent/binary?arch=${arch}' && chmod +x hangar-agent && echo '${token}' | sudo ./hangar-agent --join --token-stdin --api 'URL' --data-dir /var/lib/hangar-agent`,
        ),
      );
      expect(lines.at(-1)).to.equal('note: the token is shown this once; hangar cannot show it again. Store it now.');
      const tokenId = lines[0]!.match(/(tok-[0-9a-z]+)/)![1]!;
      const unbound = await json(['node', 'token']);
      expect(unbound.token).to.match(/^hjt1/);
      await fails(['node', 'token', '--node', 'ghost'], 'no node "ghost"');
      expect(await ok(['node', 'token-revoke', tokenId])).to.equal(`revoked join token ${tokenId}\n`);
      await fails(['node', 'token-revoke', tokenId], `HTTP 404: No unused join token ${tokenId}`);
    });

    it('logs asks the node’s agent for its log and prints the lines', async () => {
      const id = idIn(await ok(['node', 'create', 'agent-1']), 'node');
      const agent = await FakeAgent.forNode(t, id);
      expect((await agent.heartbeat()).status).to.equal(200);
      const lines = ['2024-05-01T10:00:00Z agent started', '2024-05-01T10:00:01Z heartbeat ok'];
      const answering = answerTasks(agent, { answers: { 'agent.logs': () => ({ lines }) } });
      try {
        expect(await ok(['node', 'logs', 'agent-1', '--lines', '2'])).to.equal(`${lines.join('\n')}\n`);
        expect(answering.calls.find((c) => c.method === 'agent.logs')!.input).to.deep.equal({ lines: 2 });
        // Names are taken wherever the API wants a node id: a volume on it.
        const volume = await ok(['volume', 'create', 'data', '--node', 'agent-1', '--folder', '/srv/data', '--type', 'local']);
        expect(volume).to.match(/^creating volume data \(vol-[0-9a-z]+\): /);
        expect(await json(['volume', 'get', 'data'])).to.include({ node_id: id });
        await fails(['volume', 'create', 'other', '--node', 'ghost', '--folder', '/srv/other'], 'hangar volume create: no node "ghost"');
        await fails(['swarm', 'join', 'nowhere', 'ghost'], 'hangar swarm join: no node "ghost"');
      } finally {
        await answering.stop();
      }
    });

    it('deploy sends the password from stdin and follows the deploy to its end (here: refused, exit 1)', async () => {
      const res = await cli(['node', 'deploy', '127.0.0.1', '--name', 'local', '--ssh-port', '1', '--ssh-password-file', '-', '--timeout', '60'], 'not-a-real-password\n');
      expect(res.code, res.stderr + res.stdout).to.equal(1);
      const [first, ...steps] = res.stdout.trimEnd().split('\n');
      expect(first).to.match(/^deploying 127\.0\.0\.1 as node node-[0-9a-z]+$/);
      expect(steps.at(-1)).to.match(/^\d\d:\d\d:\d\d ✗ failed +\S/);
      expect(res.stdout + res.stderr).not.to.contain('not-a-real-password');
      await fails(['node', 'deploy', '127.0.0.1', '--ssh-profile', 'ghost', '--no-wait'], 'HTTP 400: Unknown SSH profile ghost');
    });
  });

  describe('hangar user and hangar key', function () {
    this.timeout(120_000);
    let bob: string;

    it('user create (the password from stdin), list, get by username; a missing password file is a usage error', async () => {
      const created = await ok(['user', 'create', 'bob', '--password-file', '-', '--email', 'bob@example.test', '--display-name', 'Bob B', '--property', 'team=ops'], `${GOOD_PASSWORD}\n`);
      expect(created).to.match(/^created user bob \([0-9a-f-]{36}\)\n$/);
      bob = created.match(/\(([0-9a-f-]{36})\)/)![1]!;
      const [table, record] = await Promise.all([ok(['user', 'list']), ok(['user', 'get', 'bob'])]);
      expect(table.split('\n')[0]).to.match(/^id\s+\| username \| name\s+\| email\s+\| role\s+\| created_at$/);
      expect(table).to.match(new RegExp(`\n${bob} \\| bob\\s+\\| Bob B\\s+\\| bob@example\\.test\\s+\\| user\\s+\\|`));
      expect(record).to.match(new RegExp(`^id: +${bob}\n`)).and.match(/\nproperties:\nid +\| name \| value\n.*\n\d+ +\| team \| ops\n/);
      const usage = await cli(['user', 'create', 'carol']);
      expect(usage.code).to.equal(2);
      expect(usage.stderr).to.contain('Missing required argument: password-file');
      await fails(['user', 'get', 'nobody'], 'hangar user get: no user "nobody": it is not a user id, and no user has that username');
    });

    it('add-property and remove-property; password (its keys go unless --keep-api-keys)', async () => {
      const added = await json(['user', 'add-property', 'bob', 'tier', 'gold']);
      expect(added).to.include({ name: 'tier', value: 'gold' });
      expect(await ok(['user', 'remove-property', 'bob', String(added.id)])).to.equal(`removed property ${added.id} from user ${bob}\n`);
      expect(await ok(['user', 'password', 'bob', '--password-file', '-', '--keep-api-keys'], `${GOOD_PASSWORD}-2\n`)).to.equal(`set the password of user ${bob}\n`);
    });

    it('user update (email, name, role; "" removes the email) and unlock (the failed logins forgotten)', async () => {
      expect(await ok(['user', 'update', 'bob', '--email', 'bob.b@example.test', '--display-name', 'Bob Builder', '--role', 'admin'])).to.equal(`updated user bob (${bob})\n`);
      expect(await json(['user', 'get', 'bob'])).to.include({ email: 'bob.b@example.test', name: 'Bob Builder', role: 'admin' });
      await ok(['user', 'update', 'bob', '--email', '', '--role', 'user']);
      expect(await json(['user', 'get', 'bob'])).to.include({ email: null, name: 'Bob Builder', role: 'user' });
      await fails(['user', 'update', 'bob'], 'give name, email or role to change');
      // A failed login of bob's is counted; unlock forgets it, and a second unlock finds nothing.
      expect((await t.request('POST', '/v1/iam/session', { body: { username: 'bob', password: 'Wrong-horse-77-battery!' } })).status).to.equal(401);
      const unlocked = await ok(['user', 'unlock', 'bob']);
      expect(Number(unlocked.match(new RegExp(`^unlocked user ${bob} \\((\\d+) failure counter\\(s\\) forgotten\\)\n$`))?.[1])).to.be.above(0);
      expect(await ok(['user', 'unlock', 'bob'])).to.equal(`unlocked user ${bob} (0 failure counter(s) forgotten)\n`);
    });

    it('key create prints the secret once; the key works; list and delete by access key id; the default user is you', async () => {
      const out = await ok(['key', 'create', '--user', 'bob', '--description', 'ci']);
      const lines = out.trimEnd().split('\n');
      expect(lines[0]).to.match(new RegExp(`^created key HK[0-9A-Z]+ \\(key-[0-9a-z]+\\) for user ${bob}$`));
      const accessKeyId = lines[1]!.match(/^access key id: +(HK[0-9A-Z]+)$/)![1]!;
      const secret = lines[2]!.match(/^secret access key: +(\S+)$/)![1]!;
      expect(lines.slice(3)).to.deep.equal([
        'scope:             the installation, its owner’s permissions',
        'expires:           never',
        'note: the secret access key is shown this once; hangar cannot show it again. Store it now.',
      ]);
      // Bob signs with it; without --user his own keys are listed (never their secrets).
      const asBob = await cli(['key', 'list'], undefined, { HANGAR_ACCESS_KEY: accessKeyId, HANGAR_SECRET_KEY: secret });
      expect(asBob.code, asBob.stderr).to.equal(0);
      expect(asBob.stdout.split('\n')[0]).to.match(/^id\s+\| access_key_id\s+\| description \| scope\s+\| holds\s+\| expires\s+\| last_used_at\s+\| source$/);
      expect(asBob.stdout).to.contain(accessKeyId).and.contain('| ci ').and.not.contain(secret);
      const mine = await json(['key', 'list']);
      expect(mine.map((k: { access_key_id: string }) => k.access_key_id)).to.deep.equal([admin.accessKeyId]);
      expect(await ok(['key', 'delete', accessKeyId, '--user', 'bob'])).to.match(new RegExp(`^deleted key key-[0-9a-z]+ of user ${bob}\n$`));
      const revoked = await cli(['key', 'list'], undefined, { HANGAR_ACCESS_KEY: accessKeyId, HANGAR_SECRET_KEY: secret });
      expect(revoked.code).to.equal(1);
      expect(revoked.stderr).to.contain('HTTP 401');
      await fails(['key', 'delete', 'HKNOTAKEY', '--user', 'bob'], 'no key "HKNOTAKEY": it is not a key id, and no key has that access key id');
    });

    it('user delete by username', async () => {
      expect(await ok(['user', 'delete', 'bob'])).to.equal(`deleted user bob (${bob})\n`);
      await fails(['user', 'get', 'bob'], 'no user "bob"');
    });
  });

  describe('hangar ssh-profile', function () {
    this.timeout(120_000);

    it('create from a key file, list, get (the key never shown), delete; both secrets from stdin is a usage error', async () => {
      const keyFile = path.join(dir, 'id_test');
      writeFileSync(keyFile, '-----BEGIN OPENSSH PRIVATE KEY-----\nnot-really-a-key\n-----END OPENSSH PRIVATE KEY-----\n', { mode: 0o600 });
      const created = await ok(['ssh-profile', 'create', 'lab', '--user', 'deployer', '--port', '2222', '--key-file', keyFile]);
      expect(created).to.match(/^created ssh-profile lab \(sshp-[0-9a-z]+\)\n$/);
      const [table, record] = await Promise.all([ok(['ssh-profile', 'list']), ok(['ssh-profile', 'get', 'lab'])]);
      expect(table).to.match(/\| lab +\| deployer \| 2222 \| true +\| false +\|/);
      expect(record).to.match(/\nhas_key: +true\n/).and.not.contain('not-really-a-key');
      const both = await cli(['ssh-profile', 'create', 'x', '--key-file', '-', '--password-file', '-'], 'x');
      expect(both.code).to.equal(2);
      expect(both.stderr).to.contain('only one of --key-file and --password-file can be - (stdin)');
      expect(await ok(['ssh-profile', 'delete', 'lab'])).to.match(/^deleted ssh-profile sshp-[0-9a-z]+\n$/);
      await fails(['ssh-profile', 'get', 'lab'], 'HTTP 404: No SSH profile lab');
    });
  });
});
