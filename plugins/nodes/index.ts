import { definePlugin } from '../../core/plugin.js';
import { AgentBinariesRef } from '../system/api.js';
import { idsOnly, TaggableResources, TagsRef } from '../tags/api.js';
import { NodesRef, type NodesApi } from './api.js';
import { certificates } from './certificates.js';
import { NodesConfigSchema, type NodesConfig } from './config.js';
import { createNodesContext, type NodesPart } from './context.js';
import { eventRoutes } from './event-routes.js';
import { joining } from './join.js';
import { nodeMigrations } from './migrations.js';
import { operations } from './operations.js';
import { presence } from './presence.js';
import { records } from './records.js';
import { removal } from './removal.js';
import { rollouts } from './rollouts.js';
import { scheduling } from './scheduling.js';

/**
 * The nodes plugin: machines that run an agent. Each concern is a file of its own, set up here on
 * one shared context (context.ts): joining (join.ts), events (event-routes.ts), node records
 * (records.ts), removal (removal.ts), scheduling (scheduling.ts), operations queued for the agent
 * (operations.ts), client certificates (certificates.ts) and presence — heartbeats and offline
 * detection (presence.ts).
 */
export default definePlugin({
  name: 'nodes',
  description: 'nodes, join tokens, overlay addresses, node operations, node events',
  provides: [NodesRef],
  optionalDeps: [AgentBinariesRef, TagsRef],
  configSchema: NodesConfigSchema,
  migrations: nodeMigrations,
  setup(services) {
    const ctx = createNodesContext(services, services.config.nodes as NodesConfig);
    const { nodes, events, overlay, cadence, publishPeers } = ctx;
    const heartbeats = presence(ctx);
    const api: NodesApi = { nodes, events, overlay, cadence, heartbeat: heartbeats.heartbeat, publishPeers };
    services.provided.provide(NodesRef, api);
    services.provided.contribute(TaggableResources, { type: 'node', resolve: idsOnly('node', 'node', (id) => nodes.get(id)) });

    const parts: NodesPart[] = [heartbeats, joining(ctx), eventRoutes(ctx), records(ctx), removal(ctx), scheduling(ctx), operations(ctx), rollouts(ctx), certificates(ctx)];
    return {
      close: heartbeats.close,
      loops: parts.flatMap((part) => part.loops ?? []),
      routes: parts.flatMap((part) => part.routes ?? []),
    };
  },
});
