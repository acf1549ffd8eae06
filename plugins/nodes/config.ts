import { Type } from '@sinclair/typebox';
import { rateLimitSetting, type RateLimit } from '../../core/ratelimit.js';

export const NodesConfigSchema = Type.Object(
  {
    heartbeat_interval_seconds: Type.Integer({ minimum: 1, default: 10, description: 'the shortest interval told to agents in heartbeat replies (a large fleet gets a longer one)' }),
    offline_after_seconds: Type.Integer({ minimum: 1, default: 35, description: 'no heartbeat for this long → offline (scaled with the interval)' }),
    max_heartbeats_per_second: Type.Number({
      exclusiveMinimum: 0,
      default: 100,
      description: 'the heartbeat budget of the whole fleet: the interval is the fleet size ÷ this, at least heartbeat_interval_seconds',
    }),
    join_token_ttl_seconds: Type.Integer({ minimum: 10, default: 600 }),
    overlay_subnet: Type.String({ default: '10.210.0.0/16', description: 'WireGuard overlay; the first host is the control plane' }),
    overlay_port: Type.Integer({ minimum: 1, maximum: 65535, default: 51820 }),
    log_lines_default: Type.Integer({ minimum: 1, default: 100 }),
    log_lines_max: Type.Integer({ minimum: 1, default: 10000 }),
    join_failures_per_address: rateLimitSetting(
      20,
      900,
      'refused POST /v1/nodes/join calls per client address; past it every join from that address is refused (429) for the rest of the window, and no more join_failed events are stored for it',
    ),
    event_retention_days: Type.Integer({ minimum: 0, default: 30, description: 'node events older than this are deleted; 0 keeps them for ever' }),
    event_prune_interval_seconds: Type.Integer({ minimum: 1, default: 3600, description: 'how often node events past their retention are deleted' }),
    agent_rollout_margin_seconds: Type.Integer({
      minimum: 0,
      default: 30,
      description: 'in an agent update in waves, how long past its grace_seconds a node has to report the new version before its update counts as failed (its watchdog put the previous executable back by then)',
    }),
    agent_rollout_task_timeout_seconds: Type.Integer({
      minimum: 10,
      default: 900,
      description: 'in an agent update in waves, how long a node’s agent has to take and finish its update task (one busy with an OS upgrade in the same lane takes it later)',
    }),
    agent_rollout_check_ms: Type.Integer({ minimum: 50, default: 1000, description: 'how often a running agent update in waves looks at its nodes' }),
  },
  { additionalProperties: false, default: {} },
);

export interface NodesConfig {
  heartbeat_interval_seconds: number;
  offline_after_seconds: number;
  max_heartbeats_per_second: number;
  join_token_ttl_seconds: number;
  overlay_subnet: string;
  overlay_port: number;
  log_lines_default: number;
  log_lines_max: number;
  join_failures_per_address: RateLimit;
  event_retention_days: number;
  event_prune_interval_seconds: number;
  agent_rollout_margin_seconds: number;
  agent_rollout_task_timeout_seconds: number;
  agent_rollout_check_ms: number;
}
