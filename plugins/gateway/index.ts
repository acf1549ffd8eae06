import { createHash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { conflict, notFound } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { HANGAR_EDGE_NETWORK, latestTask, type LoadBalancerSpec, type Route, type WorkloadState } from '../../core/orchestrator.js';
import { resumeByStatus } from '../../core/jobs.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin, type Services } from '../../core/plugin.js';
import { IdParams, readRoutes } from '../../core/http/resources.js';
import { swarmsOf } from '../swarms/index.js';
import { servedRoutes } from '../swarms/routes.js';
import type { SwarmRecord } from '../swarms/store.js';
import { renderHaproxyConfig } from './haproxy.js';
import { gatewayMigrations, LOAD_BALANCERS } from './migrations.js';

export const GatewayConfigSchema = Type.Object(
  {
    image: Type.String({ default: 'haproxy:lts', description: 'the HAProxy image of swarm load balancers (the lab builds lab/haproxy:latest locally)' }),
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
  http_port: number;
  host_config_dir: string;
  container_config_dir: string;
  reload_signal: string;
  publish_mode: 'host' | 'ingress';
}

interface LoadBalancerRecord {
  id: string;
  name: string;
  swarm_id: string | null;
  cluster_id: string | null;
  runtime_name: string;
  image: string;
  node_id: string | null;
  http_port: number;
  status: 'deploying' | 'running' | 'failed' | 'removing';
  error: string | null;
  config_sha256: string | null;
  config_version: number;
  routes: Route[] | null;
  applied_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

class LoadBalancerStore extends StampedRepository<LoadBalancerRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, LOAD_BALANCERS, { json: ['routes'], dates: ['applied_at', 'created_at', 'updated_at'] }, clock);
  }
}

function lbView(lb: LoadBalancerRecord) {
  return {
    id: lb.id,
    name: lb.name,
    ...(lb.swarm_id ? { swarm_id: lb.swarm_id } : { cluster_id: lb.cluster_id }),
    node_id: lb.node_id,
    image: lb.image,
    http_port: lb.http_port,
    status: lb.status,
    ...(lb.error ? { error: lb.error } : {}),
    routes: (lb.routes ?? []).length,
    config_version: lb.config_version,
    applied_at: lb.applied_at,
    created_at: lb.created_at,
    updated_at: lb.updated_at,
  };
}

/** Every route of a swarm, from every plugin that has some; a domain claimed twice goes to the first. */
async function collectRoutes(services: Services, swarmId: string): Promise<Route[]> {
  const seen = new Set<string>();
  const routes: Route[] = [];
  for (const route of await servedRoutes(services, swarmId)) {
    if (seen.has(route.domain)) {
      services.log.warn({ domain: route.domain, source: route.source, source_id: route.source_id }, 'domain already routed; the later claim is ignored');
      continue;
    }
    seen.add(route.domain);
    routes.push(route);
  }
  return routes.sort((a, b) => a.domain.localeCompare(b.domain));
}

