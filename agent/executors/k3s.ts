import type { TaskKind } from '../../core/tasks/kinds.js';
import { adminKubeconfig, installAgent, installServer, K3S_PATHS, serverToken, uninstall, type K3sBinarySource } from '../../drivers/kubernetes/k3s.js';
import { K3sInstallServer, K3sJoin, K3sKubeconfig, K3sToken, K3sUninstall } from '../../drivers/kubernetes/membership-calls.js';
import type { Executor, ExecutorContext } from './types.js';

/**
 * The cluster's admin kubeconfig on a server node: k3s's, or the file HANGAR_KUBECONFIG names (a
 * cluster this agent reaches but did not install, e.g. the test suites' upstream control plane).
 */
export const clusterKubeconfig = () => process.env.HANGAR_KUBECONFIG ?? K3S_PATHS.kubeconfig;

/** Where the control plane serves the k3s binary the operator placed in its data dir (like the agent executable). */
export const K3S_BINARY_PATH = '/v1/kubernetes/k3s/binary';

function binarySource(ctx: ExecutorContext): K3sBinarySource {
  const { sha256, architecture } = ctx.payload.binary as { sha256: string; architecture: string };
  return {
    sha256,
    async fetch() {
      const res = await ctx.download(`${K3S_BINARY_PATH}?arch=${encodeURIComponent(architecture)}`);
      if (res.status !== 200) throw new Error(`downloading the k3s binary failed with HTTP ${res.status}: ${res.body.toString('utf8').slice(0, 300)}`);
      return res.body;
    },
  };
}

/** The k8s backend's host tasks: installing k3s (the binary from the control plane), its token and kubeconfig, uninstalling. */
export const K3S_EXECUTORS: Array<[TaskKind, Executor]> = [
  [
    K3sInstallServer,
    async (ctx) => {
      const { node_name, node_ip, tls_sans } = ctx.payload as { node_name: string; node_ip: string | null; tls_sans: string[] };
      ctx.log.info({ node_name, node_ip }, 'installing the k3s server');
      return installServer({ node_name, node_ip, tls_sans, binary: binarySource(ctx) });
    },
  ],
  [
    K3sJoin,
    async (ctx) => {
      const { node_name, node_ip, server_url, token } = ctx.payload as { node_name: string; node_ip: string | null; server_url: string; token: string };
      ctx.log.info({ node_name, node_ip, server_url }, 'joining the k3s cluster as an agent');
      return installAgent({ node_name, node_ip, server_url, token, binary: binarySource(ctx) });
    },
  ],
  [K3sToken, async () => serverToken()],
  [K3sKubeconfig, async ({ payload }) => adminKubeconfig(payload.server_url as string, clusterKubeconfig())],
  [
    K3sUninstall,
    async ({ log }) => {
      log.info('uninstalling k3s');
      return uninstall();
    },
  ],
];
