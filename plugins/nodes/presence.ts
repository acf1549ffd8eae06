import { isDeepStrictEqual } from 'node:util';
import { summarizeOverlay } from '../../core/overlay.js';
import type { BackgroundLoop } from '../../core/plugin.js';
import type { NodesContext } from './context.js';
import { HeartbeatWrites } from './heartbeats.js';
import { NODES } from './migrations.js';
import type { NodeRecord } from './nodes.js';
import type { HeartbeatFacts } from './schemas.js';

/** How often the heartbeats of online nodes are written (together); what readers see lags by this much at most. */
const HEARTBEAT_FLUSH_MS = 250;
/** How often each control plane counts the fleet (the heartbeat interval it announces follows it). */
const FLEET_COUNT_MS = 10_000;

const ARCHITECTURES: Record<string, string> = { x64: 'amd64', x86_64: 'amd64', amd64: 'amd64', arm64: 'arm64', aarch64: 'arm64' };

/** hangar's name for a machine architecture (`x86_64` → `amd64`); unknown names pass through. */
export function architectureName(reported: string): string {
  return ARCHITECTURES[reported] ?? reported;
}

/**
 * Presence: what the agents' heartbeats say of their nodes. A heartbeat brings a node online and
 * updates its facts; silence past the cadence's limit makes it offline (a loop run by one control
 * plane at a time). Both keep the node's status column in step (through changeNode); a heartbeat
 * that changes no status joins a batch (HeartbeatWrites) that writes only facts and times.
 */
export function presence(ctx: NodesContext) {
  const { services, nodes, cadence, settings, now, changeNode, setConnection, runtimeFacts } = ctx;
  const { db, clock } = services;
  const heartbeatWrites = new HeartbeatWrites(db.knex, db.dialect, NODES);

  services.metrics.gauge('hangar_agents', 'Nodes by what their agent’s heartbeats say: online, offline, pending (never heard from), stopped', ['connection'], async (set) => {
    for (const connection of ['online', 'offline', 'pending', 'stopped']) set({ connection }, 0);
    const rows: Array<{ connection: string; n: number | string }> = await nodes.query().where({ removing: false }).select('connection').count({ n: '*' }).groupBy('connection');
    for (const row of rows) set({ connection: row.connection }, Number(row.n));
  }, 'store');

  // Every node counts, pending ones too: a machine that just joined heartbeats within seconds, and a
  // fleet joining at once must hear the interval its size calls for from its first heartbeat.
  const countFleet = async () => {
    const [row] = await nodes.query().where({ removing: false }).count({ n: '*' });
    cadence.setFleet(Number(row?.n ?? 0));
  };

  async function heartbeat(node: NodeRecord, facts: HeartbeatFacts): Promise<NodeRecord> {
    const patch: Partial<NodeRecord> = {
      hostname: facts.hostname,
      architecture: architectureName(String(facts.architecture)),
      agent_version: facts.agent_version,
      last_heartbeat_at: now(),
      resources: facts.resources ?? null,
      facts: {
        os: facts.os ?? null,
        kernel: facts.kernel ?? null,
        addresses: facts.addresses ?? [],
        ...Object.fromEntries(runtimeFacts.map((name) => [name, facts[name] ?? null])),
        wireguard: facts.wireguard ?? null,
        restic: facts.restic ?? null,
        nfs: facts.nfs ?? null,
        pending_updates: facts.pending_updates ?? null,
        gpus: facts.gpus ?? [],
      },
      reboot_required: Boolean(facts.reboot_required),
      // Counts of peers that answer, not handshake times: it changes only when the overlay does.
      overlay: facts.overlay ? summarizeOverlay(facts.overlay) : null,
    };
    if (!node.ip_address && Array.isArray(facts.addresses)) {
      const primary = facts.addresses.find((a: { family: string; address: string }) => a.family === 'IPv4' && !a.address.startsWith('127.'));
      if (primary) patch.ip_address = primary.address;
    }
    // Coming (back) online, or a change of status, is written at once (with its event and the status
    // column); otherwise the write joins the next batch, and carries only what changed (for most
    // heartbeats, only the time): none of it is a column the status derives from.
    if (node.connection !== 'online' || node.reboot_required !== patch.reboot_required) {
      const why = node.connection !== 'online' ? 'heartbeat received' : `the agent reports ${patch.reboot_required ? 'that a reboot is required' : 'no reboot required'}`;
      return changeNode(node, { ...patch, connection: 'online' }, why);
    }
    const { last_heartbeat_at: at, ...reported } = patch;
    const changed = Object.entries(reported).filter(([key, value]) => !isDeepStrictEqual(value, node[key as keyof NodeRecord]));
    heartbeatWrites.add(node.id, at!, changed.length ? nodes.codec.encode({ ...Object.fromEntries(changed), updated_at: at }) : null);
    return { ...node, ...patch } as NodeRecord;
  }

  const loops: BackgroundLoop[] = [
    {
      name: 'nodes:heartbeat-writes',
      intervalMs: HEARTBEAT_FLUSH_MS,
      run: () => heartbeatWrites.flush().then(() => undefined),
    },
    {
      // In every control plane (and worker): each tells the agents it answers the interval the whole
      // fleet calls for, from its start (a restarted control plane's agents all come back at once).
      name: 'nodes:fleet-size',
      immediately: true,
      intervalMs: FLEET_COUNT_MS,
      run: countFleet,
    },
    {
      name: 'nodes:offline-detection',
      once: true,
      intervalMs: Math.max(1000, Math.floor((settings.offline_after_seconds * 1000) / 4)),
      async run() {
        // Heartbeats still queued here count: a node whose heartbeat just came is not silent.
        // (The grace follows the fleet, counted by nodes:fleet-size.)
        await heartbeatWrites.flush();
        const grace = cadence.offlineAfterSeconds;
        const cutoff = new Date(clock.now().getTime() - grace * 1000).toISOString();
        const silent = await nodes.query().where({ connection: 'online' }).where('last_heartbeat_at', '<', cutoff);
        for (const row of silent) await setConnection(nodes.decode(row), 'offline', `no heartbeat for ${grace} s`);
      },
    },
  ];

  return { heartbeat, loops, close: () => heartbeatWrites.flush().then(() => undefined) };
}