export default definePlugin({
  name: 'gateway',
  description: 'load balancers (HAProxy on swarms) and the routing table: domain → service:port',
  configSchema: GatewayConfigSchema,
  migrations: gatewayMigrations,
  setup(services) {
    const { db, clock } = services;
    const settings = services.config.gateway as GatewayConfig;
    const swarmsApi = swarmsOf(services);
    const { swarms, jobs, onManager } = swarmsApi;
    const balancers = new LoadBalancerStore(db, clock);
    const forget = recordRemover(services.events, 'loadbalancer', balancers);
    services.provided.set('gateway', { balancers });
    const now = () => clock.now().toISOString();

    /** Renders the swarm's routing table and hands it to the balancer (deploy, or hot reload when only routes changed). */
    async function apply(lb: LoadBalancerRecord, swarm: SwarmRecord, options: { force: boolean }): Promise<void> {
      const routes = await collectRoutes(services, swarm.id);
      const config = renderHaproxyConfig(routes, { httpPort: lb.http_port });
      const sha = createHash('sha256').update(config).digest('hex');
      if (!options.force && sha === lb.config_sha256 && lb.status === 'running') return;
      const manager = (await swarmsApi.members.findOne({ node_id: swarm.manager_node_id }))!;
      const spec: LoadBalancerSpec = {
        name: lb.runtime_name,
        resourceId: lb.id,
        image: lb.image,
        config,
        hostConfigDir: `${settings.host_config_dir}/${lb.id}`,
        containerConfigDir: settings.container_config_dir,
        reloadSignal: settings.reload_signal,
        ports: [{ published: lb.http_port, target: lb.http_port, protocol: 'tcp' }],
        publishMode: settings.publish_mode,
        runtimeNodeId: manager.runtime_node_id!,
        network: HANGAR_EDGE_NETWORK,
      };
      const state = await onManager<WorkloadState>(swarm, 'applyLoadBalancer', [spec]);
      await balancers.change(lb.id, {
        node_id: swarm.manager_node_id,
        config_sha256: sha,
        config_version: lb.config_version + 1,
        routes,
        applied_at: now(),
        status: state.running > 0 || lb.status === 'running' ? 'running' : 'deploying',
        error: null,
      });
    }

    // Route changes come in bursts (a create publishes, its deploy publishes again): apply once per burst.
    const pending = new Map<string, NodeJS.Timeout>();
    services.events.subscribe('routes.changed', (payload) => {
      const { swarmId } = payload as { swarmId: string };
      // Jobs still draining at shutdown publish too: the next start re-applies the routes instead.
      if (services.shutdown.aborted) return;
      clearTimeout(pending.get(swarmId));
      pending.set(
        swarmId,
        setTimeout(() => {
          pending.delete(swarmId);
          jobs.run(`routes of ${swarmId}`, async () => {
            const lb = await balancers.findOne({ swarm_id: swarmId });
            const swarm = await swarms.get(swarmId);
            if (!lb || !swarm?.manager_node_id || lb.status === 'removing') return;
            await apply(lb, swarm, { force: false });
          }, async (err) => {
            const lb = await balancers.findOne({ swarm_id: swarmId });
            if (lb) await balancers.change(lb.id, { error: `updating the routes failed: ${err.message}` });
          });
        }, 300),
      );
    });

    swarmsApi.onObserved(async ({ swarm, workloads }) => {
      const lb = await balancers.findOne({ swarm_id: swarm.id });
      if (!lb || lb.status === 'removing') return;
      const w = workloads.find((x) => x.name === lb.runtime_name);
      if (w && w.running > 0 && lb.status !== 'running') await balancers.change(lb.id, { status: 'running', error: null });
      if ((!w || w.running === 0) && lb.status === 'running') {
        const newest = latestTask(w?.tasks ?? []);
        await balancers.change(lb.id, { status: 'failed', error: w ? `no task running${newest?.error ? `: ${newest.error}` : ''}` : 'its service is missing from the swarm' });
      }
    });

    async function removeRuntime(lb: LoadBalancerRecord): Promise<void> {
      const swarm = lb.swarm_id ? await swarms.get(lb.swarm_id) : null;
      if (swarm?.manager_node_id) await onManager(swarm, 'removeLoadBalancer', [lb.runtime_name]);
    }

    swarmsApi.registerWorkloads({
      type: 'loadbalancer',
      inSwarm: async (swarmId) => (await balancers.findAll({ swarm_id: swarmId })).map((lb) => ({ id: lb.id, name: lb.name })),
      forceRemove: async (id) => {
        const lb = await balancers.get(id);
        if (!lb) return false;
        await removeRuntime(lb).catch(() => undefined);
        await forget(id);
        return true;
      },
    });
    swarmsApi.extendView(async (swarm) => {
      const lb = await balancers.findOne({ swarm_id: swarm.id });
      return { load_balancer: lb ? { id: lb.id, status: lb.status, node_id: lb.node_id, http_port: lb.http_port } : null };
    });

    function deployInBackground(lb: LoadBalancerRecord, swarm: SwarmRecord): void {
      jobs.run(`deploy load balancer ${lb.name}`, () => apply(lb, swarm, { force: true }), async (err) => {
        await balancers.change(lb.id, { status: 'failed', error: `deploying failed: ${err.message}` });
      });
    }

    function removeInBackground(lb: LoadBalancerRecord): void {
      jobs.run(`remove load balancer ${lb.name}`, async () => {
        await removeRuntime(lb);
        await forget(lb.id);
      }, async (err) => {
        await balancers.change(lb.id, { status: 'failed', error: `removing failed: ${err.message}; retry or clean it up (POST /v1/cleanup/loadbalancer/${lb.id})` });
      });
    }

    async function requireBalancer(id: string): Promise<LoadBalancerRecord> {
      const lb = await balancers.get(id);
      if (!lb) throw notFound(`No load balancer ${id}`);
      return lb;
    }

    async function allRoutes(lbs: LoadBalancerRecord[]) {
      const lbOf = new Map(lbs.map((lb) => [lb.swarm_id, lb.id]));
      const out: Array<Route & { swarm_id: string; load_balancer_id: string | null }> = [];
      for (const swarm of await swarms.findAll()) {
        for (const r of await collectRoutes(services, swarm.id)) out.push({ ...r, swarm_id: swarm.id, load_balancer_id: lbOf.get(swarm.id) ?? null });
      }
      return out;
    }

    return {
      // Deploying (the configuration is rendered and the service created or updated) and removing are idempotent.
      resume: async () => {
        // A route update cut short: applying again is a no-op when the rendered table has not changed.
        for (const lb of await balancers.findAll({ status: 'running' })) {
          if (lb.swarm_id) services.events.publish('routes.changed', { swarmId: lb.swarm_id });
        }
        return resumeByStatus('load balancer', balancers, {
          deploying: async (lb) => {
            const swarm = lb.swarm_id ? await swarms.get(lb.swarm_id) : null;
            if (swarm) deployInBackground(lb, swarm);
            else await balancers.change(lb.id, { status: 'failed', error: `deploying was interrupted and its swarm is gone; clean it up (POST /v1/cleanup/loadbalancer/${lb.id})` });
          },
          removing: removeInBackground,
        });
      },
      // Route updates still waiting for their burst to end are dropped: the next start re-applies them.
      close: async () => {
        for (const timer of pending.values()) clearTimeout(timer);
        pending.clear();
      },
      routes: [
        {
          method: 'POST',
          path: '/v1/swarms/{id}/lb',
          auth: { role: 'admin' },
          summary: 'Deploy the swarm’s load balancer (HAProxy on the manager) with the current routes; again re-applies them',
          status: 202,
          schemas: { params: IdParams },
          handler: async (req) => {
            const swarm = await swarms.requireActive(req.params.id);
            let lb = await balancers.findOne({ swarm_id: swarm.id });
            if (lb?.status === 'removing') throw conflict(`The load balancer of swarm ${swarm.name} is being removed`);
            lb ??= await balancers.insert({
              id: newId('lb'),
              name: `lb-${swarm.name}`,
              swarm_id: swarm.id,
              cluster_id: null,
              runtime_name: `hangar-lb-${swarm.name}`,
              image: settings.image,
              node_id: swarm.manager_node_id,
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
            deployInBackground(lb, swarm);
            return lbView(lb);
          },
        },
        {
          method: 'DELETE',
          path: '/v1/swarms/{id}/lb',
          auth: { role: 'admin' },
          summary: 'Remove the swarm’s load balancer (202; the record goes once its service is removed)',
          status: 202,
          schemas: { params: IdParams },
          handler: async (req) => {
            const swarm = await swarms.require(req.params.id);
            const lb = await balancers.findOne({ swarm_id: swarm.id });
            if (!lb) throw notFound(`Swarm ${swarm.name} has no load balancer`);
            const removing = await balancers.change(lb.id, { status: 'removing' });
            removeInBackground(removing);
            return lbView(removing);
          },
        },
        {
          method: 'GET',
          path: '/v1/gateway',
          auth: 'authenticated',
          summary: 'The routing table of every swarm and the load balancers serving it',
          handler: async () => {
            const lbs = await balancers.findAll();
            return { routes: await allRoutes(lbs), load_balancers: lbs.map(lbView) };
          },
        },
        ...readRoutes({
          path: '/v1/loadbalancers',
          summaries: { list: 'List load balancers', get: 'Get a load balancer, with the routes it serves' },
          page: (options) => balancers.page(options),
          find: requireBalancer,
          view: lbView,
          detail: (lb) => ({ ...lbView(lb), routes: lb.routes ?? [] }),
        }),
      ],
    };
  },
});
