import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import type { EventBus } from '../../core/events.js';
import { newId } from '../../core/ids.js';
import type { Logger } from '../../core/log.js';
import { RULE_NAMES, type AlertsConfig, type RuleName, type RuleSettings, type Severity } from './config.js';
import { ALERTS } from './migrations.js';
import type { Condition, Observation, Rule } from './rules.js';
import { alertTopic, type AlertAnnouncement } from './api.js';

export type AlertState = 'pending' | 'firing' | 'resolved';

export interface AlertRecord {
  id: string;
  rule: string;
  resource_type: string;
  resource_id: string;
  /** The project of the resource when the alert was last judged (null: a node, a certificate, or a resource of no project). */
  project_id: string | null;
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
  constructor(
    store: Store,
    private readonly clockOf: Clock,
  ) {
    super(store, ALERTS, { dates: ['observed_at', 'started_at', 'cleared_at', 'resolved_at', 'silenced_until', 'created_at', 'updated_at'] }, clockOf);
  }

  /**
   * Marks an alert's state announced, with `write` (its notification's outbox rows) in the same
   * transaction: both or neither. Guarded by the mark read (`a.notified_state`): null, and nothing
   * written, when it changed meanwhile.
   */
  async markAnnounced(a: AlertRecord, state: 'firing' | 'resolved', write: ((trx: Knex.Transaction) => Promise<void>) | null): Promise<AlertRecord | null> {
    const values = this.codec.encode({ notified_state: state, updated_at: this.clockOf.now().toISOString() });
    const guard = a.notified_state === null ? ' and "notified_state" is null' : ' and "notified_state" = ?';
    return this.store.knex.transaction(async (trx) => {
      const changed = await this.updateWhere(a.id, values, guard, a.notified_state === null ? [] : [a.notified_state], trx);
      if (changed && write) await write(trx);
      return changed;
    });
  }
}

/** Whether an alert is silenced at `now`. */
export const silenced = (a: Pick<AlertRecord, 'silenced_until'>, now: Date) => a.silenced_until !== null && Date.parse(a.silenced_until) > now.getTime();

/** The key of an open alert: one rule's condition on one resource (and subject). */
const keyOf = (rule: string, c: Pick<Condition, 'resource_type' | 'resource_id' | 'subject'>) => `${rule}|${c.resource_type}|${c.resource_id}|${c.subject}`;

/** Which alert it is, as the API and the events name it: its rule's condition on one resource. */
export function alertIdentity(a: AlertRecord) {
  return {
    id: a.id,
    rule: a.rule,
    resource_type: a.resource_type,
    resource_id: a.resource_id,
    project_id: a.project_id ?? null,
    subject: a.subject || null,
    severity: a.severity,
  };
}

