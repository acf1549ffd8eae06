import { X509Certificate } from 'node:crypto';
import type { Services } from '../../core/plugin.js';
import { CERTIFICATES_TABLE } from '../../core/pki/pki.js';
import { compareVersions, versionInfo } from '../../core/version.js';
import type { RuleName, RuleSettings } from './config.js';
import { CONTROL_PLANE_BACKUP, controlPlaneBackupHealth } from '../backups/api.js';

/** A rule's condition holding on one resource (or one part of it: `subject`). */
export interface Condition {
  resource_type: string;
  resource_id: string;
  /** A mount point, a certificate…; '' for the resource as a whole. */
  subject: string;
  message: string;
  /**
   * The project the alert is recorded under when it is not its resource's (absent: the resource's):
   * a cluster member's readiness is the cluster's project's business — its message names the cluster.
   */
  project_id?: string | null;
}

/** What a rule saw this turn: the conditions that hold, and the resources it could not judge (their alerts stay as they are). */
export interface Observation {
  conditions: Condition[];
  /** `resource_type|resource_id` of resources without the data the rule needs (an offline node's disks). */
  unknown: Set<string>;
}

export type Rule = (settings: RuleSettings) => Promise<Observation>;

const json = <T>(value: unknown): T | null => (typeof value === 'string' ? (JSON.parse(value) as T) : ((value ?? null) as T | null));
const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const pct = (n: number) => `${Math.round(n * 10) / 10}%`;
const DAY_MS = 86_400_000;

interface NodeRow {
  id: string;
  name: string;
  connection: string;
  agent_version: string | null;
  last_heartbeat_at: unknown;
  resources: unknown;
}

/** A mount as the agent reports it (`resources.disks`); older agents report the root's totals only. */
interface Disk {
  mount: string;
  total_bytes: number;
  free_bytes: number;
}

function disksOf(resources: Record<string, unknown> | null): Disk[] {
  if (!resources) return [];
  if (Array.isArray(resources.disks)) {
    return (resources.disks as Array<Record<string, unknown>>).flatMap((d) => {
      const total = num(d.total_bytes);
      const free = num(d.free_bytes);
      return typeof d.mount === 'string' && total && free !== null ? [{ mount: d.mount, total_bytes: total, free_bytes: free }] : [];
    });
  }
  const total = num(resources.disk_total_bytes);
  const free = num(resources.disk_free_bytes);
  return total && free !== null ? [{ mount: '/', total_bytes: total, free_bytes: free }] : [];
}

