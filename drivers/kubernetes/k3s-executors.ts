// The k3s membership kinds the agent runs with its own context (downloads from the control plane,
// the data dir): installs, joins, the token, the kubeconfig, uninstalls. The k8s backend's agent half
// (./agent.ts) hands them to the agent as executors.
import type { PayloadOf } from '../../core/tasks/kinds.js';
import { adminKubeconfig, installAgent, installServer, k3sPaths, serverToken, uninstall, type K3sBinarySource, type K3sImagesSource } from './k3s.js';
import { K3sInstallServer, K3sJoin, K3sKubeconfig, K3sToken, K3sUninstall } from './membership-calls.js';
import { executorFor, type AgentExecutorContext as ExecutorContext, type ExecutorEntry } from '../../core/clusters/backend.js';

/**
 * The cluster's admin kubeconfig on a server node: k3s's, or the file HANGAR_KUBECONFIG names (a
 * cluster this agent reaches but did not install, e.g. the test suites' upstream control plane).
 */
export const clusterKubeconfig = () => process.env.HANGAR_KUBECONFIG ?? k3sPaths().kubeconfig;

/** Where the control plane serves the k3s binary the operator placed in its data dir (like the agent executable). */
export const K3S_BINARY_PATH = '/v1/kubernetes/k3s/binary';
/** Where it serves the airgap images tarball placed beside it. */
export const K3S_IMAGES_PATH = '/v1/kubernetes/k3s/images';
/** How long downloading k3s from the download URL may take. */
const DOWNLOAD_TIMEOUT_MS = 10 * 60_000;

async function fromControlPlane(ctx: Pick<ExecutorContext, 'download'>, what: string, pathAndQuery: string): Promise<Buffer> {
  const res = await ctx.download(pathAndQuery);
  if (res.status !== 200) throw new Error(`downloading ${what} failed with HTTP ${res.status}: ${res.body.toString('utf8').slice(0, 300)}`);
  return res.body;
}

/** Downloads k3s from the operator's download URL (a connected install; redirects followed, as GitHub's release downloads need). */
export async function downloadK3s(url: string): Promise<Buffer> {
  let res: Response;
  try {
    res = await fetch(url, { redirect: 'follow', signal: AbortSignal.timeout(DOWNLOAD_TIMEOUT_MS) });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    throw new Error(`downloading k3s from ${url} failed: ${cause?.code ?? cause?.message ?? (err as Error).message}`, { cause: err });
  }
  if (!res.ok) throw new Error(`downloading k3s from ${url} failed with HTTP ${res.status}`);
  return Buffer.from(await res.arrayBuffer());
}

/**
 * What an install task fetches: the binary (from the control plane, or from the download URL when
 * the task names one: the SHA-256 is the operator's either way) and the images tarball when the
 * operator placed one.
 */
export function k3sSources(ctx: Pick<ExecutorContext<Pick<PayloadOf<typeof K3sInstallServer>, 'binary' | 'images'>>, 'payload' | 'download'>): { binary: K3sBinarySource; images: K3sImagesSource | null } {
  const { sha256, architecture, url } = ctx.payload.binary;
  const images = ctx.payload.images;
  const arch = encodeURIComponent(architecture);
  return {
    binary: { sha256, fetch: () => (url ? downloadK3s(url) : fromControlPlane(ctx, 'the k3s binary', `${K3S_BINARY_PATH}?arch=${arch}`)) },
    images: images
      ? {
          sha256: images.sha256,
          file_name: images.file_name,
          fetch: () => fromControlPlane(ctx, `the k3s images tarball ${images.file_name}`, `${K3S_IMAGES_PATH}?arch=${encodeURIComponent(images.architecture)}`),
        }
      : null,
  };
}

/** The k8s backend's host tasks: installing k3s (the binary and images from the control plane), its token and kubeconfig, uninstalling. */
export const K3S_EXECUTORS: ExecutorEntry[] = [
  executorFor(K3sInstallServer, async (ctx) => {
    const { node_name, node_ip, tls_sans } = ctx.payload;
    ctx.log.info({ node_name, node_ip }, 'installing the k3s server');
    return installServer({ node_name, node_ip, tls_sans, ...k3sSources(ctx) });
  }),
  executorFor(K3sJoin, async (ctx) => {
    const { node_name, node_ip, server_url, token } = ctx.payload;
    ctx.log.info({ node_name, node_ip, server_url }, 'joining the k3s cluster as an agent');
    return installAgent({ node_name, node_ip, server_url, token, ...k3sSources(ctx) });
  }),
  executorFor(K3sToken, async () => serverToken()),
  executorFor(K3sKubeconfig, async ({ payload }) => adminKubeconfig(payload.server_url, clusterKubeconfig())),
  executorFor(K3sUninstall, async ({ log }) => {
    // A cluster this agent reaches through HANGAR_KUBECONFIG is one it did not install: leaving it
    // (or deleting it in hangar) must not remove whatever runs Kubernetes on this machine.
    if (process.env.HANGAR_KUBECONFIG) {
      log.info({ kubeconfig: process.env.HANGAR_KUBECONFIG }, 'not uninstalling k3s: this agent reaches a cluster it did not install (HANGAR_KUBECONFIG)');
      return { uninstalled: false };
    }
    log.info('uninstalling k3s');
    return uninstall();
  }),
];