/** What `alert.firing` and `alert.resolved` carry on the EventBus (and the live events stream). */
export function alertPayload(a: AlertRecord): AlertAnnouncement {
  return {
    ...alertIdentity(a),
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
 *   whose firing was announced); a silenced alert announces nothing until its silence ends. The
 *   announcement's notification is written in the transaction that marks it announced.
 */
/** A condition as judged: its resource's project and the settings that apply to it (the project's overrides, else the installation's). */
interface Judged extends Condition {
  project_id: string | null;
  severity: Severity;
  for_seconds: number;
}

/** Where the engine learns of projects (the projects plugin and the resources' scope resolvers; both absent without projects). */
export interface ProjectLookup {
  /** A project's id by id or name; null when there is none (or projects are not loaded). */
  find(ref: string): Promise<string | null>;
  /** The projects of resources by `type|id` (null: of no project). */
  of(refs: ReadonlyArray<{ type: string; id: string }>): Promise<Map<string, string | null>>;
}

export class AlertEngine {
  /** Project refs of alerts.projects already warned about (named no project). */
  private readonly unknownProjects = new Set<string>();

  constructor(
    private readonly alerts: AlertStore,
    private readonly settings: AlertsConfig,
    private readonly rules: Partial<Record<string, Rule>>,
    private readonly clock: Clock,
    private readonly bus: EventBus,
    private readonly log: Logger,
    private readonly projects: ProjectLookup = { find: async () => null, of: async (refs) => new Map(refs.map((r) => [`${r.type}|${r.id}`, null])) },
    /** The write of an announcement's notification (plugins/notifications: NotificationsApi.prepare), absent without notifications. */
    private readonly notify?: (state: 'firing' | 'resolved', a: AlertAnnouncement) => Promise<((trx: Knex.Transaction) => Promise<void>) | null>,
  ) {}

  async run(): Promise<void> {
    const overrides = await this.projectOverrides();
    for (const name of RULE_NAMES) {
      const rule = this.rules[name];
      let judged: { conditions: Judged[]; unknown: Set<string> } = { conditions: [], unknown: new Set() };
      if (rule) {
        try {
          judged = await this.judge(name, rule, overrides);
        } catch (err) {
          // A rule that cannot look this turn changes nothing (its alerts neither fire nor resolve).
          this.log.warn({ rule: name, err: (err as Error).message }, 'alert rule failed; its alerts are left as they are this turn');
          continue;
        }
      }
      await this.apply(name, judged.conditions, judged.unknown);
    }
    await this.announce();
  }

  /** alerts.projects by project id (refs that name no project are skipped, with one warning each). */
  private async projectOverrides(): Promise<Map<string, Partial<Record<RuleName, Partial<RuleSettings>>>>> {
    const out = new Map<string, Partial<Record<RuleName, Partial<RuleSettings>>>>();
    for (const [ref, { rules }] of Object.entries(this.settings.projects ?? {})) {
      const id = await this.projects.find(ref);
      if (id) {
        out.set(id, { ...out.get(id), ...rules });
      } else if (!this.unknownProjects.has(ref)) {
        this.unknownProjects.add(ref);
        this.log.warn({ project: ref }, 'alerts.projects names no project (or projects are not loaded): its overrides are not applied');
      }
    }
    return out;
  }

  /**
   * Runs a rule with the installation's settings and with each project's that overrides them, and
   * keeps each condition from the run whose settings are its resource's project's. A rule disabled
   * for a project reports nothing on its resources (their alerts resolve after the hold-down).
   */
  private async judge(name: RuleName, rule: Rule, overrides: Map<string, Partial<Record<RuleName, Partial<RuleSettings>>>>): Promise<{ conditions: Judged[]; unknown: Set<string> }> {
    const base = this.settings.rules[name];
    const byProject = new Map<string, RuleSettings>();
    for (const [project, rules] of overrides) if (rules[name]) byProject.set(project, { ...base, ...rules[name] });
    const runs = new Map<RuleSettings, Observation>();
    for (const settings of new Set([base, ...byProject.values()])) if (settings.enabled) runs.set(settings, await rule(settings));
    const unknown = new Set([...runs.values()].flatMap((o) => [...o.unknown]));
    const found = [...runs.values()].flatMap((o) => o.conditions);
    const lookedUp = found.filter((c) => c.project_id === undefined);
    const projects = lookedUp.length ? await this.projects.of(lookedUp.map((c) => ({ type: c.resource_type, id: c.resource_id }))) : new Map<string, string | null>();
    const conditions: Judged[] = [];
    for (const [settings, observed] of runs) {
      for (const c of observed.conditions) {
        const project = c.project_id !== undefined ? c.project_id : (projects.get(`${c.resource_type}|${c.resource_id}`) ?? null);
        if (((project !== null && byProject.get(project)) || base) !== settings) continue;
        conditions.push({ ...c, project_id: project, severity: settings.severity, for_seconds: settings.for_seconds });
      }
    }
    return { conditions, unknown };
  }

  private async apply(rule: string, conditions: Judged[], unknown: Set<string>): Promise<void> {
    const now = this.clock.now();
    const at = now.toISOString();
    const rows: Record<string, unknown>[] = await this.alerts.query().where({ rule }).whereIn('state', ['pending', 'firing']);
    const open = rows.map(this.alerts.decode);
    const byKey = new Map<string, AlertRecord>(open.map((a) => [a.open_key, a]));
    const seen = new Set<string>();

    for (const c of conditions) {
      const key = keyOf(rule, c);
      if (seen.has(key)) continue;
      seen.add(key);
      const existing = byKey.get(key);
      if (!existing) {
        const firing = c.for_seconds === 0;
        await this.alerts.insert({
          id: newId('alert'),
          rule,
          resource_type: c.resource_type,
          resource_id: c.resource_id,
          project_id: c.project_id,
          subject: c.subject,
          open_key: key,
          severity: c.severity,
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
      if (existing.severity !== c.severity) patch.severity = c.severity;
      if ((existing.project_id ?? null) !== c.project_id) patch.project_id = c.project_id;
      if (existing.state === 'pending' && now.getTime() - Date.parse(existing.observed_at) >= c.for_seconds * 1000) Object.assign(patch, { state: 'firing', started_at: at });
      if (existing.state === 'firing' && existing.cleared_at) patch.cleared_at = null;
      if (Object.keys(patch).length) await this.alerts.change(existing.id, patch);
    }

    for (const a of open) {
      if (seen.has(a.open_key) || unknown.has(`${a.resource_type}|${a.resource_id}`)) continue;
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
      // Each alert on its own: one whose announcement fails (its matching, its outbox insert) stays
      // unannounced and is tried again at the next check; it holds back no other alert's.
      await this.announceOne(a).catch((err: Error) =>
        this.log.error({ alert: a.id, rule: a.rule, err: { message: err.message } }, `alert ${a.state}: its announcement failed; tried again at the next check`),
      );
    }
  }

  private async announceOne(a: AlertRecord): Promise<void> {
    const state = a.state as 'firing' | 'resolved';
    // The notification's outbox rows are written with the mark (the subscriptions matched first, outside the transaction).
    const write = (await this.notify?.(state, alertPayload(a))) ?? null;
    const changed = await this.alerts.markAnnounced(a, state, write);
    if (!changed) return;
    this.bus.publish(alertTopic(state), alertPayload(changed));
    this.log.info({ alert: a.id, rule: a.rule, resource_id: a.resource_id, subject: a.subject || undefined, severity: a.severity }, `alert ${a.state}: ${a.message}`);
  }
}
