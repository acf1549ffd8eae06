import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { LoadBalancerSpec, WorkloadSpec, WorkloadState } from '../../core/orchestrator.js';
import { attempt, checkName, failure, isConflict, isNotFound, SwarmDriverError, type Raw, type SwarmContext } from './client.js';
import { renderHaproxyConfig } from './haproxy.js';
import { findService, stateOf } from './state.js';
import { deployWorkload, removeWorkload, serviceSpecOf, type SwarmCallContext, type SwarmPolicy } from './workloads.js';

/** How the balancer runs when the gateway's settings say nothing else (HAProxy in master-worker mode). */
export const LB_DEFAULTS = {
  host_config_dir: '/var/lib/hangar/lb',
  container_config_dir: '/usr/local/etc/haproxy',
  reload_signal: 'SIGUSR2',
  publish_mode: 'host',
};

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

interface Balancer {
  workload: WorkloadSpec;
  policy: SwarmPolicy;
  config: string;
  hostConfigDir: string;
  reloadSignal: string;
}

/** The balancer as a workload: HAProxy pinned to its node, its configuration folder bound read-only. */
function balancerOf(spec: LoadBalancerSpec): Balancer {
  const settings = { ...LB_DEFAULTS, ...(spec.settings ?? {}) };
  if (!path.isAbsolute(settings.container_config_dir)) throw new SwarmDriverError(`load balancer ${spec.name}: container_config_dir must be an absolute path`);
  const hostConfigDir = path.join(settings.host_config_dir, spec.resource_id);
  return {
    config: renderHaproxyConfig(spec.routes, { httpPort: spec.http_port }),
    hostConfigDir,
    reloadSignal: settings.reload_signal || 'SIGHUP',
    policy: { publishMode: settings.publish_mode === 'ingress' ? 'ingress' : 'host', endpointMode: 'vip' },
    workload: {
      name: spec.name,
      role: 'loadbalancer',
      resource_id: spec.resource_id,
      image: spec.image,
      replicas: 1,
      ...(spec.command?.length ? { command: spec.command } : {}),
      exposure: { ports: [{ published: spec.http_port, target: spec.http_port, protocol: 'tcp' }], routed: true },
      volumes: [{ source: { host_path: { node_id: spec.node_id, path: hostConfigDir } }, target: settings.container_config_dir, read_only: true }],
    },
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
 * Renders the balancer's configuration from its routes and writes it on this machine (which must
 * be the node the balancer runs on), then reloads the running balancer in place (its reload
 * signal: no connection dropped) when only the configuration changed, or deploys it (pinned to
 * this node, the folder bind-mounted read-only) when it is new or its image, ports, command or
 * placement changed.
 */
export async function applyLoadBalancer(ctx: SwarmContext, spec: LoadBalancerSpec, context: SwarmCallContext): Promise<WorkloadState> {
  checkName('load balancer', spec?.name);
  const here = ((await attempt('reading the engine information', () => ctx.docker.info())) as Raw).Swarm?.NodeID;
  const wanted = context.cluster_nodes?.[spec.node_id];
  if (!wanted) throw new SwarmDriverError(`load balancer ${spec.name}: node ${spec.node_id} is not a member of this swarm`);
  if (here && here !== wanted) throw new SwarmDriverError(`load balancer ${spec.name} runs on node ${spec.node_id}; this call reached another node, which cannot write its configuration`);
  const balancer = balancerOf(spec);
  writeConfig(balancer.hostConfigDir, balancer.config);
  const existing = await findService(ctx, spec.name);
  if (existing && sameService(existing, await serviceSpecOf(ctx, balancer.workload, context, balancer.policy))) {
    await signalContainers(ctx, spec.name, balancer.reloadSignal);
    const state = await stateOf(ctx, spec.name);
    if (state) return state;
  }
  return deployWorkload(ctx, balancer.workload, context, balancer.policy);
}

export function removeLoadBalancer(ctx: SwarmContext, name: string): Promise<{ removed: boolean }> {
  return removeWorkload(ctx, name);
}
