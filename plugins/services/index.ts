import { ScopeResolvers, tableResolver } from '../../core/auth/scope.js';
import { Type, type TSchema } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { badRequest, conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { BundleLogs, DeployBundle, HANGAR_STACK_PREFIX, HealthSpec, healthFault, InspectWorkloads, RemoveBundle, ScaleWorkload, type Route, type WorkloadState } from '../../core/orchestrator.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { DnsName, IdParams, readRoutes } from '../../core/http/resources.js';
import type { BundleFormat, ClusterField } from '../../core/clusters/backend.js';
import { asHttpError } from '../../core/clusters/calls.js';
import { workloadLogRoutes } from '../../core/clusters/log-routes.js';
import { FIELD_NOUNS } from '../../core/clusters/backend-registry.js';
import { requireDomainsFree } from '../../core/clusters/routes.js';
import { defineWorkloadKind } from '../../core/clusters/workloads.js';
import { untilScaledDown } from '../../core/clusters/scale-down.js';
import type { ClusterRecord } from '../../core/clusters/store.js';
import { defineLifecycle, REMOVED } from '../../core/lifecycle.js';
import { SecretsRef, SecretUsersPoint, type ObjectKind, type ResolvedObject } from '../secrets/api.js';
import { ServicesRef, type ServicesApi } from './api.js';
import { decodeBase64Text, resolveObjects } from './bundles.js';
import { SERVICES, serviceMigrations } from './migrations.js';
import { ServiceStore, type HaltedRollout, type ServiceRecord, type ServiceRoute } from './store.js';
import { objectVersions, RevisionList, revisionsView, RollbackBody, type RevisionObject, type RevisionRecord } from '../../core/clusters/revisions.js';
import type { Principal } from '../../core/auth/index.js';
import { unlimitedAdmin } from '../../core/auth/permissions.js';
import { parseAllDocuments } from 'yaml';
import { RoutesChanged } from '../../core/clusters/topics.js';
import { ProjectsRef } from '../projects/api.js';
import { runtimeVolumeName, VolumesRef, VolumeUserStoppers } from '../volumes/api.js';

const Service = Type.Object({}, { additionalProperties: true });

/** What a service may be: a bundle format and the field that names the clusters of the backend that deploys it. */
interface Offer {
  target: ClusterField;
  format: BundleFormat;
}

/** What a request says a service is, before its cluster is looked up: the cluster field, the format (when the body settles it) and the bundle's text. */
interface SpecInput {
  target?: { field: ClusterField; ref: string };
  format?: BundleFormat;
  text?: string;
}

type ServiceBody = { name?: string } & Partial<Record<string, string>>;
type PartHealth = Record<string, HealthSpec>;

/** The health checks a body declares, by part: each part one of the bundle's (400 naming it otherwise), each check sound. */
function checkPartHealth(health: PartHealth | null, parts: string[], field: string): PartHealth | null {
  if (!health || !Object.keys(health).length) return null;
  for (const [part, check] of Object.entries(health)) {
    const path = `body.health.${part}`;
    if (!parts.includes(part)) {
      const message = `${field} has no part ${part} (its parts: ${parts.join(', ') || 'none'})`;
      throw badRequest(`Validation failed: ${path}: ${message}`, [{ path, message }]);
    }
    const fault = healthFault(check);
    if (fault) throw badRequest(`Validation failed: ${path}${fault.field}: ${fault.message}`, [{ path: `${path}${fault.field}`, message: fault.message }]);
  }
  return health;
}

const distinct = <T>(items: T[]) => [...new Set(items)];
const required = (field: string) => badRequest(`Validation failed: body.${field} is required`, [{ path: `body.${field}`, message: 'is required' }]);
/** "a, b or c". */
const alternatives = (items: string[]) => (items.length > 1 ? `${items.slice(0, -1).join(', ')} or ${items.at(-1)}` : (items[0] ?? 'nothing'));

/**
 * Which cluster field and bundle the body gives, checked against what the loaded backends offer
 * (each a pair: `swarm_id` and `compose_file`, `cluster_id` and `manifest`…): a 400 for fields of
 * two offers, for none, or for a missing part of the one it gives. The text is decoded here; which
 * format a `cluster_id` alone means may take its cluster (ClusterBackend.bundles).
 */
function specInput(offers: Offer[], body: ServiceBody, replacing: boolean): SpecInput {
  const targets = distinct(offers.map((o) => o.target)).filter((field) => body[field] !== undefined);
  const formats = distinct(offers.map((o) => o.format)).filter((format) => body[format.field] !== undefined);
  const choice = offers.map((o) => `${o.target} and ${o.format.field} (a ${o.format.describes})`);
  const give = `give ${choice.length > 2 ? 'one of' : 'either'} ${alternatives(choice)}`;
  const matching = offers.filter((o) => (!targets.length || o.target === targets[0]) && (!formats.length || o.format === formats[0]));
  if (targets.length > 1 || formats.length > 1 || !matching.length) throw badRequest(`Validation failed: ${give}, not both`);
  if (!targets.length && !formats.length) throw badRequest(`Validation failed: ${give}`);
  const candidates = distinct(matching.map((o) => o.format));
  if (!formats.length && candidates.length === 1) throw required(candidates[0]!.field);
  const fields = distinct(matching.map((o) => o.target));
  if (!replacing && !targets.length) throw required(alternatives(fields));
  const format = formats[0];
  return {
    ...(targets.length ? { target: { field: targets[0]!, ref: body[targets[0]!]! } } : {}),
    ...(format ? { format, text: decodeBase64Text(body[format.field]!, format.field) } : {}),
  };
}

export const stackOf = (service: Pick<ServiceRecord, 'name'>) => `${HANGAR_STACK_PREFIX}${service.name}`;

/** Per-service replica counts: what the runtime reports, else what the spec asks for with nothing running. */
function replicasOf(stack: string, desired: Record<string, number | null>, workloads: WorkloadState[]): ServiceRecord['replicas'] {
  const byKey = new Map(workloads.filter((w) => w.stack === stack && w.component).map((w) => [w.component!, w]));
  return Object.fromEntries(
    Object.entries(desired).map(([key, want]) => {
      const w = byKey.get(key);
      return [key, w ? { desired: w.replicas, running: w.running } : { desired: want, running: 0 }];
    }),
  );
}

/** A rollout's state as a cluster tells it (WorkloadState.rollout) when it stopped on a failure. */
const HALTED: Record<string, HaltedRollout['status']> = { rollback_started: 'rolled_back', rollback_completed: 'rolled_back', rollback_paused: 'paused', paused: 'paused' };

/** The parts of a stack whose last rollout their cluster rolled back or paused. */
function haltedRollouts(stack: string, workloads: WorkloadState[]): Record<string, HaltedRollout> {
  return Object.fromEntries(
    workloads.flatMap((w) => {
      const status = w.stack === stack && w.component && w.rollout ? HALTED[w.rollout.state] : undefined;
      return status ? [[w.component!, { status, message: w.rollout!.message, ...(w.rollout!.revision ? { revision: w.rollout!.revision } : {}) }]] : [];
    }),
  );
}

export default definePlugin({
  name: 'services',
  description: 'services: compose stacks on swarms (hangar secrets and configs, x-hangar routing, logs)',
  optionalDeps: [SecretsRef, ProjectsRef, VolumesRef],
  provides: [ServicesRef],
  migrations: serviceMigrations,
  setup(services) {
    const { db, clock } = services;
    const core = services.clusters;
    const store = new ServiceStore(db, clock);
    // Secrets and configs in compose files need the secrets plugin; without it a file that uses them is refused.
    const secrets = services.provided.find(SecretsRef) ?? null;
    const projects = () => services.provided.find(ProjectsRef) ?? null;
    const now = () => clock.now().toISOString();
    const routesChanged = (clusterId: string) => services.events.publish(RoutesChanged, { clusterId });

    /**
     * Looks up the secrets and configs a spec names: their current versions, or the earlier ones of
     * `pins` (a rollback's revision; by object id, so one deleted and made again since is current);
     * each earlier version used goes into `restored`. With `deploy`, an earlier version's runtime
     * object is made again when it was removed; a version no longer kept is a 409 naming it.
     */
    function resolver(clusterId: string, format: BundleFormat, pins: RevisionObject[], deploy: boolean, restored: RevisionObject[]) {
      return async (kind: ObjectKind, name: string): Promise<ResolvedObject | null> => {
        if (!secrets) throw badRequest(`Validation failed: the ${format.field} uses ${kind}s, but the secrets plugin is not loaded`);
        const current = await secrets.resolve(kind, clusterId, name);
        const pin = current && pins.find((p) => p.kind === kind && p.id === current.id && p.version !== current.version);
        if (!pin) return current;
        const earlier = await secrets.version(kind, pin.id, pin.version, { deploy });
        if (!restored.some((r) => r.id === earlier.id)) restored.push({ kind, id: earlier.id, name: earlier.name, version: earlier.version });
        return earlier;
      };
    }

    /** What services may be: each loaded backend's bundle format, with the field that names its clusters. */
    const offers = (): Offer[] => core.backends().flatMap((b) => (b.bundles ? [{ target: core.naming(b.name).field, format: b.bundles }] : []));
    /** A service's format, by the name its record keeps (null: its backend is no longer loaded). */
    const formatNamed = (name: string) => offers().find((o) => o.format.name === name) ?? null;
    /** The format of a cluster's services; a 400 when its backend deploys none. */
    function formatOf(cluster: ClusterRecord, field: ClusterField): BundleFormat {
      const format = core.backend(cluster.backend).bundles;
      if (!format) throw badRequest(`Validation failed: body.${field} names ${core.nounOf(cluster)} ${cluster.name}, which runs no services`);
      return format;
    }
    /** A service's format, for work on it; an Error when its backend is no longer loaded. */
    function requireFormat(service: Pick<ServiceRecord, 'backend' | 'name'>): BundleFormat {
      const offer = formatNamed(service.backend);
      if (!offer) throw new Error(`service ${service.name} is a ${service.backend} bundle, and no loaded backend deploys ${service.backend} bundles`);
      return offer.format;
    }

    /**
     * Where a new service of a format with namespaces goes on this cluster: its project's namespace
     * (null without projects, or for a format without namespaces: the driver's own).
     */
    async function namespaceFor(format: BundleFormat, cluster: ClusterRecord): Promise<string | null> {
      const project = format.namespaceOf && cluster.project_id ? await projects()?.find(cluster.project_id) : null;
      return project ? format.namespaceOf!(project) : null;
    }
    /** A service's placement in its bundle calls: its namespace, and whether it acts as the project's account there. */
    const placementOf = (service: ServiceRecord) => (service.namespace ? { namespace: service.namespace, confined: !!service.confined } : {});

    function view(s: ServiceRecord) {
      const offer = formatNamed(s.backend);
      return {
        id: s.id,
        name: s.name,
        backend: s.backend,
        [offer?.target ?? 'cluster_id']: s.cluster_id,
        [offer?.format.field ?? 'spec']: s.spec,
        ...(offer?.format.appliedObjects ? { applied_objects: s.applied_objects ?? [] } : {}),
        ...(offer?.format.namespaceOf ? { namespace: s.namespace ?? null, confined: !!s.confined } : {}),
        stack: stackOf(s),
        status: s.status,
        error: s.error,
        replicas: s.replicas,
        routes: s.routes,
        secret_refs: s.secret_refs,
        config_refs: s.config_refs,
        health: s.health ?? null,
        pinned_objects: s.pinned_objects ?? [],
        halted_rollouts: s.halted_rollouts ?? {},
        observed_at: s.observed_at,
        created_at: s.created_at,
        updated_at: s.updated_at,
      };
    }

    /**
     * A service's spec, read by its format and checked (400 on any problem), as the record and the
     * deploy need it: the parts and their replicas, routes, the hangar secrets and configs it uses
     * at their current versions, and the bundle call's objects and routed parts. What asks the
     * machines for more than a project's workload gets (the format's privilege check) is refused
     * unless `installationAdmin` (the caller is one with all its power: core/auth/permissions.ts
     * unlimitedAdmin); a stored spec was checked against its caller when it was accepted. `pins`:
     * the earlier object versions to use instead of the current ones (`restored` answers those used),
     * their runtime objects made again when `deploy`.
     */
    async function prepareSpec(format: BundleFormat, text: string, name: string, cluster: ClusterRecord, installationAdmin: boolean, namespace: string | null, pins: RevisionObject[] = [], deploy = false) {
      const parsed = format.parse(text, { bundle: stackOf({ name }), defaultDomain: (part) => `${part}.${name}.${cluster.name}.${core.settings.localDomain}`, installationAdmin, namespace });
      const restored: RevisionObject[] = [];
      const resolved = await resolveObjects(parsed, resolver(cluster.id, format, pins, deploy, restored), { noun: core.nounOf(cluster), field: format.field });
      return {
        restored,
        desired: parsed.desired,
        routes: parsed.routes,
        secret_refs: refs(resolved, 'secret'),
        config_refs: refs(resolved, 'config'),
        objects: parsed.objects.map((o) => ({ kind: o.kind, key: o.key, name: resolved.get(`${o.kind}:${o.key}`)!.runtime_name })),
        routed: parsed.routes.map((r) => r.service),
        versions: versionsOf(resolved),
      };
    }

    /** The secret and config versions a spec uses now, as its revision keeps them (by object, in a stable order). */
    const versionsOf = (resolved: Map<string, ResolvedObject>): RevisionObject[] =>
      [...new Map([...resolved.entries()].map(([key, o]) => [o.id, { kind: key.split(':')[0] as ObjectKind, id: o.id, name: o.name, version: o.version }])).values()].sort((a, b) =>
        `${a.kind}:${a.name}`.localeCompare(`${b.kind}:${b.name}`),
      );

    /** A revision's spec as a diff compares it: the YAML read as data under the format's field, and the object versions. */
    function diffable(service: ServiceRecord) {
      const field = formatNamed(service.backend)?.format.field ?? 'spec';
      return (r: RevisionRecord) => {
        const docs = parseAllDocuments(String(r.spec.spec ?? '')).map((d) => d.toJS({ maxAliasCount: 1000 }) as unknown);
        return { [field]: docs.length === 1 ? docs[0] : docs, health: r.spec.health, objects: objectVersions(r.objects) };
      };
    }
    /** What a diff never shows: the data of a manifest's objects (a Secret's values). */
    const hidden = (path: string[]) => path.length >= 3 && /^\d+$/.test(path[1]!) && (path[2] === 'data' || path[2] === 'stringData');

    /** Keeps a service's spec as a new revision (none when it equals the newest, unless a rollback). */
    const keepRevision = (service: ServiceRecord, text: string, health: PartHealth | null, versions: RevisionObject[], who: Principal | null, rollbackOf?: number) =>
      core.revisions.append('service', service.id, { spec: { spec: text, ...(health ? { health } : {}) }, objects: versions, principal: who, rollbackOf });

    const refs = (resolved: Map<string, ResolvedObject>, kind: ObjectKind) =>
      [...new Set([...resolved.entries()].filter(([key]) => key.startsWith(`${kind}:`)).map(([, o]) => o.id))].sort();

    /** 409 when another workload on the cluster (not this service) already answers for one of these domains. */
    const checkDomains = (clusterId: string, routes: ServiceRoute[], self: string | null) =>
      requireDomainsFree(services, clusterId, routes.map((r) => r.domain), self ? { source: 'service', id: self } : undefined);

    /** Removes the stack from its cluster; a cluster without a manager (or gone) has nothing left to remove. */
    async function removeStack(service: ServiceRecord): Promise<void> {
      const cluster = await core.clusters.get(service.cluster_id);
      if (!cluster?.manager_node_id) return;
      await core.callOn(cluster, RemoveBundle, { name: stackOf(service), ...placementOf(service) });
    }

    const lifecycle = core.lifecycle(
      store,
      defineLifecycle<ServiceRecord, WorkloadState[]>({
        noun: 'service',
        operations: {
          // The stored spec, with the current version of every secret and config it names; prune removes services no longer in it.
          deploy: {
            from: ['deploying', 'running', 'stopped', 'failed'],
            during: 'deploying',
            joins: true,
            label: (s) => `deploy service ${s.name}`,
            async run(service) {
              try {
                const cluster = await core.requireActive(service.cluster_id);
                const format = requireFormat(service);
                // The stored spec: checked against its caller's rights when it was accepted.
                const spec = await prepareSpec(format, service.spec, service.name, cluster, true, service.namespace ?? null, service.pinned_objects ?? [], true);
                const health = service.health && Object.keys(service.health).length ? { health: service.health } : {};
                // A service in its project's namespace: the driver makes the namespace, labelled with the project, on first use.
                const project = service.namespace && cluster.project_id ? await projects()?.find(cluster.project_id) : null;
                const placement = { ...placementOf(service), ...(project ? { project: { id: project.id, name: project.name } } : {}) };
                const state = await core.callOn(cluster, DeployBundle, { name: stackOf(service), spec: service.spec, objects: spec.objects, routed: spec.routed, ...health, ...placement, prune: true });
                // A format whose deploy answers the objects it applied (manifests): what is pruned against and deleted.
                const applied = (state as { applied_objects?: ServiceRecord['applied_objects'] }).applied_objects;
                return {
                  status: 'running',
                  error: null,
                  secret_refs: spec.secret_refs,
                  config_refs: spec.config_refs,
                  replicas: replicasOf(stackOf(service), spec.desired, state.services ?? []),
                  ...(format.appliedObjects ? { applied_objects: applied ?? [] } : {}),
                  observed_at: now(),
                };
              } finally {
                routesChanged(service.cluster_id);
              }
            },
            failed: (_s, err) => ({ status: 'failed', error: `deploying failed: ${err.message}` }),
          },
          // The stack leaves the cluster; the spec stays for the next start.
          stop: {
            from: ['running', 'failed'],
            label: (s) => `stop service ${s.name}`,
            async run(service) {
              await removeStack(service);
              routesChanged(service.cluster_id);
              const zero = Object.fromEntries(Object.entries(service.replicas).map(([key, r]) => [key, { desired: r.desired, running: 0 }]));
              return { status: 'stopped', error: null, replicas: zero, halted_rollouts: null };
            },
            failed: (s) => ({ status: s.status }),
          },
          // Each part to the replicas its record asks for (a volume's restore scales the parts mounting it to 0 and back), answered once those at 0 run no task.
          scale: {
            from: ['running', 'failed'],
            label: (s) => `scale service ${s.name}`,
            async run(service, { signal }) {
              const cluster = await core.requireActive(service.cluster_id);
              const stack = stackOf(service);
              const desired = Object.fromEntries(Object.entries(service.replicas).map(([key, r]) => [key, r.desired]));
              const inspect = async () => (await core.callOn(cluster, InspectWorkloads, { stacks: [stack] })).workloads.filter((w) => w.stack === stack && w.component);
              for (const w of await inspect()) {
                const want = desired[w.component!];
                if (typeof want === 'number' && w.replicas !== want) await core.callOn(cluster, ScaleWorkload, { name: w.name, replicas: want });
              }
              const workloads = await untilScaledDown(inspect, (w) => desired[w.component!] === 0, signal);
              return { replicas: replicasOf(stack, desired, workloads), observed_at: now() };
            },
            failed: (s, err) => ({ status: s.status, error: `scaling failed: ${err.message}` }),
          },
          remove: {
            from: '*',
            during: 'removing',
            preempts: true,
            label: (s) => `remove service ${s.name}`,
            async run(service) {
              await removeStack(service);
              await kind.forget(service.id);
              routesChanged(service.cluster_id);
              return REMOVED;
            },
            failed: (_s, err) => ({ status: 'failed', error: `removing failed: ${err.message}` }),
          },
        },
        // Replica counts and halted rollouts per compose service, as the cluster reports them (a stopped or removing one has none to report).
        reconcile(s, workloads) {
          if (s.status === 'stopped' || s.status === 'removing') return null;
          const stack = stackOf(s);
          const desired = Object.fromEntries(Object.entries(s.replicas).map(([key, r]) => [key, r.desired]));
          const replicas = replicasOf(stack, desired, workloads.filter((w) => w.stack === stack));
          const halted = haltedRollouts(stack, workloads);
          const same = JSON.stringify(replicas) === JSON.stringify(s.replicas) && JSON.stringify(halted) === JSON.stringify(s.halted_rollouts ?? {});
          return same ? null : { replicas, halted_rollouts: halted, observed_at: now() };
        },
      }),
    );

    async function routesOn(clusterId: string, keep: (s: ServiceRecord) => boolean): Promise<Route[]> {
      const cluster = await core.clusters.get(clusterId);
      if (!cluster) return [];
      return (await store.findAll({ cluster_id: clusterId }))
        .filter(keep)
        .flatMap((s) => s.routes.map((r) => ({ domain: r.domain, service: core.componentAddress(cluster, stackOf(s), r.service), port: r.port, source: 'service', source_id: s.id })));
    }
    const api: ServicesApi = {
      get: (id) => store.get(id),
      routes: (clusterId) => routesOn(clusterId, (s) => s.status !== 'stopped' && s.status !== 'removing'),
      // A stopped service keeps its domains for its next start.
      claims: (clusterId) => routesOn(clusterId, (s) => s.status !== 'removing'),
    };
    services.provided.provide(ServicesRef, api);
    services.provided.contribute(ScopeResolvers, tableResolver('service', () => services.db.knex, SERVICES, { via: 'cluster_id' }));
    const kind = defineWorkloadKind(services, {
      type: 'service',
      store,
      lifecycle,
      removeRuntime: removeStack,
      removed: (service) => routesChanged(service.cluster_id),
      // Replica counts per part, from every workload of the cluster (reconcile picks its stack's).
      observed: (_service, { workloads }) => workloads,
      resolve: async (ref) => (await store.findByIdOrName(ref))?.id ?? null,
      routes: { source: 'service', routes: api.routes, claims: api.claims },
      runtime: (service) => ({ stacks: [stackOf(service)] }),
      volumeUsers: async (volumeId) => {
        const volume = await volumeNamed(volumeId);
        if (!volume) return [];
        return (await store.findAll()).filter((s) => mountsOf(s, volume).parts.length).map((s) => ({ type: 'service', id: s.id, name: s.name, cluster_id: s.cluster_id }));
      },
    });

    /** A volume's name in the runtime (null without the volumes plugin: no volume to mount). */
    const volumeNamed = async (volumeId: string) => {
      const volumes = services.provided.find(VolumesRef);
      return volumes ? runtimeVolumeName(await volumes.require(volumeId)) : null;
    };
    /** The parts of a service that mount a named volume, from its stored spec, and the replicas the spec gives each part (null: one per node). */
    function mountsOf(service: ServiceRecord, volumeName: string) {
      const format = formatNamed(service.backend)?.format;
      if (!format) return { parts: [], desired: {} };
      // The stored spec: checked against its caller's rights when it was accepted.
      const parsed = format.parse(service.spec, { bundle: stackOf(service), defaultDomain: (part) => `${part}.${service.name}.invalid`, installationAdmin: true, namespace: service.namespace ?? null });
      return { parts: Object.entries(parsed.mounts ?? {}).flatMap(([part, names]) => (names.includes(volumeName) ? [part] : [])), desired: parsed.desired };
    }
    /**
     * A service that may run tasks and its parts that mount the volume, or null (gone, stopped or
     * going, none mounts it). One being deployed counts: its scale is refused while the deploy holds
     * it (409), never skipped while its tasks write.
     */
    async function runningMounts(id: string, volumeId: string) {
      const [service, volume] = await Promise.all([store.get(id), volumeNamed(volumeId)]);
      if (!service || !volume || service.status === 'stopped' || service.status === 'removing') return null;
      const mounts = mountsOf(service, volume);
      return mounts.parts.length ? { service, ...mounts } : null;
    }
    /** The replicas a service's parts that mount the volume are asked for, together. */
    const desiredOf = (found: { service: ServiceRecord; parts: string[] }) => found.parts.reduce((sum, part) => sum + (found.service.replicas[part]?.desired ?? 0), 0);
    /** Scales the parts of a service to `to(part)` and answers once settled there (409 while another operation holds it). */
    async function scaleParts(service: ServiceRecord, parts: string[], to: (part: string) => number) {
      const replicas = Object.fromEntries(Object.entries(service.replicas).map(([key, r]) => [key, parts.includes(key) ? { ...r, desired: to(key) } : r]));
      const done = await lifecycle.runNow(service.id, 'scale', { replicas });
      if (!done) throw refused(await store.get(service.id));
    }
    /**
     * A restore of a volume (or its backup with consistency stop): only the parts of a compose
     * stack that mount it are scaled to zero, each waited for until it runs no task, and brought
     * back after to the replicas the compose file gives them. A part in global mode (one task per
     * node) cannot be scaled: a 409 before anything of the service is stopped.
     */
    services.provided.contribute(VolumeUserStoppers, {
      type: 'service',
      async replicas(id, volumeId) {
        const found = await runningMounts(id, volumeId);
        return (found && desiredOf(found)) || null;
      },
      async stop(id, volumeId) {
        const found = await runningMounts(id, volumeId);
        const had = found && desiredOf(found);
        if (!found || !had) return null;
        const global = found.parts.filter((part) => found.desired[part] === null);
        if (global.length) throw conflict(`Service ${found.service.name} mounts the volume in ${global.join(', ')}, which run one task per node (global mode) and cannot be scaled to zero: stop the service first`);
        await scaleParts(found.service, found.parts, () => 0);
        return had;
      },
      async start(id, _replicas, volumeId) {
        // A service stopped or removed meanwhile: its next start deploys its compose file as it is.
        const found = await runningMounts(id, volumeId);
        if (found) await scaleParts(found.service, found.parts, (part) => found.desired[part] ?? 0);
      },
    });

    services.provided.contribute(SecretUsersPoint, {
      usersOf: async (kind, objectIds) =>
        new Map(
          [...(await store.using(kind, objectIds))].map(([id, using]) => [
            id,
            using.map((s) => {
              const pin = (s.pinned_objects ?? []).find((p) => p.kind === kind && p.id === id);
              return { id: s.id, name: s.name, ...(pin ? { pinned: pin.version } : {}) };
            }),
          ]),
        ),
      // A rotation: the stack is deployed again with the objects' current versions (a stopped one picks them up on start),
      // the rotated one's current version also where a rollback had restored an earlier one.
      async redeploy(serviceId, object) {
        let service = await store.get(serviceId);
        if (!service) return;
        const pinned = service.pinned_objects ?? [];
        const unpinned = pinned.filter((p) => !(p.kind === object.kind && p.id === object.id));
        if (unpinned.length !== pinned.length) service = await store.change(serviceId, { pinned_objects: unpinned });
        if (!['running', 'failed', 'deploying'].includes(service.status)) return;
        const after = await lifecycle.runNow(serviceId, 'deploy');
        if (after?.status === 'failed') throw new Error(after.error ?? 'its deploy failed');
      },
    });


    const refused = (s: ServiceRecord | null) => conflict(s ? `Service ${s.name} changed state meanwhile (it is ${s.status}); try again` : 'The service is gone');

    /** The service for a lifecycle request: 409 while another step is under way. */
    async function requireSettled(idOrName: string, action: string): Promise<ServiceRecord> {
      const service = await store.require(idOrName);
      if (service.status === 'deploying' || service.status === 'removing') {
        throw conflict(`Service ${service.name} is ${service.status}; ${action} it once that has finished`);
      }
      return service;
    }

    /**
     * A create's or replace's body: `name`, and for each loaded backend that runs services the
     * field naming its clusters and its bundle format's field (swarm_id and compose_file…).
     */
    function bodySchema(name: Record<string, TSchema>) {
      const fields: Record<string, TSchema> = { ...name };
      for (const { target, format } of offers()) {
        const deploys = offers().filter((o) => o.target === target).map((o) => o.format.field);
        fields[target] ??= Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: `the ${FIELD_NOUNS[target]} to deploy to (id or name), with ${alternatives(deploys)}` }));
        fields[format.field] = Type.Optional(format.schema);
      }
      fields.health = Type.Optional(
        Type.Union([Type.Record(Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]*$' }), HealthSpec), Type.Null()], {
          description: 'health checks by part (a compose service, a Deployment of the manifest), over the bundle’s own; on a PUT, left out keeps those declared, null clears them',
        }),
      );
      return Type.Object(fields, { additionalProperties: false });
    }

    /**
     * A new spec for a service (PUT, rollback): checked, kept as a revision, deployed (a stopped
     * service keeps it for its start). A rollback's `pins` are its revision's object versions.
     */
    async function replace(current: ServiceRecord, format: BundleFormat, cluster: ClusterRecord, text: string, declared: PartHealth | null | undefined, who: Principal | null, rollback?: { of: number; pins: RevisionObject[] }) {
      const rollbackOf = rollback?.of;
      const admin = unlimitedAdmin(who);
      // Made before project namespaces: it stays in `default` (never moved: a move deletes its objects, claims' data with them), where only admins apply.
      if (!admin && format.namespaceOf && !current.namespace && (await namespaceFor(format, cluster))) {
        throw conflict(
          `Service ${current.name} was made before project namespaces and stays in namespace default, where only installation admins apply manifests: ask one to change it, or delete it and create it again to have it in ${await namespaceFor(format, cluster)}`,
        );
      }
      const parsed = await prepareSpec(format, text, current.name, cluster, admin, current.namespace ?? null, rollback?.pins ?? []);
      const parts = Object.keys(parsed.desired);
      // Not given: the checks declared so far, for the parts the new spec still has.
      const kept = declared === undefined ? Object.fromEntries(Object.entries(current.health ?? {}).filter(([part]) => parts.includes(part))) : declared;
      const health = checkPartHealth(kept, parts, format.field);
      await checkDomains(cluster.id, parsed.routes, current.id);
      const patch = {
        spec: text,
        confined: !admin && !!current.namespace,
        health,
        secret_refs: parsed.secret_refs,
        config_refs: parsed.config_refs,
        replicas: baseline(parsed, current.replicas),
        routes: parsed.routes,
        pinned_objects: parsed.restored,
      };
      if (current.status === 'stopped') {
        const changed = await store.change(current.id, { ...patch, op_rev: current.op_rev + 1 });
        await keepRevision(current, text, health, parsed.versions, who, rollbackOf);
        return view(changed);
      }
      const deploying = await lifecycle.start(current.id, 'deploy', { ...patch, error: null }, refused, rollbackOf === undefined ? `redeploy service ${current.name}` : `roll back service ${current.name} to revision ${rollbackOf}`);
      await keepRevision(current, text, health, parsed.versions, who, rollbackOf);
      return Reply.accepted(view(deploying));
    }

    const baseline = (parsed: { desired: Record<string, number | null> }, previous: ServiceRecord['replicas'] = {}) =>
      Object.fromEntries(Object.entries(parsed.desired).map(([key, desired]) => [key, { desired, running: previous[key]?.running ?? 0 }]));

    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/services',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'cluster', from: 'body.swarm_id', noun: 'swarm' }, { kind: 'cluster', from: 'body.cluster_id', noun: 'cluster' }] },
          summary: 'Create a service: a compose stack on a swarm, or a manifest on a Kubernetes cluster (202 while it deploys)',
          description:
            'Body: `name`, `swarm_id` and `compose_file` (the YAML, base64). Everything is checked before anything is deployed: ' +
            'YAML syntax (400 naming the line), a non-empty services map with an image each, secrets and configs that name hangar objects of the swarm, ' +
            'and the `x-hangar: {domain, port}` routing extension; from anyone but an installation admin, nothing that asks the machines for more than a workload ' +
            '(a bind mount of a host path, a privileged container, the host\'s namespaces; a cluster-scoped, RBAC or other namespace\'s object, a hostPath: a 400 naming each). Or `name`, `cluster_id` and `manifest` (multi-document YAML, base64): every document a Kubernetes object, ' +
            'applied server-side by the field manager hangar (a field another manager owns fails the deploy, naming it); `applied_objects` lists what it made, ' +
            'a PUT prunes what the new manifest lacks, stop and delete delete them.',
          status: 202,
          schemas: { body: bodySchema({ name: DnsName }), response: Service },
          handler: async (req) => {
            const body = req.body as ServiceBody & { name: string };
            const input = specInput(offers(), body, false);
            const { field, ref } = input.target!;
            const cluster = await core.requireTarget({ [field]: ref });
            const format = formatOf(cluster, field);
            if (input.format && input.format !== format) throw badRequest(`Validation failed: body.${input.format.field} does not fit ${core.nounOf(cluster)} ${cluster.name}: its services are ${format.field}`);
            if (input.text === undefined) throw required(format.field);
            const text = input.text;
            if (await store.findOne({ name: body.name })) throw conflict(`A service named ${body.name} exists`);
            const admin = unlimitedAdmin(req.principal);
            const namespace = await namespaceFor(format, cluster);
            const parsed = await prepareSpec(format, text, body.name, cluster, admin, namespace);
            const health = checkPartHealth((req.body as { health?: PartHealth | null }).health ?? null, Object.keys(parsed.desired), format.field);
            await checkDomains(cluster.id, parsed.routes, null);
            let record: ServiceRecord;
            try {
              record = await store.insert({
                id: newId('svc'),
                name: body.name,
                backend: format.name,
                cluster_id: cluster.id,
                spec: text,
                status: 'deploying',
                error: null,
                secret_refs: parsed.secret_refs,
                config_refs: parsed.config_refs,
                applied_objects: format.appliedObjects ? [] : null,
                namespace,
                confined: !admin && namespace !== null,
                replicas: baseline(parsed),
                routes: parsed.routes,
                health,
                observed_at: null,
                created_at: now(),
                updated_at: now(),
              });
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`A service named ${body.name} exists`);
              throw err;
            }
            const deploying = await lifecycle.start(record.id, 'deploy', {}, refused, `deploy service ${record.name}`);
            await keepRevision(record, text, health, parsed.versions, req.principal);
            return view(deploying);
          },
        }),
        ...readRoutes({
          path: '/v1/services',
          summaries: { list: 'List services', get: 'Get a service: its compose file (YAML text), status, replicas per compose service, routes' },
          page: (options) => store.page(options),
          find: (id) => store.require(id),
          view,
          response: Service,
          scope: { kind: 'service' },
        }),
        defineRoute({
          method: 'PUT',
          path: '/v1/services/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'service', from: 'params.id' }] },
          summary: 'Replace the compose file and redeploy (services no longer in it are removed); a stopped service keeps it for its next start',
          otherStatuses: [202],
          schemas: { params: IdParams, body: bodySchema({ name: Type.Optional(DnsName) }), response: Service },
          handler: async (req) => {
            const current = await requireSettled(req.params.id, 'replace');
            const body = req.body as ServiceBody;
            const input = specInput(offers(), body, true);
            if (body.name !== undefined && body.name !== current.name) throw badRequest('Validation failed: a service cannot be renamed (body.name differs)');
            const format = requireFormat(current);
            if (input.format !== format) throw input.format ? badRequest(`Validation failed: service ${current.name} is a ${format.describes}; give its ${format.field}`) : required(format.field);
            const cluster = await core.requireActive(current.cluster_id);
            const target = input.target?.ref;
            if (target !== undefined && target !== cluster.id && target !== cluster.name) {
              throw badRequest(`Validation failed: a service cannot move to another ${core.nounOf(cluster)} (body.${input.target!.field} differs)`);
            }
            return replace(current, format, cluster, input.text!, (req.body as { health?: PartHealth | null }).health, req.principal);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/services/{id}/revisions',
          auth: 'authenticated',
          scope: { of: [{ kind: 'service', from: 'params.id' }] },
          summary: 'A service’s kept spec revisions, newest first: number, time, who, the secret and config versions used, and what changed against the revision before (JSON paths of the YAML read as data; a manifest object’s data is never shown)',
          schemas: { params: IdParams, response: RevisionList },
          handler: async (req) => {
            const service = await store.require(req.params.id);
            return revisionsView(core.revisions, 'service', service.id, diffable(service), hidden);
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/services/{id}/rollback',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'service', from: 'params.id' }] },
          summary: 'Roll a kept revision out again (202; a stopped service keeps it for its next start): its compose file or manifest becomes a new revision, checked and deployed as a PUT is, with the secret and config versions the revision used; 404 for a revision not kept, 409 while the service deploys or is removed, or naming a secret or config version no longer kept',
          otherStatuses: [202],
          schemas: { params: IdParams, body: RollbackBody, response: Service },
          handler: async (req) => {
            const current = await requireSettled(req.params.id, 'roll back to a revision of');
            const revision = await core.revisions.require('service', current, req.body.revision);
            const format = requireFormat(current);
            const cluster = await core.requireActive(current.cluster_id);
            return replace(current, format, cluster, String(revision.spec.spec), (revision.spec.health as PartHealth | undefined) ?? null, req.principal, { of: revision.number, pins: revision.objects });
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/services/{id}/stop',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'service', from: 'params.id' }] },
          summary: 'Stop a service: its stack is removed from the swarm, its spec kept',
          schemas: { params: IdParams, response: Service },
          handler: async (req) => {
            const current = await requireSettled(req.params.id, 'stop');
            if (current.status === 'stopped') return view(current);
            const stopped = await lifecycle.runNow(current.id, 'stop').catch((err) => {
              throw asHttpError(err, `Stopping service ${current.name}`);
            });
            if (!stopped) throw refused(await store.get(current.id));
            return view(stopped);
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/services/{id}/start',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'service', from: 'params.id' }] },
          summary: 'Start a stopped (or failed) service: deploys its spec again (202)',
          status: 202,
          schemas: { params: IdParams, response: Service },
          handler: async (req) => {
            const current = await requireSettled(req.params.id, 'start');
            if (current.status === 'running') throw conflict(`Service ${current.name} is running; replace its spec with PUT to redeploy it`);
            await core.requireActive(current.cluster_id);
            return view(await lifecycle.start(current.id, 'deploy', { error: null }, refused, `start service ${current.name}`));
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/services/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'service', from: 'params.id' }] },
          summary: 'Delete a service: its stack is removed from the swarm, then the record (202)',
          status: 202,
          schemas: { params: IdParams, response: Service },
          handler: async (req) => {
            const current = await store.require(req.params.id);
            if (current.status === 'removing') return view(current);
            const removing = await lifecycle.start(current.id, 'remove', {}, refused);
            routesChanged(current.cluster_id);
            return view(removing);
          },
        }),
        ...workloadLogRoutes({
          path: '/v1/services/{id}',
          kind: 'service',
          permission: 'services:logs',
          summaries: {
            queue: 'Fetch the stack’s logs (all its services, in time order): 202 with a task id; read the lines once from GET …/logs/{taskId}',
            read: 'Read a log fetch: its status, and its lines once done (handed over once, then deleted)',
          },
          async queue(id, range) {
            const service = await store.require(id);
            if (service.status === 'stopped') throw conflict(`Service ${service.name} is stopped: its stack and logs are gone from the swarm`);
            return core.queueLogs(await core.requireActive(service.cluster_id), BundleLogs, stackOf(service), range, service.id, placementOf(service));
          },
          subject: async (id) => (await store.require(id)).id,
          clusters: core,
        }),
      ],
    };
  },
});

export { ServicesRef, type ServicesApi } from './api.js';
