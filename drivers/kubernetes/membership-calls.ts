/**
 * How machines join and leave a Kubernetes (k3s) cluster: the k8s backend's membership interface.
 * Installing, joining, the token, the kubeconfig and uninstalling are host tasks on the machine they
 * concern (they fetch the k3s binary from the control plane, so they run as executors with the
 * agent's context: ./k3s-executors.ts); the cluster's view of its nodes is a driver call on the
 * server node, like the workload calls of core/orchestrator.ts.
 */
import { Type, type Static } from '@sinclair/typebox';
import { IN_PLACE_OBJECT_CALLS, TYPED_TASKS_VERSION } from '../../core/orchestrator.js';
import { defineDriverCall, defineTaskKind, sensitive, type DriverMethods } from '../../core/tasks/kinds.js';

/** The agent version that has the k3s membership kinds. */
export const K3S_AGENT_VERSION = TYPED_TASKS_VERSION;

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);
const NodeName = Type.String({ pattern: '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$', description: 'the Kubernetes node name (an RFC 1123 subdomain)' });
const Binary = Type.Object({
  /** The SHA-256 of the k3s binary the control plane serves (the agent skips the download when the installed one matches). */
  sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  /** The architecture to ask for (the agent's). */
  architecture: Type.String({ minLength: 1 }),
  /** Where to download it instead of the control plane (`kubernetes.k3s_download_url`, a connected install); the SHA-256 is the operator's. */
  url: Type.Optional(Type.String({ pattern: '^https?://' })),
});
/** k3s's airgap images tarball the operator placed beside the binary: the agent fetches it from the control plane into k3s's images folder. */
const Images = Type.Object({
  sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
  file_name: Type.String({ pattern: '^k3s-airgap-images-[a-z0-9]+\\.tar(\\.zst|\\.gz)?$' }),
  architecture: Type.String({ minLength: 1 }),
});
const Installed = Type.Object({ runtime_node_id: Type.String({ minLength: 1 }), version: Type.String() });

export const K3sInstallServer = defineTaskKind({
  name: 'k3s.install-server',
  description: 'install k3s from the control plane’s binary and start `k3s server` (idempotent); answers once it wrote its kubeconfig and token',
  lane: 'orchestrator',
  minAgentVersion: K3S_AGENT_VERSION,
  payload: Type.Object({ node_name: NodeName, node_ip: Nullable(Type.String({ minLength: 1 })), tls_sans: Type.Array(Type.String({ minLength: 1 })), binary: Binary, images: Type.Optional(Images) }),
  result: Installed,
});

export const K3sJoin = defineTaskKind({
  name: 'k3s.join',
  description: 'install k3s and start `k3s agent` joining a server with its token; answers once the node has its credentials',
  lane: 'orchestrator',
  minAgentVersion: K3S_AGENT_VERSION,
  payload: Type.Object({
    node_name: NodeName,
    node_ip: Nullable(Type.String({ minLength: 1 })),
    server_url: Type.String({ pattern: '^https://' }),
    token: sensitive(Type.String({ minLength: 1 })),
    binary: Binary,
    images: Type.Optional(Images),
  }),
  result: Installed,
});

export const K3sToken = defineTaskKind({
  name: 'k3s.token',
  description: 'the join token of the k3s server on this machine',
  lane: 'reads',
  minAgentVersion: K3S_AGENT_VERSION,
  payload: Type.Object({}),
  result: Type.Object({ token: sensitive(Type.String({ minLength: 1 })) }),
});

export const K3sKubeconfig = defineTaskKind({
  name: 'k3s.kubeconfig',
  description: 'the admin kubeconfig of the k3s server on this machine, pointing at server_url',
  lane: 'reads',
  minAgentVersion: K3S_AGENT_VERSION,
  payload: Type.Object({ server_url: Type.String({ pattern: '^https://' }) }),
  result: Type.Object({ kubeconfig: sensitive(Type.String({ minLength: 1 })) }),
});

export const K3sUninstall = defineTaskKind({
  name: 'k3s.uninstall',
  description: 'stop k3s, the containers it ran and their mounts, interfaces and iptables rules (as k3s-killall.sh), and remove it with its configuration and data',
  lane: 'orchestrator',
  minAgentVersion: K3S_AGENT_VERSION,
  payload: Type.Object({}),
  result: Type.Object({
    uninstalled: Type.Boolean(),
    killall: Type.Optional(
      Type.Object(
        {
          killed: Type.Array(Type.Integer(), { description: 'the containerd shims of k3s and the pods’ processes under them' }),
          unmounted: Type.Array(Type.String()),
          still_mounted: Type.Optional(Type.Array(Type.String(), { description: 'mounts that stayed (busy): neither they nor a folder above them were removed' })),
          interfaces: Type.Array(Type.String(), { description: 'the CNI’s interfaces deleted (cni0, flannel.1, the pods’ veths…)' }),
          rules_removed: Type.Integer({ description: 'iptables lines k3s added (KUBE-, CNI-, flannel) dropped' }),
        },
        { description: 'what k3s-killall.sh would have stopped and cleaned' },
      ),
    ),
  }),
});

