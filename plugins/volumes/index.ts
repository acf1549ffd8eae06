import path from 'node:path';
import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { badRequest, conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { HANGAR_LABELS } from '../../core/orchestrator.js';
import { resumeByStatus } from '../../core/jobs.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin, type Services } from '../../core/plugin.js';
import { TASK_KINDS } from '../../core/tasks/kinds.js';
import { IdParams, readRoutes } from '../../core/http/resources.js';
import { nodesOf } from '../nodes/index.js';
import type { NodeRecord } from '../nodes/nodes.js';
import { asHttpError, swarmsOf } from '../swarms/orchestration.js';
import { NodeRef } from '../swarms/schemas.js';
import type { SwarmRecord } from '../swarms/store.js';
import type { VolumeRecord, VolumesApi, VolumeUsers } from './api.js';
import { volumeMigrations } from './migrations.js';
import { DefinitionStore, VolumeStore, type NfsExport, type StoredVolume } from './store.js';

/** The name of a volume's definition on each engine. */
export const runtimeVolumeName = (volume: Pick<VolumeRecord, 'name'>) => `hangar-vol-${volume.name}`;

/** Driver options of the `local` volume driver that mount the volume over NFS from its node. */
export const nfsOptions = (volume: Pick<VolumeRecord, 'server_ip' | 'folder'>): Record<string, string> => ({
  type: 'nfs',
  o: `addr=${volume.server_ip},rw,nfsvers=4`,
  device: `:${volume.folder}`,
});

/** On the node that holds the folder the definition is a bind of the folder itself. */
const bindOptions = (volume: Pick<VolumeRecord, 'folder'>): Record<string, string> => ({ type: 'none', o: 'bind', device: volume.folder });

const VolumeName = Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$', description: 'letters, digits, "_", "." and "-"; at most 63 characters; unique' });
const Folder = Type.String({
  minLength: 2,
  maxLength: 1024,
  pattern: '^/[A-Za-z0-9._@+/-]+$',
  description: 'absolute path on the node (letters, digits and ._@+-/), created when missing',
});

function view(v: StoredVolume) {
  return {
    id: v.id,
    name: v.name,
    type: v.type,
    node_id: v.node_id,
    folder: v.folder,
    ...(v.type === 'nfs' ? { server_ip: v.server_ip, nfs_export: v.nfs_export } : {}),
    runtime_name: runtimeVolumeName(v),
    status: v.status,
    error: v.error,
    created_at: v.created_at,
    updated_at: v.updated_at,
  };
}

/** Normalises an absolute folder: one slash between segments, none at the end; refuses "." and ".." segments and "/". */
function normaliseFolder(folder: string): string {
  const segments = folder.split('/').filter(Boolean);
  if (segments.some((s) => s === '.' || s === '..')) throw badRequest('Validation failed: body.folder must not contain "." or ".." segments', [{ path: 'body.folder', message: 'must not contain "." or ".." segments' }]);
  const normal = path.posix.join('/', ...segments);
  if (normal === '/') throw badRequest('Validation failed: body.folder must not be the root folder', [{ path: 'body.folder', message: 'must not be /' }]);
  return normal;
}

export default definePlugin({
  name: 'volumes',
  description: 'Folders on nodes shared with swarm workloads: over NFS from their node, or bound locally',
  migrations: volumeMigrations,
  setup(services: Services) {
    const { db, clock, log } = services;
    const { nodes } = nodesOf(services);
    const swarmsApi = swarmsOf(services);
    const { members, jobs, call } = swarmsApi;
    const volumes = new VolumeStore(db, clock);
    const forget = recordRemover(services.events, 'volume', volumes);
    const definitions = new DefinitionStore(db, clock);
    const users: VolumeUsers[] = [];
    const now = () => clock.now().toISOString();

    /** Defines an NFS volume on these nodes (a bind on its own node); idempotent. */
    async function define(volume: StoredVolume, nodeIds: string[]): Promise<void> {
      const labels = { [HANGAR_LABELS.id]: volume.id };
      await Promise.all(
        nodeIds.map(async (nodeId) => {
          const options = nodeId === volume.node_id ? bindOptions(volume) : nfsOptions(volume);
          await call(nodeId, 'defineVolume', [runtimeVolumeName(volume), options, labels], { subject: volume.id });
          await definitions.record(volume.id, nodeId);
        }),
      );
    }

    const activeMembers = async (swarmId: string) => (await members.of(swarmId)).filter((m) => m.status === 'active').map((m) => m.node_id);

    async function usersOf(volumeId: string) {
      const all: Array<{ type: string; id: string; name: string }> = [];
      for (const fn of users) all.push(...(await fn(volumeId)));
      return all;
    }

    /** Creation in the background: the folder (and export) on the node, then the definitions in its swarm. */
    async function prepare(volume: StoredVolume): Promise<void> {
      const result = await swarmsApi.runTask<{ folder: string; export: NfsExport | null }>(
        volume.node_id,
        TASK_KINDS.volumePrepare,
        { volume_id: volume.id, name: volume.name, folder: volume.folder, type: volume.type },
        { subject: volume.id },
      );
      const prepared = await volumes.change(volume.id, { nfs_export: result.export });
      if (volume.type === 'nfs') {
        const membership = await members.findOne({ node_id: volume.node_id });
        if (membership) await define(prepared, await activeMembers(membership.swarm_id));
      }
      await volumes.change(volume.id, { status: 'ready', error: null });
    }

    /** Deletion in the background: definitions, then the export; the folder and its data stay. */
    async function remove(volume: StoredVolume, force: boolean): Promise<void> {
      const problems: string[] = [];
      const attempt = async (what: string, work: () => Promise<unknown>) => {
        try {
          await work();
        } catch (err) {
          if (!force) throw new Error(`${what}: ${(err as Error).message}`, { cause: err });
          problems.push(`${what}: ${(err as Error).message}`);
        }
      };
      for (const nodeId of await definitions.nodesOf(volume.id)) {
        const node = await nodes.get(nodeId);
        // A node that is gone took its definition with it.
        if (node && !node.removing) {
          await attempt(`removing the definition on node ${nodeId}`, () => call(nodeId, 'removeVolumeDefinition', [runtimeVolumeName(volume)], { subject: volume.id }));
        }
        await definitions.forget(volume.id, nodeId);
      }
      const host = await nodes.get(volume.node_id);
      if (volume.type === 'nfs' && host && !host.removing) {
        await attempt(`releasing the export on node ${volume.node_id}`, () =>
          swarmsApi.runTask(volume.node_id, TASK_KINDS.volumeRelease, { volume_id: volume.id, name: volume.name, folder: volume.folder, type: volume.type }, { subject: volume.id }),
        );
      }
      if (problems.length) log.warn({ volume_id: volume.id, problems }, 'volume deleted (forced) with leftovers');
      await forget(volume.id);
    }

    function prepareInBackground(volume: StoredVolume): void {
      jobs.run(`prepare volume ${volume.name}`, () => prepare(volume), async (err) => {
        await volumes.change(volume.id, { status: 'failed', error: `preparing failed: ${err.message}` });
      });
    }

    function removeInBackground(volume: StoredVolume, force: boolean): void {
      jobs.run(`delete volume ${volume.name}`, () => remove(volume, force), async (err) => {
        await volumes.change(volume.id, { status: 'failed', error: `deleting failed: ${err.message}` });
      });
    }

    async function requireVolume(idOrName: string): Promise<StoredVolume> {
      const volume = await volumes.find(idOrName);
      if (!volume) throw notFound(`No volume ${idOrName}`);
      return volume;
    }

    const api: VolumesApi = {
      require: requireVolume,
      async mountFor(volume, target, swarm: SwarmRecord) {
        const current = await requireVolume(volume.id);
        if (current.status !== 'ready') throw conflict(`Volume ${current.name} is not ready (${current.status}${current.error ? `: ${current.error}` : ''})`);
        if (current.type === 'local') {
          const membership = await members.findOne({ node_id: current.node_id });
          if (!membership || membership.swarm_id !== swarm.id) {
            throw conflict(`Volume ${current.name} is a local folder on node ${current.node_id}, which is not a member of swarm ${swarm.name}; use an nfs volume or a workload in that node's swarm`);
          }
          const node = await nodes.require(current.node_id);
          if (!node.hostname) throw conflict(`Node ${node.id} has not reported its hostname yet; its local volume ${current.name} cannot be pinned to it`);
          return { mount: { type: 'bind', source: current.folder, target }, constraints: [`node.hostname == ${node.hostname}`] };
        }
        try {
          await define(current, await activeMembers(swarm.id));
        } catch (err) {
          throw asHttpError(err, `Defining volume ${current.name} on the members of swarm ${swarm.name}`);
        }
        return { mount: { type: 'volume', source: runtimeVolumeName(current), target, driverOptions: nfsOptions(current) }, constraints: [] };
      },
      registerUsers: (fn) => void users.push(fn),
      async forceRemove(id) {
        const volume = await volumes.get(id);
        if (!volume) return false;
        await remove(volume, true);
        return true;
      },
    };
    services.provided.set('volumes', api);

    // A node that joins a swarm gets the swarm's NFS volumes: those on its members' folders and those
    // already defined on its members. When it holds volumes itself, every member gets those.
    services.events.subscribe('swarm.member.joined', (payload) => {
      const { swarmId, nodeId } = payload as { swarmId: string; nodeId: string };
      jobs.run(
        `volumes for ${nodeId} in ${swarmId}`,
        async () => {
          const memberIds = await activeMembers(swarmId);
          const ids = new Set(await definitions.volumesOn(memberIds.filter((id) => id !== nodeId)));
          const candidates = await volumes.query().where({ type: 'nfs', status: 'ready' }).andWhere((q) => q.whereIn('node_id', memberIds).orWhereIn('id', [...ids]));
          for (const row of candidates) {
            const volume = volumes.decode(row);
            await define(volume, volume.node_id === nodeId ? memberIds : [nodeId]);
          }
        },
        (err) => log.warn({ swarm_id: swarmId, node_id: nodeId, error: err.message }, 'defining volumes on a joined node failed'),
        { resumable: false },
      );
    });

    const Volume = Type.Object({}, { additionalProperties: true });

    const ForceQuery = Type.Object(
      { force: Type.Optional(Type.Boolean({ description: 'delete the record even when a definition or the export cannot be removed (a node that does not answer)' })) },
      { additionalProperties: false },
    );

    return {
      // Preparing (folder, export, definitions) and deleting are idempotent: an interrupted one runs again.
      // A deletion resumes unforced: if something is left it fails, and a forced DELETE finishes it.
      resume: () => resumeByStatus('volume', volumes, { preparing: prepareInBackground, deleting: (v) => removeInBackground(v, false) }),
      routes: [
        {
          method: 'POST',
          path: '/v1/volumes',
          auth: { role: 'admin' },
          summary: 'Create a volume: a folder on a node, shared over NFS (default) or bound locally; 202 while it is prepared',
          status: 202,
          schemas: {
            body: Type.Object(
              {
                name: VolumeName,
                node_id: NodeRef,
                folder: Folder,
                type: Type.Optional(Type.Union([Type.Literal('nfs'), Type.Literal('local')], { default: 'nfs', description: 'fixed at creation' })),
              },
              { additionalProperties: false },
            ),
            response: Volume,
          },
          async handler(req) {
            const type = req.body.type ?? 'nfs';
            const folder = normaliseFolder(req.body.folder);
            if (await volumes.findOne({ name: req.body.name })) throw conflict(`A volume named ${req.body.name} exists`);
            const node: NodeRecord = await nodes.requireLive(req.body.node_id);
            if (node.connection === 'pending') throw conflict(`Node ${node.id} has no agent yet: join the machine first`);
            const sameFolder = await volumes.findOne({ node_id: node.id, folder });
            if (sameFolder) throw conflict(`Folder ${folder} on node ${node.id} is volume ${sameFolder.name} already`);
            const serverIp = type === 'nfs' ? swarmsApi.addressOf(node) : null;
            if (type === 'nfs' && !serverIp) throw conflict(`Node ${node.id} has no address yet to serve NFS from`);
            let volume: StoredVolume;
            try {
              volume = await volumes.insert({
                id: newId('vol'),
                name: req.body.name,
                node_id: node.id,
                folder,
                type,
                server_ip: serverIp,
                status: 'preparing',
                error: null,
                nfs_export: null,
                created_at: now(),
                updated_at: now(),
              });
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`A volume named ${req.body.name} exists`);
              throw err;
            }
            prepareInBackground(volume);
            return Reply.accepted(view(volume));
          },
        },
        ...readRoutes({
          path: '/v1/volumes',
          summaries: { list: 'List volumes', get: 'Get a volume by id or name' },
          page: (options) => volumes.page(options),
          find: requireVolume,
          view,
          response: Volume,
        }),
        {
          method: 'DELETE',
          path: '/v1/volumes/{id}',
          auth: { role: 'admin' },
          summary: 'Delete a volume: 409 while anything uses it; removes its definitions and export (202), the folder and its data stay on the node',
          status: 202,
          schemas: { params: IdParams, query: ForceQuery },
          async handler(req) {
            const volume = await requireVolume(req.params.id);
            const note = `the folder ${volume.folder} and its data stay on node ${volume.node_id}`;
            if (volume.status === 'deleting') return Reply.accepted({ ...view(volume), note });
            if (volume.status === 'preparing') throw conflict(`Volume ${volume.name} is still being prepared; try again when it is ready or failed`);
            const using = await usersOf(volume.id);
            if (using.length) throw conflict(`Volume ${volume.name} is in use by ${using.map((u) => `${u.type} ${u.name}`).join(', ')}`, using);
            const deleting = await volumes.change(volume.id, { status: 'deleting', error: null });
            removeInBackground(deleting, Boolean(req.query.force));
            return Reply.accepted({ ...view(deleting), note });
          },
        },
      ],
    };
  },
});

export { volumesOf } from './api.js';
export type { VolumeRecord, VolumesApi, VolumeUsers } from './api.js';
