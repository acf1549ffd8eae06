import { createHash } from 'node:crypto';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import path from 'node:path';
import { Type } from '@sinclair/typebox';
import { conflict, notFound } from '../../core/errors.js';
import { OrchestratorError } from '../../core/clusters/calls.js';
import { defineClusterApi } from '../../core/clusters/api.js';
import { Reply } from '../../core/http/reply.js';
import { SetNodeAvailability } from '../../core/orchestrator.js';
import { NodeAvailabilityRecorders, recordObservedAvailability } from '../../core/node-availability.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import type { ClusterRecord, MemberRecord } from '../../core/clusters/store.js';
import { DnsName, IdParams, NodeRef } from '../../core/http/resources.js';
import { K3S_API_PORT, K3sInstallServer, K3sJoin, K3sNodes, K3sRemoveNode, K3sToken, K3sUninstall, K3sVolumePhase } from '../../drivers/kubernetes/api.js';
import { NodesRef, nodesOf, type NodeRecord } from '../nodes/api.js';
import { VolumesRef, type VolumeAttachment, type VolumesApi } from '../volumes/api.js';
import { ClusterMemberJoined, ClusterMemberLeft } from '../../core/clusters/topics.js';
import { IdentityRef } from '../iam/api.js';
import { credentialsMigration, ON_CLUSTER, userCredentials } from './credentials.js';

const BACKEND = 'k8s';
const K8S_CLUSTERS = 'k8s_clusters';

export const KubernetesConfigSchema = Type.Object(
  {
    k3s_dir: Type.Optional(
      Type.String({ minLength: 1, description: 'where the operator places the k3s binary (k3s, or k3s-<arch>) and optionally k3s-airgap-images-<arch>.tar.zst|.tar.gz|.tar, served to agents; default <data_dir>/k3s' }),
    ),
    k3s_download_url: Type.Optional(
      Type.String({
        pattern: '^https?://',
        description: 'connected installs: where agents download k3s when no binary is placed; {version} (k3s_version, URL-encoded), {arch} (amd64|arm64) and {suffix} ("" for amd64, "-arm64") are replaced, e.g. https://github.com/k3s-io/k3s/releases/download/{version}/k3s{suffix}',
      }),
    ),
    k3s_version: Type.Optional(Type.String({ minLength: 1, description: 'the k3s release the download URL names ({version}), e.g. v1.33.1+k3s1' })),
    k3s_sha256: Type.Optional(
      Type.Object(
        { amd64: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$' })), arm64: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$' })) },
        { additionalProperties: false, description: 'the SHA-256 of the downloaded binary per architecture (the release’s sha256sum-<arch>.txt); required: hangar installs no k3s it cannot verify' },
      ),
    ),
    install_timeout_seconds: Type.Integer({ minimum: 30, default: 300, description: 'how long installing k3s on a machine may take' }),
  },
  { additionalProperties: false, default: {} },
);

interface KubernetesConfig {
  k3s_dir?: string;
  k3s_download_url?: string;
  k3s_version?: string;
  k3s_sha256?: { amd64?: string; arm64?: string };
  install_timeout_seconds: number;
}

/** Where the cluster's kubeconfig points: the server node's public address, its overlay address, or a given address. */
const KubeconfigEndpoint = Type.Union([Type.Literal('public'), Type.Literal('overlay'), Type.String({ format: 'ipv4' })], {
  description: 'public (the server node’s address), overlay (its WireGuard address) or an IPv4 address',
});

interface K8sOptions {
  cluster_id: string;
  kubeconfig_endpoint: string;
  version: string | null;
}

function memberView(m: MemberRecord) {
  return { node_id: m.node_id, role: m.role === 'manager' ? 'server' : 'agent', status: m.status, runtime_node_id: m.runtime_node_id, address: m.advertise_address, error: m.error, joined_at: m.created_at };
}

/**
 * Kubernetes (k3s) clusters: clusters of backend k8s (`/v1/kubernetes/clusters`, core/clusters/api.ts).
 * hangar installs k3s through the agents — the binary the operator placed in the control plane's
 * data dir, `k3s server` on the first node, `k3s agent` with the server's token on the others — and
 * reaches the cluster through the server node's agent (drivers/kubernetes). Its own routes: the
 * kubeconfigs per user (./credentials.ts), volumes attached as PersistentVolumes, and the k3s files agents install.
 */
