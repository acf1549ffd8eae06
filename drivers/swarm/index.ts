import { defineDriver } from '../../core/plugin.js';
import type { SwarmDriver } from '../../core/orchestrator.js';
import { createContext } from './client.js';
import { applyLoadBalancer, removeLoadBalancer } from './loadbalancer.js';
import { init, join, joinTokens, leave, members, removeMember, setNodeAvailability } from './membership.js';
import { createObject, defineVolume, ensureNetwork, removeObject, removeVolumeDefinition } from './objects.js';
import { scanUnmanaged } from './scan.js';
import { bundleLogs, deployBundle, removeBundle } from './stacks.js';
import { deployWorkload, inspectWorkloads, removeWorkload, scaleWorkload, workloadLogs } from './workloads.js';

export { SwarmDriverError } from './client.js';

export interface SwarmDriverOptions {
  /** The Docker Engine socket (default /var/run/docker.sock). */
  socketPath?: string;
  /** The docker CLI used for `docker stack deploy` and `docker stack rm` (default `docker` on the PATH). */
  dockerBinary?: string;
}

/**
 * The swarm driver: dockerode against the local engine, and the docker CLI for `stack deploy`.
 * Every method answers plain JSON (it is a task's result) and throws an Error saying what failed
 * and the engine's reason.
 */
export function createSwarmDriver(options: SwarmDriverOptions = {}): SwarmDriver {
  const ctx = createContext(options.socketPath ?? '/var/run/docker.sock', options.dockerBinary ?? 'docker');
  return {
    backend: 'swarm',
    deployWorkload: (spec) => deployWorkload(ctx, spec),
    removeWorkload: (name) => removeWorkload(ctx, name),
    scaleWorkload: (name, replicas) => scaleWorkload(ctx, name, replicas),
    workloadLogs: (name, logOptions) => workloadLogs(ctx, name, logOptions ?? {}),
    inspectWorkloads: (filter) => inspectWorkloads(ctx, filter ?? {}),
    deployBundle: (name, spec, deployOptions) => deployBundle(ctx, name, spec, deployOptions ?? { prune: false }),
    removeBundle: (name) => removeBundle(ctx, name),
    bundleLogs: (name, logOptions) => bundleLogs(ctx, name, logOptions ?? {}),
    createObject: (kind, name, dataBase64, labels) => createObject(ctx, kind, name, dataBase64, labels ?? {}),
    removeObject: (kind, name) => removeObject(ctx, kind, name),
    setNodeAvailability: (runtimeNodeId, availability) => setNodeAvailability(ctx, runtimeNodeId, availability),
    scanUnmanaged: () => scanUnmanaged(ctx),
    applyLoadBalancer: (spec) => applyLoadBalancer(ctx, spec),
    removeLoadBalancer: (name) => removeLoadBalancer(ctx, name),
    ensureNetwork: (name) => ensureNetwork(ctx, name),
    init: (advertiseAddress) => init(ctx, advertiseAddress ?? null),
    joinTokens: () => joinTokens(ctx),
    join: (remoteAddresses, token, advertiseAddress) => join(ctx, remoteAddresses, token, advertiseAddress ?? null),
    leave: (force) => leave(ctx, !!force),
    members: () => members(ctx),
    removeMember: (runtimeNodeId, force) => removeMember(ctx, runtimeNodeId, !!force),
    defineVolume: (name, driverOptions, labels) => defineVolume(ctx, name, driverOptions ?? {}, labels ?? {}),
    removeVolumeDefinition: (name) => removeVolumeDefinition(ctx, name),
  };
}

export default defineDriver<SwarmDriver>({
  name: 'swarm',
  kind: 'orchestrator',
  create: () => createSwarmDriver(),
});
