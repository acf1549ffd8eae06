import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { badRequest, conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { BundleLogs, DeployBundle, HANGAR_STACK_PREFIX, RemoveBundle, type Route, type WorkloadState } from '../../core/orchestrator.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin } from '../../core/plugin.js';
import { DnsName, IdParams, readRoutes } from '../../core/http/resources.js';
import { asHttpError, ClusterObservers, ClusterWorkloads } from '../../core/clusters/service.js';
import { requireDomainsFree, RouteSources } from '../../core/clusters/routes.js';
import { nounOf, type ClusterRecord } from '../../core/clusters/store.js';
import { defineLifecycle, REMOVED } from '../../core/lifecycle.js';
import { TaggableResources } from '../tags/index.js';
import { SecretsRef, SecretUsersPoint, type ObjectKind, type ResolvedObject } from '../secrets/api.js';
import { ServicesRef, type ServicesApi } from './api.js';
import { decodeBase64Text, decodeComposeFile, parseCompose, resolveObjects, type ParsedCompose } from './compose.js';
import { parseManifest } from './manifest.js';
import { serviceMigrations } from './migrations.js';
import { ServiceStore, type ServiceRecord, type ServiceRoute } from './store.js';

const ComposeFile = Type.String({ minLength: 1, maxLength: 1_000_000, description: 'the compose YAML, base64-encoded' });
const Manifest = Type.String({ minLength: 1, maxLength: 1_000_000, description: 'the Kubernetes manifest (multi-document YAML), base64-encoded' });
const CreateBody = Type.Object(
  {
    name: DnsName,
    swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'compose backend: the swarm to deploy the stack to' })),
    compose_file: Type.Optional(ComposeFile),
    cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'manifest backend: the Kubernetes cluster to apply the manifest to' })),
    manifest: Type.Optional(Manifest),
  },
  { additionalProperties: false },
);
const ReplaceBody = Type.Object(
  {
    compose_file: Type.Optional(ComposeFile),
    name: Type.Optional(DnsName),
    swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    manifest: Type.Optional(Manifest),
  },
  { additionalProperties: false },
);
const LogsQuery = Type.Object(
  {
    lines: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000, default: 100, description: 'last lines (over all services of the stack)' })),
    since: Type.Optional(Type.String({ format: 'date-time', description: 'only lines from this time on (RFC 3339)' })),
  },
  { additionalProperties: false },
);
const LogParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }), taskId: Type.String({ minLength: 1, maxLength: 100 }) });
const Service = Type.Object({}, { additionalProperties: true });

interface CreateInput {
  name: string;
  swarm_id?: string;
  compose_file?: string;
  cluster_id?: string;
  manifest?: string;
}

/** What a service is, from the body: a compose stack on a swarm, or a manifest on a Kubernetes cluster. */
type SpecInput = { backend: 'compose'; swarm_id?: string; text: string } | { backend: 'manifest'; cluster_id?: string; text: string };

function specInput(body: Omit<CreateInput, 'name'>, replacing: boolean): SpecInput {
  const compose = body.swarm_id !== undefined || body.compose_file !== undefined;
  const k8s = body.cluster_id !== undefined || body.manifest !== undefined;
  const both = 'give either swarm_id and compose_file (a compose stack on a swarm) or cluster_id and manifest (Kubernetes)';
  if (compose && k8s) throw badRequest(`Validation failed: ${both}, not both`);
  if (!compose && !k8s) throw badRequest(`Validation failed: ${both}`);
  const field = compose ? 'compose_file' : 'manifest';
  const target = compose ? 'swarm_id' : 'cluster_id';
  const text = compose ? body.compose_file : body.manifest;
  if (text === undefined) throw badRequest(`Validation failed: body.${field} is required`, [{ path: `body.${field}`, message: 'is required' }]);
  if (!replacing && body[target] === undefined) throw badRequest(`Validation failed: body.${target} is required`, [{ path: `body.${target}`, message: 'is required' }]);
  return compose ? { backend: 'compose', swarm_id: body.swarm_id, text: decodeComposeFile(text) } : { backend: 'manifest', cluster_id: body.cluster_id, text: decodeBase64Text(text, 'manifest') };
}

export const stackOf = (service: Pick<ServiceRecord, 'name'>) => `${HANGAR_STACK_PREFIX}${service.name}`;

function view(s: ServiceRecord) {
  const spec =
    s.backend === 'manifest'
      ? { cluster_id: s.cluster_id, manifest: s.spec, applied_objects: s.applied_objects ?? [] }
      : { swarm_id: s.cluster_id, compose_file: s.spec };
  return {
    id: s.id,
    name: s.name,
    backend: s.backend,
    ...spec,
    stack: stackOf(s),
    status: s.status,
    error: s.error,
    replicas: s.replicas,
    routes: s.routes,
    secret_refs: s.secret_refs,
    config_refs: s.config_refs,
    observed_at: s.observed_at,
    created_at: s.created_at,
    updated_at: s.updated_at,
  };
}

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

