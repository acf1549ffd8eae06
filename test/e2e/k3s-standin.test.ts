import 'reflect-metadata'; // @peculiar/x509 (tsyringe) needs it loaded first
import { expect } from 'chai';
import { dirname } from 'node:path';
import { AppsV1Api, CertificatesV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { Pkcs10CertificateRequest, X509Certificate } from '@peculiar/x509';
import { waitFor } from '../support/agents.js';
import { ensureKubeBuild, KUBE_START_TIMEOUT_MS, kubeAvailability, nodeReady } from '../support/kube.js';
import { requireService } from '../support/requirements.js';
import { Lab, type Machine } from './lab/lab.js';

// The k3s STAND-IN (lab/kube/k3s_standin.go; docs/kubernetes.md) on two lab machines: `k3s server`
// runs the real upstream control plane on one, `k3s agent` joins the other with the node token,
// and kwok plays each machine's kubelet (nodes and pods are simulated: no container runs). The
// host reaches the cluster through the kubeconfig k3s.yaml, as hangar will.

const K3S_LOG = '/var/log/k3s.log';

/** Starts a long-running k3s command in the background on a machine (it outlives docker exec). */
async function startK3s(machine: Machine, args: string, env = ''): Promise<void> {
  await machine.sh(`${env} setsid nohup k3s ${args} >${K3S_LOG} 2>&1 </dev/null &`);
}

describe('k3s stand-in on lab machines (the upstream control plane; kwok plays each machine\'s kubelet, no containers)', function () {
  this.timeout(120_000);
  let lab: Lab;
  let server: Machine;
  let agent: Machine;
  let kubeConfig: KubeConfig;

  before(async function () {
    this.timeout(KUBE_START_TIMEOUT_MS);
    const labAvailable = await Lab.availability();
    requireService(this, labAvailable.docker, 'Docker (dockerd)');
    requireService(this, labAvailable.image, labAvailable.why ?? 'the lab image');
    const kube = await kubeAvailability();
    requireService(this, kube.ok, kube.why);
    const executable = await ensureKubeBuild();
    lab = new Lab({ name: 'k3s-standin', subnet: '172.31.73.0/24', log: () => undefined });
    // The build reaches the machines read-only; "installing k3s" is putting it on the PATH as k3s.
    [server, agent] = await lab.start({ machines: ['server', 'agent'], mounts: [`${dirname(executable)}:/opt/hangar-kube:ro`] });
    await Promise.all([server, agent].map((m) => m.sh('ln -sf /opt/hangar-kube/kube /usr/local/bin/k3s && k3s --version')));
  });
  after(async function () {
    this.timeout(120_000);
    await lab?.teardown();
  });

  it('says it is the stand-in', async () => {
    const version = await server.sh('k3s --version');
    expect(version).to.match(/^k3s version v1\.33\.\d+\+k3s-standin \(hangar's k3s stand-in/);
  });

  it('k3s server starts the control plane, writes k3s.yaml and the node token where k3s does, and registers its machine as a Ready control-plane node', async function () {
    this.timeout(4 * 60_000);
    await startK3s(server, `server --node-ip ${server.ip}`);
    await waitFor(async () => (await server.exec('test -s /var/lib/rancher/k3s/server/node-token && test -s /etc/rancher/k3s/k3s.yaml')).code === 0, {
      what: `k3s.yaml and node-token on ${server.name} (${K3S_LOG}: see the machine)`,
      timeoutMs: 3 * 60_000,
      intervalMs: 500,
    }).catch(async (error: Error) => {
      throw new Error(`${error.message}\n${(await server.exec(`tail -n 40 ${K3S_LOG}`)).stdout}`, { cause: error });
    });
    expect(await server.sh('stat -c %a /etc/rancher/k3s/k3s.yaml /var/lib/rancher/k3s/server/node-token')).to.equal('600\n600');
    expect(await server.sh('cat /var/lib/rancher/k3s/server/node-token')).to.match(/^K10[0-9a-f]{64}::server:[0-9a-f]+$/);

    // Through the kubeconfig from the host, with the machine's address instead of 127.0.0.1.
    const yaml = await server.sh('cat /etc/rancher/k3s/k3s.yaml');
    expect(yaml).to.include('server: https://127.0.0.1:6443');
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(yaml.replace('https://127.0.0.1:6443', `https://${server.ip}:6443`));
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const node = await waitFor(async () => {
      const n = await core.readNode({ name: 'server' }).catch(() => undefined);
      return n && nodeReady(n) && n.metadata?.labels?.['node-role.kubernetes.io/control-plane'] === 'true' ? n : undefined;
    }, { what: 'node server Ready with the control-plane role', timeoutMs: 60_000, intervalMs: 500 });
    expect(node.status?.addresses).to.deep.include({ type: 'InternalIP', address: server.ip });
    expect(node.status?.nodeInfo?.kubeletVersion).to.match(/^v1\.33\.\d+\+k3s-standin$/);

    // k3s kubectl on the machine uses k3s.yaml.
    const nodes = await server.sh('k3s kubectl get nodes --no-headers');
    expect(nodes.split(/\s+/).slice(0, 3)).to.deep.equal(['server', 'Ready', 'control-plane,master']);
  });

  it('refuses an agent whose token names another CA, or whose secret is wrong', async function () {
    this.timeout(3 * 60_000);
    const token = await server.sh('cat /var/lib/rancher/k3s/server/node-token');
    const otherCA = token.replace(/^K10[0-9a-f]{4}/, 'K100000');
    const wrongCA = await agent.exec(`k3s agent --server https://${server.ip}:6443 --token '${otherCA}' --data-dir /tmp/k3s-wrong-ca`, { timeoutMs: 60_000 });
    expect(wrongCA.code).to.equal(1);
    expect(wrongCA.stderr).to.include('is not the one the token names');
    const wrongSecret = await agent.exec(`k3s agent --server https://${server.ip}:6443 --token '${token.replace(/::server:.*/, '::server:0123')}' --data-dir /tmp/k3s-wrong-secret`, {
      timeoutMs: 3 * 60_000,
    });
    expect(wrongSecret.code).to.equal(1);
    expect(wrongSecret.stderr).to.include('Unauthorized');
    expect((await kubeConfig.makeApiClient(CoreV1Api).listNode()).items.map((n) => n.metadata?.name)).to.deep.equal(['server']);
  });

  it('k3s agent joins another machine with the node token (from K3S_TOKEN, as hangar’s agent gives it; TLS bootstrapping), and the host sees both nodes Ready', async function () {
    this.timeout(3 * 60_000);
    const token = await server.sh('cat /var/lib/rancher/k3s/server/node-token');
    // As k3s: the token from the environment, off the command line (--token is covered above).
    await startK3s(agent, `agent --server https://${server.ip}:6443 --node-ip ${agent.ip}`, `K3S_TOKEN='${token}'`);
    expect(await agent.sh('cat /proc/$(pgrep -f "k3s agent" | head -n 1)/cmdline | tr "\\0" " "')).not.to.contain(token);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const nodes = await waitFor(async () => {
      const listed = (await core.listNode()).items;
      return listed.length === 2 && listed.every(nodeReady) ? listed : undefined;
    }, { what: 'nodes server and agent Ready', timeoutMs: 2 * 60_000, intervalMs: 500 }).catch(async (error: Error) => {
      throw new Error(`${error.message}\n${(await agent.exec(`tail -n 40 ${K3S_LOG}`)).stdout}`, { cause: error });
    });
    const joined = nodes.find((n) => n.metadata?.name === 'agent');
    expect(joined?.status?.addresses).to.deep.include({ type: 'InternalIP', address: agent.ip });
    expect(joined?.metadata?.labels?.['node-role.kubernetes.io/control-plane']).to.equal(undefined);

    // The agent's credentials came from a CertificateSigningRequest for the node's own identity,
    // filed with the bootstrap token, approved and signed by the controller manager (the server's
    // own node joined the same way).
    const requests = (await kubeConfig.makeApiClient(CertificatesV1Api).listCertificateSigningRequest()).items;
    const issued = requests.map((r) => ({
      requester: r.spec.username,
      subject: new Pkcs10CertificateRequest(Buffer.from(r.spec.request, 'base64').toString()).subject,
      approved: r.status?.conditions?.some((c) => c.type === 'Approved' && c.status === 'True') ?? false,
      issuer: r.status?.certificate ? new X509Certificate(Buffer.from(r.status.certificate, 'base64').toString()).issuer : '',
    }));
    expect(issued.map((i) => i.subject).sort()).to.deep.equal(['O=system:nodes, CN=system:node:agent', 'O=system:nodes, CN=system:node:server']);
    for (const request of issued) {
      expect(request.requester).to.match(/^system:bootstrap:[0-9a-f]{6}$/);
      expect(request.approved).to.equal(true);
      expect(request.issuer).to.equal('CN=hangar-kube-ca');
    }
  });

  it('places a Deployment\'s pods on both machines, where they reach Running; a pod\'s log comes from its machine\'s kubelet (kwok) through the API server, saying no container runs', async () => {
    const apps = kubeConfig.makeApiClient(AppsV1Api);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const labels = { app: 'spread' };
    await apps.createNamespacedDeployment({
      namespace: 'default',
      body: {
        metadata: { name: 'spread' },
        spec: {
          replicas: 4,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              containers: [{ name: 'web', image: 'registry.invalid/web:1' }],
              topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'DoNotSchedule', labelSelector: { matchLabels: labels } }],
            },
          },
        },
      },
    });
    const pods = await waitFor(async () => {
      const listed = (await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app=spread' })).items;
      return listed.length === 4 && listed.every((p) => p.status?.phase === 'Running') ? listed : undefined;
    }, { what: 'four spread pods Running', timeoutMs: 60_000, intervalMs: 500 });
    const perNode = pods.reduce<Record<string, number>>((acc, p) => ({ ...acc, [p.spec!.nodeName!]: (acc[p.spec!.nodeName!] ?? 0) + 1 }), {});
    expect(perNode).to.deep.equal({ server: 2, agent: 2 });
    const onAgent = pods.find((p) => p.spec?.nodeName === 'agent')!;
    expect(onAgent.status?.hostIP).to.equal(agent.ip);
    const log = await core.readNamespacedPodLog({ name: onAgent.metadata!.name!, namespace: 'default', timestamps: true });
    expect(log).to.match(/^\S+Z .*stand-in.*: no container runs on this node; this line is every pod's log\n$/);
  });
});
