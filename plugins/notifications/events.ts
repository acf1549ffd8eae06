import { newId } from '../../core/ids.js';
import type { DurableWrite, EventBus, Topic } from '../../core/events.js';
import { ClusterMemberJoined, ClusterMemberLeft } from '../../core/clusters/topics.js';
import { ResourceTroubled } from '../../core/lifecycle.js';
import { KINDS, READ_VERBS } from '../../core/auth/permissions.js';
import { TaskFailed } from '../../core/tasks/queue.js';
import { BackupVerifyFailed, CONTROL_PLANE_BACKUP, ControlPlaneBackupFailed, ControlPlaneBackupSucceeded, volumeRunTopic } from '../backups/api.js';

export const SEVERITIES = ['info', 'warning', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];
export const severityRank = (s: Severity) => SEVERITIES.indexOf(s);

/** What a channel is sent: one event, the same on every attempt. */
export interface NotificationEvent {
  /** `nev-…`: the event (several channels may carry it; each delivery has its own idempotency key). */
  id: string;
  type: string;
  occurred_at: string;
  severity: Severity;
  /** The resource it is about, when there is one. */
  resource: { type: string; id: string } | null;
  /** One line a person reads (chat and email channels show it). */
  message: string;
  data: Record<string, unknown>;
}

/** An event as a producer describes it (the id and time are filled in). */
export type NewEvent = Omit<NotificationEvent, 'id' | 'occurred_at'> & { occurred_at?: string };

/**
 * Audited writes by the kind of resource their route acts on (core/auth/permissions.ts): `audit.secrets`,
 * `audit.iam`…, and `audit.other` for routes of no kind (the login API).
 */
const AUDIT_EVENT_TYPES: Record<string, string> = Object.fromEntries([
  ...Object.entries(KINDS)
    .filter(([, k]) => k.scope !== 'none' && k.verbs.some((verb) => !READ_VERBS.has(verb)))
    .map(([kind, k]) => [`audit.${kind}`, `an audited write on ${k.about} (warning when it was refused or failed)`]),
  ['audit.other', 'an audited write of no kind above (the login API: logins, password resets)'],
]);

/**
 * The event types a subscription may name, with what each says. Every one is written to the outbox
 * in the transaction of the change it reports: `node.*`, `certificate.*`, `alert.*` and `audit.*` by
 * their producers (api.ts: NotificationsApi.prepare), the others by the publisher of a topic of the
 * event bus that this plugin listens to durably ({@link keepEvents}; core/events.ts `EventBus.keep`).
 */
export const EVENT_TYPES: Record<string, string> = {
  'node.created': 'a node record was created',
  'node.joined': 'a machine joined as a node',
  'node.status_changed': 'a node’s status changed (data.from, data.to; critical when it goes offline)',
  'node.removed': 'a node was removed',
  'node.join_failed': 'a machine failed to join',
  'certificate.issued': 'a node’s client certificate was issued',
  'certificate.revoked': 'a node’s certificates were revoked',
  'task.failed': 'an agent’s task failed (warning)',
  'cluster.member.joined': 'a node joined a swarm or Kubernetes cluster',
  'cluster.member.left': 'a node left a swarm or Kubernetes cluster',
  'volume.backup.succeeded': 'a volume backup finished',
  'volume.backup.failed': 'a volume backup failed (critical)',
  'volume.backup.verify_failed': 'a volume backup’s restore drill (verify) failed: the snapshot is made but not proven restorable (critical)',
  'volume.restore.succeeded': 'a volume restore finished',
  'volume.restore.failed': 'a volume restore failed (critical)',
  'control_plane.backup.succeeded': 'the control plane’s own backup (backups.control_plane: its schedule or POST /v1/backups/control-plane) was uploaded to its target',
  'control_plane.backup.failed': 'the control plane’s own backup failed (critical): data.error says why (the target unreachable, its keys refused, a setting missing…)',
  'workload.failed': 'an instance or service failed (critical): its deploy, update or removal, or the runtime found it failed',
  'workload.rolled_back': 'an instance’s or service’s rollout was rolled back to the previous revision (warning)',
  'workload.paused': 'an instance’s rollout was paused on a failure (on_failure: pause; warning)',
  'resource.failed': 'a volume, object store, load balancer or other resource hangar manages failed (critical)',
  ...AUDIT_EVENT_TYPES,
  'alert.firing': 'an alert rule started firing (its severity)',
  'alert.resolved': 'a firing alert resolved (info)',
};

