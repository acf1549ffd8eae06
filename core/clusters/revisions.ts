/**
 * Spec revisions of the workloads on clusters (compute instances, services): every change of what
 * a resource asks for is kept as a numbered revision (who, when, the spec, the secret and config
 * versions it used), the last `keep` of them; a rollback rolls a kept revision out again as a new
 * one. The plugin owns what a spec is and how it rolls out; this keeps, numbers, trims and diffs.
 */
import { Type } from '@sinclair/typebox';
import type { Knex } from 'knex';
import type { Principal } from '../auth/index.js';
import type { Clock } from '../clock.js';
import { isUniqueViolation, Repository } from '../db/repository.js';
import type { Store } from '../db/store.js';
import { notFound } from '../errors.js';
import { newId } from '../ids.js';
import { SPEC_REVISIONS } from './migrations.js';

/** A secret or config version a revision used. */
export interface RevisionObject {
  kind: 'secret' | 'config';
  id: string;
  name: string;
  version: number;
}

export interface RevisionRecord {
  id: string;
  resource_type: string;
  resource_id: string;
  number: number;
  principal_id: string | null;
  principal_name: string | null;
  spec: Record<string, unknown>;
  objects: RevisionObject[];
  rollback_of: number | null;
  created_at: string;
  [key: string]: unknown;
}

/** One changed JSON path between two revisions; a value that is hidden reads `(hidden)`. */
export interface SpecChange {
  path: string;
  old: unknown;
  new: unknown;
}

/** A revision as `GET …/revisions` answers it ({@link revisionView}); the list is newest first. */
export const RevisionAnswer = Type.Object(
  {
    number: Type.Integer({ minimum: 1 }),
    time: Type.String({ description: 'when it was made (ISO 8601)' }),
    who: Type.Union([Type.Object({ id: Type.String(), name: Type.Union([Type.String(), Type.Null()]) }), Type.Null()], { description: 'who made it; null for a revision 1 kept by the upgrade that started revisions' }),
    rollback_of: Type.Optional(Type.Integer({ minimum: 1, description: 'the revision a rollback rolled out again' })),
    objects: Type.Array(Type.Object({ kind: Type.Union([Type.Literal('secret'), Type.Literal('config')]), id: Type.String(), name: Type.String(), version: Type.Integer() }), { description: 'the secret and config versions it used' }),
    changes: Type.Array(Type.Object({ path: Type.String(), old: Type.Unknown(), new: Type.Unknown() }), { description: 'what differs from the revision before (JSON paths; null where a side has none; (hidden) for a value never shown)' }),
  },
  { additionalProperties: false },
);
export const RevisionList = Type.Array(RevisionAnswer);

/** What the body of a rollback takes. */
export const RollbackBody = Type.Object({ revision: Type.Integer({ minimum: 1, description: 'the revision to roll out again (GET …/revisions)' }) }, { additionalProperties: false });

export const HIDDEN = '(hidden)';

const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const keyPath = (base: string, key: string) => (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(key) ? (base ? `${base}.${key}` : key) : `${base}[${JSON.stringify(key)}]`);

/**
 * The JSON paths where `after` differs from `before` (`env.MODE`, `ports[1]`, `volumes`), with their
 * old and new values (null where a side has none); a path `hide` says is secret shows `(hidden)`.
 */
export function specDiff(before: unknown, after: unknown, hide: (path: string[]) => boolean = () => false, path: string[] = [], base = ''): SpecChange[] {
  if (JSON.stringify(before) === JSON.stringify(after) || (before ?? null) === (after ?? null)) return [];
  const shown = (v: unknown) => (v === undefined ? null : hide(path) ? HIDDEN : v);
  // A map that appears or goes is told by its leaves (a first revision lists every one).
  if ((isPlain(before) || before === undefined) && (isPlain(after) || after === undefined)) {
    const from = (before ?? {}) as Record<string, unknown>;
    const to = (after ?? {}) as Record<string, unknown>;
    const keys = [...new Set([...Object.keys(from), ...Object.keys(to)])].sort();
    return keys.flatMap((k) => specDiff(from[k], to[k], hide, [...path, k], keyPath(base, k)));
  }
  if (Array.isArray(before) && Array.isArray(after)) {
    const n = Math.max(before.length, after.length);
    return Array.from({ length: n }, (_, i) => specDiff(before[i], after[i], hide, [...path, String(i)], `${base}[${i}]`)).flat();
  }
  return [{ path: base || '$', old: shown(before), new: shown(after) }];
}

export class RevisionStore extends Repository<RevisionRecord> {
  constructor(
    store: Store,
    private readonly clock: Clock,
    /** How many revisions of a resource are kept (the oldest go). */
    private readonly keep: () => number,
  ) {
    super(store, SPEC_REVISIONS, { json: ['spec', 'objects'], dates: ['created_at'] });
  }

  /** A resource's kept revisions, oldest first. */
  async of(type: string, resourceId: string): Promise<RevisionRecord[]> {
    return (await this.query().where({ resource_type: type, resource_id: resourceId }).orderBy('number')).map(this.decode);
  }

  async latest(type: string, resourceId: string): Promise<RevisionRecord | null> {
    const row = await this.query().where({ resource_type: type, resource_id: resourceId }).orderBy('number', 'desc').first();
    return row ? this.decode(row) : null;
  }

