import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { defineTaskKind } from './kinds.js';
import { Nullable } from '../validation.js';
import { BACKUP_KINDS } from './backup-kinds.js';

/** The version that introduced every kind an agent had before tasks were typed. */
export const FIRST_AGENT_VERSION = '0.1.0';

const Empty = Type.Object({});

/** An operation on the machine that every agent has had: the maintenance lane, no payload; what it does and answers. */
const machineOperation = <R extends TSchema>(name: string, description: string, result: R) =>
  defineTaskKind({ name, description, lane: 'maintenance', minAgentVersion: FIRST_AGENT_VERSION, payload: Empty, result });

/** The agent's own log: the last `lines`, or every line after `since`. */
export const AgentLogs = defineTaskKind({
  name: 'agent.logs',
  description: 'read the agent’s own log',
  lane: 'reads',
  minAgentVersion: FIRST_AGENT_VERSION,
  payload: Type.Object({ lines: Type.Optional(Type.Integer({ minimum: 1 })), since: Type.Optional(Type.String({ format: 'date-time' })) }),
  result: Type.Object({ lines: Type.Array(Type.String()) }),
});

export const AgentStop = machineOperation('agent.stop', 'stop the agent once the result is reported (workloads keep running)', Type.Object({ stopping: Type.Optional(Type.Boolean()) }));

export const AgentUpdate = defineTaskKind({
  name: 'agent.update',
  description: 'download the agent executable, check its checksum, replace this one (keeping it as <executable>.previous, put back if the new one does not reach the control plane within grace_seconds) and restart',
  lane: 'maintenance',
  minAgentVersion: FIRST_AGENT_VERSION,
  payload: Type.Object({
    architecture: Type.String({ minLength: 1 }),
    version: Type.String({ minLength: 1 }),
    sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
    grace_seconds: Type.Optional(Type.Integer({ minimum: 15, maximum: 3600, description: 'how long the new executable has to reach the control plane before the previous one is put back (default 120)' })),
  }),
  result: Type.Object({ updated_to: Type.Optional(Type.String()), sha256: Type.Optional(Type.String()), grace_seconds: Type.Optional(Type.Integer()) }),
});

/** What an OS package check or upgrade answers (the node's facts take what is there). */
const OsPackages = Type.Object({
  pending_updates: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
  reboot_required: Type.Optional(Type.Boolean()),
  upgraded: Type.Optional(Type.Integer({ minimum: 0 })),
  index_refreshed: Type.Optional(Type.Boolean()),
});

export const OsCheckUpdates = machineOperation('os.check-updates', 'refresh the package index and count pending updates', OsPackages);
export const OsUpdate = machineOperation('os.update', 'full OS package upgrade (may take an hour)', OsPackages);
export const OsReboot = machineOperation('os.reboot', 'reboot the machine once the result is reported', Type.Object({ rebooting: Type.Optional(Type.Boolean()) }));

export const OverlayPeers = defineTaskKind({
  name: 'overlay.peers',
  description: 'bring the WireGuard overlay interface in line with the peer list',
  lane: 'host',
  minAgentVersion: FIRST_AGENT_VERSION,
  payload: Type.Object({
    address: Type.String({ minLength: 1 }),
    listen_port: Type.Integer({ minimum: 1, maximum: 65535 }),
    peers: Type.Array(
      Type.Object({
        node_id: Type.String(),
        public_key: Type.String(),
        endpoint: Type.Union([Type.String(), Type.Null()]),
        allowed_ips: Type.Array(Type.String()),
      }),
    ),
  }),
  result: Type.Object({ interface: Type.Optional(Type.String()), address: Type.Optional(Type.String()), peers: Type.Optional(Type.Integer()) }),
});

const VolumeOnHost = Type.Object({
  volume_id: Type.String({ minLength: 1 }),
  name: Type.String({ minLength: 1 }),
  folder: Type.String({ pattern: '^/' }),
  type: Type.Union([Type.Literal('nfs'), Type.Literal('local')]),
});

/** One NFS client as an export line names it: an address, a network (CIDR), a host name, or a wildcard. */
export const NfsClient = Type.String({
  pattern: '^[A-Za-z0-9.:*/_-]{1,255}$',
  description: 'an address, a network in CIDR notation, a host name or a wildcard such as *.lan (as exports(5) takes them)',
});

