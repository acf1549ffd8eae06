import { Type } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { paginate } from '../../core/db/repository.js';
import { badRequest, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { TaggableResources } from '../../core/resources.js';
import { RESOURCE_TYPES, TAGGED_KINDS, TagsRef, type ResourceType, type Tag, type TagsApi } from './api.js';
import type { RouteScope } from '../../core/auth/scope.js';
import { ResourceDeleted } from '../../core/events.js';
import { recordTimes } from '../../core/db/columns.js';
import { createTables } from '../../core/db/migrations.js';

const TAGS = 'tags';
/** A tag set or its value replaced: one prepared statement (core/db/writes.ts). */
const PUT_TAG =
  'insert into "tags" ("resource_type", "resource_id", "key", "value", "created_at", "updated_at") values (?, ?, ?, ?, ?, ?) ' +
  'on conflict ("resource_type", "resource_id", "key") do update set "value" = excluded."value", "updated_at" = excluded."updated_at"';

const ResourceTypeSchema = Type.Union(
  RESOURCE_TYPES.map((t) => Type.Literal(t)),
  { description: RESOURCE_TYPES.join(' | ') },
);
const ResourceId = Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]*$', description: 'the resource’s id, or its name where its own paths take names (swarms, volumes, instances, services, object stores, secrets, configs)' });
const Key = Type.String({ pattern: '^[a-zA-Z0-9_.:/-]{1,63}$', description: 'letters, digits and _.:/-; 1 to 63 characters' });
const Value = Type.String({ maxLength: 255 });
const TagView = Type.Object({ resource_type: ResourceTypeSchema, resource_id: Type.String(), key: Type.String(), value: Type.String() });
const TagRef = { resource_type: ResourceTypeSchema, resource_id: ResourceId, key: Key };

/** A tag acts in its resource's project (the resource's resolver decides; nodes: installation roles only). */
const kinds = TAGGED_KINDS as Record<string, string>;
const ON_RESOURCE: RouteScope = { of: [{ kind: 'tagged', from: 'body.resource_id', kindAt: { from: ['body.resource_type'], kinds } }] };
/** A DELETE names its tag in the body or the query string (the body's fields first, as the handler reads them). */
const ON_NAMED_RESOURCE: RouteScope = {
  of: (['body', 'query'] as const).map((at) => ({ kind: 'tagged', from: `${at}.resource_id` as const, kindAt: { from: ['body.resource_type', 'query.resource_type'] as const, kinds } })),
};

const view = (row: Record<string, unknown>): Tag => ({
  resource_type: row.resource_type as ResourceType,
  resource_id: row.resource_id as string,
  key: row.key as string,
  value: row.value as string,
});

