import type { Route } from '../../core/orchestrator.js';
import { defineServiceRef } from '../../core/plugin.js';

/** The s3 plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** What the s3 plugin provides (`services.provided.get(S3Ref)`): the routes of its stores. */
export interface S3Api {
  /** Both routes of every store on a cluster (S3 API and console), unless it is being removed. */
  routes(clusterId: string): Promise<Route[]>;
  /** A store by id (null when there is none). */
  get(id: string): Promise<unknown>;
}

export const S3Ref = defineServiceRef<S3Api>('s3', 'object stores (the s3 plugin)');
