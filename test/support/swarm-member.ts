/**
 * A hangar swarm whose one member is this host: a real agent (separate process, docker CLI on its
 * PATH) joins the test control plane with a join token, then joins a swarm group, which makes the
 * host engine's swarm (see host-swarm.ts) the group's swarm. Suites must never make that member
 * leave through the API, nor delete the swarm: other suites share the engine.
 */
import { dockerOnlyPath } from './host-swarm.js';
import { FAST_NODES, joinedNodeId, spawnAgent, waitFor, type AgentProcess } from './agents.js';
import type { TestHangar } from './hangar.js';
import { bearer, type Credentials } from './identity.js';

/** Node and swarm settings for suites that run workloads: fast heartbeats and observation, dnsrr (no VIP on the host). */
export const SWARM_TEST_OVERRIDES = {
  ...FAST_NODES,
  swarms: { observe_interval_seconds: 1, advertise: 'address', drain_wait_seconds: 1, endpoint_mode: 'dnsrr' },
};

export interface SwarmMember {
  agent: AgentProcess;
  nodeId: string;
  swarmId: string;
  swarmName: string;
}

/**
 * Joins a fresh agent on this host to the control plane and makes it the manager of a new swarm
 * group. `path`: the agent's PATH (default: the docker CLI's folder only).
 */
export async function hostSwarmMember(t: TestHangar, admin: Credentials, swarmName: string, options: { path?: string } = {}): Promise<SwarmMember> {
  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });
  const token = await api('POST', '/v1/nodes/token', {});
  if (token.status !== 201) throw new Error(`join token: ${token.status} ${token.text}`);
  const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: options.path ?? dockerOnlyPath() });
  const nodeId = await joinedNodeId(agent);
  await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${nodeId} to be ready` });
  const swarm = await api('POST', '/v1/swarms', { name: swarmName });
  if (swarm.status !== 201) throw new Error(`create swarm: ${swarm.status} ${swarm.text}`);
  const swarmId = swarm.json.data.id as string;
  const join = await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeId });
  if (join.status !== 202) throw new Error(`join swarm: ${join.status} ${join.text}`);
  await waitFor(
    async () => {
      const s = (await api('GET', `/v1/swarms/${swarmId}`)).json.data;
      if (s.status === 'failed') throw new Error(`the swarm failed to form: ${s.error}\n${agent.output()}`);
      return s.status === 'active' && s.manager?.status === 'active';
    },
    { timeoutMs: 60_000, intervalMs: 300, what: `swarm ${swarmName} to be active` },
  );
  return { agent, nodeId, swarmId, swarmName };
}
