import { ScopeResolvers, tableResolver } from '../../core/auth/scope.js';
import { Type } from '@sinclair/typebox';
import { badRequest, conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { DeployWorkload, HealthSpec, healthFault, InspectWorkloads, RemoveWorkload, RolloutSpec, taskFailure, WorkloadLogs, type PortSpec, type Route, type WorkloadSpec, type WorkloadState } from '../../core/orchestrator.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { ComputeRef } from './api.js';
import { DnsName, IdParams, PageQuery } from '../../core/http/resources.js';
import { asHttpError } from '../../core/clusters/calls.js';
import { workloadLogRoutes } from '../../core/clusters/log-routes.js';
import { PlacementFilterQuery } from '../../core/clusters/directory.js';
import { defineWorkloadKind } from '../../core/clusters/workloads.js';
import { capitalized, type ClusterRecord } from '../../core/clusters/store.js';
import { requireDomainsFree } from '../../core/clusters/routes.js';
import { defineLifecycle, REMOVED, TROUBLED_STATUSES } from '../../core/lifecycle.js';
import { untilScaledDown } from '../../core/clusters/scale-down.js';
import { NodesRef, nodesOf } from '../nodes/api.js';
import { VolumesRef, VolumeUserStoppers, type VolumesApi } from '../volumes/api.js';
import { DEFAULT_INSTANCE_TYPE, INSTANCE_TYPES, instanceType } from './instance-types.js';
import { computeMigrations, INSTANCES } from './migrations.js';
import { instanceSpec, InstanceStore, type InstanceRecord, type InstanceSpec } from './store.js';
import { RevisionList, revisionsView, RollbackBody } from '../../core/clusters/revisions.js';
import type { Principal } from '../../core/auth/index.js';
import { RoutesChanged } from '../../core/clusters/topics.js';

const Port = Type.String({ pattern: '^[0-9]{1,5}:[0-9]{1,5}(/(tcp|udp))?$', description: '`host:container`, optionally `/tcp` or `/udp`' });
const VolumeRef = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]*:/.*$', description: '`volume:/path/in/container` (volume name or id)' });
const Domain = Type.String({ pattern: '^(?=.{1,253}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$', description: 'a lowercase DNS name' });
const Platform = Type.String({ pattern: '^linux/(amd64|arm64)$', description: 'linux/amd64 or linux/arm64' });

const CreateBody = Type.Object(
  {
    name: DnsName,
    swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the swarm to run on (id or name); or cluster_id' })),
    cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the Kubernetes cluster to run on (id or name): a Deployment; or swarm_id' })),
    image: Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\s]+$' }),
    type: Type.Optional(Type.Union(INSTANCE_TYPES.map((t) => Type.Literal(t.name)))),
    replicas: Type.Optional(Type.Integer({ minimum: 0, maximum: 1000 })),
    ports: Type.Optional(Type.Array(Port, { maxItems: 50 })),
    http_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535, description: 'container port the load balancer sends the domain to (default: the first port’s container side)' })),
    domain: Type.Optional(Domain),
    env: Type.Optional(Type.Record(Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }), Type.String({ maxLength: 32768 }))),
    command: Type.Optional(Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 100 })),
    platform: Type.Optional(Platform),
    gpu: Type.Optional(Type.Integer({ minimum: 0, maximum: 64, description: 'GPU slots per task' })),
    volumes: Type.Optional(Type.Array(VolumeRef, { maxItems: 20 })),
    health: Type.Optional(HealthSpec),
    rollout: Type.Optional(RolloutSpec),
  },
  { additionalProperties: false },
);

/** What an update may change: the spec's fields but where it runs, its name and domain (null clears command and health). */
const UpdateBody = Type.Object(
  {
    image: Type.Optional(CreateBody.properties.image),
    type: Type.Optional(CreateBody.properties.type),
    ports: Type.Optional(CreateBody.properties.ports),
    http_port: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 65535 }), Type.Null()])),
    env: Type.Optional(CreateBody.properties.env),
    command: Type.Optional(Type.Union([Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 100 }), Type.Null()])),
    platform: Type.Optional(Type.Union([Platform, Type.Null()])),
    gpu: Type.Optional(CreateBody.properties.gpu),
    health: Type.Optional(Type.Union([HealthSpec, Type.Null()])),
    rollout: Type.Optional(Type.Union([RolloutSpec, Type.Null()])),
  },
  { additionalProperties: false, minProperties: 1 },
);