/** The built-in rules over what the store holds; those of plugins that are not loaded are left out. */
export function builtinRules(services: Services): Partial<Record<RuleName, Rule>> {
  const { knex } = services.db;
  const now = () => services.clock.now().getTime();
  const loaded = (name: string) => services.plugins.includes(name);
  const nodes = async (): Promise<NodeRow[]> => knex('nodes').where({ removing: false }).select('id', 'name', 'connection', 'agent_version', 'last_heartbeat_at', 'resources');
  const nodeLabel = (n: NodeRow) => `node ${n.name} (${n.id})`;
  const none = (): Set<string> => new Set();

  const rules: Partial<Record<RuleName, Rule>> = {};
  if (loaded('nodes')) {
    rules.node_offline = async () => ({
      conditions: (await nodes())
        .filter((n) => n.connection === 'offline')
        .map((n) => ({ resource_type: 'node', resource_id: n.id, subject: '', message: `${nodeLabel(n)} is offline: no heartbeat since ${n.last_heartbeat_at ? new Date(n.last_heartbeat_at as string).toISOString() : 'it joined'}` })),
      unknown: none(),
    });

    // Use of a node's resources is judged only while its agent reports them: an offline node's last report is not news.
    const usage = (measure: (n: NodeRow, resources: Record<string, unknown> | null, threshold: number) => Condition[]): Rule => async (settings) => {
      const conditions: Condition[] = [];
      const unknown = none();
      for (const n of await nodes()) {
        if (n.connection !== 'online') {
          unknown.add(`node|${n.id}`);
          continue;
        }
        conditions.push(...measure(n, json<Record<string, unknown>>(n.resources), settings.threshold_percent!));
      }
      return { conditions, unknown };
    };
    rules.node_disk = usage((n, resources, threshold) =>
      disksOf(resources).flatMap((d) => {
        const used = (100 * (d.total_bytes - d.free_bytes)) / d.total_bytes;
        return used > threshold ? [{ resource_type: 'node', resource_id: n.id, subject: d.mount, message: `${nodeLabel(n)}: ${d.mount} is ${pct(used)} full (above ${threshold}%)` }] : [];
      }),
    );
    rules.node_memory = usage((n, resources, threshold) => {
      const total = num(resources?.memory_total_bytes);
      const free = num(resources?.memory_free_bytes);
      if (!total || free === null) return [];
      const used = (100 * (total - free)) / total;
      return used > threshold ? [{ resource_type: 'node', resource_id: n.id, subject: '', message: `${nodeLabel(n)}: memory ${pct(used)} in use (above ${threshold}%)` }] : [];
    });
    rules.agent_outdated = async () => ({
      conditions: (await nodes())
        .filter((n) => n.agent_version && compareVersions(n.agent_version, versionInfo.version) < 0)
        .map((n) => ({ resource_type: 'node', resource_id: n.id, subject: '', message: `${nodeLabel(n)} runs agent ${n.agent_version}, older than the control plane’s ${versionInfo.version}: update it (POST /v1/nodes/${n.id}/update-agent, the dashboard’s Update agent)` })),
      unknown: none(),
    });
    // A member its cluster reports not ready (a kubelet NotReady, a swarm node down) while its agent heartbeats; an offline node is node_offline's.
    rules.cluster_member_not_ready = async () => {
      const rows: Array<{ node_id: string; node_name: string; connection: string; cluster_name: string; backend: string; readiness_reason: string | null; project_id: string | null }> = await knex('cluster_members as m')
        .join('clusters as c', 'c.id', 'm.cluster_id')
        .join('nodes as n', 'n.id', 'm.node_id')
        .where({ 'm.status': 'active', 'm.readiness': 'not_ready' })
        .select('m.node_id', 'n.name as node_name', 'n.connection', 'c.name as cluster_name', 'c.backend', 'm.readiness_reason', 'c.project_id');
      const offline = rows.filter((r) => r.connection === 'offline');
      return {
        conditions: rows
          .filter((r) => r.connection !== 'offline')
          .map((r) => ({
            resource_type: 'node',
            resource_id: r.node_id,
            subject: '',
            // The cluster's project's (its name is theirs), not the installation's every user reads.
            project_id: r.project_id ?? null,
            message: `node ${r.node_name} (${r.node_id}) is not ready in ${services.clusters.nounOf(r)} ${r.cluster_name}${r.readiness_reason ? `: ${r.readiness_reason}` : ''}`,
          })),
        unknown: new Set(offline.map((r) => `node|${r.node_id}`)),
      };
    };
  }

  if (loaded('compute')) {
    rules.instance_not_running = async () => ({
      conditions: (await knex('compute_instances').where({ desired: 'running' }).whereNot({ status: 'running' }).select('id', 'name', 'status', 'reason')).map((i) => ({
        resource_type: 'instance',
        resource_id: i.id,
        subject: '',
        message: `instance ${i.name} (${i.id}) is ${i.status}, not running${i.reason ? `: ${i.reason}` : ''}`,
      })),
      unknown: none(),
    });
  }

  if (loaded('services')) {
    rules.service_not_running = async () => {
      const conditions: Condition[] = [];
      for (const s of await knex('services').whereIn('status', ['running', 'failed']).select('id', 'name', 'status', 'error', 'replicas')) {
        if (s.status === 'failed') {
          conditions.push({ resource_type: 'service', resource_id: s.id, subject: '', message: `service ${s.name} (${s.id}) failed${s.error ? `: ${s.error}` : ''}` });
          continue;
        }
        const short = Object.entries(json<Record<string, { desired?: number; running?: number }>>(s.replicas) ?? {}).filter(([, r]) => (r.running ?? 0) < (r.desired ?? 0));
        if (short.length) {
          const which = short.map(([name, r]) => `${name} ${r.running ?? 0}/${r.desired}`).join(', ');
          conditions.push({ resource_type: 'service', resource_id: s.id, subject: '', message: `service ${s.name} (${s.id}) runs fewer replicas than it wants: ${which}` });
        }
      }
      return { conditions, unknown: none() };
    };
  }

  // A rollout its cluster rolled back or paused on a failure: the workload runs, but not the spec asked for, until a later rollout goes through.
  if (loaded('compute') || loaded('services')) {
    rules.rollout_halted = async () => {
      const conditions: Condition[] = [];
      if (loaded('compute')) {
        for (const i of await knex('compute_instances').whereIn('status', ['rolled_back', 'paused']).select('id', 'name', 'status', 'reason')) {
          conditions.push({ resource_type: 'instance', resource_id: i.id, subject: '', message: `instance ${i.name} (${i.id}): its rollout was ${i.status === 'paused' ? 'paused' : 'rolled back'}${i.reason ? `: ${i.reason}` : ''}` });
        }
      }
      if (loaded('services')) {
        for (const s of await knex('services').whereNotIn('status', ['stopped', 'removing']).whereNotNull('halted_rollouts').select('id', 'name', 'halted_rollouts')) {
          const halted = Object.entries(json<Record<string, { status: string; message: string | null; revision?: number | null }>>(s.halted_rollouts) ?? {});
          if (!halted.length) continue;
          const which = halted.map(([part, h]) => `${part} ${h.status === 'paused' ? 'paused' : 'rolled back'}${h.message ? ` (${h.message})` : ''}${h.revision ? `, what runs is revision ${h.revision}` : ''}`).join('; ');
          conditions.push({ resource_type: 'service', resource_id: s.id, subject: '', message: `service ${s.name} (${s.id}): its rollout was halted: ${which}` });
        }
      }
      return { conditions, unknown: none() };
    };
  }

  rules.certificate_expiry = async (settings) => {
    const limit = now() + settings.within_days! * DAY_MS;
    const conditions: Condition[] = [];
    const expiring = (resource_id: string, what: string, expires: number) => {
      if (expires > limit) return;
      const left = expires - now();
      const when = left <= 0 ? `expired on ${new Date(expires).toISOString()}` : `expires on ${new Date(expires).toISOString()} (in ${Math.floor(left / DAY_MS)} days)`;
      conditions.push({ resource_type: 'certificate', resource_id, subject: '', message: `${what} ${when}` });
    };
    expiring('ca', 'the CA certificate', Date.parse(new X509Certificate(services.ca.caPem).validTo));
    expiring('server', 'the server certificate of the control API', Date.parse(new X509Certificate(services.ca.serverCredentials.cert).validTo));
    if (loaded('nodes')) {
      // A node's newest unrevoked client certificate is the one its agent uses.
      const rows: Array<{ node_id: string; expires_at: string }> = await knex(CERTIFICATES_TABLE)
        .join('nodes', 'nodes.id', `${CERTIFICATES_TABLE}.node_id`)
        .where('nodes.removing', false)
        .whereNull(`${CERTIFICATES_TABLE}.revoked_at`)
        .groupBy(`${CERTIFICATES_TABLE}.node_id`)
        .select(`${CERTIFICATES_TABLE}.node_id`)
        .max({ expires_at: `${CERTIFICATES_TABLE}.expires_at` });
      for (const r of rows) expiring(r.node_id, `the client certificate of node ${r.node_id}`, Date.parse(r.expires_at));
    }
    return { conditions, unknown: none() };
  };

  if (loaded('backups') && loaded('volumes')) {
    rules.backup_stale = async (settings) => {
      const cutoff = now() - settings.after_hours! * 3_600_000;
      const rows: Array<{ volume_id: string; first: unknown; last_success: unknown }> = await knex('backup_runs')
        .where({ operation: 'backup' })
        .whereIn('volume_id', knex('volumes').select('id'))
        .groupBy('volume_id')
        .select('volume_id')
        .min({ first: 'started_at' })
        .max({ last_success: knex.raw(`case when status = 'succeeded' then finished_at end`) });
      const conditions: Condition[] = [];
      for (const r of rows) {
        const last = r.last_success ? new Date(r.last_success as string).getTime() : null;
        const since = last ?? new Date(r.first as string).getTime();
        if (since >= cutoff) continue;
        conditions.push({
          resource_type: 'volume',
          resource_id: r.volume_id,
          subject: '',
          message: last ? `volume ${r.volume_id}: no successful backup since ${new Date(last).toISOString()}` : `volume ${r.volume_id}: no backup has succeeded since the first was tried (${new Date(since).toISOString()})`,
        });
      }
      return { conditions, unknown: none() };
    };
  }

  if (loaded('backups')) {
    // While backups.control_plane schedules the control plane's own backups: none succeeded for after_hours (or, with none ever, since the first failed).
    rules.control_plane_backup_stale = async (settings) => {
      const scheduled = (services.config.backups as { control_plane?: { target: string | null; cron: string | null } } | undefined)?.control_plane;
      if (!scheduled?.target || !scheduled.cron) return { conditions: [], unknown: none() };
      const { last_success_at: last, failures } = await controlPlaneBackupHealth(knex, scheduled.target);
      const since = last ?? failures[0]?.failed_at;
      if (!since || since.getTime() >= now() - settings.after_hours! * 3_600_000) return { conditions: [], unknown: none() };
      const lastFailure = failures.at(-1);
      const why = lastFailure ? `; ${failures.length} failed since, the last on ${lastFailure.failed_at.toISOString()}: ${lastFailure.error}` : '';
      const message = last
        ? `the control plane: no successful backup to backup target ${scheduled.target} since ${last.toISOString()}${why}`
        : `the control plane: no backup to backup target ${scheduled.target} has succeeded since the first was tried (${since.toISOString()})${why}`;
      return { conditions: [{ resource_type: CONTROL_PLANE_BACKUP.type, resource_id: CONTROL_PLANE_BACKUP.id, subject: '', message }], unknown: none() };
    };
  }
  return rules;
}
