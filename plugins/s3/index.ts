import { randomInt } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { HANGAR_EDGE_NETWORK, HANGAR_LABELS, type MountSpec, type Route, type WorkloadSpec, type WorkloadState } from '../../core/orchestrator.js';
import { resumeByStatus } from '../../core/jobs.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin } from '../../core/plugin.js';
import { KeyedSerial } from '../../core/serial.js';
import { IdParams, readRoutes } from '../../core/http/resources.js';
import { swarmsOf } from '../swarms/index.js';
import { requireDomainsFree } from '../swarms/routes.js';
import { DnsName } from '../swarms/schemas.js';
import type { SwarmRecord } from '../swarms/store.js';
import { volumesOf } from '../volumes/api.js';
import { s3Migrations } from './migrations.js';
import { observedState } from './state.js';
import { S3Store, type S3Record } from './store.js';

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

/** What the s3 plugin provides (`services.provided.get('s3')`): the routes of its stores. */
export interface S3Api {
  /** Both routes of every store on a swarm (S3 API and console), unless it is being removed. */
  routes(swarmId: string): Promise<Route[]>;
  /** A store by id (null when there is none). */
  get(id: string): Promise<unknown>;
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

/** How the store's workload mounts its volume, and where it may therefore run. */
type Placement = { mount: MountSpec; constraints: string[] };

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
    swarm_id: i.swarm_id,
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

export default definePlugin({
  name: 's3',
  description: 'object stores: MinIO on a swarm, its data on a volume, routed S3 API and console domains',
  configSchema: S3ConfigSchema,
  migrations: s3Migrations,
  setup(services) {
    const { db, clock } = services;
    const config = services.config.s3 as S3Config;
    const swarmsApi = swarmsOf(services);
    const { swarms, jobs, onManager, settings } = swarmsApi;
    const volumes = volumesOf(services);
    const store = new S3Store(db, clock);
    const box = services.ca.secretBox('s3');
    const now = () => clock.now().toISOString();
    const routesChanged = (swarmId: string) => services.events.publish('routes.changed', { swarmId });
    const forget = recordRemover(services.events, 's3', store);
    // A store's deployment and its removal never overlap.
    const lifecycle = new KeyedSerial();

    const routesOf = (i: S3Record): Route[] => [
      { domain: i.domain, service: i.runtime_name, port: S3_API_PORT, source: 's3', source_id: i.id },
      { domain: i.console_domain, service: i.runtime_name, port: S3_CONSOLE_PORT, source: 's3', source_id: i.id },
    ];
    const api: S3Api = {
      get: (id) => store.get(id),
      routes: async (swarmId) => (await store.findAll({ swarm_id: swarmId })).filter((i) => i.status !== 'removing').flatMap(routesOf),
    };
    services.provided.set('s3', api);

    /** The swarm secret holding a store's root password (MinIO reads it through MINIO_ROOT_PASSWORD_FILE). */
    const passwordSecret = (i: S3Record) => `${i.runtime_name}-root-password`;

    function spec(i: S3Record, mount: Placement): WorkloadSpec {
      return {
        name: i.runtime_name,
        role: 's3',
        resourceId: i.id,
        image: i.image,
        replicas: 1,
        args: MINIO_ARGS,
        env: {
          MINIO_ROOT_USER: i.root_user,
          // A name under /run/secrets: the password never appears in the service's spec.
          MINIO_ROOT_PASSWORD_FILE: ROOT_PASSWORD_TARGET,
          ...(i.cert_id ? { HANGAR_CERT_ID: i.cert_id } : {}),
        },
        secrets: [{ name: passwordSecret(i), target: ROOT_PASSWORD_TARGET }],
        mounts: [mount.mount],
        constraints: mount.constraints,
        networks: [HANGAR_EDGE_NETWORK],
        endpointMode: settings.endpoint_mode,
        publishMode: settings.publish_mode,
      };
    }

    /** The deployment, in the background: the edge network, then MinIO as a one-replica workload. */
    async function deploy(i: S3Record, swarm: SwarmRecord, mount: Placement): Promise<void> {
      try {
        await onManager(swarm, 'ensureNetwork', [HANGAR_EDGE_NETWORK]);
        const password = Buffer.from(box.openString(i.password_sealed)).toString('base64');
        await onManager(swarm, 'createObject', ['secret', passwordSecret(i), password, { [HANGAR_LABELS.id]: i.id }]);
        const state = await onManager<WorkloadState>(swarm, 'deployWorkload', [spec(i, mount)]);
        const observed = observedState(state);
        await store.changeIf(i.id, ['deploying'], { status: observed.status === 'running' ? 'running' : 'deploying', running: state.running, error: null, observed_at: now() });
      } catch (err) {
        if (!jobs.stopping) await store.changeIf(i.id, ['deploying'], { status: 'failed', error: `deploying failed: ${(err as Error).message}` });
        throw err;
      } finally {
        routesChanged(i.swarm_id);
      }
    }

    function startRemove(i: S3Record): void {
      jobs.run(
        `remove object store ${i.name}`,
        () =>
          lifecycle.run(i.id, async () => {
            await removeWorkload(i);
            await forget(i.id);
            routesChanged(i.swarm_id);
          }),
        async (err) => {
          await store.change(i.id, { status: 'failed', error: `removing failed: ${err.message}` });
        },
      );
    }

    /** A deploy the last process left half done, from the start: the swarm, the volume's mount, then MinIO. */
    function resumeDeploy(i: S3Record): void {
      jobs.run(`deploy object store ${i.name}`, () =>
        lifecycle.run(i.id, async () => {
          let swarm: SwarmRecord;
          let mount: Placement;
          try {
            swarm = await swarms.requireActive(i.swarm_id);
            mount = await volumes.mountFor(await volumes.require(i.volume_id), '/data', swarm);
          } catch (err) {
            if (!jobs.stopping) await store.changeIf(i.id, ['deploying'], { status: 'failed', error: `resuming the deploy failed: ${(err as Error).message}` });
            throw err;
          }
          await deploy(i, swarm, mount);
        }),
      );
    }

    /** Removes the workload (a swarm without a manager, or gone, has nothing left to remove); the volume's data stays. */
    async function removeWorkload(i: S3Record): Promise<void> {
      const swarm = await swarms.get(i.swarm_id);
      if (!swarm?.manager_node_id) return;
      await onManager(swarm, 'removeWorkload', [i.runtime_name]);
      await onManager(swarm, 'removeObject', ['secret', passwordSecret(i)]);
    }

    volumes.registerUsers(async (volumeId) => (await store.findAll({ volume_id: volumeId })).map((i) => ({ type: 's3', id: i.id, name: i.name })));

    swarmsApi.registerWorkloads({
      type: 's3',
      inSwarm: async (swarmId) => (await store.findAll({ swarm_id: swarmId })).map((i) => ({ id: i.id, name: i.name })),
      forceRemove: async (id) => {
        const i = await store.get(id);
        if (!i) return false;
        await lifecycle.run(id, async () => {
          await removeWorkload(i).catch(() => undefined);
          await forget(id);
        });
        routesChanged(i.swarm_id);
        return true;
      },
    });

    swarmsApi.onObserved(async ({ swarm, workloads }) => {
      const byName = new Map(workloads.map((w) => [w.name, w]));
      for (const i of await store.findAll({ swarm_id: swarm.id })) {
        if (i.status === 'removing') continue;
        const w = byName.get(i.runtime_name);
        if (!w) {
          // Deploying: not created yet; a failed deploy never created it (its own error says more).
          // Otherwise it was removed behind hangar's back.
          const neverCreated = i.status === 'deploying' || (i.status === 'failed' && i.running === null);
          if (!neverCreated && i.running !== 0) {
            await store.changeIf(i.id, [i.status], { status: 'failed', running: 0, error: `its workload ${i.runtime_name} is gone from the swarm`, observed_at: now() });
          }
          continue;
        }
        const observed = observedState(w);
        const status = observed.status ?? i.status;
        const error = observed.status ? observed.error : i.error;
        if (status !== i.status || error !== i.error || w.running !== i.running) {
          await store.changeIf(i.id, [i.status], { status, error, running: w.running, observed_at: now() });
        }
      }
    });

    return {
      // Deploys (the secret and the workload are created or updated) and removals are idempotent.
      resume: () => resumeByStatus('object store', store, { deploying: resumeDeploy, removing: startRemove }),
      close: () => jobs.drain(),
      routes: [
        {
          method: 'POST',
          path: '/v1/s3/instances',
          auth: { role: 'admin' },
          summary: 'Create an object store: MinIO on a swarm with its data on a volume (202; the root password is in this answer only)',
          status: 202,
          schemas: { body: CreateBody, response: Instance },
          handler: async (req) => {
            const body = req.body as { name: string; swarm_id: string; volume_id: string; password?: string; cert_id?: string };
            const swarm = await swarms.requireActive(body.swarm_id);
            if (await store.findOne({ name: body.name })) throw conflict(`An object store named ${body.name} exists`);
            const volume = await volumes.require(body.volume_id);
            const sharing = await store.findOne({ volume_id: volume.id });
            if (sharing) throw conflict(`Volume ${volume.name} already holds the data of object store ${sharing.name}; give each store its own volume`);
            const domain = `${body.name}.s3.${swarm.name}.${settings.local_domain}`;
            const consoleDomain = `console.${domain}`;
            await requireDomainsFree(services, swarm.id, [domain, consoleDomain]);
            // Where MinIO may run with this volume (409 when the volume is not ready or not reachable from the swarm).
            const mount = await volumes.mountFor(volume, '/data', swarm);
            const password = body.password ?? generatePassword();
            let record: S3Record;
            try {
              record = await store.insert({
                id: newId('s3'),
                name: body.name,
                swarm_id: swarm.id,
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
            jobs.run(`deploy object store ${record.name}`, () => lifecycle.run(record.id, () => deploy(record, swarm, mount)));
            return Reply.accepted({ ...view(record), password });
          },
        },
        ...readRoutes({
          path: '/v1/s3/instances',
          summaries: { list: 'List object stores (never their passwords)', get: 'Get an object store: status, S3 and console domains (never its password)' },
          page: (options) => store.page(options),
          find: (id) => store.require(id),
          view,
          response: Instance,
        }),
        {
          method: 'DELETE',
          path: '/v1/s3/instances/{id}',
          auth: { role: 'admin' },
          summary: 'Delete an object store: its workload, then the record (202); the data stays on the volume',
          status: 202,
          schemas: { params: IdParams, response: Instance },
          handler: async (req) => {
            const current = await store.require(req.params.id);
            if (current.status === 'removing') return view(current);
            const removing = await store.change(current.id, { status: 'removing' });
            routesChanged(current.swarm_id);
            startRemove(removing);
            return view(removing);
          },
        },
      ],
    };
  },
});
