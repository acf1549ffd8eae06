import { expect } from 'chai';
import { answerTasks, FakeAgent, waitFor, type FakeManagerScript } from './agents.js';
import type { TestHangar } from './hangar.js';
import { bearer } from './identity.js';

/** A workload as the double's swarm runs it; `rollout` as Docker reports an update's state. */
export interface DoubleWorkload {
  name: string;
  image: string;
  replicas: number;
  labels: Record<string, string>;
  rollout?: { state: string; message: string };
}

/** What the orchestrator's inspect answers for a workload of the double. */
export const workloadState = (w: DoubleWorkload) => ({
  name: w.name,
  labels: w.labels,
  image: w.image,
  replicas: w.replicas,
  running: w.replicas,
  tasks: [],
  ports: [],
  limits: { cpus: null, memoryMb: null },
  stack: null,
  ...(w.rollout ? { rollout: w.rollout } : {}),
});

/**
 * An active swarm whose manager is a test double: a node record whose agent is simulated
 * (FakeAgent), answering every orchestrator call — init and members as a one-node swarm would,
 * workloads deployed into `running` and inspected from it, and whatever `script` adds or overrides.
 * Answers the swarm's id, the running workloads, the calls made, and `stop()`.
 */
export async function swarmDouble(t: TestHangar, token: string, script: FakeManagerScript = {}) {
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(token) });
  const running = new Map<string, DoubleWorkload>();
  const node = await api('POST', '/v1/nodes', { name: 'fake-manager', ip_address: '192.0.2.10' });
  expect(node.status, node.text).to.equal(201);
  const agent = await FakeAgent.forNode(t, node.json.data.id);
  expect((await agent.heartbeat()).status).to.equal(200);
  const manager = answerTasks(agent, {
    ...script,
    answers: {
      init: () => ({ cluster_id: 'fake-cluster', runtime_node_id: 'fake-runtime-node' }),
      members: () => ({ members: [{ runtime_node_id: 'fake-runtime-node', hostname: 'fake-host', address: null, role: 'manager', state: 'ready', availability: 'active', leader: true }] }),
      inspectWorkloads: () => ({ workloads: [...running.values()].map(workloadState) }),
      deployWorkload: async (input) => {
        // A deploy the script refuses creates nothing.
        if (await script.refusals?.deployWorkload?.(input)) return undefined;
        const w = { name: input.spec.name, image: input.spec.image, replicas: input.spec.replicas, labels: { 'io.hangar.id': input.spec.resource_id } };
        running.set(w.name, w);
        return workloadState(w);
      },
      ...script.answers,
    },
  });
  const swarmId = (await api('POST', '/v1/swarms', { name: 'live' })).json.data.id as string;
  expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: node.json.data.id })).status).to.equal(202);
  await waitFor(async () => (await api('GET', `/v1/swarms/${swarmId}`)).json.data.status === 'active', { timeoutMs: 30_000, intervalMs: 200, what: 'the swarm to be active' });
  return {
    swarmId,
    nodeId: node.json.data.id as string,
    /** The manager's simulated agent (to heartbeat with, when a test needs its node online). */
    agent,
    running,
    /** The workload hangar's resource `id` runs as. */
    workloadOf: (id: string) => [...running.values()].find((w) => w.labels['io.hangar.id'] === id),
    calls: manager.calls,
    stop: () => manager.stop(),
  };
}