export const NfsExport = Type.Object({ file: Type.String(), served: Type.Boolean(), reason: Type.Union([Type.String(), Type.Null()]) });

/**
 * Named anew when exports became restricted (it was `host.volume-prepare`, whose agents export to
 * every address): an agent without it is refused with "update the agent first" instead of
 * exporting a volume to the world.
 */
export const VolumePrepare = defineTaskKind({
  name: 'host.volume-share',
  description: 'create a volume’s folder and, for NFS, its export entry for the clients named (the members of its clusters); run again when they change',
  lane: 'host',
  minAgentVersion: FIRST_AGENT_VERSION,
  payload: Type.Object({ ...VolumeOnHost.properties, clients: Type.Optional(Type.Array(NfsClient, { maxItems: 4096 })) }),
  result: Type.Object({ folder: Type.String(), export: Type.Union([NfsExport, Type.Null()]) }),
});

export const VolumeRelease = defineTaskKind({
  name: 'host.volume-release',
  description: 'remove a volume’s NFS export entry (the folder and its data stay)',
  lane: 'host',
  minAgentVersion: FIRST_AGENT_VERSION,
  payload: VolumeOnHost,
  result: Type.Object({ released: Type.Optional(Type.Boolean()) }),
});

/**
 * What a member of a cluster needs to mount NFS volumes (Debian's nfs-common: mount.nfs, which
 * kubelets and Docker's NFS volumes use), installed with apt-get when it is missing; sent when a
 * node joins a cluster. The answer says whether it is there now, and why not.
 */
export const NfsClientInstall = defineTaskKind({
  name: 'host.nfs-client',
  description: 'install the NFS client (nfs-common) when it is missing: a cluster member mounts NFS volumes with it',
  // A package install may take minutes: beside the OS updates, never ahead of an overlay change.
  lane: 'maintenance',
  minAgentVersion: '0.2.0',
  payload: Empty,
  result: Type.Object({ package: Type.String(), present: Type.Boolean(), installed: Type.Boolean(), reason: Nullable(Type.String()) }),
});

/** A machine another must reach: a cluster manager at the address it advertises. */
export const PathTarget = Type.Object({
  node_id: Nullable(Type.String({ maxLength: 64, description: 'the node at the address, when hangar knows it (messages name it)' })),
  address: Type.String({ minLength: 1, maxLength: 64 }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  wireguard_public_key: Nullable(Type.String({ maxLength: 64, description: 'the node’s WireGuard key when the address is its overlay address: a handshake with that peer comes first' })),
});
export type PathTarget = Static<typeof PathTarget>;

/**
 * Before a machine joins a cluster: waits until it reaches one of the targets — over the overlay a
 * live WireGuard handshake with the target's peer, then (over either network) a TCP connection to
 * the port —, trying again with a growing pause until `wait_seconds` have passed, then fails saying
 * which part of the path is missing. In the orchestrator lane, before the join it guards: in the
 * host lane it would hold up the overlay.peers task that may be the very thing it waits for.
 */
export const NetworkConfirmPath = defineTaskKind({
  name: 'network.confirm-path',
  description: 'wait until this machine reaches a target (WireGuard handshake, then TCP), retrying with backoff for a bounded time',
  lane: 'orchestrator',
  minAgentVersion: '0.2.0',
  payload: Type.Object({
    targets: Type.Array(PathTarget, { minItems: 1, maxItems: 16 }),
    wait_seconds: Type.Integer({ minimum: 1, maximum: 3600 }),
  }),
  result: Type.Object({
    node_id: Nullable(Type.String()),
    address: Type.String({ minLength: 1 }),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    via: Type.Union([Type.Literal('overlay'), Type.Literal('address')]),
    attempts: Type.Integer({ minimum: 1 }),
    waited_seconds: Type.Number({ minimum: 0 }),
  }),
});

/** The tasks about the machine itself: its agent, its OS, its overlay interface and network paths, its folders and their backups. */
export const HOST_KINDS = [AgentLogs, AgentStop, AgentUpdate, OsCheckUpdates, OsUpdate, OsReboot, OverlayPeers, NetworkConfirmPath, VolumePrepare, VolumeRelease, NfsClientInstall, ...BACKUP_KINDS] as const;
