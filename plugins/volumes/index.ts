import path from 'node:path';
import { Type } from '@sinclair/typebox';
import { isUniqueViolation } from '../../core/db/repository.js';
import { badRequest, conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { HANGAR_LABELS, StageVolume, UnstageVolume, type VolumeMount } from '../../core/orchestrator.js';
import { defineLifecycle, REMOVED } from '../../core/lifecycle.js';
import { asHttpError } from '../../core/clusters/calls.js';
import type { ClusterRecord } from '../../core/clusters/store.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin, type Services, defineRoute } from '../../core/plugin.js';
import { NfsClient, NfsClientInstall, VolumePrepare, VolumeRelease } from '../../core/tasks/host-kinds.js';
import { IdParams, NodeRef, readRoutes } from '../../core/http/resources.js';
import { NodesRef, nodesOf, type NodeRecord } from '../nodes/api.js';
import { TaggableResources } from '../tags/api.js';
import { folderClash, NodeFolderHolders, runtimeVolumeName, VolumeRestorers, VolumesRef, VolumeUsersPoint, type Reads, type RestoreSource, type VolumeAttachment, type VolumesApi, type VolumeUser } from './api.js';
import { VOLUMES, volumeMigrations } from './migrations.js';
import { CREATE_IN_PROJECT, readsResource, requireHeldIn, ScopeResolvers, tableResolver } from '../../core/auth/scope.js';
import { NodeGrantHolders, requireNodeServes } from '../../core/clusters/projects.js';
import { defaultProjectOf, projectForNew, ProjectsRef } from '../projects/api.js';
import { DefinitionStore, VolumeStore, type NfsExport, type StoredVolume } from './store.js';
import { ClusterMemberJoined, ClusterMemberLeft, ClusterMemberRemoved } from '../../core/clusters/topics.js';
import { defineReaction } from '../../core/reactions.js';

/** The name of a volume's definition on each engine. */

const VolumeName = Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$', description: 'letters, digits, "_", "." and "-"; at most 63 characters; unique' });
const Folder = Type.String({
  minLength: 2,
  maxLength: 1024,
  pattern: '^/[A-Za-z0-9._@+/-]+$',
  description: 'absolute path on the node (letters, digits and ._@+-/), created when missing',
});

export const VolumesConfigSchema = Type.Object(
  {
    nfs_export_clients: Type.Array(NfsClient, {
      default: [],
      maxItems: 64,
      description:
        'clients every NFS export names besides the members of the volume’s clusters (a CIDR such as 192.168.1.0/24, an address, a host name): for machines that mount hangar’s volumes from outside',
    }),
  },
  { additionalProperties: false, default: {} },
);

interface VolumesConfig {
  nfs_export_clients: string[];
}

function view(v: StoredVolume) {
  return {
    id: v.id,
    name: v.name,
    type: v.type,
    node_id: v.node_id,
    folder: v.folder,
    project_id: v.project_id ?? null,
    // Ready says the folder and its export entry are written; served, that the node's NFS server lists the export.
    ...(v.type === 'nfs' ? { server_ip: v.server_ip, nfs_export: v.nfs_export, served: v.status === 'ready' && v.nfs_export?.served === true } : {}),
    runtime_name: runtimeVolumeName(v),
    // Made from a backup: which (its restores: GET /v1/volumes/{id}/restores).
    ...(v.restore_from ? { restore_from: v.restore_from } : {}),
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
  description: 'Folders on nodes shared with cluster workloads: over NFS from their node, or bound locally',
  deps: [NodesRef],
  optionalDeps: [ProjectsRef],
  provides: [VolumesRef],
  migrations: volumeMigrations,
  configSchema: VolumesConfigSchema,
  setup(services: Services) {
    const { db, clock, log } = services;
    const settings = services.config.volumes as VolumesConfig;
    const core = services.clusters;
    const { nodes, events: nodeEvents } = nodesOf(services);
    const { members } = core;
    const volumes = new VolumeStore(db, clock);
    const forget = recordRemover(services.events, 'volume', volumes);
    const definitions = new DefinitionStore(db, clock);
    const now = () => clock.now().toISOString();

    /**
     * Stages an NFS volume on these members of a cluster (its own folder on its node), or, on a
     * backend whose volumes are the cluster's (Kubernetes: a PersistentVolume and claim), once
     * through its manager; idempotent.
     */
    async function stage(volume: StoredVolume, cluster: ClusterRecord, nodeIds: string[]): Promise<void> {
      const labels = { [HANGAR_LABELS.id]: volume.id };
      const input = (nodeId: string | null) => ({ name: runtimeVolumeName(volume), nfs: { server: volume.server_ip!, path: volume.folder }, local_path: nodeId === volume.node_id ? volume.folder : null, labels });
      if (stagedPerCluster(cluster.backend)) {
        // Recorded first: a claim that does not bind is still listed on the cluster, and can be detached.
        if (cluster.manager_node_id) await definitions.record(volume.id, cluster.manager_node_id, cluster.backend);
        await core.callOn(cluster, StageVolume, input(null));
        // Every member's kubelet may mount it.
        await askForClients(await activeMembers(cluster.id), volume.id);
        return;
      }
      // The volume's own node binds the folder; the others mount it over NFS.
      await askForClients(nodeIds.filter((id) => id !== volume.node_id), volume.id);
      await Promise.all(
        nodeIds.map(async (nodeId) => {
          await core.call(nodeId, StageVolume, input(nodeId), { backend: cluster.backend, subject: volume.id });
          await definitions.record(volume.id, nodeId, cluster.backend);
        }),
      );
    }

    /**
     * Installs the NFS client on a member whose agent reports none; a node event says what came of
     * it (installed, or missing and why).
     */
    const nfsClient = defineReaction<{ nodeId: string; subject: string }>(services, {
      name: 'volumes:nfs-client',
      label: ({ nodeId }) => `NFS client on ${nodeId}`,
      async run({ nodeId, subject }) {
        const client = await core.runTask(nodeId, NfsClientInstall, {}, { subject });
        if (client.installed) await nodeEvents.record({ nodeId, kind: 'nfs_client_installed', message: `installed ${client.package}: this member can mount NFS volumes` });
        else if (!client.present) await nodeEvents.record({ nodeId, kind: 'nfs_client_missing', message: `NFS volumes cannot be mounted on this member: ${client.reason ?? `${client.package} is missing`}` });
      },
      failure: 'installing the NFS client on a cluster member failed',
    });
    /**
     * Asks each of these nodes whose agent reports no NFS client (facts `nfs.client: false`; agents
     * that do not report it predate the task) to install it, in the background: once at a time.
     */
    async function askForClients(nodeIds: string[], subject: string): Promise<void> {
      for (const nodeId of nodeIds) {
        const node = await nodes.get(nodeId);
        const nfs = (node?.facts as { nfs?: { client?: boolean } | null } | null)?.nfs;
        if (node && !node.removing && nfs?.client === false) await nfsClient.request({ nodeId, subject });
      }
    }

    const stagedPerCluster = (backend: string) => core.backendNames().includes(backend) && core.backend(backend).volumeStaging === 'cluster';
    const activeMembers = async (clusterId: string) => (await members.of(clusterId)).filter((m) => m.status === 'active').map((m) => m.node_id);

    async function usersOf(volumeId: string) {
      const all: VolumeUser[] = [];
      for (const fn of services.provided.contributions(VolumeUsersPoint)) all.push(...(await fn(volumeId)));
      return all;
    }

    /**
     * Who an NFS export names: every address hangar knows (node address, overlay address) of the
     * nodes that mount the volume — the active members of its node's clusters, the nodes it is
     * defined on and, where it is staged for a whole cluster, that cluster's active members, while
     * they are active members of a cluster — then `volumes.nfs_export_clients`.
     * The volume's own node binds the folder and is left out.
     */
    async function exportClients(volume: StoredVolume): Promise<string[]> {
      const nodeIds = new Set<string>();
      for (const d of await definitions.of(volume.id)) {
        nodeIds.add(d.node_id);
        // Staged once for a whole cluster (Kubernetes): every member's kubelet mounts it.
        if (stagedPerCluster(d.backend)) for (const m of await members.findAll({ node_id: d.node_id })) for (const id of await activeMembers(m.cluster_id)) nodeIds.add(id);
      }
      for (const m of await members.findAll({ node_id: volume.node_id })) for (const id of await activeMembers(m.cluster_id)) nodeIds.add(id);
      nodeIds.delete(volume.node_id);
      const addresses = new Set<string>();
      for (const id of nodeIds) {
        const node = await nodes.get(id);
        if (!node || node.removing || !(await members.findAll({ node_id: id })).some((m) => m.status === 'active')) continue;
        for (const address of [node.ip_address, node.overlay_ip]) if (address) addresses.add(address);
      }
      return [...new Set([...[...addresses].sort(), ...settings.nfs_export_clients])];
    }

    /** The folder and, for NFS, the export for exactly these clients on the volume's node (idempotent). */
    async function share(volume: StoredVolume, clients: string[]): Promise<NfsExport | null> {
      const payload = { volume_id: volume.id, name: volume.name, folder: volume.folder, type: volume.type, ...(volume.type === 'nfs' ? { clients } : {}) };
      const result = await core.runTask(volume.node_id, VolumePrepare, payload, { subject: volume.id });
      return result.export && { ...result.export, clients };
    }

    /**
     * Exports these NFS volumes again where the clients they should name changed (a member joined or
     * left, a workload of another cluster mounts one); a volume's node that does not answer is logged.
     */
    async function reshare(volumeIds: Iterable<string>): Promise<void> {
      for (const id of new Set(volumeIds)) {
        const volume = await volumes.get(id);
        if (!volume || volume.type !== 'nfs' || volume.status !== 'ready') continue;
        const clients = await exportClients(volume);
        if (JSON.stringify(volume.nfs_export?.clients) === JSON.stringify(clients)) continue;
        try {
          await volumes.change(volume.id, { nfs_export: await share(volume, clients) });
        } catch (err) {
          log.warn({ volume_id: volume.id, node_id: volume.node_id, error: (err as Error).message }, 'exporting a volume to its new clients failed');
        }
      }
    }

    /** Preparing: the folder (and export) on the node, then the volume staged in the node's cluster. */
    async function prepare(volume: StoredVolume): Promise<Partial<StoredVolume>> {
      const nfsExport = await share(volume, volume.type === 'nfs' ? await exportClients(volume) : []);
      const prepared = { ...volume, nfs_export: nfsExport };
      if (volume.type === 'nfs') {
        const membership = await members.findOne({ node_id: volume.node_id });
        const cluster = membership && (await core.clusters.get(membership.cluster_id));
        if (cluster) await stage(prepared, cluster, await activeMembers(cluster.id));
      }
      return { nfs_export: nfsExport, status: 'ready', error: null };
    }

    /** Deletion: the staged definitions, then the export; the folder and its data stay. */
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
      for (const { node_id: nodeId, backend } of await definitions.of(volume.id)) {
        const node = await nodes.get(nodeId);
        // A node that is gone took its definition with it.
        if (node && !node.removing) {
          await attempt(`removing the definition on node ${nodeId}`, () => core.call(nodeId, UnstageVolume, { name: runtimeVolumeName(volume) }, { backend, subject: volume.id }));
        }
        await definitions.forget(volume.id, nodeId);
      }
      const host = await nodes.get(volume.node_id);
      if (volume.type === 'nfs' && host && !host.removing) {
        await attempt(`releasing the export on node ${volume.node_id}`, () =>
          core.runTask(volume.node_id, VolumeRelease, { volume_id: volume.id, name: volume.name, folder: volume.folder, type: volume.type }, { subject: volume.id }),
        );
      }
      if (problems.length) log.warn({ volume_id: volume.id, problems }, 'volume deleted (forced) with leftovers');
      await forget(volume.id);
    }

    const lifecycle = core.lifecycle(
      volumes,
      defineLifecycle<StoredVolume>({
        noun: 'volume',
        operations: {
          // Preparing (folder, export, definitions) and deleting are idempotent: an interrupted one runs again.
          prepare: {
            from: ['preparing', 'failed'],
            during: 'preparing',
            label: (v) => `prepare volume ${v.name}`,
            run: (v) => prepare(v),
            failed: (_v, err) => ({ status: 'failed', error: `preparing failed: ${err.message}` }),
          },
          // A volume made from a backup: restored into its folder first (the agent restores beside it and moves it in),
          // then exported and staged as a new one is. Until then it is `restoring`, which nothing mounts (mountFor, attach: 409).
          restore: {
            from: ['restoring'],
            during: 'restoring',
            label: (v) => `restore volume ${v.name} from ${v.restore_from?.source_id}`,
            async run(v, ctx) {
              await restorer().finish(v, v.restore_from!, ctx.signal);
              return prepare(v);
            },
            failed: (_v, err) => ({ status: 'failed', error: `restoring failed: ${err.message}` }),
          },
          // Unforced, a deletion fails when something is left; forced, it goes on and logs what is left.
          ...Object.fromEntries(
            (['delete', 'force-delete'] as const).map((op) => [
              op,
              {
                from: ['ready', 'failed', 'deleting'],
                during: 'deleting',
                label: (v: StoredVolume) => `delete volume ${v.name}`,
                async run(v: StoredVolume) {
                  await remove(v, op === 'force-delete');
                  return REMOVED;
                },
                failed: (_v: StoredVolume, err: Error) => ({ status: 'failed', error: `deleting failed: ${err.message}` }),
              },
            ]),
          ),
        },
      }),
    );

    /** What fills new volumes from backups (the backups plugin); 400 naming the field when it is not loaded. */
    function restorer() {
      const found = services.provided.contributions(VolumeRestorers)[0];
      if (!found) throw badRequest('Validation failed: body.restore_from needs the backups plugin, which is not loaded (add backups to plugins:)', [{ path: 'body.restore_from', message: 'backups are not loaded' }]);
      return found;
    }

    async function requireVolume(idOrName: string): Promise<StoredVolume> {
      const volume = await volumes.find(idOrName);
      if (!volume) throw notFound(`No volume ${idOrName}`);
      return volume;
    }

    const notReady = (v: StoredVolume) => conflict(`Volume ${v.name} is not ready (${v.status}${v.error ? `: ${v.error}` : ''})`);
    const attachmentOf = (v: StoredVolume): VolumeAttachment => ({
      volume_id: v.id,
      name: v.name,
      type: v.type,
      runtime_name: runtimeVolumeName(v),
      server_ip: v.server_ip,
      folder: v.folder,
      node_id: v.node_id,
    });

    /** Stages a ready NFS volume on a cluster's active members (or the cluster), and exports it to them. */
    async function stageFor(volume: StoredVolume, cluster: ClusterRecord, doing: string): Promise<void> {
      try {
        await stage(volume, cluster, await activeMembers(cluster.id));
      } catch (err) {
        throw asHttpError(err, doing);
      }
      // A cluster other than its node's: the export names its members from now on.
      await reshare([volume.id]);
    }

    /** Where a volume is staged on a cluster: its definitions on the cluster's members. */
    async function definitionsIn(volumeId: string, cluster: ClusterRecord) {
      const memberIds = new Set((await members.of(cluster.id)).map((m) => m.node_id));
      return (await definitions.of(volumeId)).filter((d) => memberIds.has(d.node_id));
    }

    const api: VolumesApi = {
      require: requireVolume,
      async mountFor(volume, target, cluster: ClusterRecord): Promise<VolumeMount> {
        const current = await requireVolume(volume.id);
        const noun = core.nounOf(cluster);
        if (current.status !== 'ready') throw notReady(current);
        if (current.type === 'local') {
          const membership = await members.findOne({ node_id: current.node_id });
          if (!membership || membership.cluster_id !== cluster.id) {
            throw conflict(`Volume ${current.name} is a local folder on node ${current.node_id}, which is not a member of ${noun} ${cluster.name}; use an nfs volume or a workload in that node's ${noun}`);
          }
          return { source: { host_path: { node_id: current.node_id, path: current.folder } }, target };
        }
        await stageFor(current, cluster, `Defining volume ${current.name} on the members of ${noun} ${cluster.name}`);
        return { source: { nfs: { name: runtimeVolumeName(current), server: current.server_ip!, path: current.folder } }, target };
      },
      async attach(volume, cluster) {
        const current = await requireVolume(volume.id);
        const noun = core.nounOf(cluster);
        if (current.type === 'local') {
          throw conflict(
            `Volume ${current.name} is a local folder on node ${current.node_id}: there is nothing to attach to ${noun} ${cluster.name} (a workload there mounts it in place, on that node); attach an nfs volume`,
          );
        }
        if (current.status !== 'ready') throw notReady(current);
        const created = !(await definitionsIn(current.id, cluster)).length;
        await stageFor(current, cluster, `Attaching volume ${current.name} to ${noun} ${cluster.name}`);
        return { attachment: attachmentOf(current), created };
      },
      async attachedTo(cluster) {
        const ids = await definitions.volumesOn((await members.of(cluster.id)).map((m) => m.node_id));
        const found = (await Promise.all(ids.map((id) => volumes.get(id)))).filter((v): v is StoredVolume => !!v);
        return found.sort((a, b) => a.name.localeCompare(b.name)).map(attachmentOf);
      },
      async detach(volume, cluster) {
        const noun = core.nounOf(cluster);
        const defined = await definitionsIn(volume.id, cluster);
        if (!defined.length) throw notFound(`Volume ${volume.name} is not attached to ${noun} ${cluster.name}`);
        const using = (await usersOf(volume.id)).filter((u) => !u.cluster_id || u.cluster_id === cluster.id);
        if (using.length) {
          throw conflict(`Volume ${volume.name} is mounted on ${noun} ${cluster.name} by ${using.map((u) => `${u.type} ${u.name}`).join(', ')}: detach it from them first`, using);
        }
        for (const { node_id: nodeId, backend } of defined) {
          await core.call(nodeId, UnstageVolume, { name: runtimeVolumeName(volume) }, { backend, subject: volume.id }).catch((err: unknown) => {
            throw asHttpError(err, `Detaching volume ${volume.name} from ${noun} ${cluster.name}`);
          });
          await definitions.forget(volume.id, nodeId);
        }
        // Its export no longer names this cluster's members (unless its own node is one).
        await reshare([volume.id]);
      },
      async forceRemove(id) {
        const volume = await volumes.get(id);
        if (!volume) return false;
        await remove(volume, true);
        return true;
      },
      onNode: (nodeId) => volumes.findAll({ node_id: nodeId }),
    };
    services.provided.provide(VolumesRef, api);
    // Volumes made before projects (project_id null) are read as the `default` project's.
    services.provided.contribute(ScopeResolvers, tableResolver('volume', () => db.knex, VOLUMES, { via: 'project_id', defaultProject: defaultProjectOf(services) }));
    services.provided.contribute(TaggableResources, { type: 'volume', resolve: async (ref) => (await volumes.find(ref))?.id ?? null });
    services.provided.contribute(NodeGrantHolders, {
      heldOn: async (nodeId, projectId, trx) => (await volumes.query(trx).where({ node_id: nodeId, project_id: projectId }).orderBy('name').select('name')).map((v: { name: string }) => `volume ${v.name}`),
    });

    // A node that joins a cluster gets the cluster's NFS volumes: those on its members' folders and those
    // already defined on its members. When it holds volumes itself, every member gets those. Staging
    // one asks the members that mount it for the NFS client (nfs-common) when their agent reports it
    // missing: a cluster without NFS volumes never has it installed (it brings rpcbind, port 111).
    defineReaction(services, {
      name: 'volumes:member-joined',
      on: { topic: ClusterMemberJoined, keep: ({ clusterId, nodeId }) => ({ clusterId, nodeId }) },
      label: ({ clusterId, nodeId }) => `volumes for ${nodeId} in ${clusterId}`,
      async run({ clusterId, nodeId }) {
        const cluster = await core.clusters.get(clusterId);
        if (!cluster) return;
        const memberIds = await activeMembers(clusterId);
        // Run late (a retry) after the node left the cluster again: there is nothing to define on it.
        if (!memberIds.includes(nodeId)) return;
        const ids = new Set(await definitions.volumesOn(memberIds.filter((id) => id !== nodeId)));
        const candidates = await volumes.query().where({ type: 'nfs', status: 'ready' }).andWhere((q) => q.whereIn('node_id', memberIds).orWhereIn('id', [...ids]));
        for (const row of candidates) {
          const volume = volumes.decode(row);
          await stage(volume, cluster, volume.node_id === nodeId ? memberIds : [nodeId]);
        }
        await reshare(candidates.map((row: { id: string }) => row.id));
      },
      failure: 'defining volumes on a joined node failed',
    });

    // A node that leaves a cluster (or is deleted) is no longer a client of the exports it was named in:
    // those of the volumes on the cluster's members and those defined on it. What was staged through it
    // for the whole cluster (Kubernetes: a PersistentVolume and claim, recorded on its manager) went with
    // the cluster's control plane: forgotten, so that deleting the volume does not ask for it.
    async function afterLeaving({ clusterId, nodeId }: { clusterId: string; nodeId: string }): Promise<void> {
      // Run late (a retry) after the node joined the cluster again: it is a client again, its definitions its own.
      if ((await activeMembers(clusterId)).includes(nodeId)) return;
      const definedOn = await definitions.volumesOn([nodeId]);
      for (const volumeId of definedOn) {
        for (const d of await definitions.of(volumeId)) if (d.node_id === nodeId && stagedPerCluster(d.backend)) await definitions.forget(volumeId, nodeId);
      }
      const memberIds = [nodeId, ...(await members.of(clusterId)).map((m) => m.node_id)];
      const hosted: Array<{ id: string }> = await volumes.query().where({ type: 'nfs' }).whereIn('node_id', memberIds).select('id');
      await reshare([...hosted.map((row) => row.id), ...definedOn]);
    }
    const leaving = { label: ({ clusterId, nodeId }: { clusterId: string; nodeId: string }) => `exports after ${nodeId} left ${clusterId}`, run: afterLeaving, failure: 'narrowing NFS exports after a member left failed' };
    defineReaction(services, { name: 'volumes:member-left', on: { topic: ClusterMemberLeft, keep: ({ clusterId, nodeId }) => ({ clusterId, nodeId }) }, ...leaving });
    defineReaction(services, { name: 'volumes:member-removed', on: { topic: ClusterMemberRemoved, keep: ({ cluster, member }) => ({ clusterId: cluster.id, nodeId: member.node_id }) }, ...leaving });

    const Volume = Type.Object({}, { additionalProperties: true });

    const ForceQuery = Type.Object(
      { force: Type.Optional(Type.Boolean({ description: 'delete the record even when a definition or the export cannot be removed (a node that does not answer)' })) },
      { additionalProperties: false },
    );

    return {
      // Core resumes the volumes' operations (their lifecycle's); this picks up what is not one.
      async resume() {
        // Exports an older hangar wrote name every address (`*`, no clients recorded): narrowed at the first start,
        // by one of the processes that start together (workers, replicas) — it is idempotent, so a later start may repeat it.
        core.jobs.run(
          'NFS exports from before restricted exports',
          async () => {
            if (!(await db.leadership.lead('volumes:narrow-old-exports', 60_000))) return;
            const ready: StoredVolume[] = (await volumes.query().where({ type: 'nfs', status: 'ready' })).map((row: Record<string, unknown>) => volumes.decode(row));
            await reshare(ready.filter((v) => !v.nfs_export?.clients).map((v) => v.id));
          },
          (err) => log.warn({ error: err.message }, 'narrowing NFS exports from before restricted exports failed'),
          { resumable: false },
        );
        return [];
      },
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/volumes',
          // Installation admins, and (the scope) members whose role in the project it goes in grants volumes:write, on the nodes granted to it.
          auth: { role: 'admin' },
          scope: CREATE_IN_PROJECT,
          description:
            'Installation admins make volumes in any project, on any node not granted to another project; members whose role in the project grants volumes:write make them in it, on the nodes granted to it only (another node: 404 as one that does not exist), and fill them from a backup with volumes:restore (docs/tenancy.md).',
          summary:
            'Create a volume: a folder on a node, shared over NFS (default) or bound locally; 202 while it is prepared. With restore_from, filled from a backup first (202 with the volume restoring and its restore run)',
          status: 202,
          schemas: {
            body: Type.Object(
              {
                name: VolumeName,
                node_id: NodeRef,
                folder: Folder,
                type: Type.Optional(Type.Union([Type.Literal('nfs'), Type.Literal('local')], { default: 'nfs', description: 'fixed at creation' })),
                project_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the project it belongs to (id or name); default: your default project (with the projects plugin)' })),
                restore_from: Type.Optional(
                  Type.Object(
                    {
                      snapshot_id: Type.String({ minLength: 1, maxLength: 64, description: 'a finished backup: its id (bak-…), or restic’s snapshot id (8 or more hex digits) with target_id' }),
                      target_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the backup target holding it (id or name); needed with a restic snapshot id found on more than one' })),
                    },
                    { additionalProperties: false, description: 'fill the new volume from a backup (its folder must be missing or empty on the node): restoring until the restore finished, then ready' },
                  ),
                ),
              },
              { additionalProperties: false },
            ),
            response: Volume,
          },
          async handler(req) {
            const type = req.body.type ?? 'nfs';
            const folder = normaliseFolder(req.body.folder);
            const projectId = await projectForNew(services, req.principal, req.body.project_id);
            requireHeldIn(req.ctx, projectId);
            if (req.body.restore_from) requireHeldIn(req.ctx, projectId, 'volumes:restore');
            if (await volumes.findOne({ name: req.body.name })) throw conflict(`A volume named ${req.body.name} exists`);
            const node: NodeRecord = await nodes.require(req.body.node_id);
            await requireNodeServes(services.provided, req.principal, node, req.body.node_id, projectId, 'the new volume’s');
            if (node.connection === 'pending') throw conflict(`Node ${node.id} has no agent yet: join the machine first`);
            // On a node shared between projects, another project's volume or target is not named.
            const reads: Reads = (kind, id, permission) => readsResource(req.ctx, services.provided, kind, id, permission);
            const sameFolder = await volumes.findOne({ node_id: node.id, folder });
            if (sameFolder) throw conflict((await reads('volume', sameFolder.id, 'volumes:read')) ? `Folder ${folder} on node ${node.id} is volume ${sameFolder.name} already` : folderClash(node.id, folder, null, folder));
            for (const holder of services.provided.contributions(NodeFolderHolders)) {
              const refusal = await holder.refusal(node.id, folder, reads);
              if (refusal) throw conflict(refusal, [{ path: 'body.folder', message: refusal }]);
            }
            const serverIp = type === 'nfs' ? core.addressOf(node) : null;
            if (type === 'nfs' && !serverIp) throw conflict(`Node ${node.id} has no address yet to serve NFS from`);
            const source: RestoreSource | null = req.body.restore_from ? await restorer().resolve(req.body.restore_from, node.id, projectId) : null;
            let volume: StoredVolume;
            try {
              // The node's grants checked again and the volume written with its row locked (SQLite runs
              // one writer at a time): a grant taken back meanwhile is seen here, or sees this volume.
              volume = await db.knex.transaction(async (trx) => {
                await nodes.lock(node.id, trx);
                await requireNodeServes(services.provided, req.principal, node, req.body.node_id, projectId, 'the new volume’s', trx);
                return volumes.insert(
                  {
                    id: newId('vol'),
                    name: req.body.name,
                    node_id: node.id,
                    folder,
                    type,
                    project_id: projectId,
                    server_ip: serverIp,
                    status: source ? 'restoring' : 'preparing',
                    error: null,
                    nfs_export: null,
                    restore_from: source,
                    created_at: now(),
                    updated_at: now(),
                  },
                  trx,
                );
              });
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`A volume named ${req.body.name} exists`);
              throw err;
            }
            if (!source) return Reply.accepted(view(await lifecycle.start(volume.id, 'prepare', {}, () => conflict(`Volume ${volume.name} changed meanwhile`))));
            // The restore is queued first (the answer names it); the operation follows it, then exports and stages the volume.
            let restore: Record<string, unknown>;
            try {
              restore = await restorer().start(volume, source);
            } catch (err) {
              await volumes.remove(volume.id);
              throw err;
            }
            return Reply.accepted({ ...view(await lifecycle.start(volume.id, 'restore', {}, () => conflict(`Volume ${volume.name} changed meanwhile`))), restore });
          },
        }),
        ...readRoutes({
          path: '/v1/volumes',
          summaries: { list: 'List volumes', get: 'Get a volume by id or name' },
          page: (options) => volumes.page(options),
          find: requireVolume,
          view,
          response: Volume,
          scope: { kind: 'volume' },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/volumes/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ kind: 'volume', from: 'params.id' }] },
          summary: 'Delete a volume: 409 while anything uses it; removes its definitions and export (202), the folder and its data stay on the node',
          status: 202,
          schemas: { params: IdParams, query: ForceQuery },
          async handler(req) {
            const volume = await requireVolume(req.params.id);
            const note = `the folder ${volume.folder} and its data stay on node ${volume.node_id}`;
            if (volume.status === 'deleting') return Reply.accepted({ ...view(volume), note });
            if (volume.status === 'preparing' || volume.status === 'restoring') throw conflict(`Volume ${volume.name} is still being ${volume.status === 'preparing' ? 'prepared' : 'restored'}; try again when it is ready or failed`);
            const using = await usersOf(volume.id);
            if (using.length) throw conflict(`Volume ${volume.name} is in use by ${using.map((u) => `${u.type} ${u.name}`).join(', ')}`, using);
            const deleting = await lifecycle.start(volume.id, req.query.force ? 'force-delete' : 'delete', { error: null }, (v) => conflict(`Volume ${volume.name} is ${v?.status ?? 'gone'}`));
            return Reply.accepted({ ...view(deleting), note });
          },
        }),
      ],
    };
  },
});

export { volumesOf, VolumesRef, VolumeUsersPoint } from './api.js';
export type { VolumeAttachment, VolumeRecord, VolumesApi, VolumeUser, VolumeUsers } from './api.js';
