import { Type, type TSchema } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT, type Page } from '../db/repository.js';
import type { Permission } from '../auth/permissions.js';
import { defineRoute, type AuthRequirement, type RouteDef } from '../plugin.js';
import { Reply } from './reply.js';

/** The query of a paged list: how many items, and the `next_cursor` of the page before. */
export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE_LIMIT, default: DEFAULT_PAGE_LIMIT })),
    cursor: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);

/** The query of a resource's list (readRoutes): a page, and the names it may start with. */
export const NamedListQuery = Type.Object(
  {
    ...PageQuery.properties,
    name_prefix: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only those whose name starts with this (case-sensitive; no wildcards)' })),
  },
  { additionalProperties: false },
);

/**
 * Rows whose `name` column starts with `prefix`, character for character (case-sensitive, no
 * wildcards) on both dialects.
 */
export function nameStartsWith(prefix: string): (q: Knex.QueryBuilder) => void {
  return (q) => void q.whereRaw('substr(??, 1, ?) = ?', ['name', [...prefix].length, prefix]);
}
/** A name that is also a DNS label (it appears in domains and runtime object names). */
export const DnsName = Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: 'lowercase letters, digits and inner hyphens; at most 63 characters' });
export const NodeRef = Type.String({ pattern: '^node-[0-9a-z]+$' });
export const ForceQuery = Type.Object({ force: Type.Optional(Type.Boolean({ description: 'remove what runs on it as well' })) }, { additionalProperties: false });

/** `{id}` in a resource's path: its id (or, where the plugin allows it, its name). */
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

export interface ReadRoutes<T> {
  /** The collection's path, e.g. `/v1/services`; the record is `<path>/{id}`. */
  path: string;
  summaries: { list: string; get: string };
  /** A page of the records; `where` narrows it (the list's filters), to be passed on to Repository.page. */
  page(options: { limit?: number; cursor?: string; where?: (q: Knex.QueryBuilder) => void }): Promise<Page<T>>;
  /** The record for `{id}`; throws the 404. */
  find(id: string): Promise<T>;
  /** The list item of a record (may be async). */
  view(record: T): unknown;
  /** The single-record answer when it says more than a list item (default `view`). */
  detail?(record: T): unknown;
  /** Schema of one item, for OpenAPI. */
  response?: TSchema;
  /**
   * The records belong to projects (core/auth/scope.ts): the kind their resolver registers (the
   * list answers what the caller may see; one record, only in a project of the caller's), and what
   * a 404 calls one (default the kind).
   */
  scope?: { kind: string; noun?: string };
  /** Who may read them (default any authenticated caller; `{ role: 'admin' }` for the installation's own records). */
  auth?: AuthRequirement;
  /** The permission both reads need, where it is not the one the path implies (core/auth/permissions.ts). */
  permission?: Permission;
}

/**
 * A resource's two reads (for any authenticated caller unless `auth` says otherwise): the paged
 * list (filtered by `name_prefix`: the resource's table has a `name` column) and one record by id.
 */
export function readRoutes<T>(r: ReadRoutes<T>): RouteDef[] {
  return [
    defineRoute({
      method: 'GET',
      path: r.path,
      auth: r.auth ?? 'authenticated',
      ...(r.permission ? { permission: r.permission } : {}),
      ...(r.scope ? { scope: { list: r.scope.kind } } : {}),
      summary: r.summaries.list,
      schemas: { query: NamedListQuery, ...(r.response ? { response: Type.Array(r.response) } : {}) },
      handler: async (req) => {
        const { limit, cursor, name_prefix } = req.query;
        return Reply.pageOf(await r.page({ limit, cursor, ...(name_prefix ? { where: nameStartsWith(name_prefix) } : {}) }), async (item) => r.view(item));
      },
    }),
    defineRoute({
      method: 'GET',
      path: `${r.path}/{id}`,
      auth: r.auth ?? 'authenticated',
      ...(r.permission ? { permission: r.permission } : {}),
      ...(r.scope ? { scope: { of: [{ kind: r.scope.kind, from: 'params.id' as const, ...(r.scope.noun ? { noun: r.scope.noun } : {}) }] } } : {}),
      summary: r.summaries.get,
      schemas: { params: IdParams, ...(r.response ? { response: r.response } : {}) },
      handler: async (req) => (r.detail ?? r.view)(await r.find(req.params.id)),
    }),
  ];
}