export default definePlugin({
  name: 'tags',
  description: 'key/value tags on any resource, and finding resources by tag',
  provides: [TagsRef],
  migrations: [
    createTables('001_tags', {
      [TAGS]: (t) => {
        t.string('resource_type', 20).notNullable();
        t.string('resource_id', 100).notNullable();
        t.string('key', 63).notNullable();
        t.string('value', 255).notNullable();
        recordTimes(t);
        t.primary(['resource_type', 'resource_id', 'key']);
        t.index(['key', 'value']);
      },
    }),
  ],
  setup(services) {
    const { db, clock } = services;
    const knex = (): Knex.QueryBuilder => db.knex(TAGS);
    const resolverOf = (type: ResourceType) => services.provided.contributions(TaggableResources).find((r) => r.type === type)?.resolve;
    /** The id a reference names (404 when a checked type has no such resource); unchecked types as given. */
    async function resolve(type: ResourceType, ref: string): Promise<string> {
      const resolver = resolverOf(type);
      if (!resolver) return ref;
      const id = await resolver(ref);
      if (!id) throw notFound(`No ${type} ${ref}`);
      return id;
    }

    const api: TagsApi = {
      async of(type, id) {
        const rows: Tag[] = await knex().where({ resource_type: type, resource_id: id }).orderBy('key').select('key', 'value');
        return Object.fromEntries(rows.map((r) => [r.key, r.value]));
      },
      async withAll(type, tags) {
        const entries = Object.entries(tags);
        if (!entries.length) return [];
        const rows: Array<{ resource_id: string }> = await knex()
          .where({ resource_type: type })
          .where((q) => {
            for (const [key, value] of entries) q.orWhere({ key, value });
          })
          .groupBy('resource_id')
          .havingRaw('count(*) = ?', [entries.length])
          .select('resource_id');
        return rows.map((r) => r.resource_id);
      },
    };
    services.provided.provide(TagsRef, api);

    // A resource's tags go with it (plugins publish `resource.deleted` with {type, id}).
    services.events.subscribe(ResourceDeleted, ({ type, id }) => {
      knex()
        .where({ resource_type: type, resource_id: id })
        .delete()
        .catch((err: Error) => services.log.warn({ resource_type: type, resource_id: id, error: err.message }, 'removing the tags of a deleted resource failed'));
    });

    /** The tag a DELETE names, from its body or its query string (either may carry it). */
    function deleteRef(body: Partial<Tag> | undefined, query: Partial<Tag>): Omit<Tag, 'value'> {
      const merged = { ...query, ...(body ?? {}) };
      const missing = (['resource_type', 'resource_id', 'key'] as const).filter((k) => !merged[k]);
      if (missing.length) {
        throw badRequest(
          `Validation failed: ${missing.map((k) => k).join(', ')} required (in the body or the query string)`,
          missing.map((k) => ({ path: `body.${k}`, message: 'is required (in the body or the query string)' })),
        );
      }
      return { resource_type: merged.resource_type!, resource_id: merged.resource_id!, key: merged.key! };
    }

    return {
      routes: [
        defineRoute({
          method: 'PUT',
          path: '/v1/tags',
          auth: { role: 'admin' },
          scope: ON_RESOURCE,
          summary: 'Set a tag on a resource (replaces the value of an existing key)',
          schemas: { body: Type.Object({ ...TagRef, value: Value }, { additionalProperties: false }), response: TagView },
          async handler(req) {
            const { resource_type: type, resource_id: ref, key, value } = req.body;
            const id = await resolve(type, ref);
            const now = clock.now().toISOString();
            await db.writes.run(TAGS, PUT_TAG, [type, id, key, value, now, now]);
            return { resource_type: type, resource_id: id, key, value };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/tags',
          auth: 'authenticated',
          // Only the tags of resources the caller reads (nodes': installation roles).
          scope: { list: { type: 'resource_type', id: 'resource_id', kinds } },
          summary: 'Find resources by tag: every resource with this key (and value, and type, when given)',
          schemas: {
            query: Type.Object(
              {
                key: Key,
                value: Type.Optional(Value),
                resource_type: Type.Optional(ResourceTypeSchema),
                limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
                cursor: Type.Optional(Type.String({ maxLength: 500 })),
              },
              { additionalProperties: false },
            ),
            response: Type.Array(TagView),
          },
          async handler(req) {
            const q = knex().where({ key: req.query.key });
            if (req.query.value !== undefined) q.where({ value: req.query.value });
            if (req.query.resource_type) q.where({ resource_type: req.query.resource_type });
            // With the key fixed, (type, id) names one tag: a unique keyset for the pages.
            const page = await paginate(q, { keys: ['resource_type', 'resource_id'], limit: req.query.limit, cursor: req.query.cursor, decode: view, cursors: services.db.cursors, list: `tags:${req.query.key}` });
            return Reply.page(page);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/tags',
          auth: { role: 'admin' },
          scope: ON_NAMED_RESOURCE,
          summary: 'Remove a tag from a resource (named in the body or the query string)',
          schemas: {
            body: Type.Object({ resource_type: Type.Optional(TagRef.resource_type), resource_id: Type.Optional(TagRef.resource_id), key: Type.Optional(TagRef.key) }, { additionalProperties: false }),
            query: Type.Object({ resource_type: Type.Optional(TagRef.resource_type), resource_id: Type.Optional(TagRef.resource_id), key: Type.Optional(TagRef.key) }, { additionalProperties: false }),
            response: Type.Object({ ...TagRef, deleted: Type.Literal(true) }, { additionalProperties: false }),
          },
          async handler(req) {
            const named = deleteRef(req.body, req.query);
            // A resource that is gone took its tags with it: its reference is looked for as given.
            const ref = { ...named, resource_id: (await resolverOf(named.resource_type)?.(named.resource_id)) ?? named.resource_id };
            const removed = await knex().where(ref).delete();
            if (!removed) throw notFound(`No tag ${ref.key} on ${ref.resource_type} ${ref.resource_id}`);
            return { ...ref, deleted: true };
          },
        }),
      ],
    };
  },
});
