import 'reflect-metadata'; // @peculiar/x509 (tsyringe) needs it loaded first
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { AppsV1Api, CertificatesV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { Pkcs10CertificateRequest, X509Certificate } from '@peculiar/x509';
import { waitFor } from '../support/agents.js';
import { ensureKubeBuild, KUBE_START_TIMEOUT_MS, kubeAvailability, nodeReady } from '../support/kube.js';
import { requireService } from '../support/requirements.js';
import { Lab, type Machine } from './lab/lab.js';

// The k3s STAND-IN (lab/kube/k3s_standin.go; docs/kubernetes.md) on two lab machines: `k3s server`
// runs the real upstream control plane on one, `k3s agent` joins the other with the node token,
// and each machine is a REAL node (lab/kube/node.go): Debian's containerd and runc, the upstream
// kubelet and kube-proxy, the CNI bridge and a VXLAN pod network between the machines
// (lab/kube/podnet.go). The images come from the archive lab-k8s-images makes on each machine
// (nothing is pulled), imported at start from k3s's images folder. The host reaches the cluster
// through the kubeconfig k3s.yaml, as hangar will, and the pods through a LoadBalancer Service.

const K3S_LOG = '/var/log/k3s.log';
const IMAGES = '/var/lib/rancher/k3s/agent/images/lab.tar';

/** One HTTP GET from the host: the status and body (status 0 and the error when it failed). */
async function httpGet(url: string): Promise<{ status: number; body: string }> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return { status: res.status, body: await res.text() };
  } catch (error) {
    return { status: 0, body: String((error as Error).cause ?? error) };
  }
}

/** Starts a long-running k3s command in the background on a machine (it outlives docker exec); its pid goes to /run/k3s-test.pid. */
async function startK3s(machine: Machine, args: string, env = ''): Promise<void> {
  await machine.sh(`${env} setsid nohup k3s ${args} >${K3S_LOG} 2>&1 </dev/null & echo $! >/run/k3s-test.pid`);
}