export default definePlugin({
  name: 'kubernetes',
  description: 'Kubernetes (k3s) clusters: install through the agents, kubeconfig, nodes',
  configSchema: KubernetesConfigSchema,
  deps: [NodesRef],
  optionalDeps: [VolumesRef, IdentityRef],
  migrations: [
    {
      id: '001_k8s_clusters',
      async up(knex) {
        await knex.schema.createTable(K8S_CLUSTERS, (t) => {
          t.string('cluster_id', 64).primary().references('id').inTable('clusters').onDelete('CASCADE');
          t.string('kubeconfig_endpoint', 64).notNullable();
          t.string('version', 100).nullable();
        });
      },
    },
    credentialsMigration,
  ],
  setup(services) {
    const { clusters: core } = services;
    const settings = services.config.kubernetes as KubernetesConfig;
    const k3sDir = settings.k3s_dir ?? path.join(services.config.data_dir, 'k3s');
    /** A file in k3s_dir as messages name it: by the setting, never by the absolute path of this host's data dir. */
    const shownInK3sDir = (name: string) => `${settings.k3s_dir ? '<kubernetes.k3s_dir>' : '<data_dir>/k3s'}/${name}`;
    const { nodes, events } = nodesOf(services);
    const { clusters, members } = core;
    const knex = services.db.knex;
    const installTimeoutMs = settings.install_timeout_seconds * 1000;

    const options = async (clusterId: string) => (await knex<K8sOptions>(K8S_CLUSTERS).where({ cluster_id: clusterId }).first()) ?? null;

    /** A file the operator placed in k3s_dir, the first of `names` there; its SHA-256 is computed (streamed) once per file version. */
    const checksums = new Map<string, { mtimeMs: number; sha256: Promise<string> }>();
    async function placed(names: string[]): Promise<{ file: string; name: string; sha256: string; size: number } | null> {
      for (const name of names) {
        const file = path.join(k3sDir, name);
        if (!existsSync(file)) continue;
        // A file placed that cannot be read (a folder, no permission): 409 naming it, not a 500 nor a silent skip.
        const unreadable = (reason: string) => conflict(`${shownInK3sDir(name)} cannot be read by the control plane (${reason}): replace it with a readable file, or remove it`);
        const stat = statSync(file);
        if (!stat.isFile()) throw unreadable('not a file');
        let known = checksums.get(file);
        if (!known || known.mtimeMs !== stat.mtimeMs) {
          const hash = createHash('sha256');
          const sha256 = pipeline(createReadStream(file), hash).then(() => hash.digest('hex'));
          known = { mtimeMs: stat.mtimeMs, sha256 };
          checksums.set(file, known);
          sha256.catch(() => checksums.delete(file));
        }
        const sha256 = await known.sha256.catch((err: NodeJS.ErrnoException) => {
          throw unreadable(err.code ?? 'read error');
        });
        return { file, name, sha256, size: stat.size };
      }
      return null;
    }
    /** The k3s binary for an architecture: k3s-<arch>, or k3s for any. */
    const binaryNames = (arch: string) => [`k3s-${arch}`, 'k3s'];
    /** k3s's airgap images tarball for an architecture, as its releases name it. */
    const imagesNames = (arch: string) => ['.tar.zst', '.tar.gz', '.tar'].map((ext) => `k3s-airgap-images-${arch}${ext}`);

    /** Where the download URL points for an architecture ({version}, {arch}, {suffix} replaced). */
    function downloadUrl(template: string, arch: string): string {
      if (template.includes('{version}') && !settings.k3s_version) throw conflict('kubernetes.k3s_download_url names {version}: set kubernetes.k3s_version (e.g. v1.33.1+k3s1)');
      return template
        .replaceAll('{version}', encodeURIComponent(settings.k3s_version ?? ''))
        .replaceAll('{arch}', arch)
        .replaceAll('{suffix}', arch === 'amd64' ? '' : `-${arch}`);
    }

    /**
     * What an install on `node` fetches: the binary the operator placed (served by the control
     * plane), or else the download URL's with the operator's SHA-256 (none: 409, nothing unverified
     * is installed); and the images tarball when one is placed.
     */
    async function installFiles(node: NodeRecord) {
      const architecture = node.architecture === 'arm64' || node.architecture === 'aarch64' ? 'arm64' : 'amd64';
      const images = await placed(imagesNames(architecture));
      const withImages = images ? { images: { sha256: images.sha256, file_name: images.name, architecture } } : {};
      const binary = await placed(binaryNames(architecture));
      if (binary) return { binary: { sha256: binary.sha256, architecture }, ...withImages };
      const placeIt = `place it at ${shownInK3sDir(`k3s-${architecture}`)} (or ${shownInK3sDir('k3s')})`;
      if (!settings.k3s_download_url) throw conflict(`No k3s binary for ${architecture} on the control plane: ${placeIt}, or set kubernetes.k3s_download_url for a connected install`);
      const sha256 = settings.k3s_sha256?.[architecture];
      if (!sha256) {
        throw conflict(`No k3s binary for ${architecture} on the control plane and no kubernetes.k3s_sha256.${architecture} for the download URL: hangar installs no k3s it cannot verify; set it (the release's sha256sum-${architecture}.txt) or ${placeIt}`);
      }
      return { binary: { sha256, architecture, url: downloadUrl(settings.k3s_download_url, architecture) }, ...withImages };
    }

    const addressOf = (node: NodeRecord) => core.addressOf(node);
    const serverUrl = (address: string) => `https://${address}:${K3S_API_PORT}`;

    const record = (nodeId: string, kind: string, message: string, data?: Record<string, unknown>) => events.record({ nodeId, kind, message, data });

    /** Installs k3s on a member: the server on the first, an agent (with the server's token) on the others. */
    async function join(cluster: ClusterRecord, member: MemberRecord): Promise<void> {
      const node = await nodes.get(member.node_id);
      if (!node) throw new Error(`node ${member.node_id} is gone`);
      const address = addressOf(node);
      if (member.role === 'manager') {
        const endpoint = (await options(cluster.id))?.kubeconfig_endpoint ?? 'public';
        const sans = [node.ip_address, node.overlay_ip, /^\d/.test(endpoint) ? endpoint : null].filter((x): x is string => !!x);
        try {
          const result = await core.runTask(
            node.id,
            K3sInstallServer,
            { node_name: node.id, node_ip: address, tls_sans: [...new Set(sans)], ...(await installFiles(node)) },
            { subject: cluster.id, timeoutMs: installTimeoutMs },
          );
          await core.memberJoined(member, { runtime_node_id: result.runtime_node_id, advertise_address: address, error: null });
          await clusters.change(cluster.id, { status: 'active', manager_node_id: node.id, error: null });
          await knex(K8S_CLUSTERS).where({ cluster_id: cluster.id }).update({ version: result.version });
        } catch (err) {
          await clusters.change(cluster.id, { status: 'failed', error: `installing the k3s server on ${node.id} failed: ${(err as Error).message}` });
          throw err;
        }
      } else {
        const current = (await clusters.get(cluster.id))!;
        if (!current.manager_node_id) throw new Error(`cluster ${cluster.name} has no server to join (its first node did not install it)`);
        const server = (await nodes.get(current.manager_node_id))!;
        const { token } = await core.runTask(server.id, K3sToken, {}, { subject: cluster.id });
        const result = await core.runTask(
          node.id,
          K3sJoin,
          { node_name: node.id, node_ip: address, server_url: serverUrl(addressOf(server)!), token, ...(await installFiles(node)) },
          { subject: cluster.id, timeoutMs: installTimeoutMs },
        );
        await core.memberJoined(member, { runtime_node_id: result.runtime_node_id, advertise_address: address, error: null });
      }
      await record(node.id, 'k8s_joined', `joined Kubernetes cluster ${cluster.name} as ${member.role === 'manager' ? 'the k3s server' : 'a k3s agent'}`, { cluster_id: cluster.id });
      services.events.publish(ClusterMemberJoined, { clusterId: cluster.id, nodeId: node.id });
    }

    /**
     * Removes a member: an agent node is drained (PodDisruptionBudgets honoured) and its node object
     * removed; k3s is uninstalled on the machine. A drain the cluster refuses (a budget) stops the
     * removal: the node stays a member (active, its `error` saying why), cordoned in the cluster and
     * in hangar.
     */
    async function leave(cluster: ClusterRecord, member: MemberRecord): Promise<void> {
      const isServer = cluster.manager_node_id === member.node_id;
      if (!isServer && member.runtime_node_id && cluster.manager_node_id) {
        const drainSeconds = core.settings.drainTimeoutSeconds;
        const refused = await core
          .callOn(
            cluster,
            SetNodeAvailability,
            { runtime_node_id: member.runtime_node_id, availability: 'drained', ...(drainSeconds ? { drain_timeout_seconds: drainSeconds } : {}) },
            drainSeconds ? { timeoutMs: Math.max(core.settings.callTimeoutMs, (2 * drainSeconds + 30) * 1000) } : {},
          )
          .then(
            () => null,
            async (err: Error) => {
              await record(member.node_id, 'k8s_drain_failed', `draining before leaving cluster ${cluster.name} failed: ${err.message}`, { cluster_id: cluster.id });
              // Unreachable: nothing is known of the node; the removal failed.
              if (!(err instanceof OrchestratorError) || err.unreachable) throw err;
              return err;
            },
          );
        if (refused) {
          const node = await nodes.get(member.node_id);
          if (node && node.availability !== 'cordoned') {
            const reason = `the cluster refused to drain it for its removal and keeps it cordoned (${refused.message})`;
            await recordObservedAvailability(services.provided.contributions(NodeAvailabilityRecorders), { nodeId: node.id, recorded: node.availability, availability: 'cordoned', source: `Kubernetes cluster ${cluster.name}`, reason });
          }
          await members.change(member.id, { status: 'active', error: `removing it failed: draining it was refused: ${refused.message}; it stays a member, cordoned (remove it again once the cluster lets it drain, or uncordon it)` });
          return;
        }
      }
      await core.runTask(member.node_id, K3sUninstall, {}, { subject: cluster.id, timeoutMs: installTimeoutMs }).catch(async (err: Error) => {
        await record(member.node_id, 'k8s_uninstall_failed', `uninstalling k3s failed: ${err.message}`, { cluster_id: cluster.id });
      });
      if (!isServer && member.runtime_node_id && cluster.manager_node_id) await core.callOn(cluster, K3sRemoveNode, { runtime_node_id: member.runtime_node_id });
      await core.memberLeft(member);
      if (isServer) await clusters.change(cluster.id, { manager_node_id: null, status: cluster.status === 'deleting' ? 'deleting' : 'empty' });
      await record(member.node_id, 'k8s_left', `left Kubernetes cluster ${cluster.name}`, { cluster_id: cluster.id });
      services.events.publish(ClusterMemberLeft, { clusterId: cluster.id, nodeId: member.node_id });
    }

    const clusterApi = defineClusterApi(services, {
      backend: BACKEND,
      nodes: { nodes, events },
      memberView,
      async view(cluster, list) {
        const opts = await options(cluster.id);
        const server = list.find((m) => m.node_id === cluster.manager_node_id) ?? list.find((m) => m.role === 'manager') ?? null;
        return { server_node_id: server?.node_id ?? null, nodes: list.map(memberView), version: opts?.version ?? null, kubeconfig_endpoint: opts?.kubeconfig_endpoint ?? 'public' };
      },
      create: {
        summary: 'Create a Kubernetes (k3s) cluster on nodes: k3s server on the first, k3s agents on the others; 202 while installing',
        status: 202,
        body: Type.Object(
          {
            name: DnsName,
            node_ids: Type.Array(NodeRef, { minItems: 1, uniqueItems: true, description: 'the first is the server node' }),
            options: Type.Optional(Type.Object({ kubeconfig_endpoint: Type.Optional(KubeconfigEndpoint) }, { additionalProperties: false })),
          },
          { additionalProperties: false },
        ),
        nodeIds: (body) => body.node_ids as string[],
        async created(cluster, body) {
          const asked = body.options as { kubeconfig_endpoint?: string } | undefined;
          await knex(K8S_CLUSTERS).insert({ cluster_id: cluster.id, kubeconfig_endpoint: asked?.kubeconfig_endpoint ?? 'public', version: null });
        },
      },
      summaries: {
        list: 'List Kubernetes clusters',
        get: 'Get a Kubernetes cluster: status, server node, nodes, version, kubeconfig endpoint',
        delete: 'Delete a Kubernetes cluster: 202 while k3s is uninstalled from its nodes, 200 when nothing was left; 409 naming its workloads unless forced',
      },
      members: {
        path: 'nodes',
        summary: 'The cluster’s nodes as it reports them: Ready, roles, kubelet version',
        report: { call: K3sNodes, members: (answer) => answer.nodes, by: 'server' },
        fields: (r) => ({ ready: r?.ready ?? null, roles: r?.roles ?? [], kubelet_version: r?.kubelet_version ?? null, availability: r?.availability ?? null }),
        // The node object's spec.unschedulable is the truth (drained: hangar's annotation on a cordoned node whose pods it evicted).
        availability: (r) => (r.availability === 'schedulable' ? 'active' : r.availability),
        readiness: (r) => ({ ready: r.ready, reason: r.ready ? null : 'NotReady: its kubelet does not report the Ready condition' }),
      },
      join: { path: 'nodes', summary: 'Add a node as a k3s agent; 202 while it installs' },
      leave: {
        method: 'DELETE',
        path: 'nodes',
        summary: 'Remove a node: drained (PodDisruptionBudgets honoured), k3s uninstalled on it; the server node cannot be removed (409)',
        async refuse(cluster, member) {
          if (member.node_id === cluster.manager_node_id || member.role === 'manager') {
            throw conflict(`Node ${member.node_id} is the server of cluster ${cluster.name}; delete the cluster to remove it`);
          }
        },
      },
      joinKinds: [K3sInstallServer, K3sJoin, K3sUninstall],
      // The k3s files it will install are there (placed, or downloadable and verifiable): a 409 naming what is missing.
      checkNode: (node) => installFiles(node),
      joinMember: (cluster, member) => join(cluster, member),
      leaveMember: (cluster, member) => leave(cluster, member),
      // Agents first (their node objects go through the server), the server last; k3s uninstalled on each.
      async removeMembers(cluster) {
        const list = await members.of(cluster.id);
        for (const m of [...list.filter((x) => x.node_id !== cluster.manager_node_id), ...list.filter((x) => x.node_id === cluster.manager_node_id)]) {
          const current = (await clusters.get(cluster.id))!;
          await core.runTask(m.node_id, K3sUninstall, {}, { subject: cluster.id, timeoutMs: installTimeoutMs }).catch(async (err: Error) => {
            await record(m.node_id, 'k8s_uninstall_failed', `uninstalling k3s failed: ${err.message}`, { cluster_id: current.id });
          });
          await core.memberLeft(m);
          await record(m.node_id, 'k8s_left', `left Kubernetes cluster ${current.name} (deleted)`, { cluster_id: current.id });
          services.events.publish(ClusterMemberLeft, { clusterId: current.id, nodeId: m.node_id });
        }
      },
    });
    const { require: requireCluster, ask: askServer } = clusterApi;

    const credentials = userCredentials({
      services,
      requireActive: (id) => core.requireActive(id, BACKEND),
      async serverOf(cluster) {
        const server = await nodes.get(cluster.manager_node_id);
        if (!server) throw conflict(`Cluster ${cluster.name} has no server node`);
        const endpoint = (await options(cluster.id))?.kubeconfig_endpoint ?? 'public';
        const address = endpoint === 'public' ? server.ip_address : endpoint === 'overlay' ? server.overlay_ip : endpoint;
        if (!address) throw conflict(`The server node ${server.id} has no ${endpoint} address; choose another kubeconfig endpoint`);
        return { server, url: serverUrl(address) };
      },
    });

    const volumesApi = (): VolumesApi => {
      const api = services.provided.find(VolumesRef);
      if (!api) throw notFound('Volumes need the volumes plugin, which is not loaded');
      return api;
    };
    /** A volume attached to the cluster, with its claim's phase as the cluster reports it (null: not staged there, or not read). */
    const attachmentView = (a: VolumeAttachment, phase: string | null) => ({ ...a, claim: a.runtime_name, phase });
    const VolumeParams = Type.Object({ id: IdParams.properties.id, volumeId: Type.String({ minLength: 1, maxLength: 100 }) });

    return {
      routes: [
        ...clusterApi.routes,
        ...credentials.routes,
        defineRoute({
          method: 'POST',
          path: '/v1/kubernetes/clusters/{id}/volumes',
          auth: { role: 'admin' },
          scope: { of: [...ON_CLUSTER.of!, { kind: 'volume', from: 'body.volume_id', permission: 'volumes:read' }] },
          summary: 'Attach an NFS volume: a PersistentVolume and a claim of the same name on the cluster (201 once the claim is Bound; 200 when it was attached already)',
          description: '409 when the cluster is not active, the volume is not ready or is a local folder, or the claim does not bind (the reason named).',
          status: 201,
          otherStatuses: [200],
          schemas: { params: IdParams, body: Type.Object({ volume_id: Type.String({ minLength: 1, maxLength: 100, description: 'the volume’s id or name' }) }, { additionalProperties: false }) },
          handler: async (req) => {
            const cluster = await core.requireActive(req.params.id, BACKEND);
            const volumes = volumesApi();
            const { attachment, created } = await volumes.attach(await volumes.require(req.body.volume_id), cluster);
            return Reply.data(attachmentView(attachment, 'Bound'), created ? 201 : 200);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/kubernetes/clusters/{id}/volumes',
          auth: 'authenticated',
          scope: ON_CLUSTER,
          summary: 'The volumes attached to the cluster, each with its claim’s phase as the cluster reports it (Bound, Pending, Lost; null when the cluster did not answer, with `error`)',
          schemas: { params: IdParams },
          handler: async (req) => {
            const cluster = await requireCluster(req.params.id);
            const attached = await volumesApi().attachedTo(cluster);
            let error: string | null = null;
            const data = [];
            for (const a of attached) {
              // Once the server did not answer, the others are not asked.
              const asked: { answer: { phase: string | null } | null; error: string | null } = error ? { answer: null, error } : await askServer(cluster, K3sVolumePhase, { name: a.runtime_name });
              error = asked.error;
              data.push(attachmentView(a, asked.answer?.phase ?? null));
            }
            return new Reply(200, { data, ...(error ? { error } : {}) });
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/kubernetes/clusters/{id}/volumes/{volumeId}',
          auth: { role: 'admin' },
          scope: ON_CLUSTER,
          summary: 'Detach a volume: its claim and PersistentVolume are removed (the data stays); 409 naming what mounts the claim',
          schemas: { params: VolumeParams },
          handler: async (req) => {
            const cluster = await core.requireActive(req.params.id, BACKEND);
            const volumes = volumesApi();
            const volume = await volumes.require(req.params.volumeId);
            await volumes.detach(volume, cluster);
            return { volume_id: volume.id, name: volume.name, detached: true };
          },
        }),
        ...(
          [
            ['binary', 'The k3s binary the operator placed in the control plane’s data dir, for agents installing k3s; SHA-256 in a header', binaryNames],
            ['images', 'k3s’s airgap images tarball the operator placed beside the binary, for agents installing k3s (it goes to k3s’s images folder); SHA-256 and file name in headers', imagesNames],
          ] as const
        ).map(([file, summary, names]) => (defineRoute({
          method: 'GET' as const,
          path: `/v1/kubernetes/k3s/${file}`,
          auth: 'agent' as const,
          summary,
          schemas: { query: Type.Object({ arch: Type.Union([Type.Literal('amd64'), Type.Literal('arm64')]) }, { additionalProperties: false }) },
          produces: 'application/octet-stream',
          errors: [404, 409],
          handler: async (req: { query: { arch: 'amd64' | 'arm64' } }) => {
            const found = await placed(names(req.query.arch));
            if (!found) throw notFound(`No k3s ${file} for ${req.query.arch}: the operator places it at ${names(req.query.arch).map(shownInK3sDir).join(' or ')}`);
            return Reply.raw(createReadStream(found.file), 'application/octet-stream', { 'Content-Length': String(found.size), 'X-Checksum-Sha256': found.sha256, 'X-File-Name': found.name });
          },
        }))),
      ],
      loops: credentials.loops,
      close: async () => credentials.close(),
    };
  },
});
