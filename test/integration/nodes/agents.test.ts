import { expect } from 'chai';
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DeployWorkload } from '../../../core/orchestrator.js';
import { versionInfo } from '../../../core/version.js';
import { cleanupAgents, FAST_NODES, NODE_PLUGINS, joinedNodeId, readAgentFiles, spawnAgent, stopAgent, waitFor, waitForExit, type AgentProcess } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { connectionsTo } from '../../support/proc.js';

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64' };

describeEachDialect('nodes: real agents as separate processes', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let agentA: AgentProcess;
  let nodeA: string;
  let tokenA: { id: string; token: string; expires_at: string; overlay_ip: string; ca_sha256: string };

  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const getNode = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data;
  const events = async (query: string) => (await api('GET', `/v1/nodes/events?${query}`)).json.data as any[];
  const waitForStatus = (id: string, status: string, timeoutMs = 10_000) =>
    waitFor(
      async () => {
        const node = await getNode(id);
        return node.status === status ? node : null;
      },
      { timeoutMs, what: `node ${id} to be ${status}` },
    );

  let binaryDir: string;

  before(async function () {
    this.timeout(30_000);
    binaryDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-binaries-'));
    t = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides: { ...FAST_NODES, system: { agent_binary_dir: binaryDir } } });
    admin = await bootstrapAdmin(t);
  });
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
    rmSync(binaryDir, { recursive: true, force: true });
  });

  it('joins with a token (CA pinned), keeps the private key on the machine, heartbeats over mTLS and becomes ready', async function () {
    this.timeout(30_000);
    const res = await api('POST', '/v1/nodes/token', {});
    expect(res.status).to.equal(201);
    tokenA = res.json.data;
    const caSha256 = createHash('sha256').update(new X509Certificate(t.caPem).raw).digest('hex');
    expect(tokenA.ca_sha256).to.equal(caSha256);
    expect(tokenA.token.endsWith(`.${caSha256}`)).to.equal(true);
    expect(tokenA.id).to.match(/^tok-/);

    agentA = spawnAgent({ join: { token: tokenA.token, api: t.url } });
    nodeA = await joinedNodeId(agentA);
    expect(nodeA).to.match(/^node-[0-9a-z]+$/);
    const node = await waitForStatus(nodeA, 'ready');
    expect(node).to.include({
      hostname: os.hostname(),
      name: os.hostname(),
      ip_address: '127.0.0.1',
      overlay_ip: tokenA.overlay_ip,
      agent_running: true,
      agent_version: versionInfo.version,
      architecture: ARCH[os.arch()] ?? os.arch(),
    });
    expect(node.resources.cpus).to.equal(os.cpus().length);
    expect(node.last_heartbeat_at).to.be.a('string');

    // The identity on disk: a key only the machine has, a certificate for CN = node id from this CA.
    const files = readAgentFiles(agentA.dataDir);
    expect(statSync(path.join(agentA.dataDir, 'client.key')).mode & 0o777).to.equal(0o600);
    const cert = new X509Certificate(files.certPem);
    expect(cert.subject).to.equal(`CN=${nodeA}`);
    expect(cert.verify(new X509Certificate(t.caPem).publicKey)).to.equal(true);
    expect(cert.checkPrivateKey(createPrivateKey(files.keyPem))).to.equal(true);
    expect(files.caPem.trim()).to.equal(t.caPem.trim());

    // Heartbeats keep coming at the server's interval (1 s), not the agent's default.
    const first = node.last_heartbeat_at as string;
    await waitFor(async () => (await getNode(nodeA)).last_heartbeat_at > first, { timeoutMs: 4000, what: 'a later heartbeat' });

    const log = await events(`node_id=${nodeA}`);
    const joined = log.find((e) => e.kind === 'node_joined');
    expect(joined, JSON.stringify(log)).to.exist;
    expect(joined.data).to.deep.equal({ token_id: tokenA.id });
    const ready = log.find((e) => e.kind === 'node_status_changed' && e.data?.to === 'ready');
    expect(ready, JSON.stringify(log)).to.deep.include({ node_id: nodeA, data: { from: 'pending', to: 'ready' } });
  });

  it('makes tokens that the documented `--token T` form always takes as a value (never a leading "-")', async function () {
    this.timeout(30_000);
    // base64url alone would begin with "-" about once in 64 tokens; yargs would read that as an option.
    let last: typeof tokenA | undefined;
    for (let i = 0; i < 200; i++) {
      const candidate = (await api('POST', '/v1/nodes/token', {})).json.data as typeof tokenA;
      expect(candidate.token.startsWith('-'), candidate.token).to.equal(false);
      if (last) expect((await api('DELETE', `/v1/nodes/token/${last.id}`)).status).to.equal(200);
      last = candidate;
    }
    const agent = spawnAgent({ join: { token: last!.token, api: t.url, tokenArg: 'separate' } });
    try {
      const nodeId = await joinedNodeId(agent);
      await waitForStatus(nodeId, 'ready');
    } finally {
      await stopAgent(agent);
    }
  });

  it('joins with the token on stdin (--token-stdin): no process on the machine shows it in its command line', async function () {
    this.timeout(30_000);
    const token = (await api('POST', '/v1/nodes/token', {})).json.data.token as string;
    const agent = spawnAgent({ join: { token, api: t.url, tokenArg: 'stdin' } });
    try {
      const nodeId = await joinedNodeId(agent);
      await waitForStatus(nodeId, 'ready');
      const commandLines = readdirSync('/proc')
        .filter((entry) => /^\d+$/.test(entry))
        .map((pid) => {
          try {
            return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
          } catch {
            return '';
          }
        });
      expect(commandLines.some((line) => line.includes('--token-stdin')), 'the agent is among the processes read').to.equal(true);
      expect(commandLines.filter((line) => line.includes(token.slice(0, 20)))).to.deep.equal([]);
    } finally {
      await stopAgent(agent);
    }
  });

  it('refuses a used token: a second agent exits with the 401, a join_failed event names its address, and revoking the used token is a 404', async function () {
    this.timeout(30_000);
    const second = spawnAgent({ join: { token: tokenA.token, api: t.url } });
    const exit = await waitForExit(second);
    expect(exit.code, second.output()).to.equal(1);
    expect(second.output()).to.contain('joining failed: HTTP 401');
    expect(second.nodeId(), 'no identity stored').to.equal(null);

    const failed = (await events('identifier=127.0.0.1')).filter((e) => e.kind === 'join_failed');
    expect(failed, 'a join_failed event against the caller address').to.have.length.greaterThan(0);
    expect(failed.at(-1)).to.include({ identifier: '127.0.0.1', node_id: null });
    expect(failed.at(-1).message).to.contain('token already used');
    expect(failed.at(-1).data).to.deep.equal({ hostname: os.hostname() });

    const revoke = await api('DELETE', `/v1/nodes/token/${tokenA.id}`);
    expect(revoke.status).to.equal(404);
    // Unchanged: the node keeps the address its token reserved.
    expect((await getNode(nodeA)).overlay_ip).to.equal(tokenA.overlay_ip);
  });

  it('refuses an agent certificate on another node’s task queue (403); its own queue answers', async () => {
    const files = readAgentFiles(agentA.dataDir);
    const other = await t.request('GET', '/v1/internal/tasks/node-someoneelse?wait=0', { cert: files.certPem, key: files.keyPem });
    expect(other.status).to.equal(403);
    expect(other.json).to.include({ error: 'Forbidden', message: 'Insufficient permissions' });
    const own = await t.request('GET', `/v1/internal/tasks/${nodeA}?wait=0`, { cert: files.certPem, key: files.keyPem });
    expect(own.status).to.equal(200);
    expect(own.json.data).to.deep.equal([]);
  });

  it('dispatches a queued log fetch to the long-polling agent at once; the result is read once', async function () {
    this.timeout(20_000);
    // The agent sits in its long-poll (5 s); a queued task must not wait for the poll to time out.
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    const queued = await api('POST', `/v1/nodes/${nodeA}/logs?lines=5`);
    expect(queued.status).to.equal(202);
    // The agent may already hold it by the time the 202 is written: no assertion on its status here.
    expect(queued.json.data).to.include({ kind: 'agent.logs', node_id: nodeA });
    const taskId = queued.json.data.task_id as string;
    expect(taskId).to.match(/^task-/);

    const done = await waitFor(
      async () => {
        const res = await api('GET', `/v1/nodes/${nodeA}/logs/${taskId}`);
        expect(res.status, res.text).to.equal(200);
        return res.json.data.status === 'completed' ? res.json.data : null;
      },
      { timeoutMs: 5000, intervalMs: 50, what: 'the log fetch to complete' },
    );
    expect(Date.now() - started, 'delivered by the long-poll, not after it timed out').to.be.lessThan(2000);
    expect(done.attempts).to.equal(1);
    expect(done.result.lines).to.be.an('array').with.length.within(1, 5);
    for (const line of done.result.lines) expect(JSON.parse(line)).to.have.property('msg');

    const again = await api('GET', `/v1/nodes/${nodeA}/logs/${taskId}`);
    expect(again.status, 'read once').to.equal(404);

    // `since`: only lines logged after that instant.
    const since = new Date(Date.now() - 1500).toISOString();
    const bySince = await api('POST', `/v1/nodes/${nodeA}/logs?since=${encodeURIComponent(since)}`);
    expect(bySince.status).to.equal(202);
    const sinceDone = await waitFor(
      async () => {
        const res = await api('GET', `/v1/nodes/${nodeA}/logs/${bySince.json.data.task_id}`);
        return res.json.data.status === 'completed' ? res.json.data : null;
      },
      { timeoutMs: 5000, intervalMs: 50, what: 'the since log fetch' },
    );
    expect(sinceDone.result.lines.length, 'the agent logged the earlier task').to.be.greaterThan(0);
    for (const line of sinceDone.result.lines) expect(Date.parse(JSON.parse(line).time)).to.be.greaterThan(Date.parse(since));
  });

  it('holds one connection to the control plane (HTTP/2): heartbeats, the long-poll and results share it', async function () {
    this.timeout(30_000);
    const port = Number(new URL(t.url).port);
    // The join's own connection (before the agent's session) may linger a few seconds.
    await waitFor(() => connectionsTo(agentA.child.pid!, port) === 1, { timeoutMs: 10_000, what: 'one connection from the agent' });
    // A heartbeat a second, a long-poll held open and a result posted, side by side: still one.
    const queued = await api('POST', `/v1/nodes/${nodeA}/logs?lines=1`);
    expect(queued.status, queued.text).to.equal(202);
    const seen: number[] = [];
    await waitFor(
      async () => {
        seen.push(connectionsTo(agentA.child.pid!, port));
        return (await api('GET', `/v1/nodes/${nodeA}/logs/${queued.json.data.task_id}`)).json.data.status === 'completed';
      },
      { timeoutMs: 10_000, intervalMs: 50, what: 'the log fetch to complete' },
    );
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    seen.push(connectionsTo(agentA.child.pid!, port));
    expect(new Set(seen), 'connections from the agent while it worked').to.deep.equal(new Set([1]));
    expect((await getNode(nodeA)).status).to.equal('ready');
  });

  it('runs an unmanaged scan through the task plumbing: a backend this machine does not run (k8s without k3s) fails with the error, read once', async function () {
    this.timeout(20_000);
    const bad = await api('POST', `/v1/nodes/${nodeA}/unmanaged?backend=nomad`);
    expect(bad.status).to.equal(400);
    const queued = await api('POST', `/v1/nodes/${nodeA}/unmanaged?backend=k8s`);
    expect(queued.status).to.equal(202);
    const taskId = queued.json.data.task_id as string;
    const done = await waitFor(
      async () => {
        const res = await api('GET', `/v1/nodes/${nodeA}/unmanaged/${taskId}`);
        expect(res.status, res.text).to.equal(200);
        return res.json.data.status === 'failed' ? res.json.data : null;
      },
      { timeoutMs: 15_000, intervalMs: 50, what: 'the scan to fail' },
    );
    expect(done).to.have.keys('task_id', 'status', 'error');
    expect(done.error).to.contain('no kubeconfig at /etc/rancher/k3s/k3s.yaml: k3s is not installed on this machine');
    expect((await api('GET', `/v1/nodes/${nodeA}/unmanaged/${taskId}`)).status, 'read once').to.equal(404);
    const failed = (await events(`node_id=${nodeA}`)).find((e) => e.kind === 'task_failed' && e.data?.task_id === taskId);
    expect(failed, 'task failures are node events').to.exist;
    expect(failed.data.kind).to.equal('orchestrator.unmanaged-scan');
  });

  it('update-agent: 409 while no agent executable is built; once one is, a task is queued (a source-checkout agent refuses it)', async function () {
    this.timeout(20_000);
    expect((await getNode(nodeA)).status).to.equal('ready');
    const none = await api('POST', `/v1/nodes/${nodeA}/update-agent`);
    expect(none.status).to.equal(409);
    expect(none.json.message).to.contain(`No agent executable for ${(await getNode(nodeA)).architecture} has been built on this control plane: run npm run build`);

    // A stand-in build (manifest + file); the agent under test runs from source, so it never replaces itself.
    const arch = (await getNode(nodeA)).architecture as string;
    writeFileSync(path.join(binaryDir, 'hangar-agent-test'), 'not really an executable');
    writeFileSync(path.join(binaryDir, 'manifest.json'), JSON.stringify({ version: '9.9.9', executables: { [arch]: { file: 'hangar-agent-test', sha256: 'ab'.repeat(32), size: 24 } } }));
    const queued = await api('POST', `/v1/nodes/${nodeA}/update-agent`);
    expect(queued.status, queued.text).to.equal(202);
    expect(queued.json.data).to.include({ kind: 'agent.update', node_id: nodeA });
    const taskId = queued.json.data.task_id as string;
    const task = await waitFor(async () => {
      const row = await t.hangar.services.tasks.get(taskId);
      return row?.status === 'failed' ? row : null;
    }, { timeoutMs: 5000, what: 'the update task to be reported' });
    expect(task.payload).to.deep.equal({ architecture: arch, version: '9.9.9', sha256: 'ab'.repeat(32) });
    expect(task.error).to.contain('source checkout');
    rmSync(path.join(binaryDir, 'manifest.json'));
  });

  it('stop: the agent process exits 0 and the node shows offline; restarted with only --data-dir it resumes as the same node', async function () {
    this.timeout(30_000);
    const before = (await api('GET', '/v1/nodes')).json.data.length;
    const res = await api('POST', `/v1/nodes/${nodeA}/stop`);
    expect(res.status).to.equal(202);
    expect(res.json.data.kind).to.equal('agent.stop');
    const exit = await waitForExit(agentA);
    expect(exit, agentA.output()).to.deep.equal({ code: 0, signal: null });
    const stopped = await waitForStatus(nodeA, 'offline', 5000);
    expect(stopped.agent_running).to.equal(false);
    // Not necessarily the last change: a heartbeat in flight as the agent stops can revive the node
    // until offline detection catches up (a race reported separately).
    const changes = (await events(`node_id=${nodeA}`)).filter((e) => e.kind === 'node_status_changed' && e.data?.to === 'offline');
    expect(changes.map((e) => e.message)).to.include('ready → offline: agent stopped on request');

    agentA = spawnAgent({ dataDir: agentA.dataDir });
    await waitForStatus(nodeA, 'ready', 15_000);
    expect(agentA.nodeId()).to.equal(nodeA);
    expect(agentA.output()).not.to.contain('joined the control plane');
    expect((await api('GET', '/v1/nodes')).json.data.length, 'no second node for the same machine').to.equal(before);
  });

  it('kill -9: missed heartbeats turn the node offline after the grace period, recorded as a state change', async function () {
    this.timeout(30_000);
    const token = (await api('POST', '/v1/nodes/token', {})).json.data;
    const agentC = spawnAgent({ join: { token: token.token, api: t.url } });
    const nodeC = await joinedNodeId(agentC);
    await waitForStatus(nodeC, 'ready');
    await stopAgent(agentC, 'SIGKILL');
    const killed = Date.now();
    const offline = await waitForStatus(nodeC, 'offline', 10_000);
    const took = Date.now() - killed;
    // offline_after_seconds = 3 (the last heartbeat is at most 1 s older than the kill; the check runs every 1 s).
    expect(took, 'not before the grace period').to.be.greaterThan(1500);
    expect(took).to.be.lessThan(7000);
    expect(offline.agent_running).to.equal(false);
    const change = (await events(`node_id=${nodeC}`)).filter((e) => e.kind === 'node_status_changed').at(-1);
    expect(change).to.deep.include({ node_id: nodeC, data: { from: 'ready', to: 'offline' } });
    expect(change.message).to.contain('no heartbeat for 3 s');
  });

  it('revoke: the running agent is refused from its next request, the node goes offline, and its certificate gets 401', async function () {
    this.timeout(30_000);
    await waitForStatus(nodeA, 'ready');
    const files = readAgentFiles(agentA.dataDir);
    const revoked = await api('POST', `/v1/nodes/${nodeA}/cert/revoke`);
    expect(revoked.status).to.equal(200);
    expect(revoked.json.data).to.deep.equal({ node_id: nodeA, revoked: 1 });

    const direct = await t.request('POST', '/v1/internal/heartbeat', { cert: files.certPem, key: files.keyPem, body: { hostname: 'x', architecture: 'amd64', agent_version: '1' } });
    expect(direct.status).to.equal(401);
    expect(direct.json.message).to.contain('revoked');

    await waitFor(() => /heartbeat answered 401/.test(agentA.output()), { timeoutMs: 5000, what: 'the agent to be refused' });
    await waitForStatus(nodeA, 'offline', 10_000);
    expect(agentA.exit(), 'the agent keeps retrying; it does not exit').to.equal(null);
    const kinds = (await events(`node_id=${nodeA}`)).map((e) => e.kind);
    expect(kinds).to.include('certificates_revoked');
  });

  /**
   * A stand-in for the machine's apt-get in `bin`: `update` runs until the test creates the release
   * file (so "still running" is the test's doing, not a guess about how long it takes); each run is
   * recorded in runs.log.
   */
  function heldAptGet(): { bin: string; runs: string; release(): void } {
    const bin = mkdtempSync(path.join(os.tmpdir(), 'hangar-held-apt-'));
    const runs = path.join(bin, 'runs.log');
    const released = path.join(bin, 'release');
    writeFileSync(path.join(bin, 'apt-get'), `#!/bin/sh\necho "$*" >> ${runs}\nif [ "$1" = update ]; then while [ ! -e ${released} ]; do /bin/sleep 0.05; done; fi\nexit 0\n`, { mode: 0o755 });
    return { bin, runs, release: () => writeFileSync(released, '') };
  }

  it('a task that outlasts its lease stays leased while the agent runs it: the agent’s heartbeats renew the leases of the tasks it holds', async function () {
    this.timeout(40_000);
    const apt = heldAptGet();
    try {
      const token = (await api('POST', '/v1/nodes/token', {})).json.data;
      const agent = spawnAgent({ join: { token: token.token, api: t.url }, path: apt.bin });
      const nodeId = await joinedNodeId(agent);
      await waitForStatus(nodeId, 'ready');
      const queued = await api('POST', `/v1/nodes/${nodeId}/check-updates`);
      expect(queued.status).to.equal(202);
      const taskId = queued.json.data.task_id as string;
      await waitFor(() => existsSync(apt.runs), { timeoutMs: 10_000, what: 'the agent to start apt-get update' });
      const leased = await t.hangar.services.tasks.get(taskId);
      expect(leased, agent.output()).to.include({ status: 'leased', attempts: 1 });
      const firstLeaseEnd = Date.parse(leased!.lease_expires_at!);
      // Past the end of the lease it was handed out with, apt-get still running (held by the test): the
      // task is still the agent's, its lease renewed, not back in the queue (where a caller giving up
      // would withdraw it, and the agent's result would be lost).
      const during = await waitFor(
        async () => {
          const task = (await t.hangar.services.tasks.get(taskId))!;
          if (task.status !== 'leased' || task.attempts !== 1) throw new Error(`the held task left its lease: ${JSON.stringify(task)}\n${agent.output()}`);
          return Date.now() > firstLeaseEnd && Date.parse(task.lease_expires_at!) > Date.now() ? task : null;
        },
        { timeoutMs: 20_000, intervalMs: 100, what: `the task still leased, with a renewed lease, after its first lease ended (${new Date(firstLeaseEnd).toISOString()})` },
      );
      expect(Date.parse(during.lease_expires_at!)).to.be.greaterThan(firstLeaseEnd);
      expect(readFileSync(apt.runs, 'utf8').split('\n').filter((line) => line.startsWith('update')), 'apt-get update still in its first run').to.have.length(1);
      apt.release();
      const done = await waitFor(
        async () => {
          const task = await t.hangar.services.tasks.get(taskId);
          return task && ['completed', 'failed'].includes(task.status) ? task : null;
        },
        { timeoutMs: 20_000, intervalMs: 200, what: 'the check-updates task to finish once apt-get is released' },
      );
      expect(done, agent.output()).to.include({ status: 'completed', attempts: 1 });
      expect(readFileSync(apt.runs, 'utf8').split('\n').filter((line) => line.startsWith('update'))).to.have.length(1);
      await stopAgent(agent);
    } finally {
      apt.release();
      rmSync(apt.bin, { recursive: true, force: true });
    }
  });

  it('runs lanes side by side: a log fetch (reads lane) and an orchestrator call (orchestrator lane) queued behind an OS package check (maintenance lane) finish while the check still runs', async function () {
    this.timeout(40_000);
    const apt = heldAptGet();
    try {
      const token = (await api('POST', '/v1/nodes/token', {})).json.data;
      // No engine to reach: the orchestrator call fails at once, after it ran (its error names the socket).
      const socket = path.join(apt.bin, 'no-docker.sock');
      const agent = spawnAgent({ join: { token: token.token, api: t.url }, path: apt.bin, env: { HANGAR_DOCKER_SOCKET: socket } });
      const nodeId = await joinedNodeId(agent);
      await waitForStatus(nodeId, 'ready');
      const check = (await api('POST', `/v1/nodes/${nodeId}/check-updates`)).json.data.task_id as string;
      await waitFor(() => existsSync(apt.runs), { timeoutMs: 10_000, what: 'the agent to start apt-get update' });
      const logs = await api('POST', `/v1/nodes/${nodeId}/logs?lines=3`);
      expect(logs.status).to.equal(202);
      const deploy = await t.hangar.services.tasks.enqueue({
        nodeId,
        kind: DeployWorkload,
        payload: { backend: 'swarm', spec: { name: 'lanes-probe', role: 'instance', resource_id: 'inst-lanes', image: 'busybox', replicas: 1 } },
      });
      const settled = (id: string) => waitFor(
        async () => {
          const task = await t.hangar.services.tasks.get(id);
          return task && ['completed', 'failed'].includes(task.status) ? task : null;
        },
        { timeoutMs: 20_000, intervalMs: 100, what: `task ${id} to finish while apt-get is held` },
      );
      const read = await settled(logs.json.data.task_id);
      expect(read, agent.output()).to.include({ status: 'completed' });
      expect((read.result as { lines: string[] }).lines.length).to.be.greaterThan(0);
      const deployed = await settled(deploy.id);
      expect(deployed.status, agent.output()).to.equal('failed');
      expect(deployed.error, 'the driver ran and found no engine').to.contain(socket);
      // All the while the check was held in its lane.
      expect((await t.hangar.services.tasks.get(check))?.status, agent.output()).to.equal('leased');
      expect(readFileSync(apt.runs, 'utf8').split('\n').filter((line) => line.startsWith('update'))).to.have.length(1);
      apt.release();
      await waitFor(async () => (await t.hangar.services.tasks.get(check))?.status === 'completed', { timeoutMs: 20_000, intervalMs: 200, what: 'the check to finish once apt-get is released' });
      await stopAgent(agent);
    } finally {
      apt.release();
      rmSync(apt.bin, { recursive: true, force: true });
    }
  });
});
