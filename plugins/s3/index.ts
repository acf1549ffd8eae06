import { randomInt } from 'node:crypto';
import { ScopeResolvers, tableResolver } from '../../core/auth/scope.js';
import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { CreateObject, DeployWorkload, HANGAR_LABELS, InspectWorkloads, RemoveObject, RemoveWorkload, type Route, type VolumeMount, type WorkloadSpec, type WorkloadState } from '../../core/orchestrator.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { S3Ref, type S3Api } from './api.js';
import { DnsName, IdParams, readRoutes } from '../../core/http/resources.js';
import { requireDomainsFree } from '../../core/clusters/routes.js';
import { defineWorkloadKind } from '../../core/clusters/workloads.js';
import { changes, defineLifecycle, REMOVED } from '../../core/lifecycle.js';
import { VolumesRef, volumesOf, VolumeUserStoppers } from '../volumes/api.js';
import { untilScaledDown } from '../../core/clusters/scale-down.js';
import { S3_INSTANCES, s3Migrations } from './migrations.js';
import { observedState } from './state.js';
import { S3Store, type S3Record } from './store.js';
import { RoutesChanged } from '../../core/clusters/topics.js';

/** Ports MinIO serves: the S3 API and the web console. */
export const S3_API_PORT = 9000;
export const S3_CONSOLE_PORT = 9001;
/** How MinIO is run: the image's entrypoint (`minio`, or the lab stand-in) with these arguments. */
const ROOT_PASSWORD_TARGET = 'minio_root_password';
const MINIO_ARGS = ['server', '/data', '--console-address', `:${S3_CONSOLE_PORT}`];
const PASSWORD_ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789';
const GENERATED_PASSWORD_LENGTH = 24;

export const S3ConfigSchema = Type.Object(
  {
    image: Type.String({ minLength: 1, default: 'minio/minio:latest', description: 'the MinIO image object stores run (the lab uses its stand-in, lab/minio-standin:latest)' }),
    root_user: Type.String({ pattern: '^[A-Za-z0-9_.-]{3,64}$', default: 'hangar', description: 'MinIO root user (MINIO_ROOT_USER) of every store' }),
  },
  { additionalProperties: false, default: {} },
);

interface S3Config {
  image: string;
  root_user: string;
}

const CreateBody = Type.Object(
  {
    name: DnsName,
    swarm_id: Type.String({ minLength: 1, maxLength: 100, description: 'the swarm (id or name) MinIO runs on' }),
    volume_id: Type.String({ minLength: 1, maxLength: 100, description: 'the volume (id or name) mounted at /data' }),
    password: Type.Optional(Type.String({ minLength: 8, maxLength: 40, description: 'MinIO root password (8-40 characters); generated when left out' })),
    cert_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'certificate for console single sign-on (recorded; see docs/object-store.md)' })),
  },
  { additionalProperties: false },
);
const Instance = Type.Object({}, { additionalProperties: true });
/** Object stores belong to projects (core/auth/scope.ts): their resolver's kind and what a 404 calls one. */
const OBJECT_STORE = { kind: 'object-store', noun: 'object store' } as const;


/** A random password of letters and digits (no look-alikes), uniformly drawn. */
function generatePassword(): string {
  let out = '';
  for (let i = 0; i < GENERATED_PASSWORD_LENGTH; i++) out += PASSWORD_ALPHABET[randomInt(PASSWORD_ALPHABET.length)];
  return out;
}

function view(i: S3Record) {
  return {
    id: i.id,
    name: i.name,
    swarm_id: i.cluster_id,
    volume_id: i.volume_id,
    status: i.status,
    error: i.error,
    domain: i.domain,
    console_domain: i.console_domain,
    root_user: i.root_user,
    sso: i.sso,
    cert_id: i.cert_id,
    image: i.image,
    runtime_name: i.runtime_name,
    running: i.running,
    observed_at: i.observed_at,
    created_at: i.created_at,
    updated_at: i.updated_at,
  };
}

/**
 * What an observation changes in a store no operation holds (pure): running with a task up,
 * failed with the last task's error, failed when its workload is gone (a failed deploy that never
 * created it keeps its own error).
 */
export function reconcileStore(i: S3Record, w: WorkloadState | undefined, now: string): Partial<S3Record> | null {
  if (i.status === 'removing' || i.status === 'stopped') return null;
  if (!w) {
    if (i.status === 'failed' && (i.running === null || i.running === 0)) return null;
    return { status: 'failed', running: 0, error: `its workload ${i.runtime_name} is gone from the cluster`, observed_at: now };
  }
  const observed = observedState(w);
  const patch = changes(i, { status: observed.status ?? i.status, error: observed.status ? observed.error : i.error, running: w.running });
  return patch && { ...patch, observed_at: now };
}