/** The lifecycle nouns (core/lifecycle.ts) of workloads: their failures and rollbacks are `workload.*` events. */
const WORKLOAD_NOUNS = new Set(['instance', 'service']);
/** How a troubled status reads in a notification's message. */
const WHAT_HAPPENED: Record<string, string> = { failed: 'failed', rolled_back: 'was rolled back', paused: 'was paused (its rollout held on a failure)' };
/** A lifecycle noun's resource type where the two differ (the tags plugin's RESOURCE_TYPES). */
const RESOURCE_TYPE_OF_NOUN: Record<string, string> = { 'load balancer': 'loadbalancer', 'object store': 's3' };


/** Completes an event a producer describes. */
export function eventOf(e: NewEvent, now: Date): NotificationEvent {
  return { id: newId('nev'), occurred_at: e.occurred_at ?? now.toISOString(), type: e.type, severity: e.severity, resource: e.resource, message: e.message, data: e.data };
}

/**
 * Listens durably to the bus topics the declared types come from: each payload's event is matched by
 * `prepare` before its publisher's transaction and its outbox rows are written in it
 * (core/events.ts `EventBus.keepWith`). Answers the unsubscriber.
 */
export function keepEvents(bus: EventBus, prepare: (event: NewEvent) => Promise<DurableWrite | null>): () => void {
  const offs: Array<() => void> = [];
  const on = <T>(topic: Topic<T>, translate: (payload: T) => NewEvent | null) =>
    offs.push(
      bus.keep(topic, async (payload) => {
        const event = translate(payload);
        return event ? prepare(event) : null;
      }),
    );
  on(TaskFailed, (t) => ({
    type: 'task.failed',
    severity: 'warning',
    resource: { type: 'node', id: t.node_id },
    message: `task ${t.id} (${t.kind}) on node ${t.node_id} failed: ${t.error ?? 'no reason given'}`,
    data: { task_id: t.id, node_id: t.node_id, kind: t.kind, subject: t.subject, error: t.error },
  }));
  for (const what of ['joined', 'left'] as const) {
    on(what === 'joined' ? ClusterMemberJoined : ClusterMemberLeft, (m) => ({
      type: `cluster.member.${what}`,
      severity: 'info',
      resource: { type: m.clusterId.startsWith('swarm-') ? 'swarm' : 'cluster', id: m.clusterId },
      message: `node ${m.nodeId} ${what} ${m.clusterId}`,
      data: { cluster_id: m.clusterId, node_id: m.nodeId },
    }));
  }
  for (const operation of ['backup', 'restore'] as const) {
    for (const status of ['succeeded', 'failed'] as const) {
      on(volumeRunTopic(operation, status), (r) => ({
        type: `volume.${operation}.${status}`,
        severity: status === 'failed' ? 'critical' : 'info',
        resource: { type: 'volume', id: r.volume_id },
        message: `${operation} ${r.id} of volume ${r.volume_id} ${status}${r.error ? `: ${r.error}` : ''}`,
        data: { ...r },
      }));
    }
  }
  on(BackupVerifyFailed, (r) => ({
    type: 'volume.backup.verify_failed',
    severity: 'critical',
    resource: { type: 'volume', id: r.volume_id },
    message: `the restore drill of backup ${r.id} of volume ${r.volume_id} failed${typeof r.verify_error === 'string' ? `: ${r.verify_error}` : ''}`,
    data: { ...r },
  }));
  on(ControlPlaneBackupSucceeded, (b) => ({
    type: 'control_plane.backup.succeeded',
    severity: 'info',
    resource: { ...CONTROL_PLANE_BACKUP },
    message: `the control plane’s backup ${b.key} (${b.bytes} bytes) was uploaded to backup target ${b.target_id}`,
    data: { ...b },
  }));
  on(ControlPlaneBackupFailed, (b) => ({
    type: 'control_plane.backup.failed',
    severity: 'critical',
    resource: { ...CONTROL_PLANE_BACKUP },
    message: `the control plane’s ${b.trigger === 'schedule' ? 'scheduled ' : ''}backup to backup target ${b.target_id} failed${b.failures_in_row > 1 ? ` (${b.failures_in_row} in a row)` : ''}: ${b.error}`,
    data: { ...b },
  }));
  on(ResourceTroubled, (r) => {
    const workload = WORKLOAD_NOUNS.has(r.noun);
    if (!workload && r.to !== 'failed') return null;
    const label = `${r.noun} ${r.name ?? r.id}${r.name ? ` (${r.id})` : ''}`;
    return {
      type: workload ? `workload.${r.to}` : 'resource.failed',
      severity: r.to === 'failed' ? 'critical' : 'warning',
      resource: { type: RESOURCE_TYPE_OF_NOUN[r.noun] ?? r.noun.replace(/ /g, '_'), id: r.id },
      message: `${label} ${WHAT_HAPPENED[r.to] ?? r.to}${r.reason ? `: ${r.reason}` : ''}`,
      data: { ...r },
    };
  });
  return () => offs.forEach((off) => off());
}
