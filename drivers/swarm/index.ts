import { SwarmDriverError } from './client.js';
import type { ExecDriver, OrchestratorDriver } from '../../core/orchestrator.js';
import type { NodeAvailability } from '../../core/orchestrator.js';
import type { RuntimeAvailability, SwarmMembership } from './membership-calls.js';
import { createContext } from './client.js';
import { applyLoadBalancer, removeLoadBalancer } from './loadbalancer.js';
import { init, join, joinTokens, leave, members, removeMember, setNodeAvailability } from './membership.js';
import { createObject, removeObject, removeVolumeDefinition, stageVolume } from './objects.js';
import { scanUnmanaged } from './scan.js';
import { bundleLogs, deployBundle, removeBundle } from './stacks.js';
import { deployWorkload, inspectWorkloads, removeWorkload, scaleWorkload, workloadLogs } from './workloads.js';
import { execInWorkload } from './exec.js';

export { SwarmDriverError } from './client.js';

export type SwarmDriver = OrchestratorDriver & SwarmMembership & ExecDriver;

/** hangar's availability as the engine has it. */
const ENGINE_AVAILABILITY: Record<NodeAvailability, RuntimeAvailability> = { schedulable: 'active', cordoned: 'pause', drained: 'drain' };

export interface SwarmDriverOptions {
  /** The Docker Engine socket (default /var/run/docker.sock). */
  socketPath?: string;
  /** The docker CLI used for `docker stack deploy` and `docker stack rm` (default `docker` on the PATH). */
  dockerBinary?: string;
}

/**
 * The swarm driver: dockerode against the local engine, and the docker CLI for `stack deploy`.
 * Every method takes one named input (a task's payload without `backend`), answers plain JSON (the
 * task's result) and throws an Error saying what failed and the engine's reason.
 */
export function createSwarmDriver(options: SwarmDriverOptions = {}): SwarmDriver {
  const ctx = createContext(options.socketPath ?? '/var/run/docker.sock', options.dockerBinary ?? 'docker');
  return {
    backend: 'swarm',
    deployWorkload: ({ spec, cluster_nodes, settings }) => deployWorkload(ctx, spec, { cluster_nodes, settings }),
    removeWorkload: ({ name }) => removeWorkload(ctx, name),
    scaleWorkload: ({ name, replicas }) => scaleWorkload(ctx, name, replicas),
    workloadLogs: ({ name, ...logOptions }) => workloadLogs(ctx, name, logOptions),
    inspectWorkloads: (filter) => inspectWorkloads(ctx, filter ?? {}),
    deployBundle: ({ name, spec, prune, objects, routed, health }) => deployBundle(ctx, name, spec, { prune: !!prune, objects, routed, health }),
    removeBundle: ({ name }) => removeBundle(ctx, name),
    bundleLogs: ({ name, ...logOptions }) => bundleLogs(ctx, name, logOptions),
    createObject: ({ kind, name, data, labels }) => createObject(ctx, kind, name, data, labels ?? {}),
    removeObject: ({ kind, name }) => removeObject(ctx, kind, name),
    stageVolume: (input) => stageVolume(ctx, input),
    unstageVolume: ({ name }) => removeVolumeDefinition(ctx, name),
    setNodeAvailability: async ({ runtime_node_id, availability }) => {
      const engine = ENGINE_AVAILABILITY[availability];
      if (!engine) throw new SwarmDriverError(`unknown availability ${JSON.stringify(availability)}: schedulable, cordoned or drained`);
      await setNodeAvailability(ctx, runtime_node_id, engine);
      return { availability };
    },
    scanUnmanaged: () => scanUnmanaged(ctx),
    execInWorkload: (input) => execInWorkload(ctx, input),
    applyLoadBalancer: ({ spec, cluster_nodes, settings }) => applyLoadBalancer(ctx, spec, { cluster_nodes, settings }),
    removeLoadBalancer: ({ name }) => removeLoadBalancer(ctx, name),
    init: ({ advertise_address }) => init(ctx, advertise_address ?? null),
    joinTokens: () => joinTokens(ctx),
    join: ({ remote_addresses, token, advertise_address }) => join(ctx, remote_addresses, token, advertise_address ?? null),
    leave: ({ force }) => leave(ctx, !!force),
    members: () => members(ctx),
    removeMember: ({ runtime_node_id, force }) => removeMember(ctx, runtime_node_id, !!force),
  };
}
