import { ScopeResolvers, tableResolver, type RouteScope, type ScopeAccess } from '../../core/auth/scope.js';
import { createHash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { conflict, notFound } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { ApplyLoadBalancer, latestTask, RemoveLoadBalancer, Route, taskFailure, type LoadBalancerSpec, type WorkloadState } from '../../core/orchestrator.js';
import { definePlugin, type Services, defineRoute } from '../../core/plugin.js';
import { GatewayRef } from './api.js';
import { IdParams, readRoutes } from '../../core/http/resources.js';
import { ClusterViewFields } from '../../core/clusters/directory.js';
import type { Clusters } from '../../core/clusters/service.js';
import { defineWorkloadKind } from '../../core/clusters/workloads.js';
import { servedRoutes } from '../../core/clusters/routes.js';
import type { ClusterBackend, LoadBalancerProfile } from '../../core/clusters/backend.js';
import { capitalized, type ClusterRecord } from '../../core/clusters/store.js';
import { defineLifecycle, LEASE_DATES, REMOVED, type LeaseFields } from '../../core/lifecycle.js';
import { idsOnly } from '../tags/api.js';
import { gatewayMigrations, LOAD_BALANCERS } from './migrations.js';
import { RoutesChanged } from '../../core/clusters/topics.js';

export const GatewayConfigSchema = Type.Object(
  {
    image: Type.String({ default: 'haproxy:lts', description: 'the image of the swarms’ load balancers (HAProxy; the lab builds lab/haproxy:latest locally)' }),
    kubernetes_image: Type.String({
      default: 'rancher/mirrored-library-traefik:3.3.6',
      description: 'the image of the Kubernetes clusters’ ingress controller (Traefik; use the one your k3s release lists in k3s-images.txt: it is in its airgap images tarball)',
    }),
    http_port: Type.Integer({ minimum: 1, maximum: 65535, default: 80, description: 'the port the balancer listens on, on the node it runs on' }),
    host_config_dir: Type.String({ default: '/var/lib/hangar/lb', description: 'where the agent writes the balancer’s configuration on its node' }),
    container_config_dir: Type.String({ default: '/usr/local/etc/haproxy', description: 'where the image reads haproxy.cfg' }),
    reload_signal: Type.String({ default: 'SIGUSR2', description: 'makes HAProxy (master-worker mode) re-read its configuration without dropping connections' }),
    publish_mode: Type.Union([Type.Literal('host'), Type.Literal('ingress')], { default: 'host', description: 'the balancer is pinned to one node; host mode binds the port there' }),
  },
  { additionalProperties: false, default: {} },
);

interface GatewayConfig {
  image: string;
  kubernetes_image: string;
  http_port: number;
  host_config_dir: string;
  container_config_dir: string;
  reload_signal: string;
  publish_mode: 'host' | 'ingress';
}

interface LoadBalancerRecord extends LeaseFields {
  id: string;
  name: string;
  cluster_id: string;
  runtime_name: string;
  image: string;
  node_id: string | null;
  http_port: number;
  status: 'deploying' | 'running' | 'failed' | 'removing';
  error: string | null;
  /** Hash of what was last applied (routes, node, image, settings): an apply that would change nothing is skipped. */
  config_sha256: string | null;
  config_version: number;
  routes: Route[] | null;
  applied_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export class LoadBalancerStore extends StampedRepository<LoadBalancerRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, LOAD_BALANCERS, { json: ['routes'], dates: ['applied_at', 'created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }
}

/** Where a record runs, as the API names it: `swarm_id` on a swarm, `cluster_id` on a Kubernetes cluster (exactly one). */
const Placement = {
  swarm_id: Type.Optional(Type.String({ description: 'the swarm it serves (absent on a Kubernetes cluster)' })),
  cluster_id: Type.Optional(Type.String({ description: 'the Kubernetes cluster it serves (absent on a swarm)' })),
};

/** A load balancer, the same in the list, the single read, the deploy answers and GET /v1/gateway. */
export const LoadBalancerView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  ...Placement,
  node_id: Type.Union([Type.String(), Type.Null()], { description: 'the node it runs on' }),
  image: Type.String({ description: 'the image it was last deployed with (gateway.image when it was created or redeployed)' }),
  http_port: Type.Integer(),
  status: Type.Union([Type.Literal('deploying'), Type.Literal('running'), Type.Literal('failed'), Type.Literal('removing')]),
  error: Type.Optional(Type.String({ description: 'why it failed, or why its last routes update failed' })),
  routes: Type.Array(Route, { description: 'the routes it was last applied with' }),
  config_version: Type.Integer({ description: 'counts the applies' }),
  applied_at: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
  updated_at: Type.String(),
}, { additionalProperties: false });

/** A route of GET /v1/gateway: the cluster it is on and the balancer serving it. */
const GatewayRoute = Type.Object({ ...Route.properties, ...Placement, load_balancer_id: Type.Union([Type.String(), Type.Null()]) }, { additionalProperties: false });

async function lbView(core: Clusters, lb: LoadBalancerRecord) {
  return {
    id: lb.id,
    name: lb.name,
    ...(await core.placement(lb.cluster_id)),
    node_id: lb.node_id,
    image: lb.image,
    http_port: lb.http_port,
    status: lb.status,
    ...(lb.error ? { error: lb.error } : {}),
    routes: lb.routes ?? [],
    config_version: lb.config_version,
    applied_at: lb.applied_at,
    created_at: lb.created_at,
    updated_at: lb.updated_at,
  };
}

/** Every route of a cluster, from every plugin that has some; a domain claimed twice goes to the first. */
async function collectRoutes(services: Services, clusterId: string): Promise<Route[]> {
  const seen = new Set<string>();
  const routes: Route[] = [];
  for (const route of await servedRoutes(services, clusterId)) {
    if (seen.has(route.domain)) {
      services.log.warn({ domain: route.domain, source: route.source, source_id: route.source_id }, 'domain already routed; the later claim is ignored');
      continue;
    }
    seen.add(route.domain);
    routes.push(route);
  }
  return routes.sort((a, b) => a.domain.localeCompare(b.domain));
}

/**
 * What an observation changes in a balancer no operation holds (pure). A balancer being deployed
 * fails when the runtime rejects its tasks (as an instance does: taskFailure), and stays failed
 * until a task runs; a missing workload is forgotten as applied, so that the routes loop deploys it again.
 */
export function reconcileBalancer(lb: LoadBalancerRecord, w: WorkloadState | undefined): Partial<LoadBalancerRecord> | null {
  if (lb.status === 'removing') return null;
  if (w && w.running > 0 && lb.status !== 'running') return { status: 'running', error: null };
  if (!w) return lb.status === 'running' ? { status: 'failed', error: 'its workload is missing from the cluster', config_sha256: null } : null;
  if (w.running > 0) return null;
  if (lb.status === 'running') {
    const newest = latestTask(w.tasks);
    return { status: 'failed', error: `no task running${newest?.error ? `: ${newest.error}` : ''}` };
  }
  const failure = lb.status === 'deploying' ? taskFailure(w.tasks) : null;
  return failure ? { status: 'failed', error: `deploying failed: ${failure}` } : null;
}

export default definePlugin({
  name: 'gateway',
  provides: [GatewayRef],
  description: 'load balancers (HAProxy on swarms, an ingress controller on Kubernetes clusters) and the routing table: domain → service:port',
  configSchema: GatewayConfigSchema,
  migrations: gatewayMigrations,
  setup(services) {
    const { db, clock } = services;
    const settings = services.config.gateway as GatewayConfig;
    const core = services.clusters;
    const view = (lb: LoadBalancerRecord) => lbView(core, lb);
    const balancers = new LoadBalancerStore(db, clock);
    services.provided.contribute(ScopeResolvers, tableResolver('loadbalancer', () => db.knex, LOAD_BALANCERS, { via: 'cluster_id' }));
    services.provided.provide(GatewayRef, { balancers });
    const now = () => clock.now().toISOString();
    const lbSettings = { host_config_dir: settings.host_config_dir, container_config_dir: settings.container_config_dir, reload_signal: settings.reload_signal, publish_mode: settings.publish_mode };

    /** The balancer as the driver takes it, with the cluster's current routing table; and the hash of it. */
    async function desired(lb: LoadBalancerRecord, cluster: ClusterRecord): Promise<{ spec: LoadBalancerSpec; sha: string }> {
      const spec: LoadBalancerSpec = {
        name: lb.runtime_name,
        resource_id: lb.id,
        image: lb.image,
        http_port: lb.http_port,
        node_id: cluster.manager_node_id!,
        routes: await collectRoutes(services, cluster.id),
        settings: lbSettings,
      };
      return { spec, sha: createHash('sha256').update(JSON.stringify(spec)).digest('hex') };
    }

    const lifecycle = core.lifecycle(
      balancers,
      defineLifecycle<LoadBalancerRecord, WorkloadState | undefined>({
        noun: 'load balancer',
        operations: {
          // The routing table to the balancer: deployed, or hot-reloaded when only the routes changed; skipped when nothing did.
          apply: {
            from: ['deploying', 'running', 'failed'],
            joins: true,
            label: (lb) => `deploy load balancer ${lb.name}`,
            async run(lb, { unrecorded }) {
              const cluster = await core.requireActive(lb.cluster_id);
              const { spec, sha } = await desired(lb, cluster);
              // What the balancer runs: an earlier pass of this apply (a route change joined it) may have changed it.
              const applied = (unrecorded as Partial<LoadBalancerRecord> | null) ?? {};
              if (sha === (applied.config_sha256 ?? lb.config_sha256) && lb.status === 'running') return applied;
              const state = await core.callOn(cluster, ApplyLoadBalancer, { spec });
              return {
                node_id: spec.node_id,
                config_sha256: sha,
                config_version: lb.config_version + 1,
                routes: spec.routes,
                applied_at: now(),
                status: state.running > 0 || lb.status === 'running' ? 'running' : 'deploying',
                error: null,
              };
            },
            failed: (lb, err) => (lb.status === 'running' ? { error: `updating the routes failed: ${err.message}` } : { status: 'failed', error: `deploying failed: ${err.message}` }),
          },
          remove: {
            from: '*',
            during: 'removing',
            preempts: true,
            label: (lb) => `remove load balancer ${lb.name}`,
            async run(lb) {
              await removeRuntime(lb);
              await kind.forget(lb.id);
              return REMOVED;
            },
            failed: (lb, err) => ({ status: 'failed', error: `removing failed: ${err.message}; retry or clean it up (POST /v1/cleanup/loadbalancer/${lb.id})` }),
          },
        },
        reconcile: (lb, w) => reconcileBalancer(lb, w),
      }),
    );

    /** Applies the cluster's routes when they (or the balancer) changed; an apply under way takes the change in. */
    async function applyRoutes(clusterId: string): Promise<void> {
      const lb = await balancers.findOne({ cluster_id: clusterId });
      const cluster = await core.clusters.get(clusterId);
      if (!lb || !cluster?.manager_node_id || lb.status === 'removing') return;
      // Nothing changed since the last apply: a balancer being deployed waits for the observation, and a failed one
      // for a redeploy (applying the same again fails the same way, and would hide the reason).
      if (!lb.op_id && (await desired(lb, cluster)).sha === lb.config_sha256) return;
      await lifecycle.trigger(lb.id, 'apply', {}, `routes of ${clusterId}`);
    }

    // Route changes come in bursts (a create publishes, its deploy publishes again): apply once per burst.
    const pending = new Map<string, NodeJS.Timeout>();
    services.events.subscribe(RoutesChanged, ({ clusterId }) => {
      // Jobs still draining at shutdown publish too: the next start (its routes loop) re-applies the routes instead.
      if (services.shutdown.aborted) return;
      clearTimeout(pending.get(clusterId));
      pending.set(
        clusterId,
        setTimeout(() => {
          pending.delete(clusterId);
          applyRoutes(clusterId).catch((err: Error) => services.log.warn({ cluster_id: clusterId, error: err.message }, 'applying the routes failed'));
        }, 300),
      );
    });

    async function removeRuntime(lb: LoadBalancerRecord): Promise<void> {
      const cluster = await core.clusters.get(lb.cluster_id);
      if (cluster?.manager_node_id) await core.callOn(cluster, RemoveLoadBalancer, { name: lb.runtime_name });
    }

    const kind = defineWorkloadKind(services, {
      type: 'loadbalancer',
      store: balancers,
      lifecycle,
      removeRuntime,
      observed: (lb, { workloads }) => workloads.find((w) => w.name === lb.runtime_name),
      resolve: idsOnly('loadbalancer', 'lb', (id) => balancers.get(id)),
    });
    services.provided.contribute(ClusterViewFields, async (cluster) => {
      const lb = await balancers.findOne({ cluster_id: cluster.id });
      return { load_balancer: lb ? { id: lb.id, status: lb.status, node_id: lb.node_id, http_port: lb.http_port } : null };
    });

    async function requireBalancer(id: string): Promise<LoadBalancerRecord> {
      const lb = await balancers.get(id);
      if (!lb) throw notFound(`No load balancer ${id}`);
      return lb;
    }

    async function allRoutes(clusters: ClusterRecord[], lbs: LoadBalancerRecord[]) {
      const lbOf = new Map(lbs.map((lb) => [lb.cluster_id, lb.id]));
      const out: Array<Route & ({ swarm_id: string } | { cluster_id: string }) & { load_balancer_id: string | null }> = [];
      for (const cluster of clusters) {
        const placement = await core.placement(cluster.id);
        for (const r of await collectRoutes(services, cluster.id)) out.push({ ...r, ...placement, load_balancer_id: lbOf.get(cluster.id) ?? null });
      }
      return out;
    }

    const refused = (lb: LoadBalancerRecord | null) => conflict(lb ? `Load balancer ${lb.name} is ${lb.status}` : 'The load balancer is gone');

    /**
     * Deploys the balancer again whatever it last applied, with the image configured now for its
     * backend (gateway.image, gateway.kubernetes_image: a change of them reaches an existing
     * balancer only this way); the 202's body.
     */
    async function redeploy(lb: LoadBalancerRecord, image: string) {
      const patch: Partial<LoadBalancerRecord> = { config_sha256: null, image, ...(image !== lb.image ? { status: 'deploying', error: null } : {}) };
      return view(await lifecycle.start(lb.id, 'apply', patch, refused, `deploy load balancer ${lb.name}`));
    }

    /**
     * The load balancer routes of a backend whose clusters take one (its `loadBalancer` profile,
     * core/clusters/backend.ts) and have an API path: `<path>/{id}/lb`. What runs is the backend's
     * (a swarm: HAProxy on the manager; Kubernetes: an ingress controller in hangar's namespace,
     * drivers/kubernetes/loadbalancer.ts); everything else is the same resource.
     */
    function lbRoutes(backend: ClusterBackend, profile: LoadBalancerProfile) {
      const { noun, title, path: clustersPath } = core.naming(backend.name);
      const path = `${clustersPath}/{id}/lb`;
      // The cluster's project decides (core/auth/scope.ts): its maintainers deploy and remove its balancer.
      const onCluster: RouteScope = { of: [{ kind: 'cluster', from: 'params.id', noun }] };
      const image = () => profile.image(services.config);
      const requireCluster = async (id: string, state?: 'any') => {
        const cluster = await core.clusters.findByIdOrName(id);
        if (!cluster || cluster.backend !== backend.name) throw notFound(`No ${title} ${id}`);
        return state ? cluster : core.requireActive(cluster.id);
      };
      return [
        defineRoute({
          method: 'POST' as const,
          path,
          auth: { role: 'admin' as const },
          scope: onCluster,
          summary: `Deploy the ${title}’s load balancer (${profile.runs}) with the current routes; again deploys it anew (the configured image, the routes)`,
          status: 202,
          schemas: { params: IdParams, response: LoadBalancerView },
          handler: async (req: { params: { id: string } }) => {
            const cluster = await requireCluster(req.params.id);
            let lb = await balancers.findOne({ cluster_id: cluster.id });
            if (lb?.status === 'removing') throw conflict(`The load balancer of ${noun} ${cluster.name} is being removed`);
            lb ??= await balancers.insert({
              id: newId('lb'),
              name: `lb-${cluster.name}`,
              cluster_id: cluster.id,
              runtime_name: profile.runtimeName(cluster.name),
              image: image(),
              node_id: cluster.manager_node_id,
              http_port: settings.http_port,
              status: 'deploying',
              error: null,
              config_sha256: null,
              config_version: 0,
              routes: [],
              applied_at: null,
              created_at: now(),
              updated_at: now(),
            });
            // Again: applied whatever the hash says, with the image configured now.
            return redeploy(lb, image());
          },
        }),
        defineRoute({
          method: 'DELETE' as const,
          path,
          auth: { role: 'admin' as const },
          scope: onCluster,
          summary: `Remove the ${title}’s load balancer (202; the record goes once its workload is removed)`,
          status: 202,
          schemas: { params: IdParams, response: LoadBalancerView },
          handler: async (req: { params: { id: string } }) => {
            const cluster = await requireCluster(req.params.id, 'any');
            const lb = await balancers.findOne({ cluster_id: cluster.id });
            if (!lb) throw notFound(`${capitalized(noun)} ${cluster.name} has no load balancer`);
            return view(await lifecycle.start(lb.id, 'remove', {}, refused));
          },
        }),
      ];
    }

    return {
      // Deploys and removals an expired lease left are taken over by core; route updates, by the routes loop.
      loops: [
        {
          // Routes changed by another control plane (or while this one was down) reach the balancers too.
          name: 'gateway:routes',
          intervalMs: core.settings.observeIntervalMs,
          once: true,
          async run() {
            for (const lb of await balancers.findAll()) await applyRoutes(lb.cluster_id);
          },
        },
      ],
      // Route updates still waiting for their burst to end are dropped: the routes loop re-applies them.
      close: async () => {
        for (const timer of pending.values()) clearTimeout(timer);
        pending.clear();
      },
      routes: [
        ...core.backends().flatMap((backend) => (backend.loadBalancer && core.naming(backend.name).path ? lbRoutes(backend, backend.loadBalancer) : [])),
        defineRoute({
          method: 'GET',
          path: '/v1/gateway',
          auth: 'authenticated',
          // Routes and balancers belong to their cluster's project: a caller sees those of the projects where it reads load balancers.
          scope: { list: 'loadbalancer' },
          summary: 'The routing table of every cluster (swarms and Kubernetes) the caller may see and the load balancers serving it',
          schemas: { response: Type.Object({ routes: Type.Array(GatewayRoute), load_balancers: Type.Array(LoadBalancerView) }) },
          handler: async (req) => {
            // What the scope step decided (core/http/koa-app.ts): the projects the caller reads load balancers in, and ?project=.
            const access = req.ctx.state.scope as ScopeAccess | null | undefined;
            const sees = (cluster: ClusterRecord) => {
              const project = cluster.project_id ?? null;
              if (access?.narrowed && project !== access.narrowed) return false;
              return !access || access.allowed === null || (project !== null && access.allowed.has(project));
            };
            const clusters = (await core.clusters.findAll()).filter(sees);
            const visible = new Set(clusters.map((c) => c.id));
            const lbs = (await balancers.findAll()).filter((lb) => visible.has(lb.cluster_id));
            return { routes: await allRoutes(clusters, lbs), load_balancers: await Promise.all(lbs.map(view)) };
          },
        }),
        ...readRoutes({
          path: '/v1/loadbalancers',
          summaries: { list: 'List load balancers, each with the routes it serves', get: 'Get a load balancer, with the routes it serves' },
          page: (options) => balancers.page(options),
          find: requireBalancer,
          view,
          response: LoadBalancerView,
          scope: { kind: 'loadbalancer' },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/loadbalancers/{id}/redeploy',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'loadbalancer', from: 'params.id' }] },
          summary: 'Deploy a load balancer anew: with the image configured now (gateway.image for a swarm, gateway.kubernetes_image for a Kubernetes cluster) and the current routes, whatever it last applied; 202, poll for its status',
          status: 202,
          schemas: { params: IdParams, response: LoadBalancerView },
          handler: async (req) => {
            const lb = await requireBalancer(req.params.id);
            const cluster = await core.requireActive(lb.cluster_id);
            const profile = core.findBackend(cluster.backend)?.loadBalancer;
            if (!profile) throw conflict(`${capitalized(core.nounOf(cluster))} ${cluster.name} takes no load balancer`);
            return redeploy(lb, profile.image(services.config));
          },
        }),
      ],
    };
  },
});
