import { Type, type TSchema } from '@sinclair/typebox';
import { DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT, type Page } from '../db/repository.js';
import type { RouteDef } from '../plugin.js';
import { Reply } from './reply.js';

/** The query of a paged list: how many items, and the `next_cursor` of the page before. */
export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE_LIMIT, default: DEFAULT_PAGE_LIMIT })),
    cursor: Type.Optional(Type.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
);

/** `{id}` in a resource's path: its id (or, where the plugin allows it, its name). */
export const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

export interface ReadRoutes<T> {
  /** The collection's path, e.g. `/v1/services`; the record is `<path>/{id}`. */
  path: string;
  summaries: { list: string; get: string };
  page(options: { limit?: number; cursor?: string }): Promise<Page<T>>;
  /** The record for `{id}`; throws the 404. */
  find(id: string): Promise<T>;
  view(record: T): unknown;
  /** The single-record answer when it says more than a list item (default `view`). */
  detail?(record: T): unknown;
  /** Schema of one item, for OpenAPI. */
  response?: TSchema;
}

/** A resource's two reads for any authenticated caller: the paged list and one record by id. */
export function readRoutes<T>(r: ReadRoutes<T>): RouteDef[] {
  return [
    {
      method: 'GET',
      path: r.path,
      auth: 'authenticated',
      summary: r.summaries.list,
      schemas: { query: PageQuery, ...(r.response ? { response: Type.Array(r.response) } : {}) },
      handler: async (req) => Reply.page(await r.page({ limit: req.query.limit, cursor: req.query.cursor }), r.view),
    },
    {
      method: 'GET',
      path: `${r.path}/{id}`,
      auth: 'authenticated',
      summary: r.summaries.get,
      schemas: { params: IdParams, ...(r.response ? { response: r.response } : {}) },
      handler: async (req) => (r.detail ?? r.view)(await r.find(req.params.id)),
    },
  ];
}