describe('k3s stand-in on lab machines (the upstream control plane; a real kubelet, containerd and pod network on each machine)', function () {
  this.timeout(120_000);
  let lab: Lab;
  let server: Machine;
  let agent: Machine;
  let kubeConfig: KubeConfig;
  const hostSysctls = {
    overcommit: readFileSync('/proc/sys/vm/overcommit_memory', 'utf8').trim(),
    panic: readFileSync('/proc/sys/kernel/panic', 'utf8').trim(),
  };

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
    // The images the pods run (the sandbox, busybox, the ingress controller) go where k3s finds its airgap images.
    [server, agent] = await lab.start({ machines: ['server', 'agent'], mounts: [`${dirname(executable)}:/opt/hangar-kube:ro`] });
    await Promise.all(
      [server, agent].map((m) => m.sh(`ln -sf /opt/hangar-kube/kube /usr/local/bin/k3s && k3s --version && lab-k8s-images --ingress /opt/hangar-kube/hangar-ingress ${IMAGES}`, { timeoutMs: 180_000 })),
    );
  });
  after(async function () {
    this.timeout(120_000);
    await lab?.teardown();
  });

  it('says it is the stand-in', async () => {
    const version = await server.sh('k3s --version');
    expect(version).to.match(/^k3s version v1\.33\.\d+\+k3s-standin \(hangar's k3s stand-in/);
  });

  it('k3s server starts the control plane, writes k3s.yaml and the node token where k3s does, and its machine\'s kubelet registers a Ready control-plane node (containerd)', async function () {
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
    // The upstream kubelet registered it (k3s's would say v1.33.x+k3s1), on Debian's containerd.
    expect(node.status?.nodeInfo?.kubeletVersion).to.match(/^v1\.33\.\d+$/);
    expect(node.status?.nodeInfo?.containerRuntimeVersion).to.match(/^containerd:\/\/1\.\d+\.\d+/);
    expect(node.spec?.podCIDR).to.match(/^10\.42\.\d+\.0\/24$/);
    // The kubelet's global sysctls read as it wants them inside the machine only; the host's are untouched.
    expect(await server.sh('cat /proc/sys/vm/overcommit_memory /proc/sys/kernel/panic /proc/sys/kernel/panic_on_oops')).to.equal('1\n10\n1');
    expect(readFileSync('/proc/sys/vm/overcommit_memory', 'utf8').trim()).to.equal(hostSysctls.overcommit);
    expect(readFileSync('/proc/sys/kernel/panic', 'utf8').trim()).to.equal(hostSysctls.panic);

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
    expect(await agent.sh('cat /proc/$(cat /run/k3s-test.pid)/cmdline | tr "\\0" " "')).not.to.contain(token);
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

  it('runs a Deployment\'s real containers on both machines: their own log lines, their memory limit in the kernel, reachable pod to pod across the machines (VXLAN), behind a Service by its cluster IP and, as a LoadBalancer, from the host', async function () {
    this.timeout(4 * 60_000);
    const apps = kubeConfig.makeApiClient(AppsV1Api);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const labels = { app: 'spread' };
    const script = 'echo "started $(hostname)"; mkdir -p /www; echo "hello from $(hostname)" >/www/index.html; exec httpd -f -p 8080 -h /www';
    await apps.createNamespacedDeployment({
      namespace: 'default',
      body: {
        metadata: { name: 'spread' },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              containers: [
                {
                  name: 'web',
                  image: 'lab/busybox:1',
                  command: ['sh', '-c', script],
                  ports: [{ containerPort: 8080 }],
                  readinessProbe: { httpGet: { path: '/', port: 8080 }, periodSeconds: 2 },
                  resources: { limits: { memory: '48Mi' } },
                },
              ],
              topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'DoNotSchedule', labelSelector: { matchLabels: labels } }],
            },
          },
        },
      },
    });
    const pods = await waitFor(async () => {
      const listed = (await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app=spread' })).items;
      const ready = (p: (typeof listed)[number]) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      return listed.length === 2 && listed.every(ready) ? listed : undefined;
    }, { what: 'two spread pods Ready', timeoutMs: 120_000, intervalMs: 1000 });
    expect(pods.map((p) => p.spec!.nodeName).sort()).to.deep.equal(['agent', 'server']);
    const onAgent = pods.find((p) => p.spec?.nodeName === 'agent')!;
    const onServer = pods.find((p) => p.spec?.nodeName === 'server')!;
    expect(onAgent.status?.hostIP).to.equal(agent.ip);
    expect(onAgent.status?.podIP).to.match(/^10\.42\.\d+\.\d+$/);
    expect(onAgent.status?.containerStatuses?.[0]?.containerID).to.match(/^containerd:\/\//);

    // The log is the container's own output, read from its machine's kubelet through the API server.
    const log = await core.readNamespacedPodLog({ name: onAgent.metadata!.name!, namespace: 'default' });
    expect(log.split('\n')[0]).to.equal(`started ${onAgent.metadata!.name}`);
    // The memory limit is the container's cgroup limit (cgroup v1, seen from inside the container).
    const kubectl = (args: string) => server.sh(`k3s kubectl ${args}`);
    expect(await kubectl(`exec ${onAgent.metadata!.name} -- cat /sys/fs/cgroup/memory/memory.limit_in_bytes`)).to.equal(String(48 * 1024 * 1024));
    // Pod to pod across the machines. Each machine routes the other's pod CIDR once its pod network
    // has seen the other node (it syncs every 3 s, as flannel follows nodes), which a pod's readiness
    // (probed by its own machine's kubelet) does not wait for: the first answer may take a sync.
    const get = (pod: string, address: string) => kubectl(`exec ${pod} -- sh -c 'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc ${address}'`);
    const reach = (pod: string, address: string) =>
      waitFor(() => get(pod, address).catch(() => ''), { what: `${address} answering from pod ${pod}`, timeoutMs: 20_000, intervalMs: 500 });
    expect(await reach(onServer.metadata!.name!, `${onAgent.status!.podIP} 8080`)).to.contain(`hello from ${onAgent.metadata!.name}`);
    expect(await reach(onAgent.metadata!.name!, `${onServer.status!.podIP} 8080`)).to.contain(`hello from ${onServer.metadata!.name}`);

    // A Service: its cluster IP from a pod (kube-proxy), and as a LoadBalancer (the nodes' addresses) from the host.
    await core.createNamespacedService({
      namespace: 'default',
      body: { metadata: { name: 'spread' }, spec: { type: 'LoadBalancer', selector: labels, ports: [{ port: 8088, targetPort: 8080 }] } },
    });
    const service = await waitFor(async () => {
      const found = await core.readNamespacedService({ name: 'spread', namespace: 'default' });
      return (found.status?.loadBalancer?.ingress?.length ?? 0) === 2 ? found : undefined;
    }, { what: 'the LoadBalancer Service with both nodes\' addresses', timeoutMs: 30_000, intervalMs: 500 });
    expect(service.status!.loadBalancer!.ingress!.map((i) => i.ip).sort()).to.deep.equal([server.ip, agent.ip].sort());
    const names = pods.map((p) => p.metadata!.name!);
    expect(await reach(onServer.metadata!.name!, `${service.spec!.clusterIP} 8088`)).to.match(new RegExp(`hello from (${names.join('|')})`));
    const answers = new Set<string>();
    for (const machine of [server, agent, server, agent, server, agent]) {
      const res = await waitFor(async () => {
        const r = await httpGet(`http://${machine.ip}:8088/`);
        return r.status === 200 ? r : undefined;
      }, { what: `the Service answering on ${machine.ip}:8088 from the host`, timeoutMs: 30_000, intervalMs: 500 });
      answers.add(res.body.trim());
    }
    for (const body of answers) expect(names.map((name) => `hello from ${name}`)).to.include(body);
  });

  it('a stopped agent (SIGTERM) takes its node down with it, as k3s-killall.sh would: no pod process, shim, mount, interface or firewall rule of it is left', async function () {
    this.timeout(2 * 60_000);
    await agent.sh('kill -TERM $(cat /run/k3s-test.pid)');
    await waitFor(async () => (await agent.exec(['pgrep', '-f', 'k3s agent|kubelet|kube-proxy|containerd-shim'])).code === 1, {
      what: 'the stand-in, the kubelet, kube-proxy and the shims gone from the agent machine',
      timeoutMs: 60_000,
      intervalMs: 500,
    });
    expect(await agent.sh(`tail -n 1 ${K3S_LOG}`)).to.match(/node agent taken down \(pods, mounts, interfaces, firewall rules\)/);
    expect((await agent.exec(['pgrep', '-x', 'httpd'])).code, 'no pod process').to.equal(1);
    expect(await agent.sh('grep -c -E " (/var/lib/kubelet|/run/k3s|/var/lib/rancher|/proc/sys/(net|vm|kernel))" /proc/self/mountinfo || true')).to.equal('0');
    expect((await agent.exec('ip link show cni0')).code, 'no cni0').to.not.equal(0);
    expect((await agent.exec('ip link show k3s-vxlan')).code, 'no k3s-vxlan').to.not.equal(0);
    expect(await agent.sh('iptables-save | grep -c -E "KUBE-|CNI-|K3S-STANDIN-" || true')).to.equal('0');
    // The machine's own dockerd (and its containerd) still runs: only the stand-in's went.
    expect((await agent.exec('docker info --format "{{.ServerVersion}}"')).code).to.equal(0);
  });
});