/** 400 naming the field when a health check is not one probe with sensible timings. */
function checkHealth(health: HealthSpec | null | undefined): void {
  const fault = health ? healthFault(health) : null;
  if (fault) throw badRequest(`Validation failed: body.health${fault.field}: ${fault.message}`, [{ path: `body.health${fault.field}`, message: fault.message }]);
}

type CreateInput = {
  name: string;
  swarm_id?: string;
  cluster_id?: string;
  image: string;
  type?: string;
  replicas?: number;
  ports?: string[];
  http_port?: number;
  domain?: string;
  env?: Record<string, string>;
  command?: string[];
  platform?: string;
  gpu?: number;
  volumes?: string[];
  health?: HealthSpec;
  rollout?: RolloutSpec;
};

function parsePort(text: string): PortSpec {
  const [pair, protocol] = text.split('/');
  const [published, target] = pair!.split(':').map(Number) as [number, number];
  for (const [side, n] of [['host', published], ['container', target]] as const) {
    if (n < 1 || n > 65535) throw badRequest(`Validation failed: port ${text}: the ${side} port must be 1-65535`);
  }
  return { published, target, protocol: (protocol as 'tcp' | 'udp' | undefined) ?? 'tcp' };
}

const desiredReplicas = (i: InstanceRecord) => (i.desired === 'running' ? i.replicas : 0);
const withoutDigest = (image: string) => image.split('@')[0]!;

/** What the runtime shows compared with what hangar set: running, stopped, drifted or failed (with the reason). */
export function judge(instance: InstanceRecord, w: WorkloadState | undefined, where = 'cluster'): { status: InstanceRecord['status']; reason: string | null } {
  if (instance.status === 'terminating') return { status: 'terminating', reason: instance.reason };
  if (!w) {
    if (instance.status === 'deploying') return { status: 'deploying', reason: instance.reason };
    // A deploy that failed never created the service: its own reason says more than "missing".
    if (instance.status === 'failed' && instance.reason) return { status: 'failed', reason: instance.reason };
    return { status: 'failed', reason: `its workload is missing from the ${where} (removed outside hangar?): start it again or clean it up` };
  }
  const want = desiredReplicas(instance);
  const drift: string[] = [];
  if (w.replicas !== null && w.replicas !== want) drift.push(`replicas ${w.replicas} (hangar set ${want})`);
  // The runtime returned to the previous spec by itself (a rollout whose new tasks failed, rolled back), or stopped the rollout (on_failure pause).
  const rollout = w.rollout;
  if (rollout?.state === 'rollback_completed' || rollout?.state === 'rollback_started') {
    const to = rollout.revision ? `revision ${rollout.revision}` : 'the previous revision';
    return { status: 'rolled_back', reason: `the ${where} rolled the update back${rollout.message ? `: ${rollout.message}` : ''}; what runs is ${to}` };
  }
  if (rollout?.state === 'paused') {
    return { status: 'paused', reason: `the ${where} paused the rollout${rollout.message ? `: ${rollout.message}` : ''}; update the instance (or roll back to a revision) to go on` };
  }
  if (rollout?.state === 'updating' && want > 0) return { status: 'rolling_out', reason: `${w.running}/${want} running${rollout.revision ? `, rolling out revision ${rollout.revision}` : ''}` };
  if (withoutDigest(w.image) !== instance.image) drift.push(`image ${withoutDigest(w.image)} (hangar set ${instance.image})`);
  if (drift.length) return { status: 'drifted', reason: `the ${where} runs ${drift.join(', ')}` };
  if (want === 0) return w.running === 0 ? { status: 'stopped', reason: null } : { status: 'deploying', reason: `stopping: ${w.running} task(s) still running` };
  if (w.running >= want) return { status: 'running', reason: null };
  const failure = taskFailure(w.tasks);
  if (failure) return { status: 'failed', reason: `${w.running}/${want} running; ${failure}` };
  return { status: 'deploying', reason: `${w.running}/${want} running` };
}

