import { Type, type Static } from '@sinclair/typebox';
import type { NodeFact } from '../../core/clusters/backend.js';
import { OverlayReport, OverlayState } from '../../core/overlay.js';

export const NodeId = Type.String({ pattern: '^node-[0-9a-z]+$', maxLength: 64 });
export const NodeParams = Type.Object({ id: NodeId });
export const NodeTaskParams = Type.Object({ id: NodeId, taskId: Type.String({ pattern: '^task-[0-9a-z]+$', maxLength: 64 }) });
export const IpAddress = Type.Union([Type.String({ format: 'ipv4' }), Type.String({ format: 'ipv6' })]);
export const InterfaceName = Type.String({ pattern: '^[A-Za-z0-9_.:@-]{1,15}$', description: 'network interface, e.g. eth0' });
export const NodeName = Type.String({ minLength: 1, maxLength: 100 });

export const NodeView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  hostname: Type.Union([Type.String(), Type.Null()]),
  ip_address: Type.Union([Type.String(), Type.Null()]),
  interface: Type.Union([Type.String(), Type.Null()]),
  architecture: Type.Union([Type.String(), Type.Null()]),
  gpu_overcommit_factor: Type.Integer(),
  status: Type.Union(['pending', 'ready', 'offline', 'needs_reboot', 'cordoned', 'drained', 'removing'].map((s) => Type.Literal(s))),
  availability: Type.String(),
  overlay_ip: Type.Union([Type.String(), Type.Null()]),
  overlay: Type.Union([OverlayState, Type.Null()], {
    description: 'the WireGuard overlay as the agent last reported it; the node is reached at overlay_ip only while it is up with that address and a peer answers',
  }),
  agent_version: Type.Union([Type.String(), Type.Null()]),
  last_heartbeat_at: Type.Union([Type.String(), Type.Null()]),
  resources: Type.Any(),
  is_control_plane: Type.Boolean(),
});

export const TaskRef = Type.Object({ task_id: Type.String() });

/** What an agent reports in a heartbeat; `runtimeFacts` are what it says of each loaded backend's runtime (`docker`, `k3s`). */
export const heartbeatSchema = (runtimeFacts: readonly NodeFact[]) =>
  Type.Object(
    {
      hostname: Type.String({ minLength: 1, maxLength: 255 }),
      architecture: Type.String({ maxLength: 20 }),
      os: Type.Optional(Type.Object({ id: Type.Optional(Type.String()), version: Type.Optional(Type.String()), pretty_name: Type.Optional(Type.String()) })),
      kernel: Type.Optional(Type.String({ maxLength: 200 })),
      agent_version: Type.String({ maxLength: 40 }),
      resources: Type.Optional(
        Type.Object({
          cpus: Type.Optional(Type.Integer({ minimum: 0 })),
          load_1m: Type.Optional(Type.Number()),
          memory_total_bytes: Type.Optional(Type.Number({ minimum: 0 })),
          memory_free_bytes: Type.Optional(Type.Number({ minimum: 0 })),
          disk_total_bytes: Type.Optional(Type.Number({ minimum: 0 })),
          disk_free_bytes: Type.Optional(Type.Number({ minimum: 0 })),
          disks: Type.Optional(
            Type.Array(
              Type.Object({ mount: Type.String({ maxLength: 4096 }), fs_type: Type.Optional(Type.String({ maxLength: 64 })), total_bytes: Type.Number({ minimum: 0 }), free_bytes: Type.Number({ minimum: 0 }) }),
              { maxItems: 64, description: 'space of each mounted filesystem (agents before the alerts send none: the disk rule then judges the root’s totals)' },
            ),
          ),
        }),
      ),
      addresses: Type.Optional(Type.Array(Type.Object({ interface: Type.String(), address: Type.String(), family: Type.String() }), { maxItems: 256 })),
      ...Object.fromEntries(runtimeFacts.map((fact) => [fact.name, Type.Optional(fact.schema)])),
      wireguard: Type.Optional(Type.Object({ present: Type.Boolean() })),
      restic: Type.Optional(Type.Object({ present: Type.Boolean() }, { description: 'whether restic (volume backups) is on the agent’s PATH' })),
      nfs: Type.Optional(
        Type.Object(
          { client: Type.Boolean(), server: Type.Boolean() },
          { description: 'whether the NFS client (mount.nfs: nfs-common) and server (exportfs: nfs-kernel-server) are on the agent’s PATH' },
        ),
      ),
      overlay: Type.Optional(Type.Union([OverlayReport, Type.Null()])),
      pending_updates: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
      reboot_required: Type.Optional(Type.Boolean()),
      gpus: Type.Optional(Type.Array(Type.Object({ index: Type.Integer(), name: Type.String() }), { maxItems: 64 })),
      capabilities: Type.Optional(
        Type.Object(
          {
            kinds: Type.Array(Type.String({ maxLength: 100 }), { maxItems: 500, description: 'the task kinds the agent runs' }),
            backends: Type.Array(Type.String({ maxLength: 32 }), { maxItems: 32, description: 'the orchestrator backends it has a driver for' }),
          },
          { description: 'what the agent can run; agents older than typed tasks send none and are judged by agent_version' },
        ),
      ),
      held_tasks: Type.Optional(
        Type.Array(Type.String({ maxLength: 64 }), { maxItems: 1000, description: 'tasks the agent holds (running or waiting their turn): their leases are renewed' }),
      ),
    },
    { additionalProperties: true },
  );

/** A heartbeat's facts as validated by {@link heartbeatSchema} (a backend's runtime fact under its own name). */
export type HeartbeatFacts = Static<ReturnType<typeof heartbeatSchema>> & { [runtimeFact: string]: unknown };