export default definePlugin({
  name: 's3',
  description: 'object stores: MinIO on a swarm, its data on a volume, routed S3 API and console domains',
  configSchema: S3ConfigSchema,
  migrations: s3Migrations,
  deps: [VolumesRef],
  provides: [S3Ref],
  setup(services) {
    const { db, clock } = services;
    const config = services.config.s3 as S3Config;
    const core = services.clusters;
    const volumes = volumesOf(services);
    const store = new S3Store(db, clock);
    const box = services.ca.secretBox('s3');
    const now = () => clock.now().toISOString();
    const routesChanged = (clusterId: string) => services.events.publish(RoutesChanged, { clusterId });

    const routesOf = (i: S3Record): Route[] => [
      { domain: i.domain, service: i.runtime_name, port: S3_API_PORT, source: 's3', source_id: i.id },
      { domain: i.console_domain, service: i.runtime_name, port: S3_CONSOLE_PORT, source: 's3', source_id: i.id },
    ];
    const api: S3Api = {
      get: (id) => store.get(id),
      routes: async (clusterId) => (await store.findAll({ cluster_id: clusterId })).filter((i) => i.status !== 'removing').flatMap(routesOf),
    };
    services.provided.provide(S3Ref, api);
    // A store is in its cluster's project, which is its volume's: a create joins the two of one project only.
    services.provided.contribute(ScopeResolvers, tableResolver(OBJECT_STORE.kind, () => db.knex, S3_INSTANCES, { via: 'cluster_id' }));

    /** The runtime secret holding a store's root password (MinIO reads it through MINIO_ROOT_PASSWORD_FILE). */
    const passwordSecret = (i: S3Record) => `${i.runtime_name}-root-password`;

    function spec(i: S3Record, volume: VolumeMount): WorkloadSpec {
      return {
        name: i.runtime_name,
        role: 's3',
        resource_id: i.id,
        image: i.image,
        replicas: i.replicas,
        args: MINIO_ARGS,
        env: {
          MINIO_ROOT_USER: i.root_user,
          // A name under /run/secrets: the password never appears in the workload's spec.
          MINIO_ROOT_PASSWORD_FILE: ROOT_PASSWORD_TARGET,
          ...(i.cert_id ? { HANGAR_CERT_ID: i.cert_id } : {}),
        },
        secrets: [{ name: passwordSecret(i), target: ROOT_PASSWORD_TARGET }],
        volumes: [volume],
        exposure: { routed: true, domain: i.domain },
      };
    }

    /** Removes the workload and its password secret (a cluster without a manager, or gone, has nothing left to remove); the volume's data stays. */
    async function removeWorkload(i: S3Record): Promise<void> {
      const cluster = await core.clusters.get(i.cluster_id);
      if (!cluster?.manager_node_id) return;
      await core.callOn(cluster, RemoveWorkload, { name: i.runtime_name });
      await core.callOn(cluster, RemoveObject, { kind: 'secret', name: passwordSecret(i) });
    }

    const lifecycle = core.lifecycle(
      store,
      defineLifecycle<S3Record, WorkloadState | undefined>({
        noun: 'object store',
        operations: {
          // The volume's mount, the password secret, then MinIO as a one-replica workload (created or updated); at 0 replicas
          // (a restore of its volume stops it), answered once its container is gone.
          deploy: {
            from: ['deploying', 'failed', 'running', 'stopped'],
            during: 'deploying',
            label: (i) => `deploy object store ${i.name}`,
            async run(i, { signal }) {
              try {
                const cluster = await core.requireActive(i.cluster_id);
                const volume = await volumes.mountFor(await volumes.require(i.volume_id), '/data', cluster);
                const password = Buffer.from(box.openString(i.password_sealed)).toString('base64');
                await core.callOn(cluster, CreateObject, { kind: 'secret', name: passwordSecret(i), data: password, labels: { [HANGAR_LABELS.id]: i.id } });
                const state = await core.callOn(cluster, DeployWorkload, { spec: spec(i, volume) });
                if (i.replicas === 0) {
                  const read = async () => (await core.callOn(cluster, InspectWorkloads, { names: [i.runtime_name] })).workloads;
                  await untilScaledDown(read, () => true, signal);
                  return { status: 'stopped', running: 0, error: null, observed_at: now() };
                }
                return { status: observedState(state).status === 'running' ? 'running' : 'deploying', running: state.running, error: null, observed_at: now() };
              } finally {
                routesChanged(i.cluster_id);
              }
            },
            failed: (_i, err) => ({ status: 'failed', error: `deploying failed: ${err.message}` }),
          },
          remove: {
            from: '*',
            during: 'removing',
            preempts: true,
            label: (i) => `remove object store ${i.name}`,
            async run(i) {
              await removeWorkload(i);
              await kind.forget(i.id);
              routesChanged(i.cluster_id);
              return REMOVED;
            },
            failed: (_i, err) => ({ status: 'failed', error: `removing failed: ${err.message}` }),
          },
        },
        reconcile: (i, w) => reconcileStore(i, w, now()),
      }),
    );
    const refused = (i: S3Record | null) => conflict(i ? `Object store ${i.name} is ${i.status}` : 'The object store is gone');

    const kind = defineWorkloadKind(services, {
      type: 's3',
      store,
      lifecycle,
      removeRuntime: removeWorkload,
      removed: (i) => routesChanged(i.cluster_id),
      observed: (i, { workloads }) => workloads.find((w) => w.name === i.runtime_name),
      resolve: async (ref) => (await store.findByIdOrName(ref))?.id ?? null,
      routes: { source: 's3', routes: api.routes },
      volumeUsers: async (volumeId) => (await store.findAll({ volume_id: volumeId })).map((i) => ({ type: 's3', id: i.id, name: i.name })),
    });

    /** Deploys a store at `replicas` (0 or 1) and answers once it has settled there (409 while another operation holds it, or when it failed). */
    async function scaleNow(i: S3Record, replicas: number): Promise<void> {
      const done = await lifecycle.runNow(i.id, 'deploy', { replicas });
      if (!done) throw refused(await store.get(i.id));
      if (done.status === 'failed') throw conflict(`Scaling object store ${i.name} to ${replicas} failed: ${done.error ?? 'its deploy failed'}`);
    }
    /** A store that may run its container (one being deployed or marked failed counts: its scale is refused while busy, never skipped). */
    const mayRun = (i: S3Record | null): i is S3Record => Boolean(i && i.status !== 'stopped' && i.status !== 'removing' && i.replicas);
    /**
     * A restore of the store's volume (or its backup with consistency stop): the store is deployed
     * at 0 replicas (status `stopped`) and waited for until its container is gone, then deployed
     * at 1 again.
     */
    services.provided.contribute(VolumeUserStoppers, {
      type: 's3',
      async replicas(id) {
        const i = await store.get(id);
        return mayRun(i) ? i.replicas : null;
      },
      async stop(id) {
        const i = await store.get(id);
        if (!mayRun(i)) return null;
        await scaleNow(i, 0);
        return i.replicas;
      },
      async start(id, replicas) {
        const i = await store.get(id);
        // Removed meanwhile: nothing to bring back.
        if (i && i.status !== 'removing') await scaleNow(i, replicas);
      },
    });

    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/s3/instances',
          auth: { role: 'admin' },
          // On a swarm and a volume of one project (the volume read there), where the caller holds object-stores:write.
          scope: { of: [{ kind: 'cluster', from: 'body.swarm_id', noun: 'swarm' }, { kind: 'volume', from: 'body.volume_id', permission: 'volumes:read' }] },
          summary: 'Create an object store: MinIO on a swarm with its data on a volume (202; the root password is in this answer only)',
          status: 202,
          schemas: { body: CreateBody, response: Instance },
          handler: async (req) => {
            const body = req.body;
            const cluster = await core.requireTarget(body);
            if (await store.findOne({ name: body.name })) throw conflict(`An object store named ${body.name} exists`);
            const volume = await volumes.require(body.volume_id);
            const sharing = await store.findOne({ volume_id: volume.id });
            if (sharing) throw conflict(`Volume ${volume.name} already holds the data of object store ${sharing.name}; give each store its own volume`);
            const domain = `${body.name}.s3.${cluster.name}.${core.settings.localDomain}`;
            const consoleDomain = `console.${domain}`;
            await requireDomainsFree(services, cluster.id, [domain, consoleDomain]);
            // Where MinIO may run with this volume (409 when the volume is not ready or not reachable from the cluster).
            await volumes.mountFor(volume, '/data', cluster);
            const password = body.password ?? generatePassword();
            let record: S3Record;
            try {
              record = await store.insert({
                id: newId('s3'),
                name: body.name,
                cluster_id: cluster.id,
                volume_id: volume.id,
                runtime_name: `s3-${body.name}`,
                image: config.image,
                root_user: config.root_user,
                password_sealed: box.seal(password),
                cert_id: body.cert_id ?? null,
                sso: Boolean(body.cert_id),
                domain,
                console_domain: consoleDomain,
                status: 'deploying',
                replicas: 1,
                error: null,
                running: null,
                observed_at: null,
                created_at: now(),
                updated_at: now(),
              });
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`An object store named ${body.name} exists`);
              throw err;
            }
            return Reply.accepted({ ...view(await lifecycle.start(record.id, 'deploy', {}, refused)), password });
          },
        }),
        ...readRoutes({
          path: '/v1/s3/instances',
          summaries: { list: 'List object stores (never their passwords)', get: 'Get an object store: status, S3 and console domains (never its password)' },
          page: (options) => store.page(options),
          find: (id) => store.require(id),
          view,
          response: Instance,
          scope: OBJECT_STORE,
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/s3/instances/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ ...OBJECT_STORE, from: 'params.id' }] },
          summary: 'Delete an object store: its workload, then the record (202); the data stays on the volume',
          status: 202,
          schemas: { params: IdParams, response: Instance },
          handler: async (req) => {
            const current = await store.require(req.params.id);
            if (current.status === 'removing') return view(current);
            const removing = await lifecycle.start(current.id, 'remove', {}, refused);
            routesChanged(current.cluster_id);
            return view(removing);
          },
        }),
      ],
    };
  },
});