/** What an observation of a cluster says about one instance. */
export interface ObservedInstance {
  workload: WorkloadState | undefined;
  /** Runtime node id → hangar node id. */
  nodeIds: Map<string, string>;
  /** What the cluster is called in messages (`swarm`). */
  where: string;
}

/** What the runtime shows of an instance, as the record keeps it (pure). */
export function reconcileInstance(i: InstanceRecord, observed: ObservedInstance, now: string): Partial<InstanceRecord> {
  const w = observed.workload;
  const placement = (w?.tasks ?? [])
    .filter((t) => t.desired_state === 'running')
    .map((t) => ({ node_id: t.runtime_node_id ? (observed.nodeIds.get(t.runtime_node_id) ?? null) : null, runtime_node_id: t.runtime_node_id, state: t.state }));
  return { ...judge(i, w, observed.where), running: w?.running ?? 0, placement, observed_at: now };
}

/** An instance's view; `placement` names its cluster as the API does (`swarm_id` for a swarm). */
export function instanceView(i: InstanceRecord, target: { swarm_id: string } | { cluster_id: string } = { swarm_id: i.cluster_id }) {
  return {
    id: i.id,
    name: i.name,
    ...target,
    image: i.image,
    type: i.type,
    replicas: i.replicas,
    desired_state: i.desired,
    status: i.status,
    ...(i.reason ? { reason: i.reason } : {}),
    running: i.running,
    placement: i.placement ?? [],
    ports: i.ports.map((p) => `${p.published}:${p.target}/${p.protocol ?? 'tcp'}`),
    http_port: i.http_port,
    domain: i.domain,
    env: i.env,
    command: i.command,
    platform: i.platform,
    gpu: i.gpu,
    volumes: i.volumes,
    health: i.health ?? null,
    rollout: i.rollout ?? null,
    runtime_name: i.runtime_name,
    observed_at: i.observed_at,
    created_at: i.created_at,
    updated_at: i.updated_at,
  };
}

