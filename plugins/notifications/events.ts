import { newId } from '../../core/ids.js';
import type { EventBus, Topic } from '../../core/events.js';
import { ClusterMemberJoined, ClusterMemberLeft } from '../../core/clusters/topics.js';
import { ResourceTroubled } from '../../core/lifecycle.js';
import { KINDS, READ_VERBS } from '../../core/auth/permissions.js';
import { AuditRecorded } from '../audit/api.js';
import { TaskFailed } from '../../core/tasks/queue.js';
import { alertTopic } from '../alerts/api.js';
import { volumeRunTopic } from '../backups/api.js';
import { NodeEventRecorded } from '../nodes/api.js';

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

/** A node event kind (plugins/nodes, bus topic `node.event`) that is also a notification type. */
const NODE_KINDS: Record<string, { type: string; severity: (data: Record<string, unknown> | null) => Severity }> = {
  node_created: { type: 'node.created', severity: () => 'info' },
  node_joined: { type: 'node.joined', severity: () => 'info' },
  node_status_changed: { type: 'node.status_changed', severity: (d) => (d?.to === 'offline' ? 'critical' : d?.to === 'ready' ? 'info' : 'warning') },
  node_removed: { type: 'node.removed', severity: () => 'info' },
  join_failed: { type: 'node.join_failed', severity: () => 'warning' },
  certificate_issued: { type: 'certificate.issued', severity: () => 'info' },
  certificates_revoked: { type: 'certificate.revoked', severity: () => 'warning' },
};

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
 * The event types a subscription may name, with what each says. Each comes from a topic of the
 * in-process event bus (core/events.ts), translated by {@link bridgeEvents}.
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
  'volume.restore.succeeded': 'a volume restore finished',
  'volume.restore.failed': 'a volume restore failed (critical)',
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

const str = (v: unknown): string | null => (typeof v === 'string' && v ? v : null);
const asSeverity = (v: unknown, fallback: Severity): Severity => (SEVERITIES.includes(v as Severity) ? (v as Severity) : fallback);

/** Completes an event a producer describes. */
export function eventOf(e: NewEvent, now: Date): NotificationEvent {
  return { id: newId('nev'), occurred_at: e.occurred_at ?? now.toISOString(), type: e.type, severity: e.severity, resource: e.resource, message: e.message, data: e.data };
}

/**
 * Subscribes to the bus topics the declared types come from; `emit` is called at once with each
 * (it must not block: the bus is synchronous). Answers the unsubscriber.
 */
export function bridgeEvents(bus: EventBus, emit: (event: NewEvent) => void): () => void {
  const offs: Array<() => void> = [];
  const on = <T>(topic: Topic<T>, translate: (payload: T) => NewEvent | null) =>
    offs.push(
      bus.subscribe(topic, (payload) => {
        const event = translate(payload);
        if (event) emit(event);
      }),
    );
  on(NodeEventRecorded, (e) => {
    const kind = NODE_KINDS[e.kind];
    if (!kind) return null;
    return {
      type: kind.type,
      severity: kind.severity(e.data),
      resource: e.node_id ? { type: 'node', id: e.node_id } : null,
      message: e.message ?? `${kind.type}${e.node_id ? ` ${e.node_id}` : ''}`,
      data: { node_id: e.node_id, identifier: e.identifier, ...(e.data ?? {}) },
    };
  });
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
  on(AuditRecorded, (a) => ({
    type: `audit.${a.kind}`,
    severity: a.status >= 400 ? 'warning' : 'info',
    resource: a.resource_id ? { type: a.kind, id: a.resource_id } : null,
    message: `${a.principal_name ?? 'an anonymous caller'}: ${a.method} ${a.route}${a.resource_id ? ` (${a.resource_id})` : ''} answered ${a.status}`,
    data: { ...a },
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
  for (const state of ['firing', 'resolved'] as const) {
    on(alertTopic(state), (a) => {
      const type = str(a.resource_type);
      const id = str(a.resource_id);
      return {
        type: `alert.${state}`,
        severity: state === 'resolved' ? 'info' : asSeverity(a.severity, 'warning'),
        resource: type && id ? { type, id } : null,
        message: `${state === 'firing' ? 'FIRING' : 'resolved'}: ${str(a.message) ?? str(a.rule) ?? 'an alert'}`,
        data: { ...a, rule: a.rule ?? null, resource_type: type, resource_id: id, severity: asSeverity(a.severity, 'warning'), started_at: a.started_at ?? null, message: a.message ?? null },
      };
    });
  }
  return () => offs.forEach((off) => off());
}
