import type { AgentDriver } from '../core/clusters/backend.js';
import k8s from '../drivers/kubernetes/agent.js';
import swarm from '../drivers/swarm/agent.js';
import { EXTRA_AGENT_DRIVERS } from './extra-drivers.js';

/**
 * The agent drivers built into this agent: swarm and k8s, and those an agent executable was built
 * with (`node scripts/build.mjs agent --driver MODULE` puts them in place of ./extra-drivers.ts).
 * `hangar agent` run by Node adds more with `--driver`. Each is made on its first call.
 */
export const BUILTIN_AGENT_DRIVERS: readonly AgentDriver[] = [swarm, k8s, ...EXTRA_AGENT_DRIVERS];
