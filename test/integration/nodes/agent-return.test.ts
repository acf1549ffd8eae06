import { expect } from 'chai';
import { cleanupAgents, FAST_NODES, joinedNodeId, NODE_PLUGINS, spawnAgent, waitFor, type AgentProcess } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { freePort } from '../../support/ports.js';

/** The agent's JSON log entries so far. */
function logEntries(agent: AgentProcess): Array<Record<string, unknown>> {
  return agent
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** The agent's log entry for its `count`-th failed task poll in a row, once there is one. */
function failedPoll(agent: AgentProcess, count: number): Record<string, unknown> | null {
  return logEntries(agent).find((e) => e.msg === 'task poll failed; retrying' && e.failures === count) ?? null;
}

/**
 * An agent whose control plane was away (stopped, or lost and restored at its address: the restore
 * drill, test/e2e/control-plane-restore.test.ts): its task polls failed with a growing backoff, and
 * the first heartbeat answered again ends that backoff, so the control plane's calls are taken at
 * once instead of after up to 30 s.
 */
describeEachDialect('nodes: an agent whose control plane comes back', (dialect) => {
  const storage = dialect.freshStorage();
  let port: number;
  let t: TestHangar;
  let admin: Credentials;
  let agent: AgentProcess;
  let nodeId: string;
  const start = () => startHangar(dialect, { plugins: NODE_PLUGINS, storage, overrides: { ...FAST_NODES, api: { port } } });
  const api = (method: string, p: string) => t.request(method, p, { headers: bearer(admin.token) });

  before(async function () {
    this.timeout(60_000);
    port = await freePort();
    t = await start();
    admin = await bootstrapAdmin(t);
    const token = await api('POST', '/v1/nodes/token');
    agent = spawnAgent({ join: { token: token.json.data.token, api: t.url } });
    nodeId = await joinedNodeId(agent);
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the node to be ready' });
  });
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
  });

  it('takes a task as soon as its heartbeat is answered again, not after the backoff of its failed polls', async function () {
    this.timeout(120_000);
    await t.stop();
    // After its sixth failed poll in a row the agent waits 15 to 30 s before the next one (agent/agent.ts backoff).
    await waitFor(() => failedPoll(agent, 6), { timeoutMs: 90_000, intervalMs: 200, what: "the agent's sixth failed task poll" });
    t = await start();
    const queued = await api('POST', `/v1/nodes/${nodeId}/logs?lines=20`);
    expect(queued.status, queued.text).to.equal(202);
    const done = await waitFor(
      async () => {
        const res = await api('GET', `/v1/nodes/${nodeId}/logs/${queued.json.data.task_id}`);
        return res.json.data?.status === 'completed' ? res.json.data : null;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: 'the log fetch to complete' },
    );
    // The backoff that began with the sixth failed poll was cut short by the answered heartbeat (its log says so).
    const ended = logEntries(agent).find((e) => e.msg === 'task poll backoff ended: the control plane answers again');
    expect(ended, 'the agent ended its poll backoff').to.not.equal(undefined);
    expect(ended).to.include({ failures: 6 });
    expect(ended!.skipped_ms as number).to.be.greaterThan(0);
    expect((done.result.lines as string[]).some((l) => l.includes('control plane reachable again')), 'its log says the heartbeat was answered again').to.equal(true);
    expect(failedPoll(agent, 7), 'no poll failed after the sixth').to.equal(null);
  });
});
