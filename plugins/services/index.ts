import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { badRequest, conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { HANGAR_STACK_PREFIX, type BundleState, type Route, type WorkloadState } from '../../core/orchestrator.js';
import { resumeByStatus } from '../../core/jobs.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin } from '../../core/plugin.js';
import { KeyedSerial } from '../../core/serial.js';
import { IdParams, readRoutes } from '../../core/http/resources.js';
import { asHttpError, swarmsOf } from '../swarms/index.js';
import { requireDomainsFree } from '../swarms/routes.js';
import { DnsName } from '../swarms/schemas.js';
import type { SwarmRecord } from '../swarms/store.js';
import { secretsOf, type ObjectKind, type ResolvedObject } from '../secrets/api.js';
import type { ServicesApi } from './api.js';
import { decodeComposeFile, EDGE_NETWORK, parseCompose, renderCompose, resolveObjects, type ParsedCompose } from './compose.js';
import { serviceMigrations } from './migrations.js';
import { ServiceStore, type ServiceRecord, type ServiceRoute } from './store.js';

const ComposeFile = Type.String({ minLength: 1, maxLength: 1_000_000, description: 'the compose YAML, base64-encoded' });
const CreateBody = Type.Object(
  {
    name: DnsName,
    swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'compose backend: the swarm to deploy the stack to' })),
    compose_file: Type.Optional(ComposeFile),
    cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Kubernetes backend (not available yet)' })),
    manifest: Type.Optional(Type.Unknown({ description: 'Kubernetes backend (not available yet)' })),
  },
  { additionalProperties: false },
);
const ReplaceBody = Type.Object(
  {
    compose_file: Type.Optional(ComposeFile),
    name: Type.Optional(DnsName),
    swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    manifest: Type.Optional(Type.Unknown()),
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
  manifest?: unknown;
}

/** The compose backend's input; the Kubernetes one (cluster_id + manifest) is refused for now. */
function composeInput(body: Omit<CreateInput, 'name'>, replacing: boolean): { swarm_id?: string; compose_file: string } {
  const compose = body.swarm_id !== undefined || body.compose_file !== undefined;
  const k8s = body.cluster_id !== undefined || body.manifest !== undefined;
  const both = 'give either swarm_id and compose_file (a compose stack on a swarm) or cluster_id and manifest (Kubernetes)';
  if (compose && k8s) throw badRequest(`Validation failed: ${both}, not both`);
  if (k8s) throw badRequest('Kubernetes clusters are not available yet');
  if (!compose) throw badRequest(`Validation failed: ${both}`);
  if (body.compose_file === undefined) throw badRequest('Validation failed: body.compose_file is required', [{ path: 'body.compose_file', message: 'is required' }]);
  if (!replacing && body.swarm_id === undefined) throw badRequest('Validation failed: body.swarm_id is required', [{ path: 'body.swarm_id', message: 'is required' }]);
  return { swarm_id: body.swarm_id, compose_file: body.compose_file };
}

export const stackOf = (service: Pick<ServiceRecord, 'name'>) => `${HANGAR_STACK_PREFIX}${service.name}`;

function view(s: ServiceRecord) {
  return {
    id: s.id,
    name: s.name,
    backend: s.backend,
    swarm_id: s.swarm_id,
    stack: stackOf(s),
    status: s.status,
    error: s.error,
    compose_file: s.spec,
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
  const byName = new Map(workloads.map((w) => [w.name, w]));
  return Object.fromEntries(
    Object.entries(desired).map(([key, want]) => {
      const w = byName.get(`${stack}_${key}`);
      return [key, w ? { desired: w.replicas, running: w.running } : { desired: want, running: 0 }];
    }),
  );
}

export default definePlugin({
  name: 'services',
  description: 'services: compose stacks on swarms (hangar secrets and configs, x-hangar routing, logs)',
  migrations: serviceMigrations,
  setup(services) {
    const { db, clock } = services;
    const swarmsApi = swarmsOf(services);
    const { swarms, jobs, onManager, settings } = swarmsApi;
    const store = new ServiceStore(db, clock);
    // Secrets and configs in compose files need the secrets plugin; without it a file that uses them is refused.
    const secrets = services.plugins.includes('secrets') ? secretsOf(services) : null;
    const now = () => clock.now().toISOString();
    const routesChanged = (swarmId: string) => services.events.publish('routes.changed', { swarmId });
    const forget = recordRemover(services.events, 'service', store);

    // One lifecycle step at a time per service (a deploy, a rotation's redeploy, a stop, a removal).
    const lifecycle = new KeyedSerial();
    const serial = <T>(id: string, work: () => Promise<T>) => lifecycle.run(id, work);

    function resolver(swarmId: string) {
      return async (kind: ObjectKind, name: string): Promise<ResolvedObject | null> => {
        if (!secrets) throw badRequest(`Validation failed: the compose file uses ${kind}s, but the secrets plugin is not loaded`);
        return secrets.resolve(kind, swarmId, name);
      };
    }

    /** Parses, checks and resolves a compose file for the service `name` on `swarm` (400 on any problem). */
    async function prepare(text: string, name: string, swarm: SwarmRecord): Promise<{ parsed: ParsedCompose; resolved: Map<string, ResolvedObject> }> {
      const parsed = parseCompose(text, stackOf({ name }), (svc) => `${svc}.${name}.${swarm.name}.${settings.local_domain}`);
      return { parsed, resolved: await resolveObjects(parsed, resolver(swarm.id)) };
    }

    const refs = (resolved: Map<string, ResolvedObject>, kind: ObjectKind) =>
      [...new Set([...resolved.entries()].filter(([key]) => key.startsWith(`${kind}:`)).map(([, o]) => o.id))].sort();

    /** 409 when another workload on the swarm (not this service) already answers for one of these domains. */
    const checkDomains = (swarmId: string, routes: ServiceRoute[], self: string | null) =>
      requireDomainsFree(services, swarmId, routes.map((r) => r.domain), self ? { source: 'service', id: self } : undefined);

    /** Deploys the stored spec of a service whose status is `deploying`; failure → status failed. */
    async function deploy(id: string): Promise<void> {
      const service = await store.get(id);
      if (!service || service.status !== 'deploying') return;
      try {
        const swarm = await swarms.requireActive(service.swarm_id);
        const { parsed, resolved } = await prepare(service.spec, service.name, swarm);
        if (parsed.routes.length) await onManager(swarm, 'ensureNetwork', [EDGE_NETWORK]);
        const state = await onManager<BundleState>(swarm, 'deployBundle', [stackOf(service), renderCompose(parsed, resolved), { prune: true }]);
        await store.changeIf(id, ['deploying'], {
          status: 'running',
          error: null,
          secret_refs: refs(resolved, 'secret'),
          config_refs: refs(resolved, 'config'),
          replicas: replicasOf(stackOf(service), parsed.desired, state.services ?? []),
          observed_at: now(),
        });
      } catch (err) {
        if (!jobs.stopping) await store.changeIf(id, ['deploying'], { status: 'failed', error: `deploying failed: ${(err as Error).message}` });
        throw err;
      } finally {
        routesChanged(service.swarm_id);
      }
    }

    function startDeploy(service: ServiceRecord, what: string): void {
      jobs.run(`${what} service ${service.name}`, () => serial(service.id, () => deploy(service.id)));
    }

    function startRemove(service: ServiceRecord): void {
      jobs.run(`remove service ${service.name}`, () => serial(service.id, () => remove(service.id)));
    }

    /** Removes the stack from its swarm; a swarm without a manager (or gone) has nothing left to remove. */
    async function removeStack(service: ServiceRecord): Promise<void> {
      const swarm = await swarms.get(service.swarm_id);
      if (!swarm?.manager_node_id) return;
      await onManager(swarm, 'removeBundle', [stackOf(service)]);
    }

    async function remove(id: string): Promise<void> {
      const service = await store.get(id);
      if (!service) return;
      try {
        await removeStack(service);
      } catch (err) {
        if (!jobs.stopping) await store.change(id, { status: 'failed', error: `removing failed: ${(err as Error).message}` });
        throw err;
      }
      await forget(id);
      routesChanged(service.swarm_id);
    }

    const routesOf = (s: ServiceRecord): Route[] =>
      s.routes.map((r) => ({ domain: r.domain, service: `${stackOf(s)}_${r.service}`, port: r.port, source: 'service', source_id: s.id }));
    const api: ServicesApi = {
      get: (id) => store.get(id),
      routes: async (swarmId) => (await store.findAll({ swarm_id: swarmId })).filter((s) => s.status !== 'stopped' && s.status !== 'removing').flatMap(routesOf),
      // A stopped service keeps its domains for its next start.
      claims: async (swarmId) => (await store.findAll({ swarm_id: swarmId })).filter((s) => s.status !== 'removing').flatMap(routesOf),
    };
    services.provided.set('services', api);

    secrets?.registerUsers({
      usersOf: async (kind, objectIds) =>
        new Map([...(await store.using(kind, objectIds))].map(([id, using]) => [id, using.map((s) => ({ id: s.id, name: s.name }))])),
      // A rotation: the stack is deployed again with the objects' current versions (a stopped one picks them up on start).
      redeploy: (serviceId) =>
        serial(serviceId, async () => {
          const service = await store.changeIf(serviceId, ['running', 'failed'], { status: 'deploying' });
          if (service) await deploy(service.id);
        }),
    });

    swarmsApi.registerWorkloads({
      type: 'service',
      inSwarm: async (swarmId) => (await store.findAll({ swarm_id: swarmId })).map((s) => ({ id: s.id, name: s.name })),
      forceRemove: async (id) => {
        const service = await store.get(id);
        if (!service) return false;
        await serial(id, async () => {
          await removeStack(service).catch(() => undefined);
          await forget(id);
        });
        routesChanged(service.swarm_id);
        return true;
      },
    });

    swarmsApi.onObserved(async ({ swarm, workloads }) => {
      for (const s of await store.findAll({ swarm_id: swarm.id })) {
        if (s.status === 'stopped' || s.status === 'removing') continue;
        const stack = stackOf(s);
        const desired = Object.fromEntries(Object.entries(s.replicas).map(([key, r]) => [key, r.desired]));
        const replicas = replicasOf(
          stack,
          desired,
          workloads.filter((w) => w.stack === stack),
        );
        if (JSON.stringify(replicas) !== JSON.stringify(s.replicas)) await store.changeIf(s.id, [s.status], { replicas, observed_at: now() });
      }
    });

    /** The service for a lifecycle request: 409 while another step is under way. */
    async function requireSettled(idOrName: string, action: string): Promise<ServiceRecord> {
      const service = await store.require(idOrName);
      if (service.status === 'deploying' || service.status === 'removing') {
        throw conflict(`Service ${service.name} is ${service.status}; ${action} it once that has finished`);
      }
      return service;
    }

    const baseline = (parsed: ParsedCompose, previous: ServiceRecord['replicas'] = {}) =>
      Object.fromEntries(Object.entries(parsed.desired).map(([key, desired]) => [key, { desired, running: previous[key]?.running ?? 0 }]));

    return {
      // Stack deploys (with prune) and removals are idempotent: a step the last process left half done runs again.
      resume: () => resumeByStatus('service', store, { deploying: (s) => startDeploy(s, 'resuming'), removing: startRemove }),
      close: () => jobs.drain(),
      routes: [
        {
          method: 'POST',
          path: '/v1/services',
          auth: { role: 'admin' },
          summary: 'Create a service: a compose stack on a swarm (202 while it deploys)',
          description:
            'Body: `name`, `swarm_id` and `compose_file` (the YAML, base64). Everything is checked before anything is deployed: ' +
            'YAML syntax (400 naming the line), a non-empty services map with an image each, secrets and configs that name hangar objects of the swarm, ' +
            'and the `x-hangar: {domain, port}` routing extension. `cluster_id` + `manifest` (Kubernetes) is not available yet.',
          status: 202,
          schemas: { body: CreateBody, response: Service },
          handler: async (req) => {
            const body = req.body as CreateInput;
            const input = composeInput(body, false);
            const swarm = await swarms.requireActive(input.swarm_id!);
            const text = decodeComposeFile(input.compose_file);
            if (await store.findOne({ name: body.name })) throw conflict(`A service named ${body.name} exists`);
            const { parsed, resolved } = await prepare(text, body.name, swarm);
            await checkDomains(swarm.id, parsed.routes, null);
            let record: ServiceRecord;
            try {
              record = await store.insert({
                id: newId('svc'),
                name: body.name,
                backend: 'compose',
                swarm_id: swarm.id,
                spec: text,
                status: 'deploying',
                error: null,
                secret_refs: refs(resolved, 'secret'),
                config_refs: refs(resolved, 'config'),
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
            startDeploy(record, 'deploy');
            return view(record);
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
            const input = composeInput(body, true);
            if (body.name !== undefined && body.name !== current.name) throw badRequest('Validation failed: a service cannot be renamed (body.name differs)');
            const swarm = await swarms.requireActive(current.swarm_id);
            if (input.swarm_id !== undefined && input.swarm_id !== swarm.id && input.swarm_id !== swarm.name) {
              throw badRequest('Validation failed: a service cannot move to another swarm (body.swarm_id differs)');
            }
            const text = decodeComposeFile(input.compose_file);
            const { parsed, resolved } = await prepare(text, current.name, swarm);
            await checkDomains(swarm.id, parsed.routes, current.id);
            const patch = {
              spec: text,
              secret_refs: refs(resolved, 'secret'),
              config_refs: refs(resolved, 'config'),
              replicas: baseline(parsed, current.replicas),
              routes: parsed.routes,
            };
            if (current.status === 'stopped') return view(await store.change(current.id, patch));
            const updated = await store.changeIf(current.id, ['running', 'failed'], { ...patch, status: 'deploying', error: null });
            if (!updated) throw conflict(`Service ${current.name} changed state meanwhile; try again`);
            startDeploy(updated, 'redeploy');
            return Reply.accepted(view(updated));
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
            return serial(current.id, async () => {
              const service = await store.require(current.id);
              try {
                await removeStack(service);
              } catch (err) {
                throw asHttpError(err, `Stopping service ${service.name}`);
              }
              const zero = Object.fromEntries(Object.entries(service.replicas).map(([key, r]) => [key, { desired: r.desired, running: 0 }]));
              const stopped = await store.change(service.id, { status: 'stopped', error: null, replicas: zero });
              routesChanged(service.swarm_id);
              return view(stopped);
            });
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
            await swarms.requireActive(current.swarm_id);
            const updated = await store.changeIf(current.id, ['stopped', 'failed'], { status: 'deploying', error: null });
            if (!updated) throw conflict(`Service ${current.name} changed state meanwhile; try again`);
            startDeploy(updated, 'start');
            return view(updated);
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
            const removing = await store.change(current.id, { status: 'removing' });
            routesChanged(current.swarm_id);
            startRemove(removing);
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
            return swarmsApi.queueLogs(await swarms.requireActive(service.swarm_id), 'bundleLogs', stackOf(service), req.query, service.id);
          },
        },
        {
          method: 'GET',
          path: '/v1/services/{id}/logs/{taskId}',
          auth: { role: 'admin' },
          summary: 'Read a log fetch: its status, and its lines once done (handed over once, then deleted)',
          schemas: { params: LogParams },
          handler: async (req) => {
            return swarmsApi.readLogs(req.params.taskId, (await store.require(req.params.id)).id);
          },
        },
      ],
    };
  },
});

export type { ServicesApi } from './api.js';
