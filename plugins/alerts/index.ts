import { retentionLoops } from '../../core/retention.js';
import { ProjectGrantsRef, ScopeResolvers, type RouteScope, type ScopeAccess } from '../../core/auth/scope.js';
import { badRequest } from '../../core/errors.js';
import { projectsOfResources } from '../tags/api.js';
import { alertNotification, NotificationsRef } from '../notifications/api.js';
import { Type } from '@sinclair/typebox';
import { conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { ProjectSeriesPoint } from '../../core/metrics.js';
import { IdParams, PageQuery } from '../../core/http/resources.js';
import { definePlugin, type RouteDef, type Services, defineRoute } from '../../core/plugin.js';
import { AlertsConfigSchema, PROJECT_RULE_NAMES, RULE_NAMES, type AlertsConfig } from './config.js';
import { AlertEngine, alertIdentity, AlertStore, silenced, type AlertRecord } from './engine.js';
import { alertMigrations } from './migrations.js';
import { builtinRules } from './rules.js';

const STATES = ['pending', 'firing', 'resolved'] as const;

const AlertView = Type.Object({
  id: Type.String(),
  rule: Type.String(),
  resource_type: Type.String(),
  resource_id: Type.String(),
  project_id: Type.Union([Type.String(), Type.Null()], { description: 'the project of the resource (null: a node, a certificate, or a resource of no project)' }),
  subject: Type.Union([Type.String(), Type.Null()], { description: 'what on the resource: a mount point; null for the resource as a whole' }),
  severity: Type.String(),
  state: Type.String({ description: 'pending (seen, not yet for the rule’s for_seconds) | firing | resolved' }),
  message: Type.String(),
  observed_at: Type.String(),
  started_at: Type.Union([Type.String(), Type.Null()]),
  cleared_at: Type.Union([Type.String(), Type.Null()], { description: 'while firing: since when the condition has been clear (it resolves after alerts.hold_down_seconds)' }),
  resolved_at: Type.Union([Type.String(), Type.Null()]),
  silenced: Type.Boolean(),
  silenced_until: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const ListQuery = Type.Object(
  {
    ...PageQuery.properties,
    state: Type.Optional(Type.Union(STATES.map((s) => Type.Literal(s)), { description: 'only alerts in this state (default: firing and resolved)' })),
    rule: Type.Optional(Type.Union(RULE_NAMES.map((r) => Type.Literal(r)), { description: 'only alerts of this rule' })),
    resource_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'only alerts on this resource' })),
    project: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only alerts on resources of this project (id or name)' })),
  },
  { additionalProperties: false },
);

const SilenceBody = Type.Object(
  { minutes: Type.Integer({ minimum: 1, maximum: 525_600, description: 'how long: the alert announces nothing and is left out of hangar_alerts_firing until then (at most a year)' }) },
  { additionalProperties: false },
);

