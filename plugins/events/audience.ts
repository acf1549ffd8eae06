import type { Knex } from 'knex';
import type { Principal } from '../../core/auth/index.js';
import { permitted, readsEverything, type UserGrants } from '../../core/auth/permissions.js';
import { ProjectGrantsRef, ScopeGate, ScopeResolvers, type ScopeAccess } from '../../core/auth/scope.js';
import type { RecordChange } from '../../core/db/changes.js';
import type { ServiceRegistry } from '../../core/provided.js';

/**
 * Who may receive an event: the reading permission of what it is about and, for a resource of a
 * project, that project (null: of no project the store could name, so installation roles only).
 * `adminOnly`: admins and auditors with a credential of the installation (tasks, SSH profiles).
 */
export interface Audience {
  adminOnly?: boolean;
  permission?: string;
  /** Present for the resources of a project's kind: its project id, or null when none was found. */
  project?: string | null;
}

/** How a table's records are read and find their project. */
interface TableAudience {
  permission: string | ((id: string) => string);
  /** The scope resolver's kind (core/auth/scope.ts ScopeResolvers); absent: an installation thing. */
  kind?: string | ((id: string) => string);
  /** The record leads to its project through another one: this column names a record of `kind`. */
  via?: string;
  /** The record is a project itself. */
  project?: true;
}

const config = (id: string) => id.startsWith('cfg-');

/** The tables whose changes stream, by what reading them needs. A table not listed is for admins and auditors. */
const TABLES: Readonly<Record<string, TableAudience>> = {
  clusters: { permission: 'clusters:read', kind: 'cluster' },
  cluster_members: { permission: 'clusters:read', kind: 'cluster', via: 'cluster_id' },
  compute_instances: { permission: 'instances:read', kind: 'instance' },
  services: { permission: 'services:read', kind: 'service' },
  s3_instances: { permission: 'object-stores:read', kind: 'object-store' },
  volumes: { permission: 'volumes:read', kind: 'volume' },
  backup_runs: { permission: 'volumes:read', kind: 'volume', via: 'volume_id' },
  backup_targets: { permission: 'backups:read', kind: 'backup-target' },
  backup_schedules: { permission: 'backups:read', kind: 'backup-schedule' },
  secrets: { permission: (id) => (config(id) ? 'configs:read' : 'secrets:read-metadata'), kind: (id) => (config(id) ? 'config' : 'secret') },
  load_balancers: { permission: 'loadbalancers:read', kind: 'loadbalancer' },
  projects: { permission: 'projects:read', project: true },
  nodes: { permission: 'nodes:read' },
  agent_rollouts: { permission: 'nodes:read' },
  alerts: { permission: 'alerts:read', kind: 'alert' },
  notification_channels: { permission: 'notifications:read' },
  notification_subscriptions: { permission: 'notifications:read' },
  notification_deliveries: { permission: 'notifications:read' },
};

/** Every reading permission of a project's kind an event may need (what a stream's caller is asked for once). */
export const PROJECT_READS: readonly string[] = [
  ...new Set(Object.values(TABLES).flatMap((t) => (t.kind || t.project ? (typeof t.permission === 'string' ? [t.permission] : ['configs:read', 'secrets:read-metadata']) : []))),
];

/** Records' projects kept, at most: a change of a record seen before is attributed without asking the store. */
const CACHED = 10_000;

/**
 * Attributes each change of a record to its audience, asking the kind's scope resolver once per
 * record and keeping the answer (a record stays in its project; a deleted one is forgotten once its
 * deletion is attributed). Changes are attributed in the order they came, so the stream keeps it.
 */
