import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { answerTasks, FakeAgent } from '../../support/agents.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs, type CliResult } from '../runner/support.js';

/**
 * The resource commands (cli/resources.ts) as an operator runs them: the real bin/hangar.mjs
 * against a control plane in this process, signed with an admin's API key from the environment.
 * Mostly what needs no running swarm; the last part puts a test double (FakeAgent) in the place
 * of a swarm manager's agent, to see the 202s, --wait, log reads and values pass through the CLI.
 * What the swarm does with them is other suites' business.
 */

// The resource plugins the commands reach; every one is built in (a missing one fails the suite's start, it is not skipped).
const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 'secrets', 'compute', 'services', 's3', 'gateway', 'tags', 'cleanup'];

describeEachDialect('hangar resource commands against a running control plane', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let env: Record<string, string | undefined>;
  let dir: string;

  const cli = (args: string[], input?: string): Promise<CliResult> => hangarCli(args, { env, input, timeoutMs: 60_000 });
  /** Runs the CLI and expects exit 0 and no stderr; answers stdout. */
  const ok = async (args: string[], input?: string): Promise<string> => {
    const res = await cli(args, input);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(0);
    expect(res.stderr).to.equal('');
    return res.stdout;
  };
  /** Runs the CLI and expects exit 1 with the API's message on stderr (nothing on stdout). */
  const fails = async (args: string[], message: string | RegExp, input?: string) => {
    const res = await cli(args, input);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(1);
    if (typeof message === 'string') expect(res.stderr).to.contain(message);
    else expect(res.stderr).to.match(message);
    expect(res.stdout).to.equal('');
    return res.stderr;
  };
  const usage = async (args: string[], message: string) => {
    const res = await cli(args);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(2);
    expect(res.stderr).to.contain(message);
  };
  const json = async (args: string[], input?: string) => JSON.parse(await ok([...args, '--json'], input));

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
    dir = temp.make('hangar-cli-resources-');
    const ca = path.join(dir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    env = {
      XDG_CONFIG_HOME: dir,
      HANGAR_API_URL: t.url,
      HANGAR_ACCESS_KEY: admin.accessKeyId,
      HANGAR_SECRET_KEY: admin.secretAccessKey,
      HANGAR_CA_FILE: ca,
      HANGAR_CLI_POLL_MS: '100',
    };
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  describe('swarm', function () {
    this.timeout(120_000);
    let web: { id: string; name: string };

    it('create prints what it created; --json prints the data; a duplicate name is the API’s 409, a bad name its 400', async () => {
      const created = await ok(['swarm', 'create', 'web']);
      expect(created).to.match(/^created swarm web \(swarm-[0-9a-z]+\)\n$/);
      web = { id: created.match(/\((swarm-[0-9a-z]+)\)/)![1]!, name: 'web' };
      const [other, duplicate, bad] = await Promise.all([
        json(['swarm', 'create', 'db']),
        fails(['swarm', 'create', 'web'], 'A swarm named web exists'),
        fails(['swarm', 'create', 'Not_A_Dns_Name'], /HTTP 400: Validation failed: .*name/),
      ]);
      expect(other).to.include({ name: 'db', status: 'empty', manager: null });
      expect(other.id).to.match(/^swarm-/);
      expect(duplicate).to.match(/^hangar swarm create: POST \/v1\/swarms: HTTP 409: /);
      expect(bad).to.match(/^hangar swarm create: /);
    });

    it('list is a table of every swarm; --json the array', async () => {
      const [table, data] = await Promise.all([ok(['swarm', 'list']), json(['swarm', 'list'])]);
      const lines = table.trimEnd().split('\n');
      expect(lines[0]).to.match(/^id\s+\| name\s+\| status\s+\| manager \| members \| lb \| created_at$/);
      expect(lines.find((l) => l.startsWith(web.id))).to.match(/\| web\s+\| empty\s+\| -\s+\| 0\s+\| -\s+\|/);
      expect(lines.at(-1)).to.equal('(2 rows)');
      expect(data.map((s: { name: string }) => s.name).sort()).to.deep.equal(['db', 'web']);
    });

    it('get shows one swarm field by field, by id or by name; members and an unknown id', async () => {
      const [byId, byName, members, unknown] = await Promise.all([
        ok(['swarm', 'get', web.id]),
        json(['swarm', 'get', 'web']),
        ok(['swarm', 'members', web.id]),
        fails(['swarm', 'get', 'swm-nope'], 'HTTP 404: No swarm swm-nope'),
      ]);
      expect(byId).to.match(new RegExp(`^id: +${web.id}\n`));
      expect(byId).to.match(/\nstatus: +empty\n/).and.match(/\nmanager: +-\n/).and.match(/\nmembers: +-\n/);
      expect(byName).to.include({ id: web.id, name: 'web' });
      expect(members).to.equal('no members\n');
      expect(unknown).to.equal('hangar swarm get: GET /v1/swarms/swm-nope: HTTP 404: No swarm swm-nope\n');
    });

    it('join, leave and the load balancer answer with the API’s messages on an empty swarm', async () => {
      await Promise.all([
        fails(['swarm', 'join', web.id, 'node-0missing'], /HTTP 404: .*node-0missing/),
        // Not a node id: looked up as a name (the API takes ids only), and no node has it.
        fails(['swarm', 'join', web.id, 'not-a-node'], 'hangar swarm join: no node "not-a-node": it is not a node id, and no node has that name'),
        fails(['swarm', 'leave', web.id, 'node-0missing'], 'HTTP 404: Node node-0missing is not a member of swarm web'),
        fails(['swarm', 'lb-deploy', web.id], 'HTTP 409: Swarm web has no manager yet'),
        fails(['swarm', 'lb-remove', web.id], 'HTTP 404: Swarm web has no load balancer'),
      ]);
    });

    it('delete of an empty swarm is done at once; then it is gone', async () => {
      const db = (await json(['swarm', 'get', 'db'])) as { id: string };
      expect(await ok(['swarm', 'delete', db.id, '--force', '--wait'])).to.equal(`deleted swarm ${db.id}\n`);
      await fails(['swarm', 'get', db.id], `HTTP 404: No swarm ${db.id}`);
    });
  });

  describe('instance', function () {
    this.timeout(120_000);

    it('types is a table of the instance types; --json their data', async () => {
      const [table, data] = await Promise.all([ok(['instance', 'types']), json(['instance', 'types'])]);
      expect(table.split('\n')[0]).to.match(/^name\s+\| cpus\s+\| memory_mb \| default$/);
      expect(table).to.match(/\nmicro\s+\| 1\s+\| 512\s+\| true\n/);
      expect(data.find((x: { name: string }) => x.name === 'micro')).to.deep.include({ cpus: 1, memory_mb: 512, default: true });
    });

    it('create sends every flag; the API’s 409 (no manager) and 400 (a bad port) surface', async () => {
      await Promise.all([
        fails(
          ['instance', 'create', 'api', '--swarm', 'web', '--image', 'nginx:1', '--port', '8080:80', '--port', '8443:443', '--env', 'A=1', '--env', 'B=x=y', '--command', `sh -c 'echo "hi there"'`, '--replicas', '2'],
          'HTTP 409: Swarm web has no manager yet: join a node to it first',
        ),
        fails(['instance', 'create', 'api', '--swarm', 'web', '--image', 'nginx:1', '--port', '80'], /HTTP 400: Validation failed: .*ports/),
        fails(['instance', 'create', 'api', '--swarm', 'web', '--image', 'nginx:1', '--type', 'huge'], /HTTP 400: Validation failed: .*type/),
      ]);
    });

    it('list, get, logs and scale of what is not there', async () => {
      const [list, data] = await Promise.all([
        ok(['instance', 'list']),
        json(['instance', 'list']),
        fails(['instance', 'get', 'inst-nope'], /HTTP 404: .*inst-nope/),
        fails(['instance', 'logs', 'inst-nope', '--lines', '5'], /HTTP 404: .*inst-nope/),
        fails(['instance', 'scale', 'inst-nope', '3'], /HTTP 404: .*inst-nope/),
      ]);
      expect(list).to.equal('no instances\n');
      expect(data).to.deep.equal([]);
    });

    it('create --cluster sends cluster_id (the API names a cluster that does not exist); exactly one of --swarm and --cluster', async () => {
      const [missing, both, neither, filtered] = await Promise.all([
        fails(['instance', 'create', 'api', '--cluster', 'k8s-nope', '--image', 'nginx:1'], 'k8s-nope'),
        cli(['instance', 'create', 'api', '--swarm', 'web', '--cluster', 'k8s-nope', '--image', 'nginx:1']),
        cli(['instance', 'create', 'api', '--image', 'nginx:1']),
        fails(['instance', 'list', '--cluster', 'k8s-nope'], 'k8s-nope'),
      ]);
      expect(missing).to.match(/^hangar instance create: POST \/v1\/compute\/instances: HTTP 4\d\d: /);
      expect(filtered).to.match(/^hangar instance list: GET \/v1\/compute\/instances\?.*cluster_id=k8s-nope.*: HTTP 400: /);
      expect(both.code).to.equal(2);
      expect(both.stderr).to.contain('Arguments cluster and swarm are mutually exclusive');
      expect(neither.code).to.equal(2);
      expect(neither.stderr).to.contain('give the swarm (--swarm) or the Kubernetes cluster (--cluster) to create it on');
    });
  });

  describe('secret and config', function () {
    this.timeout(120_000);

    it('create from a literal, a file or stdin reaches the API, whose 409 (no manager) surfaces; nothing is listed', async () => {
      const file = path.join(dir, 'config.txt');
      writeFileSync(file, 'listen 80;\n');
      await Promise.all([
        fails(['secret', 'create', 'db-password', '--swarm', 'web', '--from-literal', 's3cret'], 'HTTP 409: Swarm web has no manager yet'),
        fails(['secret', 'create', 'db-password', '--swarm', 'web', '-'], 'HTTP 409: Swarm web has no manager yet', 'from stdin\n'),
        fails(['config', 'create', 'nginx', '--swarm', 'web', '--from-file', file], 'HTTP 409: Swarm web has no manager yet'),
        fails(['config', 'create', 'nginx', '--swarm', 'web', '--from-file', '-'], 'HTTP 409: Swarm web has no manager yet', 'from stdin\n'),
        fails(['secret', 'create', 'bad name', '--swarm', 'web', '--from-literal', 'x'], 'HTTP 400: Validation failed'),
      ]);
      const [secrets, configs, data] = await Promise.all([ok(['secret', 'list']), ok(['config', 'list', '--swarm', 'web']), json(['secret', 'list'])]);
      expect(secrets).to.equal('no secrets\n');
      expect(configs).to.equal('no configs\n');
      expect(data).to.deep.equal([]);
      await Promise.all([fails(['secret', 'get', 'db-password'], 'HTTP 404: No secret db-password'), fails(['config', 'get', 'nginx', '--decode'], 'HTTP 404: No config nginx')]);
    });

    it('the value comes in exactly one way (usage errors, exit 2)', async () => {
      await Promise.all([
        usage(['secret', 'create', 'x', '--swarm', 'web'], 'give the value in exactly one way'),
        usage(['secret', 'create', 'x', '--swarm', 'web', '--from-literal', 'a', '--from-file', '/etc/hostname'], 'give the value in exactly one way'),
        usage(['secret', 'create', 'x', '--swarm', 'web', 'value'], 'unexpected argument "value"'),
        usage(['config', 'create', 'x', '--swarm', 'web', '--from-file', path.join(dir, 'missing')], '--from-file'),
        usage(['secret', 'update', 'x'], 'give the value in exactly one way'),
      ]);
    });
  });

  describe('volume, service, s3, gateway and lb', function () {
    this.timeout(120_000);

    it('volume: create on an unknown node and a bad folder are the API’s 404 and 400; list is empty', async () => {
      const [, , list] = await Promise.all([
        fails(['volume', 'create', 'data', '--node', 'node-0missing', '--folder', '/srv/data'], /HTTP 404: .*node-0missing/),
        fails(['volume', 'create', 'data', '--node', 'node-0missing', '--folder', 'relative'], /HTTP 400: Validation failed: .*folder/),
        ok(['volume', 'list']),
        usage(['volume', 'create', 'data', '--node', 'node-0missing', '--folder', '/srv', '--type', 'iscsi'], 'Invalid values'),
      ]);
      expect(list).to.equal('no volumes\n');
    });

    it('service: create reads and encodes the compose file; the API’s 409 (no manager) surfaces', async () => {
      const compose = path.join(dir, 'compose.yml');
      writeFileSync(compose, 'services:\n  web:\n    image: nginx:1\n');
      await Promise.all([
        fails(['service', 'create', 'shop', '--swarm', 'web', '--compose-file', compose], 'HTTP 409: Swarm web has no manager yet'),
        fails(['service', 'get', 'svc-nope'], /HTTP 404: .*svc-nope/),
        usage(['service', 'create', 'shop', '--swarm', 'web'], 'give --compose-file (a compose stack on a swarm) or --manifest (Kubernetes manifests on a cluster), one of them'),
        usage(['service', 'create', 'shop', '--swarm', 'web', '--compose-file', path.join(dir, 'missing.yml')], '--compose-file'),
        // The Kubernetes form: --cluster with --manifest, sent as the API takes it (cluster_id: the API's own 404 names the cluster).
        fails(['service', 'create', 'shop', '--cluster', 'kube-nope', '--manifest', compose], /HTTP 404: .*cluster kube-nope/i),
        usage(['service', 'create', 'shop', '--swarm', 'web', '--manifest', compose], '--manifest goes with --cluster (a Kubernetes cluster), not --swarm'),
        usage(['service', 'create', 'shop', '--cluster', 'web', '--compose-file', compose], '--compose-file goes with --swarm (a swarm), not --cluster'),
        usage(['service', 'create', 'shop', '--cluster', 'web', '--manifest', compose, '--compose-file', compose], 'one of them'),
        usage(['service', 'update', 'svc-nope'], 'one of them'),
      ]);
      expect(await ok(['service', 'list'])).to.equal('no services\n');
    });

    it('s3: create on a swarm with no manager is refused; list is empty', async () => {
      const passwordFile = path.join(dir, 's3-password');
      writeFileSync(passwordFile, 'Long-enough-1\n');
      await Promise.all([
        fails(['s3', 'create', 'files', '--swarm', 'web', '--volume', 'vol-0missing', '--password-file', passwordFile], 'HTTP 409: Swarm web has no manager yet'),
        fails(['s3', 'create', 'files', '--swarm', 'web', '--volume', 'vol-0missing', '--password-file', '-'], /HTTP 400: Validation failed: .*password/, 'short\n'),
        fails(['s3', 'get', 's3-nope'], /HTTP 404: .*s3-nope/),
        usage(['s3', 'create', 'files', '--swarm', 'web'], 'Missing required argument: volume'),
      ]);
      expect(await ok(['s3', 'list'])).to.equal('no object stores\n');
    });

    it('gateway prints the routes and load balancers; lb list, get and redeploy', async () => {
      const [text, data, lbs, lbData] = await Promise.all([
        ok(['gateway']),
        json(['gateway']),
        ok(['lb', 'list']),
        json(['lb', 'list']),
        fails(['lb', 'get', 'lb-nope'], 'HTTP 404: No load balancer lb-nope'),
        fails(['lb', 'redeploy', 'lb-nope'], 'HTTP 404: No load balancer lb-nope'),
      ]);
      expect(text).to.equal('routes:         -\nload_balancers: -\n');
      expect(data).to.deep.equal({ routes: [], load_balancers: [] });
      expect(lbs).to.equal('no load balancers\n');
      expect(lbData).to.deep.equal([]);
    });
  });

  describe('tag', function () {
    this.timeout(120_000);

    it('set, list (table and --json), delete; the API’s 404 and 400 surface', async () => {
      const web = (await json(['swarm', 'get', 'web'])) as { id: string };
      expect(await ok(['tag', 'set', 'swarm', web.id, 'env', 'prod'])).to.equal(`tagged swarm ${web.id}: env=prod\n`);
      expect(await json(['tag', 'set', 'swarm', web.id, 'team', '007'])).to.deep.equal({ resource_type: 'swarm', resource_id: web.id, key: 'team', value: '007' });
      const [table, data, byValue, none] = await Promise.all([
        ok(['tag', 'list', '--key', 'env']),
        json(['tag', 'list', '--key', 'team']),
        ok(['tag', 'list', '--key', 'env', '--value', 'staging']),
        ok(['tag', 'list', '--key', 'env', '--type', 'node']),
        fails(['tag', 'set', 'swarm', 'swm-nope', 'env', 'prod'], 'HTTP 404: No swarm swm-nope'),
        fails(['tag', 'set', 'planet', web.id, 'env', 'prod'], /HTTP 400: Validation failed: .*resource_type/),
        fails(['tag', 'set', 'swarm', web.id, 'bad key!', 'x'], /HTTP 400: Validation failed: .*key/),
        usage(['tag', 'list'], 'Missing required argument: key'),
        usage(['tag', 'set', 'swarm', web.id, 'env'], 'Not enough non-option arguments'),
      ]);
      const lines = table.trimEnd().split('\n');
      expect(lines[0]).to.match(/^resource_type \| resource_id\s+\| key \| value$/);
      expect(lines[2]).to.match(new RegExp(`^swarm\\s+\\| ${web.id} \\| env \\| prod$`));
      expect(lines[3]).to.equal('(1 row)');
      expect(data).to.deep.equal([{ resource_type: 'swarm', resource_id: web.id, key: 'team', value: '007' }]);
      expect(byValue).to.equal('no resources with this tag\n');
      expect(none).to.equal('no resources with this tag\n');
      expect(await ok(['tag', 'delete', 'swarm', web.id, 'env'])).to.equal(`removed tag env from swarm ${web.id}\n`);
      await fails(['tag', 'delete', 'swarm', web.id, 'env'], `HTTP 404: No tag env on swarm ${web.id}`);
      expect(await ok(['tag', 'list', '--key', 'env'])).to.equal('no resources with this tag\n');
    });
  });

  describe('cleanup', function () {
    this.timeout(120_000);

    it('an unknown id is the API’s 404; an unknown type its 400; an empty swarm is removed', async () => {
      await Promise.all([
        fails(['cleanup', 'instance', 'inst-nope'], 'hangar cleanup: POST /v1/cleanup/instance/inst-nope: HTTP 404: No instance inst-nope'),
        fails(['cleanup', 'swarm', 'swm-nope'], 'HTTP 404: No swarm swm-nope'),
        fails(['cleanup', 'planet', 'x'], 'HTTP 400: Validation failed'),
        usage(['cleanup', 'swarm'], 'Not enough non-option arguments'),
      ]);
      const lost = (await json(['swarm', 'create', 'lost'])) as { id: string };
      expect(await ok(['cleanup', 'swarm', lost.id])).to.equal(`removed swarm ${lost.id} (what existed of it in the runtime, and its record)\n`);
      await fails(['swarm', 'get', lost.id], 'HTTP 404');
    });
  });

  describe('usage errors exit 2, before any request', function () {
    this.timeout(120_000);

    it('a missing positional or flag, an unknown verb or flag, a number that is none, a malformed --env or --command', async () => {
      await Promise.all([
        usage(['swarm'], 'Not enough non-option arguments'),
        usage(['swarm', 'create'], 'Not enough non-option arguments'),
        usage(['swarm', 'explode', 'x'], 'Unknown argument'),
        usage(['swarm', 'list', '--colour'], 'Unknown argument: colour'),
        usage(['instance', 'create', 'api', '--swarm', 'web'], 'Missing required argument: image'),
        usage(['instance', 'scale', 'inst-x', 'three'], 'replicas must be a number'),
        usage(['instance', 'create', 'api', '--swarm', 'web', '--image', 'x', '--env', 'NOEQUALS'], '--env "NOEQUALS" must be KEY=VALUE'),
        usage(['instance', 'create', 'api', '--swarm', 'web', '--image', 'x', '--command', 'sh -c "unterminated'], 'unterminated "'),
        usage(['instance', 'logs', 'inst-x', '--lines', '5', '--since', '2024-01-01T00:00:00Z'], 'mutually exclusive'),
      ]);
    });

    it('no connection configured is a usage error too', async () => {
      const res = await hangarCli(['swarm', 'list'], { env: { XDG_CONFIG_HOME: dir, HANGAR_API_URL: undefined, HANGAR_ACCESS_KEY: undefined, HANGAR_SECRET_KEY: undefined, HANGAR_CA_FILE: undefined } });
      expect(res.code).to.equal(2);
      expect(res.stderr).to.contain('hangar swarm list: no connection to a control plane');
    });
  });

  describe('on a swarm whose manager is a test double (a fake agent answers the orchestrator calls)', function () {
    this.timeout(120_000);
    let nodeId: string;
    let swarmId: string;
    let manager: ReturnType<typeof answerTasks>;
    const LOG_LINES = ['2024-05-01T10:00:00Z hello', '2024-05-01T10:00:01Z world'];
    const answers: Record<string, (input: any) => unknown> = {
      init: () => ({ cluster_id: 'fake-cluster', runtime_node_id: 'fake-runtime-node' }),
      workloadLogs: () => ({ lines: LOG_LINES }),
      inspectWorkloads: () => ({ workloads: [] }),
      members: () => ({ members: [{ runtime_node_id: 'fake-runtime-node', hostname: 'fake-host', address: null, role: 'manager', state: 'ready', availability: 'active', leader: true }] }),
    };
    /** Calls the fake manager refuses, with the engine's error. */
    const refusals: Record<string, (input: any) => string | undefined> = {
      deployWorkload: (input) => (String(input.spec?.name).startsWith('inst-broken') ? 'No such image: nginx:none' : undefined),
    };
    const called = (method: string) => manager.calls.filter((c) => c.method === method);

    before(async () => {
      const node = await t.request('POST', '/v1/nodes', { body: { name: 'fake-manager', ip_address: '192.0.2.10' }, headers: bearer(admin.token) });
      expect(node.status, node.text).to.equal(201);
      nodeId = node.json.data.id;
      const agent = await FakeAgent.forNode(t, nodeId);
      expect((await agent.heartbeat()).status).to.equal(200);
      manager = answerTasks(agent, { answers, refusals });
      swarmId = (await json(['swarm', 'create', 'live'])).id;
    });
    after(() => manager?.stop());

    it('join answers 202: what was accepted and how to follow it; members lists the manager', async () => {
      expect(await ok(['swarm', 'join', 'live', nodeId])).to.equal(`joining node ${nodeId} to swarm live as manager: joining; follow with: hangar swarm members live\n`);
      for (let i = 0; i < 100 && (await json(['swarm', 'get', 'live'])).status !== 'active'; i++) await new Promise((r) => setTimeout(r, 200));
      const members = await ok(['swarm', 'members', 'live']);
      expect(members.split('\n')[0]).to.match(/^node_id\s+\| role\s+\| status \| hostname\s+\| state \| availability \| leader \| error$/);
      expect(members).to.match(new RegExp(`\n${nodeId}\\s+\\| manager \\| active \\| fake-host \\| ready \\| active\\s+\\| true\\s+\\| -\n`));
    });

    it('secret: create sends the value base64-encoded; list, get (never the value), update, delete', async () => {
      const created = await ok(['secret', 'create', 'db-password', '--swarm', 'live', '--from-literal', 's3cret']);
      expect(created).to.match(/^created secret db-password \(sec-[0-9a-z]+\)\n$/);
      const id = created.match(/\((sec-[0-9a-z]+)\)/)![1]!;
      expect(called('createObject').at(-1)!.input).to.deep.include({ kind: 'secret', name: 'db-password-v1', data: Buffer.from('s3cret').toString('base64') });
      const [list, record, data] = await Promise.all([ok(['secret', 'list', '--swarm', swarmId]), ok(['secret', 'get', id]), json(['secret', 'get', 'db-password'])]);
      // No cluster and no namespace on a swarm's secret.
      expect(list).to.match(new RegExp(`\n${id} \\| db-password \\| ${swarmId} \\| - +\\| - +\\| 1 +\\| - +\\| `));
      expect(record).to.match(/\nversion: +1\n/).and.not.contain('s3cret').and.not.contain(Buffer.from('s3cret').toString('base64'));
      expect(data).to.include({ id, name: 'db-password', version: 1 }).and.not.have.property('data');
      expect(await ok(['secret', 'update', id, '-'], 'rotated\n')).to.equal(`updated secret db-password (${id}) to version 2\n`);
      expect(called('createObject').at(-1)!.input).to.deep.include({ kind: 'secret', name: 'db-password-v2', data: Buffer.from('rotated\n').toString('base64') });
      expect(await ok(['secret', 'delete', id])).to.equal(`deleted secret ${id}\n`);
    });

    it('config: get shows the value as base64; --decode prints its bytes as they are', async () => {
      const value = 'worker_processes 2;\nlisten 80;\n';
      const created = await json(['config', 'create', 'nginx', '--swarm', 'live', '--from-file', '-'], value);
      expect(created.data).to.equal(Buffer.from(value).toString('base64'));
      const [decoded, record] = await Promise.all([ok(['config', 'get', 'nginx', '--decode']), ok(['config', 'get', created.id])]);
      expect(decoded).to.equal(value);
      expect(record).to.match(new RegExp(`\ndata: +${Buffer.from(value).toString('base64')}\n`));
      expect(await ok(['config', 'delete', 'nginx'])).to.equal(`deleted config ${created.id}\n`);
    });

    it('instance: create maps every flag into the body (202, how to follow); --wait ends failed with the reason (exit 1); logs polls its read and prints the lines; delete --wait until gone', async () => {
      const created = await ok([
        'instance', 'create', 'api', '--swarm', 'live', '--image', 'nginx:1', '--replicas', '2', '--type', 'small',
        '--port', '8080:80', '--port', '5353:53/udp', '--http-port', '80', '--domain', 'api.example.test',
        '--env', 'A=1', '--env', 'B=x=y', '--command', `sh -c 'echo "hi there"'`, '--arg=--verbose', '--platform', 'linux/arm64',
      ]);
      const id = created.match(/\((inst-[0-9a-z]+)\)/)?.[1];
      expect(created).to.equal(`creating instance api (${id}): deploying; follow with: hangar instance get ${id}\n`);
      const got = await json(['instance', 'get', id!]);
      expect(got).to.deep.include({
        name: 'api', swarm_id: swarmId, image: 'nginx:1', replicas: 2, type: 'small', http_port: 80, domain: 'api.example.test',
        ports: ['8080:80/tcp', '5353:53/udp'], env: { A: '1', B: 'x=y' }, command: ['sh', '-c', 'echo "hi there"', '--verbose'], platform: 'linux/arm64',
      });
      // Where it runs: the swarm column has it, the cluster column - (a cluster's instance the other way round).
      const table = (await ok(['instance', 'list', '--swarm', swarmId])).split('\n');
      expect(table[0]).to.match(/^id\s+\| name\s+\| swarm\s+\| cluster \| image\s+\| type\s+\| replicas \| running \| status\s+\| domain\s*$/);
      expect(table.find((l) => l.startsWith(id!))).to.match(new RegExp(`^${id}\\s+\\| api\\s+\\| ${swarmId}\\s+\\| -\\s+\\| nginx:1 `));
      expect(await ok(['instance', 'logs', id!, '--lines', '5'])).to.equal(`${LOG_LINES.join('\n')}\n`);
      expect(called('workloadLogs').at(-1)!.input).to.deep.equal({ name: 'inst-api', lines: 5 });
      const logsJson = await json(['instance', 'logs', 'api', '--since', '2024-05-01T00:00:00Z']);
      expect(logsJson).to.include({ status: 'completed' });
      expect(logsJson.lines).to.deep.equal(LOG_LINES);
      const broken = await cli(['instance', 'create', 'broken', '--swarm', 'live', '--image', 'nginx:none', '--wait', '--timeout', '30']);
      const brokenJson = await cli(['instance', 'create', 'broken-json', '--swarm', 'live', '--image', 'nginx:none', '--wait', '--timeout', '30', '--json']);
      expect(broken.code, broken.stderr).to.equal(1);
      expect(broken.stderr).to.match(/^hangar instance: instance broken \(inst-[0-9a-z]+\) failed: .*No such image: nginx:none\n$/);
      expect(broken.stdout).to.match(/^creating instance broken \(inst-[0-9a-z]+\): deploying\n(· .*\n)*· failed: .*No such image: nginx:none\n$/);
      expect(brokenJson.code).to.equal(1);
      expect(JSON.parse(brokenJson.stdout)).to.include({ name: 'broken-json', status: 'failed' });
      expect(await ok(['instance', 'delete', 'broken'])).to.match(/^deleting instance broken \(inst-[0-9a-z]+\): terminating; follow with: hangar instance get inst-[0-9a-z]+\n$/);
      await ok(['instance', 'delete', 'broken-json', '--wait']);
      const deleted = await ok(['instance', 'delete', id!, '--wait', '--timeout', '30']);
      expect(deleted).to.match(new RegExp(`^deleting instance api \\(${id}\\): terminating\n(· .*\n)*instance ${id} is gone\n$`));
      await fails(['instance', 'get', id!], 'HTTP 404');
    });

    it('swarm delete --wait: 202 while its manager leaves, then gone', async () => {
      const out = await ok(['swarm', 'delete', 'live', '--wait', '--timeout', '60']);
      expect(out).to.match(new RegExp(`^deleting swarm live \\(${swarmId}\\): deleting\n(· .*\n)*swarm ${swarmId} is gone\n$`));
      expect(called('leave')).to.have.length.greaterThan(0);
    });
  });
});
