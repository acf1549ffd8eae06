import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import type { EventBus } from '../../core/events.js';
import { newId } from '../../core/ids.js';
import type { Logger } from '../../core/log.js';
import { RULE_NAMES, type AlertsConfig, type Severity } from './config.js';
import { ALERTS } from './migrations.js';
import type { Condition, Observation, Rule } from './rules.js';
import { alertTopic, type AlertAnnouncement } from './api.js';

export type AlertState = 'pending' | 'firing' | 'resolved';

export interface AlertRecord {
  id: string;
  rule: string;
  resource_type: string;
  resource_id: string;
  subject: string;
  open_key: string;
  severity: Severity;
  state: AlertState;
  message: string;
  observed_at: string;
  started_at: string | null;
  cleared_at: string | null;
  resolved_at: string | null;
  silenced_until: string | null;
  notified_state: 'firing' | 'resolved' | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export class AlertStore extends StampedRepository<AlertRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, ALERTS, { dates: ['observed_at', 'started_at', 'cleared_at', 'resolved_at', 'silenced_until', 'created_at', 'updated_at'] }, clock);
  }
}

/** Whether an alert is silenced at `now`. */
export const silenced = (a: Pick<AlertRecord, 'silenced_until'>, now: Date) => a.silenced_until !== null && Date.parse(a.silenced_until) > now.getTime();

/** The key of an open alert: one rule's condition on one resource (and subject). */
const keyOf = (rule: string, c: Pick<Condition, 'resource_type' | 'resource_id' | 'subject'>) => `${rule}|${c.resource_type}|${c.resource_id}|${c.subject}`;

/** What `alert.firing` and `alert.resolved` carry on the EventBus (and the live events stream). */
export function alertPayload(a: AlertRecord): AlertAnnouncement {
  return {
    id: a.id,
    rule: a.rule,
    resource_type: a.resource_type,
    resource_id: a.resource_id,
    subject: a.subject || null,
    severity: a.severity,
    started_at: a.started_at,
    resolved_at: a.resolved_at,
    message: a.message,
  };
}

/**
 * One turn of the rules (run by one control plane at a time): each rule's conditions move its
 * alerts along pending → firing → resolved, and what changed is announced once.
 *
 * - A condition first seen opens a `pending` alert; it fires once it has held `for_seconds`
 *   (a condition that clears before that leaves nothing behind).
 * - A firing alert whose condition clears resolves only once it has stayed clear
 *   `hold_down_seconds`; if it comes back meanwhile the alert simply goes on firing. A flapping
 *   condition therefore fires once and resolves once.
 * - Resources a rule could not judge this turn (an offline node's disks) keep their alerts as they are.
 * - `alert.firing` is published once per alert, `alert.resolved` once after it (only for an alert
 *   whose firing was announced); a silenced alert announces nothing until its silence ends.
 */
export class AlertEngine {
  constructor(
    private readonly alerts: AlertStore,
    private readonly settings: AlertsConfig,
    private readonly rules: Partial<Record<string, Rule>>,
    private readonly clock: Clock,
    private readonly bus: EventBus,
    private readonly log: Logger,
  ) {}

  async run(): Promise<void> {
    for (const name of RULE_NAMES) {
      const settings = this.settings.rules[name];
      const rule = this.rules[name];
      let observed: Observation = { conditions: [], unknown: new Set() };
      if (rule && settings.enabled) {
        try {
          observed = await rule(settings);
        } catch (err) {
          // A rule that cannot look this turn changes nothing (its alerts neither fire nor resolve).
          this.log.warn({ rule: name, err: (err as Error).message }, 'alert rule failed; its alerts are left as they are this turn');
          continue;
        }
      }
      await this.apply(name, settings.severity, settings.for_seconds, observed);
    }
    await this.announce();
  }

  private async apply(rule: string, severity: Severity, forSeconds: number, observed: Observation): Promise<void> {
    const now = this.clock.now();
    const at = now.toISOString();
    const rows: Record<string, unknown>[] = await this.alerts.query().where({ rule }).whereIn('state', ['pending', 'firing']);
    const open = rows.map(this.alerts.decode);
    const byKey = new Map<string, AlertRecord>(open.map((a) => [a.open_key, a]));
    const seen = new Set<string>();
    const due = (since: string) => now.getTime() - Date.parse(since) >= forSeconds * 1000;

    for (const c of observed.conditions) {
      const key = keyOf(rule, c);
      if (seen.has(key)) continue;
      seen.add(key);
      const existing = byKey.get(key);
      if (!existing) {
        const firing = forSeconds === 0;
        await this.alerts.insert({
          id: newId('alert'),
          rule,
          resource_type: c.resource_type,
          resource_id: c.resource_id,
          subject: c.subject,
          open_key: key,
          severity,
          state: firing ? 'firing' : 'pending',
          message: c.message,
          observed_at: at,
          started_at: firing ? at : null,
          cleared_at: null,
          resolved_at: null,
          silenced_until: null,
          notified_state: null,
          created_at: at,
          updated_at: at,
        });
        continue;
      }
      const patch: Partial<AlertRecord> = {};
      if (existing.message !== c.message) patch.message = c.message;
      if (existing.severity !== severity) patch.severity = severity;
      if (existing.state === 'pending' && due(existing.observed_at)) Object.assign(patch, { state: 'firing', started_at: at });
      if (existing.state === 'firing' && existing.cleared_at) patch.cleared_at = null;
      if (Object.keys(patch).length) await this.alerts.change(existing.id, patch);
    }

    for (const a of open) {
      if (seen.has(a.open_key) || observed.unknown.has(`${a.resource_type}|${a.resource_id}`)) continue;
      if (a.state === 'pending') {
        await this.alerts.remove(a.id);
        continue;
      }
      const clearedAt = a.cleared_at ?? at;
      if (now.getTime() - Date.parse(clearedAt) >= this.settings.hold_down_seconds * 1000) {
        // Resolved: the key is free for the next alert of the same condition.
        await this.alerts.change(a.id, { state: 'resolved', resolved_at: at, cleared_at: clearedAt, open_key: a.id });
      } else if (!a.cleared_at) {
        await this.alerts.change(a.id, { cleared_at: at });
      }
    }
  }

  /** Deletes alerts resolved before `before`; answers how many. */
  async prune(before: Date): Promise<number> {
    return this.alerts.query().where({ state: 'resolved' }).where('resolved_at', '<', before.toISOString()).delete();
  }

  /** Publishes what has not been announced yet: firings, then resolutions of announced firings; silenced ones wait. */
  private async announce(): Promise<void> {
    const now = this.clock.now();
    const rows = (
      await this.alerts
        .query()
        .where((q) => q.where({ state: 'firing' }).whereNull('notified_state'))
        .orWhere((q) => q.where({ state: 'resolved', notified_state: 'firing' }))
        .orderBy('created_at')
    ).map(this.alerts.decode);
    for (const a of rows) {
      if (silenced(a, now)) continue;
      const changed = await this.alerts.change(a.id, { notified_state: a.state as 'firing' | 'resolved' });
      this.bus.publish(alertTopic(a.state as 'firing' | 'resolved'), alertPayload(changed));
      this.log.info({ alert: a.id, rule: a.rule, resource_id: a.resource_id, subject: a.subject || undefined, severity: a.severity }, `alert ${a.state}: ${a.message}`);
    }
  }
}