export class Attributor {
  private readonly projects = new Map<string, string | null>();
  /** Records being looked up: their other changes meanwhile wait for the same answer. */
  private readonly resolving = new Map<string, Promise<string | null>>();
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly provided: ServiceRegistry,
    private readonly knex: () => Knex,
  ) {}

  /** Whether projects are in force (the projects plugin is loaded). */
  get active(): boolean {
    return Boolean(this.provided.find(ProjectGrantsRef));
  }

  /**
   * Hands `deliver` the change's audience, in the order of the calls (a record's project may take
   * a store round trip the first time it is seen). A change that carries its row is attributed from
   * it: a record deleted before its project was asked for (never seen since this process started)
   * still reaches its project's members.
   */
  attribute(change: RecordChange, deliver: (audience: Audience) => void): void {
    const { table, id, op, row } = change;
    const of = TABLES[table];
    if (!of) return void this.enqueue(() => deliver({ adminOnly: true }));
    const permission = typeof of.permission === 'function' ? of.permission(id) : of.permission;
    // Without projects (or for the installation's things) no project is named: installation roles decide.
    if ((!of.kind && !of.project) || !this.active) return void this.enqueue(() => deliver({ permission }));
    if (of.project) return void this.enqueue(() => deliver({ permission, project: id }));
    const key = `${table}:${id}`;
    const cached = this.projects.get(key);
    if (cached !== undefined) {
      if (op === 'delete') this.projects.delete(key);
      return void this.enqueue(() => deliver({ permission, project: cached }));
    }
    let resolving = row ? undefined : this.resolving.get(key);
    if (!resolving) {
      const asked = this.projectOf(table, of, id, row).catch(() => null);
      if (!row) this.resolving.set(key, asked);
      resolving = asked;
      void asked.then((project) => {
        if (this.resolving.get(key) === asked) this.resolving.delete(key);
        if (op !== 'delete') this.remember(key, project);
      });
    }
    const answer = resolving;
    this.enqueue(async () => {
      const project = await answer;
      if (op === 'delete') this.projects.delete(key);
      deliver({ permission, project });
    });
  }

  private enqueue(step: () => void | Promise<void>): void {
    this.queue = this.queue.then(step).catch(() => undefined);
  }

  private remember(key: string, project: string | null): void {
    if (project === null) return;
    if (this.projects.size >= CACHED) this.projects.delete(this.projects.keys().next().value!);
    this.projects.set(key, project);
  }

  private async projectOf(table: string, of: TableAudience, id: string, row?: Readonly<Record<string, unknown>>): Promise<string | null> {
    const kind = typeof of.kind === 'function' ? of.kind(id) : of.kind!;
    const resolver = this.provided.contributions(ScopeResolvers).find((r) => r.kind === kind);
    let ref = id;
    if (of.via) {
      const through = row?.[of.via] ?? ((await this.knex()(table).where({ id }).first(of.via)) as Record<string, unknown> | undefined)?.[of.via];
      if (typeof through !== 'string') return null;
      ref = through;
    } else if (row && resolver?.projectOfRow) {
      const fromRow = await resolver.projectOfRow(row);
      if (fromRow !== undefined) return fromRow;
    }
    return resolver ? ((await resolver.projectsOf([ref])).get(ref) ?? null) : null;
  }
}

/**
 * What one caller may receive, decided once (its memberships read once) and again when a notice
 * says they changed: the events of the installation its role reads, and those of the resources of
 * projects where its role grants reading their kind.
 */
export class Viewer {
  private constructor(
    readonly principal: Principal,
    /** By permission; null when projects are not in force (installation roles alone decide, as before them). */
    private readonly access: ReadonlyMap<string, ScopeAccess> | null,
    private readonly userGrants: UserGrants,
  ) {}

  static async of(principal: Principal, gate: ScopeGate, userGrants: UserGrants): Promise<Viewer> {
    return new Viewer(principal, gate.active ? await gate.accessTo(principal, PROJECT_READS) : null, userGrants);
  }

  sees(audience: Audience): boolean {
    const p = this.principal;
    // Not to a key narrowed to a permission list: admin-only events (tasks, users, keys) are no permission it can name.
    if (audience.adminOnly) return readsEverything(p) && !p.project_id && !p.permissions;
    // Before projects: what any caller could list, as it was.
    if (!this.access || !audience.permission) return true;
    if (audience.project === undefined) return !p.project_id && permitted(p, audience.permission, this.userGrants);
    const access = this.access.get(audience.permission);
    // Of no project: installation roles', and for a kind that keeps the installation's beside its projects' (alerts) whoever may list those.
    return Boolean(access) && (access!.allowed === null || (audience.project === null ? access!.installation : access!.allowed.has(audience.project)));
  }
}