export default definePlugin({
  name: 'services',
  description: 'services: compose stacks on swarms (hangar secrets and configs, x-hangar routing, logs)',
  optionalDeps: [SecretsRef],
  provides: [ServicesRef],
  migrations: serviceMigrations,
  setup(services) {
    const { db, clock } = services;
    const core = services.clusters;
    const store = new ServiceStore(db, clock);
    // Secrets and configs in compose files need the secrets plugin; without it a file that uses them is refused.
    const secrets = services.provided.find(SecretsRef) ?? null;
    const now = () => clock.now().toISOString();
    const routesChanged = (clusterId: string) => services.events.publish('routes.changed', { clusterId });
    const forget = recordRemover(services.events, 'service', store);

    function resolver(clusterId: string) {
      return async (kind: ObjectKind, name: string): Promise<ResolvedObject | null> => {
        if (!secrets) throw badRequest(`Validation failed: the compose file uses ${kind}s, but the secrets plugin is not loaded`);
        return secrets.resolve(kind, clusterId, name);
      };
    }

    /** Parses, checks and resolves a compose file for the service `name` on `cluster` (400 on any problem). */
    async function prepare(text: string, name: string, cluster: ClusterRecord): Promise<{ parsed: ParsedCompose; resolved: Map<string, ResolvedObject> }> {
      const parsed = parseCompose(text, stackOf({ name }), (svc) => `${svc}.${name}.${cluster.name}.${core.settings.localDomain}`);
      return { parsed, resolved: await resolveObjects(parsed, resolver(cluster.id), nounOf(cluster).toLowerCase()) };
    }

    /**
     * A service's spec, checked (400 on any problem), as the record and the deploy need it: the
     * parts and their replicas, routes, the hangar secrets and configs it uses (compose), and the
     * bundle call's objects and routed parts. A manifest names its own Secrets and Ingresses.
     */
    async function prepareSpec(backend: ServiceRecord['backend'], text: string, name: string, cluster: ClusterRecord) {
      if (backend === 'manifest') {
        const manifest = parseManifest(text);
        return { desired: manifest.desired, routes: [] as ServiceRoute[], secret_refs: [] as string[], config_refs: [] as string[], objects: [], routed: [] as string[] };
      }
      const { parsed, resolved } = await prepare(text, name, cluster);
      return {
        desired: parsed.desired,
        routes: parsed.routes,
        secret_refs: refs(resolved, 'secret'),
        config_refs: refs(resolved, 'config'),
        objects: parsed.objects.map((o) => ({ kind: o.kind, key: o.key, name: resolved.get(`${o.kind}:${o.key}`)!.runtime_name })),
        routed: parsed.routes.map((r) => r.service),
      };
    }

    const refs = (resolved: Map<string, ResolvedObject>, kind: ObjectKind) =>
      [...new Set([...resolved.entries()].filter(([key]) => key.startsWith(`${kind}:`)).map(([, o]) => o.id))].sort();

    /** 409 when another workload on the cluster (not this service) already answers for one of these domains. */
    const checkDomains = (clusterId: string, routes: ServiceRoute[], self: string | null) =>
      requireDomainsFree(services, clusterId, routes.map((r) => r.domain), self ? { source: 'service', id: self } : undefined);

    /** Removes the stack from its cluster; a cluster without a manager (or gone) has nothing left to remove. */
    async function removeStack(service: ServiceRecord): Promise<void> {
      const cluster = await core.clusters.get(service.cluster_id);
      if (!cluster?.manager_node_id) return;
      await core.callOn(cluster, RemoveBundle, { name: stackOf(service) });
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
                const spec = await prepareSpec(service.backend, service.spec, service.name, cluster);
                const state = await core.callOn(cluster, DeployBundle, { name: stackOf(service), spec: service.spec, objects: spec.objects, routed: spec.routed, prune: true });
                // A manifest's bundle answers the objects it applied (what is pruned against and deleted).
                const applied = (state as { applied_objects?: ServiceRecord['applied_objects'] }).applied_objects;
                return {
                  status: 'running',
                  error: null,
                  secret_refs: spec.secret_refs,
                  config_refs: spec.config_refs,
                  replicas: replicasOf(stackOf(service), spec.desired, state.services ?? []),
                  ...(service.backend === 'manifest' ? { applied_objects: applied ?? [] } : {}),
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
              return { status: 'stopped', error: null, replicas: zero };
            },
            failed: (s) => ({ status: s.status }),
          },
          remove: {
            from: '*',
            during: 'removing',
            preempts: true,
            label: (s) => `remove service ${s.name}`,
            async run(service) {
              await removeStack(service);
              await forget(service.id);
              routesChanged(service.cluster_id);
              return REMOVED;
            },
            failed: (_s, err) => ({ status: 'failed', error: `removing failed: ${err.message}` }),
          },
        },
        // Replica counts per compose service, as the cluster reports them (a stopped or removing one has none to report).
        reconcile(s, workloads) {
          if (s.status === 'stopped' || s.status === 'removing') return null;
          const stack = stackOf(s);
          const desired = Object.fromEntries(Object.entries(s.replicas).map(([key, r]) => [key, r.desired]));
          const replicas = replicasOf(stack, desired, workloads.filter((w) => w.stack === stack));
          return JSON.stringify(replicas) === JSON.stringify(s.replicas) ? null : { replicas, observed_at: now() };
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
    services.provided.contribute(TaggableResources, { type: 'service', resolve: async (ref) => (await store.findByIdOrName(ref))?.id ?? null });
    services.provided.contribute(RouteSources, { source: 'service', routes: api.routes, claims: api.claims });

    services.provided.contribute(SecretUsersPoint, {
      usersOf: async (kind, objectIds) =>
        new Map([...(await store.using(kind, objectIds))].map(([id, using]) => [id, using.map((s) => ({ id: s.id, name: s.name }))])),
      // A rotation: the stack is deployed again with the objects' current versions (a stopped one picks them up on start).
      async redeploy(serviceId) {
        const service = await store.get(serviceId);
        if (!service || !['running', 'failed', 'deploying'].includes(service.status)) return;
        const after = await lifecycle.runNow(serviceId, 'deploy');
        if (after?.status === 'failed') throw new Error(after.error ?? 'its deploy failed');
      },
    });

    services.provided.contribute(ClusterWorkloads, {
      type: 'service',
      inCluster: async (clusterId) => (await store.findAll({ cluster_id: clusterId })).map((s) => ({ id: s.id, name: s.name })),
      forceRemove: async (id) => {
        const service = await store.get(id);
        if (!service) return false;
        await removeStack(service).catch(() => undefined);
        await forget(id);
        routesChanged(service.cluster_id);
        return true;
      },
    });

    services.provided.contribute(ClusterObservers, async ({ cluster, workloads }) => {
      for (const s of await store.findAll({ cluster_id: cluster.id })) await lifecycle.observe(s, workloads);
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

    const baseline = (parsed: { desired: Record<string, number | null> }, previous: ServiceRecord['replicas'] = {}) =>
      Object.fromEntries(Object.entries(parsed.desired).map(([key, desired]) => [key, { desired, running: previous[key]?.running ?? 0 }]));

    return {
      // Stack deploys (with prune) and removals are idempotent: an operation whose lease expired runs again.
      resume: () => lifecycle.takeOver({ everything: core.resumeEverything() }),
      routes: [
        {
          method: 'POST',
          path: '/v1/services',
          auth: { role: 'admin' },
          summary: 'Create a service: a compose stack on a swarm, or a manifest on a Kubernetes cluster (202 while it deploys)',
          description:
            'Body: `name`, `swarm_id` and `compose_file` (the YAML, base64). Everything is checked before anything is deployed: ' +
            'YAML syntax (400 naming the line), a non-empty services map with an image each, secrets and configs that name hangar objects of the swarm, ' +
            'and the `x-hangar: {domain, port}` routing extension. Or `name`, `cluster_id` and `manifest` (multi-document YAML, base64): every document a Kubernetes object, ' +
            'applied server-side by the field manager hangar (a field another manager owns fails the deploy, naming it); `applied_objects` lists what it made, ' +
            'a PUT prunes what the new manifest lacks, stop and delete delete them.',
          status: 202,
          schemas: { body: CreateBody, response: Service },
          handler: async (req) => {
            const body = req.body as CreateInput;
            const input = specInput(body, false);
            const cluster = await core.requireTarget(input);
            const text = input.text;
            if (await store.findOne({ name: body.name })) throw conflict(`A service named ${body.name} exists`);
            const parsed = await prepareSpec(input.backend, text, body.name, cluster);
            await checkDomains(cluster.id, parsed.routes, null);
            let record: ServiceRecord;
            try {
              record = await store.insert({
                id: newId('svc'),
                name: body.name,
                backend: input.backend,
                cluster_id: cluster.id,
                spec: text,
                status: 'deploying',
                error: null,
                secret_refs: parsed.secret_refs,
                config_refs: parsed.config_refs,
                applied_objects: input.backend === 'manifest' ? [] : null,
                replicas: baseline(parsed),
                routes: parsed.routes,
                observed_at: null,
                created_at: now(),
                updated_at: now(),
              });
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`A service named ${body.name} exists`);
              throw err;
            }
            return view(await lifecycle.start(record.id, 'deploy', {}, refused, `deploy service ${record.name}`));
          },
        },
        ...readRoutes({
          path: '/v1/services',
          summaries: { list: 'List services', get: 'Get a service: its compose file (YAML text), status, replicas per compose service, routes' },
          page: (options) => store.page(options),
          find: (id) => store.require(id),
          view,
          response: Service,
        }),
        {
          method: 'PUT',
          path: '/v1/services/{id}',
          auth: { role: 'admin' },
          summary: 'Replace the compose file and redeploy (services no longer in it are removed); a stopped service keeps it for its next start',
          otherStatuses: [202],
          schemas: { params: IdParams, body: ReplaceBody, response: Service },
          handler: async (req) => {
            const current = await requireSettled(req.params.id, 'replace');
            const body = req.body as Partial<CreateInput>;
            const input = specInput(body, true);
            if (body.name !== undefined && body.name !== current.name) throw badRequest('Validation failed: a service cannot be renamed (body.name differs)');
            if (input.backend !== current.backend) throw badRequest(`Validation failed: service ${current.name} is a ${current.backend === 'manifest' ? 'manifest on a Kubernetes cluster' : 'compose stack on a swarm'}; give its ${current.backend === 'manifest' ? 'manifest' : 'compose_file'}`);
            const cluster = await core.requireActive(current.cluster_id);
            const target = input.backend === 'compose' ? input.swarm_id : input.cluster_id;
            if (target !== undefined && target !== cluster.id && target !== cluster.name) {
              throw badRequest(`Validation failed: a service cannot move to another ${input.backend === 'compose' ? 'swarm (body.swarm_id differs)' : 'cluster (body.cluster_id differs)'}`);
            }
            const text = input.text;
            const parsed = await prepareSpec(current.backend, text, current.name, cluster);
            await checkDomains(cluster.id, parsed.routes, current.id);
            const patch = {
              spec: text,
              secret_refs: parsed.secret_refs,
              config_refs: parsed.config_refs,
              replicas: baseline(parsed, current.replicas),
              routes: parsed.routes,
            };
            if (current.status === 'stopped') return view(await store.change(current.id, { ...patch, op_rev: current.op_rev + 1 }));
            return Reply.accepted(view(await lifecycle.start(current.id, 'deploy', { ...patch, error: null }, refused, `redeploy service ${current.name}`)));
          },
        },
        {
          method: 'POST',
          path: '/v1/services/{id}/stop',
          auth: { role: 'admin' },
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
        },
        {
          method: 'POST',
          path: '/v1/services/{id}/start',
          auth: { role: 'admin' },
          summary: 'Start a stopped (or failed) service: deploys its spec again (202)',
          status: 202,
          schemas: { params: IdParams, response: Service },
          handler: async (req) => {
            const current = await requireSettled(req.params.id, 'start');
            if (current.status === 'running') throw conflict(`Service ${current.name} is running; replace its spec with PUT to redeploy it`);
            await core.requireActive(current.cluster_id);
            return view(await lifecycle.start(current.id, 'deploy', { error: null }, refused, `start service ${current.name}`));
          },
        },
        {
          method: 'DELETE',
          path: '/v1/services/{id}',
          auth: { role: 'admin' },
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
        },
        {
          method: 'POST',
          path: '/v1/services/{id}/logs',
          auth: { role: 'admin' },
          summary: 'Fetch the stack’s logs (all its services, in time order): 202 with a task id; read the lines once from GET …/logs/{taskId}',
          status: 202,
          schemas: { params: IdParams, query: LogsQuery },
          handler: async (req) => {
            const service = await store.require(req.params.id);
            if (service.status === 'stopped') throw conflict(`Service ${service.name} is stopped: its stack and logs are gone from the swarm`);
            return core.queueLogs(await core.requireActive(service.cluster_id), BundleLogs, stackOf(service), req.query, service.id);
          },
        },
        {
          method: 'GET',
          path: '/v1/services/{id}/logs/{taskId}',
          auth: { role: 'admin' },
          summary: 'Read a log fetch: its status, and its lines once done (handed over once, then deleted)',
          schemas: { params: LogParams },
          handler: async (req) => {
            return core.readLogs(req.params.taskId, (await store.require(req.params.id)).id);
          },
        },
      ],
    };
  },
});

export { ServicesRef, type ServicesApi } from './api.js';