export const KubeNode = Type.Object({
  runtime_node_id: Type.String(),
  address: Nullable(Type.String()),
  ready: Type.Boolean(),
  roles: Type.Array(Type.String()),
  kubelet_version: Type.String(),
  availability: Type.Union([Type.Literal('schedulable'), Type.Literal('cordoned'), Type.Literal('drained')]),
  labels: Type.Record(Type.String(), Type.String()),
});

export type KubeNodeState = Static<typeof KubeNode>;

export const K3sNodes = defineDriverCall({
  name: 'k3s.nodes',
  description: 'the cluster’s nodes as it reports them (Ready, roles, kubelet version)',
  lane: 'reads',
  minAgentVersion: K3S_AGENT_VERSION,
  method: 'nodes',
  input: Type.Object({}),
  result: Type.Object({ nodes: Type.Array(KubeNode) }),
});

export const K3sRemoveNode = defineDriverCall({
  name: 'k3s.remove-node',
  description: 'remove a node object from the cluster (after its machine left)',
  lane: 'orchestrator',
  minAgentVersion: K3S_AGENT_VERSION,
  method: 'removeNode',
  input: Type.Object({ runtime_node_id: Type.String({ minLength: 1 }) }),
  result: Type.Object({ removed: Type.Boolean() }),
});

export const K3sVolumePhase = defineDriverCall({
  name: 'k3s.volume-phase',
  description: 'the phase of a staged volume’s claim (Bound, Pending, Lost), or null when it is not staged on the cluster',
  lane: 'reads',
  minAgentVersion: K3S_AGENT_VERSION,
  method: 'volumePhase',
  input: Type.Object({ name: Type.String({ minLength: 1 }) }),
  result: Type.Object({ phase: Nullable(Type.String()) }),
});

export const K3sUserCredential = defineDriverCall({
  name: 'k3s.user-credential',
  description: 'a kubeconfig for a hangar user: its ServiceAccount in hangar-users bound to a ClusterRole, and a token of it from the TokenRequest API',
  // Quick API calls that hand out a credential: not queued behind deployments.
  lane: 'reads',
  minAgentVersion: K3S_AGENT_VERSION,
  method: 'issueUserCredential',
  input: Type.Object({
    user_id: Type.String({ minLength: 1 }),
    username: Type.String({ minLength: 1 }),
    cluster_role: Type.String({ minLength: 1 }),
    ttl_seconds: Type.Integer({ minimum: 600 }),
    server_url: Type.String({ pattern: '^https://' }),
  }),
  result: Type.Object({ kubeconfig: sensitive(Type.String({ minLength: 1 })), expires_at: Type.String(), service_account: Type.String(), namespace: Type.String() }),
});

export const K3sRevokeUserCredential = defineDriverCall({
  name: 'k3s.revoke-user-credential',
  description: 'delete a hangar user’s ServiceAccount and binding: every token of it is refused at once',
  lane: 'reads',
  minAgentVersion: K3S_AGENT_VERSION,
  method: 'revokeUserCredential',
  input: Type.Object({ user_id: Type.String({ minLength: 1 }) }),
  result: Type.Object({ revoked: Type.Boolean() }),
});

/** The k3s driver calls beside the orchestrator contract (run by the k8s driver on the server node): its nodes, a volume claim's phase, users' credentials. */
export const K3S_DRIVER_CALLS = [K3sNodes, K3sRemoveNode, K3sVolumePhase, K3sUserCredential, K3sRevokeUserCredential] as const;
export type K3sMembership = DriverMethods<typeof K3S_DRIVER_CALLS>;

/** Every kind of the k8s backend's membership. */
export const K3S_MEMBERSHIP_KINDS = [K3sInstallServer, K3sJoin, K3sToken, K3sKubeconfig, K3sUninstall, ...K3S_DRIVER_CALLS] as const;

/** Every task kind of the k8s backend beside the calls every driver has: its membership, and the objects kept in place (core/orchestrator.ts). */
export const K8S_BACKEND_KINDS = [...K3S_MEMBERSHIP_KINDS, ...IN_PLACE_OBJECT_CALLS] as const;
