import { Type } from '@sinclair/typebox';
import { defineServiceRef } from '../../core/plugin.js';

/** The swarms plugin's contract: what other plugins import of it (importing this never loads the plugin). */

export const SwarmsConfigSchema = Type.Object(
  {
    call_timeout_seconds: Type.Optional(Type.Integer({ minimum: 5, description: 'older name of clusters.call_timeout_seconds (wins when set)' })),
    observe_interval_seconds: Type.Optional(Type.Integer({ minimum: 1, description: 'older name of clusters.observe_interval_seconds (wins when set)' })),
    advertise: Type.Optional(Type.Union([Type.Literal('overlay'), Type.Literal('address')], { description: 'older name of clusters.advertise (wins when set)' })),
    publish_mode: Type.Union([Type.Literal('ingress'), Type.Literal('host')], { default: 'ingress', description: 'how workload ports are published (host: on the node running the task)' }),
    endpoint_mode: Type.Union([Type.Literal('vip'), Type.Literal('dnsrr')], { default: 'vip', description: 'service discovery: one virtual IP, or DNS round robin over the tasks' }),
    local_domain: Type.Optional(
      Type.String({ pattern: '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$', description: 'older name of clusters.local_domain (wins when set)' }),
    ),
    drain_wait_seconds: Type.Integer({ minimum: 0, default: 10, description: 'how long a leaving worker is drained before it leaves' }),
  },
  { additionalProperties: false, default: {} },
);

export interface SwarmsConfig {
  call_timeout_seconds?: number;
  observe_interval_seconds?: number;
  advertise?: 'overlay' | 'address';
  publish_mode: 'ingress' | 'host';
  endpoint_mode: 'vip' | 'dnsrr';
  local_domain?: string;
  drain_wait_seconds: number;
}

/**
 * What the swarms plugin provides: its settings (a plugin that needs swarms loaded names SwarmsRef
 * in its deps). What runs on a swarm, how members reach each other and forced removal are core's
 * (services.clusters: workloadsIn, addressOf; cleanup through ClusterRemovals).
 */
export interface SwarmsApi {
  settings: SwarmsConfig;
}

export const SwarmsRef = defineServiceRef<SwarmsApi>('swarms', 'swarm groups (the swarms plugin)');
