import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { badRequest, conflict, HttpError, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { sleep } from '../../core/clock.js';
import { CreateObject, DeleteObject, HANGAR_LABELS, ObjectUsers as ObjectUsersCall, PutObject, RemoveObject, RestartWorkload } from '../../core/orchestrator.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin, type RouteDef, type Services, defineRoute } from '../../core/plugin.js';
import { defineLifecycle, REMOVED } from '../../core/lifecycle.js';
import { PageQuery } from '../../core/http/resources.js';
import { asHttpError } from '../../core/clusters/calls.js';
import { BeforeClusterRemoved, PlacementFilterQuery } from '../../core/clusters/directory.js';
import { NodesRef } from '../nodes/api.js';
import type { ClusterRecord } from '../../core/clusters/store.js';
import { SecretsRef, SecretUsersPoint, type ObjectKind, type ObjectUsers, type ResolvedObject, type SecretsApi } from './api.js';
import { SECRETS, secretMigrations } from './migrations.js';
import { ScopeResolvers, tableResolver } from '../../core/auth/scope.js';
import { EarlierVersions, ObjectStore, type ObjectRecord } from './store.js';
import { TaggableResources } from '../tags/api.js';

/** The engine refuses secrets and configs of 500 KiB and more (and empty ones). */
export const MAX_DATA_BYTES = 500 * 1024 - 1;

const PREFIX: Record<ObjectKind, string> = { secret: 'sec', config: 'cfg' };
const Title: Record<ObjectKind, string> = { secret: 'Secret', config: 'Config' };

export const runtimeObjectName = (name: string, version: number) => `${name}-v${version}`;

const ObjectName = Type.String({
  pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$',
  description: 'letters, digits, "_", "." and "-"; at most 63 characters; unique per swarm (per cluster namespace; there lower-case, digits, "-" and ".")',
});
/** Where an object kept in place goes when the request names no namespace. */
const DEFAULT_NAMESPACE = 'default';
const Data = Type.String({ maxLength: 700_000, description: 'the value, base64-encoded; at most 500 KB decoded' });

const invalid = (path: string, message: string) => badRequest(`Validation failed: ${path} ${message}`, [{ path, message }]);

/** The bytes of a base64 value (standard alphabet, padded; line breaks allowed); 400 otherwise. */
function decodeData(data: string): Buffer {
  const compact = data.replace(/[\r\n]/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 !== 0) throw invalid('body.data', 'must be base64 (the standard alphabet, padded)');
  const bytes = Buffer.from(compact, 'base64');
  if (bytes.length === 0) throw invalid('body.data', 'must not be empty');
  if (bytes.length > MAX_DATA_BYTES) throw invalid('body.data', `must be smaller than 500 KB decoded (it is ${bytes.length} bytes)`);
  return bytes;
}

export default definePlugin({
  name: 'secrets',
  description: 'Secrets and configs on swarms (versioned runtime objects) and Kubernetes clusters (kept in place): encrypted at rest, rotation that redeploys or rolls out their users',
  // Clusters of any backend (core's clusters layer): swarms, Kubernetes clusters.
  deps: [NodesRef],
  provides: [SecretsRef],
  migrations: secretMigrations,
  setup(services: Services) {
    const { db, clock, log } = services;
    const core = services.clusters;
    const swarms = core.clusters;
    const objects = new ObjectStore(db, clock);
    const earlier = new EarlierVersions(db, clock);
    /** Earlier versions kept per object: as many as a workload keeps revisions. */
    const versionsKept = () => core.settings.revisionsKept ?? 10;
    const box = services.ca.secretBox('secrets');
    const now = () => clock.now().toISOString();

    /** Where an object lives, as the API names it: by its cluster's field (`swarm_id` for a swarm's, `cluster_id` for the others'), the other one null. */
    async function targetOf(o: ObjectRecord): Promise<{ swarm_id: string | null; cluster_id: string | null }> {
      return { swarm_id: null, cluster_id: null, ...(await core.placement(o.cluster_id)) };
    }

    const resolved = (o: ObjectRecord): ResolvedObject => ({ id: o.id, name: o.name, runtime_name: o.runtime_name, version: o.version });

    type User = { id: string; name: string; type: string; pinned?: number; hook: ObjectUsers };

    /** The users of each object of one kind, asking every hook once for all of them. */
    async function usersOfMany(kind: ObjectKind, ids: string[]): Promise<Map<string, User[]>> {
      const all = new Map<string, User[]>(ids.map((id) => [id, []]));
      for (const hook of services.provided.contributions(SecretUsersPoint)) {
        for (const [id, users] of await hook.usersOf(kind, ids)) all.get(id)?.push(...users.map((u) => ({ id: u.id, name: u.name, type: u.type ?? 'service', pinned: u.pinned, hook })));
      }
      return all;
    }

    const usersOf = async (o: ObjectRecord): Promise<User[]> => (await usersOfMany(o.kind, [o.id])).get(o.id)!;

    async function view(o: ObjectRecord, users?: User[]) {
      users ??= await usersOf(o);
      return {
        id: o.id,
        name: o.name,
        ...(await targetOf(o)),
        namespace: o.namespace || null,
        version: o.version,
        runtime_name: o.runtime_name,
        services: users.map((u) => u.name),
        // A config's value is no secret; a secret's never leaves the control plane again.
        ...(o.kind === 'config' ? { data: box.open(o.data_sealed).toString('base64') } : {}),
        created_at: o.created_at,
        updated_at: o.updated_at,
      };
    }

    /** By id, or by name when exactly one object of this kind has it. */
    async function find(kind: ObjectKind, ref: string): Promise<ObjectRecord> {
      if (ref.startsWith(`${PREFIX[kind]}-`)) {
        const byId = await objects.get(ref);
        if (byId && byId.kind === kind) return byId;
      }
      const named = await objects.findAll({ kind, name: ref });
      if (named.length === 1) return named[0]!;
      if (!named.length) throw notFound(`No ${kind} ${ref}`);
      throw conflict(
        `${named.length} ${kind}s are named ${ref}; use the id`,
        await Promise.all(named.map(async (o) => ({ id: o.id, ...(await targetOf(o)) }))),
      );
    }

    /** The cluster an object lives on, when it still has a manager to talk to. */
    async function managedCluster(o: ObjectRecord): Promise<ClusterRecord | null> {
      const cluster = await swarms.get(o.cluster_id);
      return cluster?.manager_node_id ? cluster : null;
    }

    /**
     * Objects kept in place (their backend's `objects.semantics`, core/clusters/backend.ts: Kubernetes)
     * are one runtime object under the object's own name in a namespace, its value replaced, its
     * users rolled out; they are the ones with a namespace. The others (versioned, swarm's, with
     * namespace '') are an immutable runtime object per version.
     */
    const inPlace = (o: Pick<ObjectRecord, 'namespace'>) => Boolean(o.namespace);
    const placeOf = (cluster: ClusterRecord, namespace: string) => `${core.nounOf(cluster)} ${cluster.name}${namespace ? ` (namespace ${namespace})` : ''}`;

    /** "services web, api", "deployment/web": what uses an object, as a 409 names it. */
    function describeUsers(users: User[]): string {
      const services = users.filter((u) => u.type === 'service').map((u) => u.name);
      const others = users.filter((u) => u.type !== 'service').map((u) => u.name);
      return [...(services.length ? [`${services.length === 1 ? 'service' : 'services'} ${services.join(', ')}`] : []), ...(others.length ? [others.join(', ')] : [])].join(' and ');
    }

    const forget = (o: ObjectRecord) => recordRemover(services.events, o.kind, objects)(o.id);
    // A swarm's objects go with it (their runtime objects went with its engines).
    services.provided.contribute(BeforeClusterRemoved, async (swarmId) => {
      for (const o of await objects.findAll({ cluster_id: swarmId })) await forget(o);
    });

    // On a cluster that keeps objects in place, the users are its own workloads that name the object
    // (found on the cluster, not in hangar's records), and a rotation rolls them out there.
    services.provided.contribute(SecretUsersPoint, {
      async usersOf(kind, ids) {
        const found = new Map<string, Array<{ id: string; name: string; type: string }>>();
        const rows: Array<Pick<ObjectRecord, 'id' | 'name' | 'cluster_id' | 'namespace' | 'runtime_name'>> = ids.length
          ? await objects.query().whereIn('id', ids).whereNot({ namespace: '' }).select('id', 'name', 'cluster_id', 'namespace', 'runtime_name')
          : [];
        const groups = new Map<string, typeof rows>();
        for (const o of rows) groups.set(`${o.cluster_id}/${o.namespace}`, [...(groups.get(`${o.cluster_id}/${o.namespace}`) ?? []), o]);
        for (const group of groups.values()) {
          const { cluster_id: clusterId, namespace } = group[0]!;
          const cluster = await swarms.get(clusterId);
          if (!cluster?.manager_node_id) continue;
          let users: Record<string, string[]>;
          try {
            ({ users } = await core.callOn(cluster, ObjectUsersCall, { kind, namespace, names: group.map((o) => o.runtime_name) }));
          } catch (err) {
            throw asHttpError(err, `Finding the workloads that use ${kind}s ${group.map((o) => o.name).join(', ')} on ${placeOf(cluster, namespace)}`);
          }
          for (const o of group) found.set(o.id, (users[o.runtime_name] ?? []).map((workload) => ({ id: `${clusterId}/${namespace}/${workload}`, name: workload, type: 'workload' })));
        }
        return found;
      },
      async redeploy(userId) {
        const [clusterId, namespace, ...workload] = userId.split('/');
        await core.callOn(await core.requireActive(clusterId!), RestartWorkload, { namespace: namespace!, workload: workload.join('/') });
      },
    });

    const labels = (o: Pick<ObjectRecord, 'id'>, version: number) => ({ [HANGAR_LABELS.object]: o.id, [HANGAR_LABELS.version]: String(version) });

    /** Removes retired versions' runtime objects; answers the names that are still there. */
    async function removeRetired(o: ObjectRecord, swarm: ClusterRecord, names: string[]): Promise<string[]> {
      const kept: string[] = [];
      for (const name of names) {
        try {
          await core.callOn(swarm, RemoveObject, { kind: o.kind, name });
        } catch (err) {
          log.warn({ id: o.id, runtime_name: name, error: (err as Error).message }, `removing an old ${o.kind} version failed; kept for the next rotation`);
          kept.push(name);
        }
      }
      return kept;
    }

    // One change of an object at a time, whichever control plane takes it: a rotation's new version and its removal of old ones, a deletion, a rollback's restore of an earlier version each hold the object's lease.
    const lifecycle = core.lifecycle(
      objects,
      defineLifecycle<ObjectRecord>({
        noun: 'object',
        operations: {
          change: {
            from: '*',
            label: (o) => `change ${o.kind} ${o.name}`,
            // Only ever run with its work (rotate or remove) in the request; a change cut short is not taken over.
            run: async () => ({}),
            failed: () => ({}),
          },
        },
      }),
    );
    /**
     * Runs one change of an object under its lease, in the request. Changes asked for at once (on
     * this control plane or another) take turns: one waiting for the lease retries until the change
     * holding it is done, and gives up with a 409 only after an orchestrator call's timeout.
     */
    async function exclusive<T>(o: ObjectRecord, work: () => Promise<T>): Promise<T> {
      const giveUpAt = Date.now() + core.settings.callTimeoutMs;
      for (;;) {
        let ran = false;
        let answer!: T;
        await lifecycle.runNow(o.id, 'change', {}, async () => {
          ran = true;
          answer = await work();
          return (await objects.get(o.id)) ? {} : REMOVED;
        });
        if (ran) return answer;
        if (!(await objects.get(o.id))) throw notFound(`No ${o.kind} ${o.name}`);
        if (Date.now() > giveUpAt) throw conflict(`${Title[o.kind]} ${o.name} is being changed by another request; try again`);
        await sleep(100, services.shutdown);
      }
    }

    const api: SecretsApi = {
      async resolve(kind, swarmId, name) {
        const swarm = (await swarms.get(swarmId)) ?? (await swarms.findOne({ name: swarmId }));
        if (!swarm) return null;
        const o = await objects.findOne({ kind, cluster_id: swarm.id, name });
        return o ? resolved(o) : null;
      },
      async get(kind, id) {
        const o = await objects.get(id);
        return o && o.kind === kind ? resolved(o) : null;
      },
      async version(kind, id, version, { deploy }) {
        const o = await objects.get(id);
        if (!o || o.kind !== kind) throw notFound(`No ${kind} ${id}`);
        if (version === o.version) return resolved(o);
        const kept = inPlace(o) ? [] : await earlier.kept(o.id);
        const sealed = kept.includes(version) ? await earlier.sealed(o.id, version) : null;
        if (!sealed) {
          const which = kept.length ? `versions ${kept.join(', ')} and the current ${o.version}` : `only the current version ${o.version}`;
          throw conflict(`Version ${version} of ${kind} ${o.name} is no longer kept (it keeps ${which})`, [{ kind, id: o.id, name: o.name, version }]);
        }
        const runtimeName = runtimeObjectName(o.name, version);
        if (deploy) await exclusive(o, () => restore(o.id, version, runtimeName, sealed));
        return { id: o.id, name: o.name, runtime_name: runtimeName, version };
      },
    };
    services.provided.provide(SecretsRef, api);
    for (const kind of ['secret', 'config'] as const) services.provided.contribute(ScopeResolvers, tableResolver(kind, () => db.knex, SECRETS, { via: 'cluster_id', where: { kind } }));
    for (const kind of ['secret', 'config'] as const) {
      // By id, or by name when one is so named (409 when several swarms have one of that name).
      services.provided.contribute(TaggableResources, { type: kind, resolve: async (ref) => (await find(kind, ref).catch((err: HttpError) => (err.status === 404 ? null : Promise.reject(err))))?.id ?? null });
    }

    /**
     * An earlier version's runtime object made again (the engine answers the existing one when it is
     * still there), listed with the retired ones so the next rotation or the deletion removes it.
     */
    async function restore(id: string, version: number, runtimeName: string, sealed: string): Promise<void> {
      const o = await objects.get(id);
      if (!o) throw notFound(`No object ${id}`);
      const cluster = await core.requireActive(o.cluster_id);
      try {
        await core.callOn(cluster, CreateObject, { kind: o.kind, name: runtimeName, data: box.open(sealed).toString('base64'), labels: labels(o, version) });
      } catch (err) {
        throw asHttpError(err, `Restoring version ${version} of ${o.kind} ${o.name}`);
      }
      if (!o.retired.includes(runtimeName)) await objects.change(o.id, { retired: [...o.retired, runtimeName] });
    }

    /**
     * A rotation: the new version (its object and the record) under the object's lease; its users
     * redeployed with it, without the lease (a deploy that restores an earlier version of the object,
     * a rollback's, takes it meanwhile); then, under the lease again, the earlier versions no user is
     * pinned to removed.
     */
    async function rotate(found: ObjectRecord, bytes: Buffer) {
      const current = await exclusive(found, () => newVersion(found.id, bytes));
      const { kind, version } = current;
      // The users are redeployed so they reference the new version; only then can the old one go.
      const users = await usersOf(current);
      const outcomes = await Promise.allSettled(users.map((u) => u.hook.redeploy(u.id, { kind, id: current.id })));
      const failed = users.flatMap((u, i) => {
        const outcome = outcomes[i]!;
        return outcome.status === 'rejected' ? [{ id: u.id, name: u.name, error: (outcome.reason as Error).message }] : [];
      });
      if (failed.length) {
        const which = failed.map((f) => `${f.name} (${f.error})`).join(', ');
        throw conflict(
          inPlace(current)
            ? `Version ${version} of ${kind} ${current.name} is in place, but rolling out ${which} failed; their pods read the new value when they restart`
            : `Version ${version} of ${kind} ${current.name} is stored, but redeploying ${which} failed; the previous version stays until they are redeployed (a later rotation removes it)`,
          failed,
        );
      }
      if (current.retired.length) await exclusive(current, () => removeUnpinned(current.id, version));
      // What this request made, even when another rotation has made a later version since.
      return { ...(await view(current, users)), redeployed: users.map((u) => u.name) };
    }

    /**
     * Removes the retired runtime objects of versions before `version` (a later rotation's are its
     * own to remove) that no user is pinned to: one a rollback restores after its users were
     * redeployed stays until the next rotation.
     */
    async function removeUnpinned(id: string, version: number): Promise<void> {
      const o = await objects.get(id);
      if (!o) throw notFound(`No object ${id}`);
      const later = new Set(Array.from({ length: o.version - version + 1 }, (_, i) => runtimeObjectName(o.name, version + i)));
      const pinned = new Set((await usersOf(o)).flatMap((u) => (u.pinned === undefined ? [] : [runtimeObjectName(o.name, u.pinned)])));
      const unused = o.retired.filter((name) => !later.has(name) && !pinned.has(name));
      if (!unused.length) return;
      const kept = await removeRetired(o, await core.requireActive(o.cluster_id), unused);
      await objects.change(o.id, { retired: o.retired.filter((name) => !unused.includes(name) || kept.includes(name)) });
    }

    /** A new version: its runtime object, then the record (the version replaced kept for rollbacks). */
    async function newVersion(id: string, bytes: Buffer): Promise<ObjectRecord> {
      const current = await objects.get(id);
      if (!current) throw notFound(`No object ${id}`);
      const { kind, namespace } = current;
      const swarm = await core.requireActive(current.cluster_id);
      const version = current.version + 1;
      // In place: the same object gets the new value; otherwise a new immutable object per version.
      const runtimeName = inPlace(current) ? current.runtime_name : runtimeObjectName(current.name, version);
      const data = bytes.toString('base64');
      try {
        if (inPlace(current)) await core.callOn(swarm, PutObject, { kind, namespace, name: runtimeName, data, labels: labels(current, version), replace: true });
        else await core.callOn(swarm, CreateObject, { kind, name: runtimeName, data, labels: labels(current, version) });
      } catch (err) {
        throw asHttpError(err, `${inPlace(current) ? 'Writing' : 'Creating'} version ${version} of ${kind} ${current.name}`);
      }
      const retired = inPlace(current) ? [] : [...current.retired, current.runtime_name];
      const advanced = await db.knex
        .transaction(async (trx) => {
          if (!(await objects.advance(current, { version, runtime_name: runtimeName, data_sealed: box.seal(bytes), retired }, trx))) return false;
          // The version replaced stays at hand for a rollback to a revision that used it: kept with the change, or neither is.
          if (!inPlace(current)) await earlier.keep(current.id, current.version, current.data_sealed, versionsKept(), trx);
          return true;
        })
        .catch(async (err: Error) => {
          // Nothing recorded: the object made for the new version goes too, so the next rotation makes it with its own value.
          if (!inPlace(current)) await removeRetired(current, swarm, [runtimeName]);
          throw err;
        });
      // Another control plane rotated it meanwhile: its request owns the new version (and the object).
      if (!advanced) throw conflict(`${Title[kind]} ${current.name} was changed by another request meanwhile; try again`);
      return (await objects.get(id))!;
    }

    function routes(kind: ObjectKind): RouteDef[] {
      const base = `/v1/${kind}s`;
      const Params = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: `${kind} id, or its name when only one ${kind} has it` }) });
      const View = Type.Object({}, { additionalProperties: true });
      return [
        defineRoute({
          method: 'POST',
          path: base,
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'cluster', from: 'body.swarm_id', noun: 'swarm' }, { kind: 'cluster', from: 'body.cluster_id', noun: 'cluster' }] },
          summary: `Create a ${kind} on a swarm (version 1) or in a namespace of a Kubernetes cluster`,
          status: 201,
          schemas: {
            body: Type.Object(
              {
                name: ObjectName,
                swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the swarm (id or name); give this or cluster_id' })),
                cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'a Kubernetes cluster (id or name); give this or swarm_id' })),
                namespace: Type.Optional(Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: `the Kubernetes namespace (with cluster_id; default ${DEFAULT_NAMESPACE}); it must exist` })),
                data: Data,
              },
              { additionalProperties: false },
            ),
            response: View,
          },
          async handler(req) {
            const { name, swarm_id: swarmRef, cluster_id: clusterRef } = req.body;
            if (Boolean(swarmRef) === Boolean(clusterRef)) throw invalid('body', 'must have exactly one of swarm_id and cluster_id');
            const bytes = decodeData(req.body.data);
            const field = swarmRef ? 'swarm_id' : 'cluster_id';
            const named = await core.requireTarget({ [field]: swarmRef ?? clusterRef }, { state: 'any' });
            // How its backend keeps objects: one runtime object under its own name in a namespace (in place), or one per version.
            const keeps = core.findBackend(named.backend)?.objects;
            if (!keeps) throw invalid(`body.${field}`, `names a ${core.nounOf(named)}, which keeps no secrets or configs`);
            const keptInPlace = keeps.semantics === 'in-place';
            if (!keptInPlace && req.body.namespace) throw invalid('body.namespace', 'applies to Kubernetes clusters only (those that keep secrets and configs in place)');
            const namespace = keptInPlace ? (req.body.namespace ?? DEFAULT_NAMESPACE) : '';
            const runtimeName = keptInPlace ? name : runtimeObjectName(name, 1);
            const refused = keeps.refuseName?.(runtimeName);
            if (refused) throw invalid('body.name', refused);
            const cluster = await core.requireActive(named.id);
            const exists = () => conflict(`A ${kind} named ${name} exists on ${placeOf(cluster, namespace)}`);
            if (await objects.findOne({ kind, cluster_id: cluster.id, namespace, name })) throw exists();
            const id = newId(PREFIX[kind]);
            let record: ObjectRecord;
            try {
              record = await objects.insert({
                id,
                kind,
                name,
                cluster_id: cluster.id,
                namespace,
                version: 1,
                runtime_name: runtimeName,
                data_sealed: box.seal(bytes),
                retired: [],
                created_at: now(),
                updated_at: now(),
              });
            } catch (err) {
              if (isUniqueViolation(err)) throw exists();
              throw err;
            }
            const data = bytes.toString('base64');
            try {
              if (inPlace(record)) await core.callOn(cluster, PutObject, { kind, namespace, name: runtimeName, data, labels: labels(record, 1), replace: false });
              else await core.callOn(cluster, CreateObject, { kind, name: runtimeName, data, labels: labels(record, 1) });
            } catch (err) {
              await objects.remove(id);
              throw asHttpError(err, `Creating ${kind} ${name} on ${placeOf(cluster, namespace)}`);
            }
            return view(record);
          },
        }),
        defineRoute({
          method: 'GET',
          path: base,
          auth: 'authenticated',
          scope: { list: kind },
          summary: `List ${kind}s with the services using each${kind === 'secret' ? ' (never their values)' : ''}`,
          schemas: {
            query: Type.Object(
              {
                ...PageQuery.properties,
                ...PlacementFilterQuery,
              },
              { additionalProperties: false },
            ),
            response: Type.Array(View),
          },
          async handler(req) {
            const swarmId = req.query.swarm_id && (await core.filterId(req.query.swarm_id, 'swarm_id'));
            const clusterId = req.query.cluster_id && (await core.filterId(req.query.cluster_id, 'cluster_id'));
            const page = await objects.page({
              limit: req.query.limit,
              cursor: req.query.cursor,
              where: (q) => {
                q.where({ kind });
                if (swarmId) q.where({ cluster_id: swarmId });
                if (clusterId) q.where({ cluster_id: clusterId });
              },
            });
            const users = await usersOfMany(kind, page.items.map((o) => o.id));
            return new Reply(200, { data: await Promise.all(page.items.map((o) => view(o, users.get(o.id)))), next_cursor: page.next_cursor });
          },
        }),
        defineRoute({
          method: 'GET',
          path: `${base}/{id}`,
          auth: 'authenticated',
          scope: { of: [{ kind, from: 'params.id' }] },
          summary: kind === 'secret' ? 'Get a secret (its value is never returned)' : 'Get a config with its value (base64)',
          errors: [409],
          schemas: { params: Params, response: View },
          handler: async (req) => view(await find(kind, req.params.id)),
        }),
        defineRoute({
          method: 'PUT',
          path: `${base}/{id}`,
          auth: { role: 'admin' },
          scope: { of: [{ kind, from: 'params.id' }] },
          summary: `Rotate a ${kind}: a new version, the services using it redeployed with it, then the old version removed (on a Kubernetes cluster: the value replaced in place and the workloads using it rolled out)`,
          schemas: { params: Params, body: Type.Object({ data: Data }, { additionalProperties: false }), response: View },
          async handler(req) {
            const bytes = decodeData(req.body.data);
            const found = await find(kind, req.params.id);
            return rotate(found, bytes);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: `${base}/{id}`,
          auth: { role: 'admin' },
          scope: { of: [{ kind, from: 'params.id' }] },
          summary: `Delete a ${kind} and its runtime objects; 409 while a service (on a cluster, a workload) uses it`,
          schemas: { params: Params },
          async handler(req) {
            const found = await find(kind, req.params.id);
            return exclusive(found, () => remove(found.id));
          },
        }),
      ];
    }

    /** Deletion: refused while a service uses the object; its runtime objects, then the record. */
    async function remove(id: string) {
      const o = await objects.get(id);
      if (!o) throw notFound(`No object ${id}`);
      const { kind } = o;
      const users = await usersOf(o);
      if (users.length) {
        throw conflict(
          `${Title[kind]} ${o.name} is used by ${describeUsers(users)}`,
          users.map((u) => ({ type: u.type, id: u.id, name: u.name })),
        );
      }
      const cluster = await managedCluster(o);
      if (cluster) {
        // Old versions first: the current one goes last, so a refusal leaves the record consistent.
        for (const name of [...o.retired, o.runtime_name]) {
          try {
            if (inPlace(o)) await core.callOn(cluster, DeleteObject, { kind, namespace: o.namespace, name });
            else await core.callOn(cluster, RemoveObject, { kind, name });
          } catch (err) {
            throw asHttpError(err, `Removing ${kind} ${name} from ${placeOf(cluster, o.namespace)}`);
          }
        }
      }
      await forget(o);
      return { id: o.id, deleted: true };
    }

    return { routes: [...routes('secret'), ...routes('config')] };
  },
});

export { secretsOf, SecretsRef, SecretUsersPoint } from './api.js';
export type { ObjectKind, ObjectUsers, ResolvedObject, SecretsApi } from './api.js';
