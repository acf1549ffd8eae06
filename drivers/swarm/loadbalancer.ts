import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { LoadBalancerSpec, WorkloadSpec, WorkloadState } from '../../core/orchestrator.js';
import { checkName, failure, isConflict, isNotFound, SwarmDriverError, type Raw, type SwarmContext } from './client.js';
import { ensureNetwork } from './objects.js';
import { findService, stateOf } from './state.js';
import { deployWorkload, removeWorkload, serviceSpecOf } from './workloads.js';

export const LB_CONFIG_FILE = 'haproxy.cfg';

/** Writes the configuration so that a reader sees the old file or the new one, never half of it. */
function writeConfig(dir: string, text: string): void {
  if (!path.isAbsolute(dir)) throw new SwarmDriverError(`load balancer configuration folder ${JSON.stringify(dir)} is not an absolute path`);
  const target = path.join(dir, LB_CONFIG_FILE);
  const tmp = path.join(dir, `.${LB_CONFIG_FILE}.${process.pid}.${randomBytes(4).toString('hex')}`);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    writeFileSync(tmp, text, { mode: 0o644 });
    renameSync(tmp, target);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw new SwarmDriverError(`writing the load balancer configuration ${target}: ${(err as Error).message}`);
  }
}

function workloadOf(spec: LoadBalancerSpec): WorkloadSpec {
  return {
    name: spec.name,
    role: 'loadbalancer',
    resourceId: spec.resourceId,
    image: spec.image,
    replicas: 1,
    ...(spec.command?.length ? { command: spec.command } : {}),
    ports: spec.ports,
    publishMode: spec.publishMode,
    mounts: [{ type: 'bind', source: spec.hostConfigDir, target: spec.containerConfigDir, readOnly: true }],
    constraints: [`node.id == ${spec.runtimeNodeId}`],
    networks: [spec.network],
  };
}

const portsKey = (ports: Raw[] | undefined) =>
  JSON.stringify(
    (ports ?? []).map((p) => [p.Protocol ?? 'tcp', p.TargetPort ?? 0, p.PublishedPort ?? 0, p.PublishMode ?? 'ingress']).sort(),
  );

const mountsKey = (mounts: Raw[] | undefined) => JSON.stringify((mounts ?? []).map((m) => [m.Type, m.Source, m.Target, !!m.ReadOnly]));

/** Whether the running service already is what `desired` describes, but for the configuration file. */
function sameService(existing: Raw, desired: Raw): boolean {
  const now = existing.Spec ?? {};
  const nowContainer = now.TaskTemplate?.ContainerSpec ?? {};
  const wantContainer = desired.TaskTemplate.ContainerSpec;
  return (
    nowContainer.Image === wantContainer.Image &&
    JSON.stringify(nowContainer.Command ?? []) === JSON.stringify(wantContainer.Command ?? []) &&
    portsKey(now.EndpointSpec?.Ports) === portsKey(desired.EndpointSpec.Ports) &&
    mountsKey(nowContainer.Mounts) === mountsKey(wantContainer.Mounts) &&
    JSON.stringify(now.TaskTemplate?.Placement?.Constraints ?? []) === JSON.stringify(desired.TaskTemplate.Placement.Constraints ?? []) &&
    now.Mode?.Replicated?.Replicas === 1
  );
}

/** Sends the reload signal to the balancer's containers on this engine; answers how many got it. */
async function signalContainers(ctx: SwarmContext, name: string, signal: string): Promise<number> {
  let containers: Raw[];
  try {
    containers = (await ctx.docker.listContainers({ filters: { label: [`com.docker.swarm.service.name=${name}`] } })) as Raw[];
  } catch (err) {
    throw failure(`listing the containers of load balancer ${name}`, err);
  }
  let signalled = 0;
  for (const container of containers) {
    try {
      await ctx.docker.getContainer(container.Id).kill({ signal });
      signalled += 1;
    } catch (err) {
      // Stopped between the list and the signal: its successor reads the new file when it starts.
      if (isNotFound(err) || isConflict(err)) continue;
      throw failure(`sending ${signal} to load balancer ${name}`, err);
    }
  }
  return signalled;
}

/**
 * Writes the balancer's configuration on this machine, then reloads the running balancer in place
 * (its reload signal: no connection dropped) when only the configuration changed, or deploys it
 * (pinned to this node, the folder bind-mounted read-only) when it is new or its image, ports,
 * command or placement changed.
 */
export async function applyLoadBalancer(ctx: SwarmContext, spec: LoadBalancerSpec): Promise<WorkloadState> {
  checkName('load balancer', spec?.name);
  if (!spec.runtimeNodeId) throw new SwarmDriverError(`load balancer ${spec.name}: no runtime node to run on`);
  if (!path.isAbsolute(spec.containerConfigDir ?? '')) throw new SwarmDriverError(`load balancer ${spec.name}: containerConfigDir must be an absolute path`);
  writeConfig(spec.hostConfigDir, spec.config ?? '');
  const workload = workloadOf(spec);
  const existing = await findService(ctx, spec.name);
  if (existing && sameService(existing, await serviceSpecOf(ctx, workload))) {
    await signalContainers(ctx, spec.name, spec.reloadSignal || 'SIGHUP');
    const state = await stateOf(ctx, spec.name);
    if (state) return state;
  }
  await ensureNetwork(ctx, spec.network);
  return deployWorkload(ctx, workload);
}

export function removeLoadBalancer(ctx: SwarmContext, name: string): Promise<{ removed: boolean }> {
  return removeWorkload(ctx, name);
}