export default definePlugin({
  name: 'alerts',
  description: 'built-in alert rules (nodes offline, disk and memory, instances and services not running, rollouts halted, certificates expiring, stale backups, outdated agents): firing and resolved alerts, silences, events and a metric',
  configSchema: AlertsConfigSchema,
  migrations: alertMigrations,
  setup(services: Services) {
    const settings = services.config.alerts as AlertsConfig;
    const { clock } = services;
    const alerts = new AlertStore(services.db, clock);
    const findProject = async (ref: string) => (await services.provided.find(ProjectGrantsRef)?.find(ref)) ?? null;
    const engine = new AlertEngine(alerts, settings, builtinRules(services), clock, services.events, services.log, {
      find: findProject,
      of: (refs) => projectsOfResources(services.provided, refs),
    }, async (state, announcement) => (await services.provided.find(NotificationsRef)?.prepare(alertNotification(state, announcement))) ?? null);

    const view = (a: AlertRecord) => ({
      ...alertIdentity(a),
      state: a.state,
      message: a.message,
      observed_at: a.observed_at,
      started_at: a.started_at,
      cleared_at: a.cleared_at,
      resolved_at: a.resolved_at,
      silenced: silenced(a, clock.now()),
      silenced_until: silenced(a, clock.now()) ? a.silenced_until : null,
      created_at: a.created_at,
      updated_at: a.updated_at,
    });

    // An alert is its resource's project's (alerts.project_id); one of no project (a node's, a
    // certificate's) is the installation's, read as the route's auth says (core/auth/scope.ts, KindDef.unowned).
    services.provided.contribute(ScopeResolvers, {
      kind: 'alert',
      async projectsOf(refs) {
        const rows: Array<{ id: string; project_id: string | null }> = await alerts.query().whereIn('id', [...refs]).select('id', 'project_id');
        return new Map(rows.map((r) => [r.id, r.project_id ?? null]));
      },
    });
    const oneAlert: RouteScope = { of: [{ kind: 'alert', from: 'params.id' }] };

    async function requireAlert(id: string): Promise<AlertRecord> {
      const alert = await alerts.get(id);
      if (!alert) throw notFound(`No alert ${id}`);
      return alert;
    }

    /**
     * Alerts firing and not silenced by rule and severity, each enabled rule 0 when none fires: all of
     * them, or one project's (0 for the rules on a project's resources only).
     */
    async function firing(set: (labels: Record<string, string>, value: number) => void, projectId?: string): Promise<void> {
      for (const rule of projectId ? PROJECT_RULE_NAMES : RULE_NAMES) if (settings.rules[rule].enabled) set({ rule, severity: settings.rules[rule].severity }, 0);
      const now = clock.now().toISOString();
      const rows: Array<{ rule: string; severity: string; n: number | string }> = await alerts
        .query()
        .where({ state: 'firing', ...(projectId ? { project_id: projectId } : {}) })
        .where((q) => q.whereNull('silenced_until').orWhere('silenced_until', '<=', now))
        .select('rule', 'severity')
        .count({ n: '*' })
        .groupBy('rule', 'severity');
      for (const row of rows) set({ rule: row.rule, severity: row.severity }, Number(row.n));
    }
    const FIRING_HELP = 'Alerts firing and not silenced, by rule and severity';
    services.metrics.gauge('hangar_alerts_firing', FIRING_HELP, ['rule', 'severity'], (set) => firing(set), 'store');
    // A project's metrics: its own alerts (those on its resources), to its members who read alerts.
    services.provided.contribute(ProjectSeriesPoint, { name: 'hangar_alerts_firing', help: `${FIRING_HELP} (the project’s alerts)`, permission: 'alerts:read', collect: (projectId, set) => firing(set, projectId) });

    const routes: RouteDef[] = [
      defineRoute({
        method: 'GET',
        path: '/v1/alerts',
        auth: 'authenticated',
        // A member sees the alerts of its projects where its role reads alerts, and the installation's (nodes, certificates) as before.
        scope: { list: 'alert' },
        summary: 'Alerts, oldest first: firing and resolved (state=pending: conditions seen but not yet held long enough)',
        schemas: { query: ListQuery, response: Type.Array(AlertView) },
        async handler(req) {
          const { limit, cursor, state, rule, resource_id, project } = req.query;
          // What the scope step decided (core/http/koa-app.ts): ?project= resolved through it (a 400 for one the caller is
          // not a member of), and the projects the caller reads alerts in; the page holds only those (the step filters it again).
          const access = req.ctx.state.scope as ScopeAccess | null | undefined;
          const projectId = access ? access.narrowed : project === undefined ? undefined : await findProject(project);
          if (projectId === null) throw badRequest(`Validation failed: query.project: no project ${project}`, [{ path: 'query.project', message: 'names no project' }]);
          const allowed = access?.allowed ? [...access.allowed] : null;
          const page = await alerts.page({
            limit,
            cursor,
            where: (q) => {
              if (state) q.where({ state });
              else q.whereIn('state', ['firing', 'resolved']);
              if (rule) q.where({ rule });
              if (resource_id) q.where({ resource_id });
              if (projectId) q.where({ project_id: projectId });
              if (allowed) q.where((w) => void (access!.installation ? w.whereIn('project_id', allowed).orWhereNull('project_id') : w.whereIn('project_id', allowed)));
            },
          });
          return Reply.page(page, view);
        },
      }),
      defineRoute({
        method: 'GET',
        path: '/v1/alerts/{id}',
        auth: 'authenticated',
        scope: oneAlert,
        summary: 'One alert',
        schemas: { params: IdParams, response: AlertView },
        handler: async (req) => view(await requireAlert(req.params.id)),
      }),
      defineRoute({
        method: 'POST',
        path: '/v1/alerts/{id}/silence',
        auth: { role: 'admin' },
        permission: 'alert-silences:write',
        summary: 'Silence an alert for some minutes: it announces nothing (alert.firing / alert.resolved wait until the silence ends) and leaves hangar_alerts_firing',
        schemas: { params: IdParams, body: SilenceBody, response: AlertView },
        async handler(req) {
          const alert = await requireAlert(req.params.id);
          if (alert.state === 'resolved') throw conflict(`Alert ${alert.id} is resolved: there is nothing to silence`);
          const until = new Date(clock.now().getTime() + req.body.minutes * 60_000).toISOString();
          return view(await alerts.change(alert.id, { silenced_until: until }));
        },
      }),
      defineRoute({
        method: 'DELETE',
        path: '/v1/alerts/{id}/silence',
        auth: { role: 'admin' },
        permission: 'alert-silences:write',
        summary: 'End an alert’s silence: what it did not announce meanwhile is announced at the next check',
        schemas: { params: IdParams, response: AlertView },
        handler: async (req) => view(await alerts.change((await requireAlert(req.params.id)).id, { silenced_until: null })),
      }),
    ];

    return {
      routes,
      loops: [
        { name: 'alerts:evaluate', once: true, intervalMs: settings.interval_seconds * 1000, run: () => engine.run() },
        ...retentionLoops({ name: 'alerts:retention', days: settings.retention_days, clock, log: services.log, what: 'alerts: resolved alerts', prune: (before) => engine.prune(before) }),
      ],
    };
  },
});
