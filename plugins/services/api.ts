import type { Route } from '../../core/orchestrator.js';
import { defineServiceRef } from '../../core/plugin.js';

/** What the services plugin provides (`services.provided.get(ServicesRef)`): the routes its stacks ask for. */
export interface ServicesApi {
  /** Routes of the compose services on a cluster that declare `x-hangar` (not of stopped or removing ones). */
  routes(clusterId: string): Promise<Route[]>;
  /** The routes of every service not being removed, stopped ones included: the domains they hold. */
  claims(clusterId: string): Promise<Route[]>;
  /** A service by id (null when there is none). */
  get(id: string): Promise<unknown>;
}

export const ServicesRef = defineServiceRef<ServicesApi>('services', 'compose services (the services plugin)');