export default definePlugin({
  name: 'compute',
  description: 'compute instances on clusters: create, scale, stop/start, logs, volumes; observed state',
  deps: [NodesRef],
  optionalDeps: [VolumesRef],
  provides: [ComputeRef],
  migrations: computeMigrations,
  setup(services) {
    const { db, clock } = services;
    const core = services.clusters;
    const { nodes } = nodesOf(services);
    const instances = new InstanceStore(db, clock);
    const volumes = (): VolumesApi => {
      const api = services.provided.find(VolumesRef);
      if (!api) throw badRequest('Volumes need the volumes plugin, which is not loaded');
      return api;
    };
    const now = () => clock.now().toISOString();
    const routesChanged = (clusterId: string) => services.events.publish(RoutesChanged, { clusterId });
    const view = async (i: InstanceRecord) => instanceView(i, await core.placement(i.cluster_id));

    /** The instance as a workload: what the user asked for, in the orchestrator-neutral terms drivers translate. */
    async function spec(i: InstanceRecord, cluster: ClusterRecord): Promise<WorkloadSpec> {
      const type = instanceType(i.type)!;
      const mounts: NonNullable<WorkloadSpec['volumes']> = [];
      for (const v of i.volumes) mounts.push(await volumes().mountFor(await volumes().require(v.volume_id), v.path, cluster));
      const [os, architecture] = i.platform ? i.platform.split('/') : [];
      return {
        name: i.runtime_name,
        role: 'instance',
        resource_id: i.id,
        image: i.image,
        replicas: desiredReplicas(i),
        env: i.env,
        ...(i.command ? { command: i.command } : {}),
        resources: { cpus: type.cpus, memory_mb: type.memory_mb, ...(i.gpu ? { gpus: i.gpu } : {}) },
        ...(os ? { platform: { os, architecture } } : {}),
        volumes: mounts,
        exposure: { ports: i.ports, routed: true, ...(i.domain ? { domain: i.domain } : {}) },
        replica_hostnames: true,
        ...(i.health ? { health: i.health } : {}),
        ...(i.rollout ? { rollout: i.rollout } : {}),
        revision: (await core.revisions.latest('instance', i.id))?.number,
      };
    }

    const lifecycle = core.lifecycle(
      instances,
      defineLifecycle<InstanceRecord, ObservedInstance>({
        noun: 'instance',
        operations: {
          // Creating, starting, stopping, scaling, attaching: the record says what is wanted; deploying sends it.
          deploy: {
            from: ['deploying', 'running', 'stopped', 'drifted', 'failed', 'rolled_back', 'rolling_out', 'paused'],
            during: 'deploying',
            joins: true,
            label: (i) => `deploy instance ${i.name}`,
            async run(i) {
              const cluster = await core.requireActive(i.cluster_id);
              const state = await core.callOn(cluster, DeployWorkload, { spec: await spec(i, cluster) });
              routesChanged(i.cluster_id);
              return reconcileInstance(i, { workload: state, nodeIds: await core.nodeIdsByRuntime(cluster.id), where: core.nounOf(cluster) }, now());
            },
            failed: (i, err) => ({ status: 'failed', reason: `${i.reason ?? 'deploying'} failed: ${err.message}` }),
          },
          // The workload is removed, then the record.
          terminate: {
            from: '*',
            during: 'terminating',
            preempts: true,
            label: (i) => `terminate instance ${i.name}`,
            async run(i) {
              await removeWorkload(i);
              await kind.forget(i.id);
              routesChanged(i.cluster_id);
              return REMOVED;
            },
            failed: (i, err) => ({ status: 'failed', reason: `terminating failed: ${err.message}; retry or clean it up (POST /v1/cleanup/instance/${i.id})` }),
          },
        },
        reconcile: (i, observed) => reconcileInstance(i, observed, now()),
      }),
    );

    /** 409 when the instance may not take this change now (it is being terminated). */
    const refused = (i: InstanceRecord | null) => conflict(i ? `Instance ${i.name} is ${i.status === 'terminating' ? 'being terminated' : i.status}` : 'The instance is gone');

    /**
     * Writes a change to the instance's record and deploys it in the background; the 202's body.
     * A change of its spec (instanceSpec) is kept as a new revision by `who`.
     */
    async function redeploy(i: InstanceRecord, patch: Partial<InstanceRecord>, label: string, who: Principal | null = null, rollbackOf?: number) {
      const spec = instanceSpec({ ...i, ...patch });
      // Kept before the deploy begins: the deploy names its revision to the runtime (a rollback there says which one runs).
      if (rollbackOf !== undefined || JSON.stringify(spec) !== JSON.stringify(instanceSpec(i))) await core.revisions.append('instance', i.id, { spec: { ...spec }, principal: who, rollbackOf });
      const started = await lifecycle.start(i.id, 'deploy', patch, refused, `${label} instance ${i.name}`);
      return view(started);
    }

    /** Host ports published twice are a 400. */
    function parsePorts(texts: string[]): PortSpec[] {
      const ports = texts.map(parsePort);
      const published = new Set<string>();
      for (const p of ports) {
        const key = `${p.published}/${p.protocol}`;
        if (published.has(key)) throw badRequest(`Validation failed: host port ${key} is published twice`);
        published.add(key);
      }
      return ports;
    }

    /**
     * An update of the instance's spec (PATCH, and a rollback to a kept revision): checked as a
     * create is, then rolled out as a new revision.
     */
    async function update(i: InstanceRecord, next: InstanceSpec, who: Principal | null, label: string, rollbackOf?: number) {
      checkHealth(next.health);
      const ports = parsePorts(next.ports);
      const cluster = await core.requireActive(i.cluster_id);
      if (next.gpu !== i.gpu) await gpuCheck(cluster, next.gpu);
      for (const v of next.volumes) {
        if (i.volumes.some((mounted) => mounted.volume_id === v.volume_id)) continue;
        await volumes().require(v.volume_id).catch(() => {
          throw conflict(`Volume ${v.name} (${v.volume_id}) of that revision no longer exists`);
        });
      }
      const { image, type, http_port, env, command, platform, gpu, volumes: mounts, health, rollout } = next;
      const reason = rollbackOf === undefined ? label : `rolling back to revision ${rollbackOf}`;
      return redeploy(i, { image, type, ports, http_port, env, command, platform, gpu, volumes: mounts, health, rollout, reason }, label, who, rollbackOf);
    }

    async function gpuCheck(cluster: ClusterRecord, slots: number): Promise<void> {
      if (!slots) return;
      let best = 0;
      for (const m of await core.members.of(cluster.id)) {
        const node = await nodes.get(m.node_id);
        const gpus = Array.isArray(node?.facts?.gpus) ? (node!.facts!.gpus as unknown[]).length : 0;
        best = Math.max(best, gpus * (node?.gpu_overcommit_factor ?? 1));
      }
      if (best < slots) throw conflict(`No node of ${core.nounOf(cluster)} ${cluster.name} has ${slots} GPU slot(s) (the most is ${best}: GPUs × the node’s overcommit factor)`);
    }

    async function requireInstance(id: string): Promise<InstanceRecord> {
      const i = (await instances.get(id)) ?? (await instances.byName(id));
      if (!i) throw notFound(`No instance ${id}`);
      return i;
    }

    async function requireMutable(id: string): Promise<InstanceRecord> {
      const i = await requireInstance(id);
      if (i.status === 'terminating') throw conflict(`Instance ${i.name} is being terminated`);
      return i;
    }

    /** Parses `vol:/path` references into volume ids (404 for an unknown volume). */
    async function resolveVolumes(refs: string[]): Promise<InstanceRecord['volumes']> {
      const out: InstanceRecord['volumes'] = [];
      for (const ref of refs) {
        const at = ref.indexOf(':');
        const volume = await volumes().require(ref.slice(0, at));
        const path = ref.slice(at + 1);
        if (out.some((v) => v.path === path)) throw badRequest(`Validation failed: two volumes are mounted at ${path}`);
        out.push({ volume_id: volume.id, name: volume.name, path });
      }
      return out;
    }

    async function routes(clusterId: string): Promise<Route[]> {
      return (await instances.findAll({ cluster_id: clusterId }))
        .filter((i) => i.domain && i.status !== 'terminating' && (i.http_port ?? i.ports[0]?.target))
        .map((i) => ({ domain: i.domain!, service: i.runtime_name, port: (i.http_port ?? i.ports[0]!.target)!, source: 'instance', source_id: i.id }));
    }
    /** The instance's workload leaves its cluster (a cluster without a manager, or gone, has nothing left to remove). */
    async function removeWorkload(i: InstanceRecord): Promise<void> {
      const cluster = await core.clusters.get(i.cluster_id);
      if (cluster?.manager_node_id) await core.callOn(cluster, RemoveWorkload, { name: i.runtime_name });
    }

    services.provided.provide(ComputeRef, { instances });
    services.provided.contribute(ScopeResolvers, tableResolver('instance', () => services.db.knex, INSTANCES, { via: 'cluster_id' }));
    const kind = defineWorkloadKind(services, {
      type: 'instance',
      store: instances,
      lifecycle,
      removeRuntime: removeWorkload,
      removed: (i) => routesChanged(i.cluster_id),
      observed: (i, { cluster, workloads, nodeIds }) => ({ workload: workloads.find((w) => w.name === i.runtime_name), nodeIds, where: core.nounOf(cluster) }),
      resolve: async (ref) => ((await instances.get(ref)) ?? (await instances.byName(ref)))?.id ?? null,
      routes: { source: 'instance', routes },
      runtime: (i) => ({ names: [i.runtime_name] }),
      volumeUsers: async (volumeId) =>
        (await instances.findAll()).filter((i) => i.volumes.some((v) => v.volume_id === volumeId)).map((i) => ({ type: 'instance', id: i.id, name: i.name, cluster_id: i.cluster_id })),
    });

    /**
     * A restore of a volume an instance mounts, with stop_workloads (plugins/backups): the instance
     * is scaled to zero by the same deploy as POST …/scale, waited for until it has settled and its
     * containers are gone (a task told to shut down runs out its grace period, and a scale back up
     * before it ends would keep it running through the restore), and scaled back to the replicas it
     * had after the restore.
     */
    async function scaleNow(i: InstanceRecord, replicas: number, reason: string): Promise<void> {
      const done = await lifecycle.runNow(i.id, 'deploy', { replicas, reason });
      if (!done) throw refused(await instances.get(i.id));
      if (TROUBLED_STATUSES.has(String(done.status))) throw conflict(`Scaling instance ${i.name} to ${replicas} ended ${done.status}${done.reason ? `: ${String(done.reason)}` : ''}`);
    }
    services.provided.contribute(VolumeUserStoppers, {
      type: 'instance',
      async replicas(id) {
        const i = await instances.get(id);
        return !i || i.desired !== 'running' || i.replicas === 0 ? null : i.replicas;
      },
      async stop(id) {
        const i = await instances.get(id);
        if (!i || i.desired !== 'running' || i.replicas === 0) return null;
        await scaleNow(i, 0, 'stopped for a restore of a volume it mounts');
        const cluster = await core.requireActive(i.cluster_id);
        await untilScaledDown(async () => (await core.callOn(cluster, InspectWorkloads, { names: [i.runtime_name] })).workloads, () => true, services.shutdown);
        return i.replicas;
      },
      async start(id, replicas) {
        const i = await instances.get(id);
        if (i) await scaleNow(i, replicas, 'back after a restore of a volume it mounts');
      },
    });

    return {
      routes: [
        defineRoute({
          method: 'GET',
          path: '/v1/compute/instance-types',
          auth: 'authenticated',
          summary: 'Instance types: CPU and memory limits per task',
          handler: () => INSTANCE_TYPES.map((t) => ({ ...t, default: t.name === DEFAULT_INSTANCE_TYPE })),
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/compute/instances',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'cluster', from: 'body.swarm_id', noun: 'swarm' }, { kind: 'cluster', from: 'body.cluster_id', noun: 'cluster' }, { kind: 'volume', from: 'body.volumes[]', upTo: ':', permission: 'volumes:read' }] },
          summary: 'Create a compute instance: a replicated workload on a swarm (swarm_id) or a Deployment on a Kubernetes cluster (cluster_id); 202, poll for its status',
          status: 202,
          schemas: { body: CreateBody },
          handler: async (req) => {
            const body = req.body as CreateInput;
            if ((body.swarm_id === undefined) === (body.cluster_id === undefined)) {
              throw badRequest('Validation failed: give exactly one of body.swarm_id (a swarm) and body.cluster_id (a Kubernetes cluster)', [
                { path: 'body', message: 'exactly one of swarm_id and cluster_id' },
              ]);
            }
            const cluster = await core.requireTarget(body);
            if (await instances.findOne({ cluster_id: cluster.id, name: body.name })) throw conflict(`${capitalized(core.nounOf(cluster))} ${cluster.name} already has an instance named ${body.name}`);
            const domain = body.domain ?? `${body.name}.${cluster.name}.${core.settings.localDomain}`;
            const clash = await instances.findOne({ domain });
            if (clash) throw conflict(`Domain ${domain} is already routed to instance ${clash.name}`);
            await requireDomainsFree(services, cluster.id, [domain]);
            checkHealth(body.health);
            const ports = parsePorts(body.ports ?? []);
            await gpuCheck(cluster, body.gpu ?? 0);
            const id = newId('inst');
            const record = await instances.insert({
              id,
              name: body.name,
              cluster_id: cluster.id,
              runtime_name: `inst-${body.name}`,
              image: body.image,
              type: body.type ?? DEFAULT_INSTANCE_TYPE,
              replicas: body.replicas ?? 1,
              desired: 'running',
              status: 'deploying',
              reason: null,
              domain,
              http_port: body.http_port ?? null,
              ports,
              env: body.env ?? {},
              command: body.command ?? null,
              platform: body.platform ?? null,
              gpu: body.gpu ?? 0,
              volumes: await resolveVolumes(body.volumes ?? []),
              health: body.health ?? null,
              rollout: body.rollout ?? null,
              placement: [],
              running: 0,
              observed_at: null,
              created_at: now(),
              updated_at: now(),
            });
            routesChanged(cluster.id);
            // Revision 1 before the deploy begins: the deploy names it to the runtime.
            await core.revisions.append('instance', record.id, { spec: { ...instanceSpec(record) }, principal: req.principal });
            const deploying = await lifecycle.start(record.id, 'deploy', {}, refused, `creating instance ${record.name}`);
            return view(deploying);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/compute/instances',
          auth: 'authenticated',
          scope: { list: 'instance' },
          summary: 'List compute instances with desired and observed state',
          schemas: {
            query: Type.Object(
              {
                ...PageQuery.properties,
                ...PlacementFilterQuery,
              },
              { additionalProperties: false },
            ),
          },
          handler: async (req) => {
            if (req.query.swarm_id && req.query.cluster_id) throw badRequest('Validation failed: filter by query.swarm_id or query.cluster_id, not both', [{ path: 'query', message: 'one of swarm_id and cluster_id' }]);
            const clusterId =
              (req.query.swarm_id && (await core.filterId(req.query.swarm_id, 'swarm_id'))) || (req.query.cluster_id && (await core.filterId(req.query.cluster_id, 'cluster_id')));
            return Reply.pageOf(await instances.page({ limit: req.query.limit, cursor: req.query.cursor, where: (q) => clusterId && q.where({ cluster_id: clusterId }) }), view);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/compute/instances/{id}',
          auth: 'authenticated',
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'Get an instance: spec, desired and observed state, where its tasks run',
          schemas: { params: IdParams },
          handler: async (req) => view(await requireInstance(req.params.id)),
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/compute/instances/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'Terminate an instance (202; the record goes once its service is removed)',
          status: 202,
          schemas: { params: IdParams },
          handler: async (req) => {
            const i = await requireInstance(req.params.id);
            const terminating = await lifecycle.start(i.id, 'terminate', { reason: null }, refused);
            routesChanged(i.cluster_id);
            return view(terminating);
          },
        }),
        defineRoute({
          method: 'PATCH',
          path: '/v1/compute/instances/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'Update an instance’s spec (image, type, ports, http_port, env, command, platform, gpu, health, rollout; null clears command, http_port, platform, health and rollout): 202, a rolling update kept as a new revision',
          status: 202,
          schemas: { params: IdParams, body: UpdateBody },
          handler: async (req) => {
            const i = await requireMutable(req.params.id);
            const body = req.body as Partial<InstanceSpec>;
            const next: InstanceSpec = { ...instanceSpec(i) };
            for (const [key, value] of Object.entries(body)) (next as unknown as Record<string, unknown>)[key] = value;
            return update(i, next, req.principal, 'updating');
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/compute/instances/{id}/revisions',
          auth: 'authenticated',
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'An instance’s kept spec revisions, newest first: number, time, who, the secret and config versions used, and what changed against the revision before (JSON paths, old and new values)',
          schemas: { params: IdParams, response: RevisionList },
          handler: async (req) => revisionsView(core.revisions, 'instance', (await requireInstance(req.params.id)).id),
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/compute/instances/{id}/rollback',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'Roll a kept revision out again (202): its spec becomes a new revision, through the same checks and rolling update as any update; 404 for a revision not kept, 409 while the instance is being terminated',
          status: 202,
          schemas: { params: IdParams, body: RollbackBody },
          handler: async (req) => {
            const i = await requireMutable(req.params.id);
            const revision = await core.revisions.require('instance', i, req.body.revision);
            return update(i, { ...instanceSpec(i), ...(revision.spec as Partial<InstanceSpec>) }, req.principal, 'rolling back', revision.number);
          },
        }),
        ...(
          [
            ['stop', 'stopped', 'stopping', 'Stop an instance: its tasks end, its replica count is remembered for start'],
            ['start', 'running', 'starting', 'Start an instance again with its remembered replica count (also recreates a missing service)'],
          ] as const
        ).map(([verb, desired, doing, summary]) =>
          defineRoute({
            method: 'POST',
            path: `/v1/compute/instances/{id}/${verb}`,
            auth: { role: 'admin' },
            scope: { of: [{ kind: 'instance', from: 'params.id' }] },
            summary,
            status: 202,
            schemas: { params: IdParams },
            handler: async (req) => redeploy(await requireMutable(req.params.id), { desired, reason: doing }, doing),
          }),
        ),
        defineRoute({
          method: 'POST',
          path: '/v1/compute/instances/{id}/scale',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'Set the number of replicas (a stopped instance keeps it for start)',
          status: 202,
          schemas: { params: IdParams, body: Type.Object({ replicas: Type.Integer({ minimum: 0, maximum: 1000 }) }, { additionalProperties: false }) },
          handler: async (req) => {
            const i = await requireMutable(req.params.id);
            // A stopped instance only remembers the count for start.
            if (i.desired !== 'running') return view(await instances.change(i.id, { replicas: req.body.replicas, op_rev: i.op_rev + 1 }));
            return redeploy(i, { replicas: req.body.replicas, reason: `scaling to ${req.body.replicas}` }, 'scaling');
          },
        }),
        ...workloadLogRoutes({
          path: '/v1/compute/instances/{id}',
          kind: 'instance',
          permission: 'instances:logs',
          summaries: {
            queue: 'Queue a read of the instance’s logs: the last `lines` (default 100, max 10000) or everything after `since`',
            read: 'The log read: status, and the lines once completed (read once)',
          },
          async queue(id, range) {
            const i = await requireInstance(id);
            return core.queueLogs(await core.requireActive(i.cluster_id), WorkloadLogs, i.runtime_name, range, i.id);
          },
          subject: async (id) => (await requireInstance(id)).id,
          clusters: core,
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/compute/instances/{id}/volumes',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'instance', from: 'params.id' }, { kind: 'volume', from: 'body.volume_id', permission: 'volumes:read' }] },
          summary: 'Attach a volume at a path (a rolling update of the instance)',
          status: 202,
          schemas: { params: IdParams, body: Type.Object({ volume_id: Type.String({ minLength: 1, maxLength: 100 }), path: Type.String({ pattern: '^/.*$', maxLength: 4096 }) }, { additionalProperties: false }) },
          handler: async (req) => {
            const i = await requireMutable(req.params.id);
            const volume = await volumes().require(req.body.volume_id);
            if (i.volumes.some((v) => v.volume_id === volume.id)) throw conflict(`Volume ${volume.name} is already attached to ${i.name}`);
            if (i.volumes.some((v) => v.path === req.body.path)) throw conflict(`Instance ${i.name} already has a volume at ${req.body.path}`);
            const cluster = await core.requireActive(i.cluster_id);
            await volumes().mountFor(volume, req.body.path, cluster).catch((err) => {
              throw asHttpError(err, `preparing volume ${volume.name}`);
            });
            const attached = [...i.volumes, { volume_id: volume.id, name: volume.name, path: req.body.path }];
            return redeploy(i, { volumes: attached, reason: `attaching ${volume.name}` }, 'attaching a volume to', req.principal);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/compute/instances/{id}/volumes/{volumeId}',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'instance', from: 'params.id' }] },
          summary: 'Detach a volume (a rolling update of the instance)',
          status: 202,
          schemas: { params: Type.Object({ id: Type.String({ maxLength: 100 }), volumeId: Type.String({ maxLength: 100 }) }) },
          handler: async (req) => {
            const i = await requireMutable(req.params.id);
            const attached = i.volumes.find((v) => v.volume_id === req.params.volumeId || v.name === req.params.volumeId);
            if (!attached) throw notFound(`Volume ${req.params.volumeId} is not attached to instance ${i.name}`);
            return redeploy(i, { volumes: i.volumes.filter((v) => v !== attached), reason: `detaching ${attached.name}` }, 'detaching a volume from', req.principal);
          },
        }),
      ],
    };
  },
});
