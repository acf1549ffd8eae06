import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { answerTasks, FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { KUBE_CLUSTER_PLUGINS } from '../../support/kube-cluster.js';
import { hangarCli, TempDirs, type CliResult } from '../runner/support.js';

/**
 * `hangar cluster` (create waiting for the cluster, its load balancer and volumes) and `hangar node`
 * (cordon and drain the cluster is still at, followed with --wait; the unmanaged scan) as an
 * operator runs them: the real bin/hangar.mjs against a control plane in this process. The nodes'
 * agents are test doubles (FakeAgent) answering the k3s and driver calls the control plane sends
 * them; no Kubernetes runs (the kube suites drive the same routes against a real control plane).
 */
describeEachDialect('hangar cluster and the node verbs a cluster answers through tasks', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let env: Record<string, string | undefined>;
  let server: { id: string; agent: FakeAgent };
  let worker: { id: string; agent: FakeAgent };
  const loops: Array<{ stop(): Promise<void> }> = [];
  /** What the server's agent answers a drain with, set by each case. */
  let drain: () => Promise<string | undefined> = async () => undefined;

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const cli = (args: string[]): Promise<CliResult> => hangarCli(args, { env, timeoutMs: 90_000 });
  const ok = async (args: string[]): Promise<string> => {
    const res = await cli(args);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(0);
    expect(res.stderr).to.equal('');
    return res.stdout;
  };
  /** Exit 1; answers stderr. */
  const fails = async (args: string[], message: string | RegExp): Promise<CliResult> => {
    const res = await cli(args);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(1);
    if (typeof message === 'string') expect(res.stderr).to.contain(message);
    else expect(res.stderr).to.match(message);
    return res;
  };

  async function nodeWithAgent(name: string, ip: string): Promise<{ id: string; agent: FakeAgent }> {
    const node = await api('POST', '/v1/nodes', { name, ip_address: ip });
    expect(node.status, node.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.heartbeat()).status).to.equal(200);
    return { id: node.json.data.id, agent };
  }

  before(async function () {
    this.timeout(60_000);
    const k3sDir = temp.make('hangar-cli-k3s-');
    writeFileSync(path.join(k3sDir, 'k3s-amd64'), 'not really k3s');
    // A cordon or drain the cluster has not done within 1 s is answered 202 with its task.
    t = await startHangar(dialect, {
      plugins: [...KUBE_CLUSTER_PLUGINS, 'gateway', 'volumes'],
      overrides: { kubernetes: { k3s_dir: k3sDir }, clusters: { advertise: 'address', availability_wait_seconds: 1 } },
    });
    admin = await bootstrapAdmin(t);
    const dir = temp.make('hangar-cli-clusters-');
    const ca = path.join(dir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
    server = await nodeWithAgent('kube-1', '10.9.0.1');
    worker = await nodeWithAgent('kube-2', '10.9.0.2');
    loops.push(
      answerTasks(server.agent, {
        answers: {
          'k3s.install-server': () => ({ runtime_node_id: 'kube-1', version: 'v1.33.1+k3s1' }),
          'k3s.token': () => ({ token: 'K10abc::server:secret' }),
          scanUnmanaged: () => ({
            resources: [{ kind: 'deployment', id: 'uid-1', name: 'shop/web', image: 'shop/web:2', labels: {}, namespace: 'shop' }],
          }),
        },
        refusals: {
          'k3s.install-server': (input) => (input.node_name === 'broken' ? 'k3s did not start: port 6443 in use' : undefined),
          setNodeAvailability: (input) => (input.availability === 'drained' ? drain() : undefined),
        },
      }),
      // The agent node's install takes a moment, so the wait sees the cluster forming (not asserted: it may not).
      answerTasks(worker.agent, { answers: { 'k3s.join': async () => (await sleep(1000), { runtime_node_id: 'kube-2', version: 'v1.33.1+k3s1' }) } }),
    );
  });
  after(async function () {
    this.timeout(20_000);
    for (const loop of loops) await loop.stop();
    await t?.stop();
    temp.cleanup();
  });

  describe('cluster', function () {
    this.timeout(120_000);

    it('create waits until the cluster is active, printing each node’s progress; --no-wait returns once accepted', async () => {
      const out = await ok(['cluster', 'create', `kube-${dialect.name}`, '--node', 'kube-1', '--node', 'kube-2']);
      const lines = out.trimEnd().split('\n');
      expect(lines[0]).to.match(new RegExp(`^creating cluster kube-${dialect.name} \\(cluster-[0-9a-z]+\\): forming$`));
      // Every status line names each node, its role and where its install is.
      const progress = lines.filter((l) => l.startsWith('· '));
      expect(progress.length, out).to.be.at.least(1);
      for (const line of progress) expect(line).to.match(new RegExp(`^· (forming|active) \\(${server.id} server \\w+, ${worker.id} agent \\w+\\)$`));
      expect(progress.at(-1)).to.equal(`· active (${server.id} server active, ${worker.id} agent active)`);
      expect(lines.at(-1)).to.match(new RegExp(`^cluster kube-${dialect.name} \\(cluster-[0-9a-z]+\\) is active$`));
      const listed = JSON.parse(await ok(['cluster', 'get', `kube-${dialect.name}`, '--json']));
      expect(listed).to.include({ status: 'active', server_node_id: server.id, version: 'v1.33.1+k3s1' });
    });

    it('create of a cluster whose server cannot install k3s ends with exit 1 and the reason; with --no-wait it is only accepted', async () => {
      const broken = await nodeWithAgent('broken', '10.9.0.3');
      const loop = answerTasks(broken.agent, { refusals: { 'k3s.install-server': () => 'k3s did not start: port 6443 in use', 'k3s.join': () => 'k3s agent did not get its credentials' } });
      const second = await nodeWithAgent('second', '10.9.0.4');
      const secondLoop = answerTasks(second.agent, {
        answers: { 'k3s.install-server': () => ({ runtime_node_id: 'second', version: 'v1.33.1+k3s1' }), 'k3s.token': () => ({ token: 'K10abc::server:secret' }) },
      });
      try {
        const accepted = await ok(['cluster', 'create', `nowait-${dialect.name}`, '--node', 'broken', '--no-wait']);
        expect(accepted).to.match(new RegExp(`^creating cluster nowait-${dialect.name} \\(cluster-[0-9a-z]+\\): forming; follow with: hangar cluster get cluster-[0-9a-z]+\n$`));
        await waitFor(async () => (await api('GET', `/v1/kubernetes/clusters/nowait-${dialect.name}`)).json.data.status === 'failed', { timeoutMs: 20_000, what: 'the cluster failed' });
        await ok(['cluster', 'delete', `nowait-${dialect.name}`, '--force', '--wait']);

        const res = await fails(['cluster', 'create', `broken-${dialect.name}`, '--node', 'broken'], 'port 6443 in use');
        // Each status it saw (forming only if a poll came before the failure), the failure last.
        expect(res.stdout.trimEnd().split('\n').at(-1)).to.match(/^· failed: .*port 6443 in use/);
        expect(res.stderr).to.match(new RegExp(`^hangar cluster: cluster broken-${dialect.name} \\(cluster-[0-9a-z]+\\) failed: .*port 6443 in use`, 'm'));
        await ok(['cluster', 'delete', `broken-${dialect.name}`, '--force', '--wait']);

        // Active (its server is), but an agent node's install failed: not what was asked for.
        const half = await fails(['cluster', 'create', `half-${dialect.name}`, '--node', 'second', '--node', 'broken'], 'k3s agent did not get its credentials');
        expect(half.stderr).to.match(new RegExp(`^hangar cluster: cluster half-${dialect.name} \\(cluster-[0-9a-z]+\\) is active, but node ${broken.id} failed: .*k3s agent did not get its credentials`, 'm'));
        await ok(['cluster', 'delete', `half-${dialect.name}`, '--force', '--wait']);
      } finally {
        await loop.stop();
        await secondLoop.stop();
      }
    });

    it('lb-deploy and lb-remove: the cluster’s load balancer, followed with hangar lb get', async () => {
      const deployed = await ok(['cluster', 'lb-deploy', `kube-${dialect.name}`]);
      expect(deployed).to.match(new RegExp(`^deploying the load balancer of cluster kube-${dialect.name} \\((lb-[0-9a-z-]+)\\): deploying; follow with: hangar lb get lb-[0-9a-z-]+\n$`));
      const lb = deployed.match(/\((lb-[0-9a-z-]+)\)/)![1]!;
      expect(JSON.parse(await ok(['lb', 'get', lb, '--json']))).to.include({ id: lb, cluster_id: JSON.parse(await ok(['cluster', 'get', `kube-${dialect.name}`, '--json'])).id });
      expect(await ok(['cluster', 'lb-remove', `kube-${dialect.name}`])).to.match(new RegExp(`^removing the load balancer of cluster kube-${dialect.name} \\(${lb}\\)`));
      await waitFor(async () => (await api('GET', `/v1/loadbalancers/${lb}`)).status === 404, { timeoutMs: 20_000, what: 'the load balancer removed' });
      await fails(['cluster', 'lb-remove', `kube-${dialect.name}`], 'HTTP 404');
    });

    it('volumes, attach and detach reach the cluster’s volume routes (what they refuse surfaces)', async () => {
      expect(await ok(['cluster', 'volumes', `kube-${dialect.name}`])).to.equal('no volumes attached\n');
      expect(JSON.parse(await ok(['cluster', 'volumes', `kube-${dialect.name}`, '--json']))).to.deep.equal([]);
      await fails(['cluster', 'attach', `kube-${dialect.name}`, 'no-such-volume'], /POST \/v1\/kubernetes\/clusters\/kube-\w+\/volumes: HTTP 404/);
      await fails(['cluster', 'detach', `kube-${dialect.name}`, 'no-such-volume'], /DELETE \/v1\/kubernetes\/clusters\/kube-\w+\/volumes\/no-such-volume: HTTP 404/);
    });
  });

  describe('node', function () {
    this.timeout(120_000);

    it('drain --wait: a drain the cluster is still at (202) is followed to its end; a refusal after it ends with exit 1 and the cluster’s reason', async () => {
      // Answered 3 s after the agent took it: past the request's 1 s, so the API answers 202 with its task.
      drain = async () => (await sleep(3000), undefined);
      const out = await ok(['node', 'drain', 'kube-1', '--wait']);
      expect(out).to.match(new RegExp(`^draining node ${server.id}: the cluster is still at it \\(task task-[0-9a-z-]+\\); waiting\ndrained node ${server.id}\n$`));
      expect(JSON.parse(await ok(['node', 'get', 'kube-1', '--json']))).to.include({ availability: 'drained' });
      expect(await ok(['node', 'uncordon', 'kube-1'])).to.match(/^uncordoned node kube-1 \(node-[0-9a-z]+\)\n$/);

      drain = async () => (await sleep(3000), 'evicting shop/web-1: Cannot evict pod as it would violate the pod’s disruption budget.');
      const refused = await fails(['node', 'drain', 'kube-1', '--wait'], `hangar node: draining node ${server.id} failed: `);
      expect(refused.stderr).to.contain('disruption budget');
      expect(JSON.parse(await ok(['node', 'get', 'kube-1', '--json'])), 'not drained').to.include({ availability: 'cordoned' });
      await ok(['node', 'uncordon', 'kube-1']);
    });

    it('drain without --wait prints the task to follow; node availability reads it', async () => {
      drain = async () => (await sleep(3000), undefined);
      const out = await ok(['node', 'drain', 'kube-1']);
      const follow = out.match(/follow with: hangar (node availability node-[0-9a-z]+ (task-[0-9a-z-]+))\n$/);
      expect(follow, out).to.not.equal(null);
      expect(out).to.match(new RegExp(`^draining node ${server.id}: (pending|leased); follow with`));
      const read = await waitFor(async () => {
        // pending or leased until it is finished; a finished one is handed over once.
        const line = await ok(follow![1]!.split(' '));
        return /: (pending|leased)\n$/.test(line) ? null : line;
      }, { timeoutMs: 20_000, intervalMs: 500, what: 'the drain finished' });
      expect(read).to.equal(`task ${follow![2]}: completed\n`);
      await fails(follow![1]!.split(' '), 'HTTP 404'); // read once
      await ok(['node', 'uncordon', 'kube-1']);
    });

    it('unmanaged --backend k8s prints what the scan found, through the cluster’s server from any member', async () => {
      const out = await ok(['node', 'unmanaged', 'kube-2', '--backend', 'k8s']);
      expect(out.split('\n')[0]).to.match(/^kind\s+\| name\s+\| namespace \| image\s+\| stack$/);
      expect(out).to.match(/deployment \| shop\/web \| shop\s+\| shop\/web:2 \| -/);
      const data = JSON.parse(await ok(['node', 'unmanaged', 'kube-1', '--backend', 'k8s', '--json']));
      expect(data).to.include({ status: 'completed' });
      expect(data.resources).to.have.length(1);
      await fails(['node', 'unmanaged', 'kube-1', '--backend', 'nomad'], 'HTTP 400');
    });
  });
});
