import { conflict } from '../../core/errors.js';
import type { Route } from '../../core/orchestrator.js';
import type { Services } from '../../core/plugin.js';

/** Plugins whose records become load-balancer routes, in the order their claims on a domain win. */
export const ROUTE_SOURCES = ['compute', 'services', 's3'] as const;

/** What a route source provides (`services.provided.get(source)`): the routes its workloads on a swarm ask for. */
export interface RouteProvider {
  routes(swarmId: string): Promise<Route[]>;
  /** Routes it holds even when not serving them (a stopped service keeps its domains); default `routes`. */
  claims?(swarmId: string): Promise<Route[]>;
}

async function fromSources(services: Services, swarmId: string, pick: (p: Partial<RouteProvider>) => RouteProvider['routes'] | undefined): Promise<Route[]> {
  const all: Route[] = [];
  for (const source of ROUTE_SOURCES) {
    const provider = services.provided.get(source) as Partial<RouteProvider> | undefined;
    const list = provider && pick(provider);
    if (list) all.push(...(await list.call(provider, swarmId)));
  }
  return all;
}

/** Every route the loaded sources serve on a swarm, in source order (a domain may appear twice). */
export function servedRoutes(services: Services, swarmId: string): Promise<Route[]> {
  return fromSources(services, swarmId, (p) => p.routes);
}

/** Every domain claim on a swarm: the served routes plus those held while not served. */
function claimedRoutes(services: Services, swarmId: string): Promise<Route[]> {
  return fromSources(services, swarmId, (p) => p.claims ?? p.routes);
}

/**
 * 409 when a workload on the swarm other than `self` already answers for one of these domains,
 * naming it. Every plugin checks the same way before it stores a domain.
 */
export async function requireDomainsFree(services: Services, swarmId: string, domains: string[], self?: { source: string; id: string }): Promise<void> {
  if (!domains.length) return;
  for (const route of await claimedRoutes(services, swarmId)) {
    if (self && route.source === self.source && route.source_id === self.id) continue;
    if (domains.includes(route.domain)) throw conflict(`Domain ${route.domain} is already routed to ${route.source} ${route.source_id}`);
  }
}