  /** One kept revision; a 404 naming the ones kept when it is not. */
  async require(type: string, resource: { id: string; name: string }, number: number): Promise<RevisionRecord> {
    const row = await this.query().where({ resource_type: type, resource_id: resource.id, number }).first();
    if (row) return this.decode(row);
    const kept = (await this.of(type, resource.id)).map((r) => r.number);
    const range = kept.length ? `it keeps ${kept[0] === kept.at(-1) ? `revision ${kept[0]}` : `revisions ${kept[0]}-${kept.at(-1)}`}` : 'it keeps none';
    throw notFound(`${type[0]!.toUpperCase()}${type.slice(1)} ${resource.name} has no revision ${number} (${range})`);
  }

  /**
   * A new revision of the resource, numbered after its newest, unless its spec and objects equal
   * the newest's (then that one). The oldest beyond `keep` go.
   */
  async append(
    type: string,
    resourceId: string,
    change: { spec: Record<string, unknown>; objects?: RevisionObject[]; principal: Pick<Principal, 'id' | 'name'> | null; rollbackOf?: number },
  ): Promise<RevisionRecord> {
    const objects = change.objects ?? [];
    for (let attempt = 0; ; attempt++) {
      const latest = await this.latest(type, resourceId);
      if (latest && change.rollbackOf === undefined && JSON.stringify(latest.spec) === JSON.stringify(change.spec) && JSON.stringify(latest.objects) === JSON.stringify(objects)) return latest;
      const number = (latest?.number ?? 0) + 1;
      try {
        const record = await this.insert({
          id: newId('rev'),
          resource_type: type,
          resource_id: resourceId,
          number,
          principal_id: change.principal?.id ?? null,
          principal_name: change.principal?.name ?? null,
          spec: change.spec,
          objects,
          rollback_of: change.rollbackOf ?? null,
          created_at: this.clock.now().toISOString(),
        });
        await this.query().where({ resource_type: type, resource_id: resourceId }).where('number', '<=', number - this.keep()).delete();
        return record;
      } catch (err) {
        // Another request numbered the same revision first: number after it.
        if (attempt < 5 && (isUniqueViolation(err) || (err as { status?: number }).status === 409)) continue;
        throw err;
      }
    }
  }

  /** Forgets a removed resource's revisions. */
  async forget(type: string, resourceId: string): Promise<void> {
    await this.query().where({ resource_type: type, resource_id: resourceId }).delete();
  }
}

/**
 * A revision as the API answers it: number, time, who, and what changed against the revision
 * before it (`diffable` gives the form compared: a service's YAML read as data; `hide` the paths
 * whose values are never shown). The first kept revision, or one whose predecessor is trimmed,
 * lists every path of its spec as new.
 */
export function revisionView(
  revision: RevisionRecord,
  previous: RevisionRecord | null,
  diffable: (r: RevisionRecord) => unknown = (r) => ({ ...r.spec, objects: objectVersions(r.objects) }),
  hide?: (path: string[]) => boolean,
) {
  return {
    number: revision.number,
    time: revision.created_at,
    who: revision.principal_id ? { id: revision.principal_id, name: revision.principal_name } : null,
    ...(revision.rollback_of !== null ? { rollback_of: revision.rollback_of } : {}),
    objects: revision.objects.map((o) => ({ kind: o.kind, id: o.id, name: o.name, version: o.version })),
    changes: specDiff(previous ? diffable(previous) : {}, diffable(revision), hide),
  };
}

/** The secret and config versions a revision used, as a diff shows them: `{secret: {db: 2}}`. */
export function objectVersions(objects: RevisionObject[]): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const o of objects) (out[o.kind] ??= {})[o.name] = o.version;
  return out;
}

/** A resource's revisions as the API lists them, newest first. */
export async function revisionsView(store: RevisionStore, type: string, resourceId: string, diffable?: (r: RevisionRecord) => unknown, hide?: (path: string[]) => boolean) {
  const kept = await store.of(type, resourceId);
  return kept.map((r, i) => revisionView(r, kept[i - 1] ?? null, diffable, hide)).reverse();
}

/**
 * For the migration that starts revisions of a kind: each existing record without one gets
 * revision 1, its spec as `specOf` reads it from the row (json columns may come as text).
 */
export async function seedRevisions(knex: Knex, type: string, table: string, specOf: (row: Record<string, unknown>) => Record<string, unknown>): Promise<void> {
  const have = new Set((await knex(SPEC_REVISIONS).where({ resource_type: type }).select('resource_id')).map((r: { resource_id: string }) => r.resource_id));
  const now = new Date().toISOString();
  for (const row of await knex(table).select()) {
    if (have.has(row.id as string)) continue;
    await knex(SPEC_REVISIONS).insert({
      id: newId('rev'),
      resource_type: type,
      resource_id: row.id,
      number: 1,
      principal_id: null,
      principal_name: null,
      spec: JSON.stringify(specOf(row)),
      objects: JSON.stringify([]),
      rollback_of: null,
      created_at: now,
    });
  }
}

/** A json column's value as data, in either dialect (SQLite answers text). */
export const jsonColumn = (value: unknown): unknown => (typeof value === 'string' ? JSON.parse(value) : value);
