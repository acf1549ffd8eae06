import { Type } from '@sinclair/typebox';
import { userGrantsOf } from '../../core/auth/permissions.js';
import { ProjectGrantsRef, ScopeGate, ScopeResolvers } from '../../core/auth/scope.js';
import { notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { exposition, gaugeJson, ProjectSeriesPoint, RESOURCE_LABELS } from '../../core/metrics.js';
import { defineRoute, type RouteDef, type Services } from '../../core/plugin.js';
import { ONE_PROJECT } from './grants.js';

/**
 * `GET /v1/projects/{id}/metrics`: a project's share of `/metrics` (docs/metrics.md), for its
 * members. `/metrics` itself stays the operator's scrape token's: its series name every project's
 * resources. Here a series is answered only when every resource it names (RESOURCE_LABELS: a
 * volume's backups) is of this project and the caller's role reads that kind there; series of the
 * installation (requests, agents, tasks, the process) are not. Besides, the series computed for the
 * project itself (ProjectSeriesPoint: its alerts firing), where the role grants what each needs.
 */
export function projectMetricsRoute(services: Services): RouteDef {
  let grants: ReturnType<typeof userGrantsOf> | undefined;
  const gate = new ScopeGate(services.provided, () => (grants ??= userGrantsOf(services.routeTable().map((r) => r.route))));
  return defineRoute({
    method: 'GET',
    path: '/v1/projects/{id}/metrics',
    auth: 'authenticated',
    scope: ONE_PROJECT,
    produces: 'text/plain',
    errors: [403],
    summary: 'A project’s metrics (Prometheus text format): the series of /metrics that name its resources (its volumes’ backups) and its alerts firing (hangar_alerts_firing), those your role there reads',
    description: 'See docs/metrics.md. Never the installation’s series (requests, agents, tasks, the process): those are /metrics’, for the scrape token.',
    schemas: { params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: 'the project’s id or name' }) }) },
    async handler(req) {
      const project = await services.provided.find(ProjectGrantsRef)?.find(req.params.id);
      if (!project) throw notFound(`No project ${req.params.id}`);
      const principal = req.principal!;
      /** Whether the caller reads this resource label's kind in the project. */
      const reads = new Map<string, boolean>();
      for (const [label, { permission }] of Object.entries(RESOURCE_LABELS)) {
        const access = await gate.access(principal, permission);
        reads.set(label, access.allowed === null || access.allowed.has(project));
      }
      /** The project of each resource named, by label and value (resolved once per scrape). */
      const projectOf = new Map<string, string | null>();
      const resolve = async (label: string, value: string) => {
        const key = `${label}\0${value}`;
        if (!projectOf.has(key)) {
          const resolver = services.provided.contributions(ScopeResolvers).find((r) => r.kind === RESOURCE_LABELS[label]!.kind);
          projectOf.set(key, resolver ? ((await resolver.projectsOf([value])).get(value) ?? null) : null);
        }
        return projectOf.get(key);
      };
      const metrics = await services.metrics.select(async (labels) => {
        const named = Object.keys(labels).filter((l) => l in RESOURCE_LABELS && labels[l] !== undefined);
        if (!named.length) return false;
        for (const label of named) if (!reads.get(label) || (await resolve(label, String(labels[label]))) !== project) return false;
        return true;
      });
      // The series computed for the project itself (its alerts firing), where its role grants what they need.
      for (const series of services.provided.contributions(ProjectSeriesPoint)) {
        const access = await gate.access(principal, series.permission);
        if (access.allowed !== null && !access.allowed.has(project)) continue;
        const values: Array<{ labels: Record<string, string>; value: number }> = [];
        await series.collect(project, (labels, value) => void values.push({ labels, value }));
        if (values.length) metrics.push(gaugeJson(series.name, series.help, values));
      }
      return Reply.raw(exposition(metrics), services.metrics.contentType, { 'Cache-Control': 'no-store' });
    },
  });
}
