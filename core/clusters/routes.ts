import { conflict } from '../errors.js';
import type { Route } from '../orchestrator.js';
import { defineExtensionPoint, type Services } from '../plugin.js';

/** The route sources in the order their claims on a domain win. */
export const ROUTE_SOURCES = ['instance', 'service', 's3'] as const;

/** A plugin whose records become load-balancer routes: the routes its workloads on a cluster ask for. */
export interface RouteProvider {
  /** `instance`, `service` or `s3`: what a route's `source` says; claims are weighed in {@link ROUTE_SOURCES} order. */
  source: (typeof ROUTE_SOURCES)[number];
  routes(clusterId: string): Promise<Route[]>;
  /** Routes it holds even when not serving them (a stopped service keeps its domains); default `routes`. */
  claims?(clusterId: string): Promise<Route[]>;
}

/** Where the load balancer's routes come from (compute, services and s3 contribute). */
export const RouteSources = defineExtensionPoint<RouteProvider>('routes.sources', 'load-balancer route sources');

async function fromSources(services: Services, clusterId: string, pick: (p: RouteProvider) => RouteProvider['routes']): Promise<Route[]> {
  const providers = [...services.provided.contributions(RouteSources)].sort((a, b) => ROUTE_SOURCES.indexOf(a.source) - ROUTE_SOURCES.indexOf(b.source));
  const all: Route[] = [];
  for (const provider of providers) all.push(...(await pick(provider).call(provider, clusterId)));
  return all;
}

/** Every route the loaded sources serve on a cluster, in source order (a domain may appear twice). */
export function servedRoutes(services: Services, clusterId: string): Promise<Route[]> {
  return fromSources(services, clusterId, (p) => p.routes);
}

/** Every domain claim on a cluster: the served routes plus those held while not served. */
function claimedRoutes(services: Services, clusterId: string): Promise<Route[]> {
  return fromSources(services, clusterId, (p) => p.claims ?? p.routes);
}

/**
 * 409 when a workload on the cluster other than `self` already answers for one of these domains,
 * naming it. Every plugin checks the same way before it stores a domain.
 */
export async function requireDomainsFree(services: Services, clusterId: string, domains: string[], self?: { source: string; id: string }): Promise<void> {
  if (!domains.length) return;
  for (const route of await claimedRoutes(services, clusterId)) {
    if (self && route.source === self.source && route.source_id === self.id) continue;
    if (domains.includes(route.domain)) throw conflict(`Domain ${route.domain} is already routed to ${route.source} ${route.source_id}`);
  }
}
