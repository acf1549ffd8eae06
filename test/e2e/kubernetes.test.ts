import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { TEST_MASTER_KEY, TestDialect } from '../support/dialects.js';
import { FailNow, until } from '../support/agents.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { ensureKubeBuild, KUBE_START_TIMEOUT_MS, kubeAvailability } from '../support/kube.js';
import { PG_URL, postgresAvailable, requireService } from '../support/requirements.js';
import { freePort } from '../support/ports.js';
import { Lab, type Machine } from './lab/lab.js';
import { requireLab } from './lab/requirements.js';
import { S3Server, type S3Bucket } from '../support/s3-server.js';
import { answersOnly, describeLoop, RequestLoop } from '../support/request-loop.js';
import { hangarCli } from '../integration/runner/support.js';


/**
 * Kubernetes clusters end to end on real machines through the HTTP API: three lab machines get
 * agents over SSH (and hangar's WireGuard overlay, the production default); a cluster is created on
 * them, and hangar's agents install "k3s" — the k3s STAND-IN (lab/kube: upstream Kubernetes, a
 * real kubelet, kube-proxy and containerd on each machine, the pod network over the nodes' overlay
 * addresses; docs/kubernetes.md), served by the control plane from its k3s folder as the
 * operator's k3s binary would be, with its airgap images tarball (made on a lab machine by
 * lab-k8s-images: nothing can be pulled) — `k3s server` on the first, `k3s agent` with the
 * server's token on the others. Real containers run: their logs, secrets, probes, evictions,
 * Services and the cluster's load balancer (the lab's HAProxy ingress controller) are the real
 * thing. The kubeconfig hangar hands out works with kubectl; deleting the cluster uninstalls k3s
 * from the machines. A volume a pod writes is backed up and restored with restic to the real S3
 * server (SeaweedFS on the lab's gateway), and the control plane itself is destroyed and restored from
 * that bucket while the cluster runs (the restore drill). Runs on PostgreSQL.
 */
/** An HTTP GET from the host to `address` (host:port) for `host`: the status and body (status 0 and the error when it failed). */
function get(address: string, host: string, urlPath = '/'): Promise<{ status: number; body: string }> {
  const [hostname, port] = address.split(':');
  return new Promise((resolve) => {
    const req = http.get({ hostname, port: Number(port ?? 80), path: urlPath, headers: { Host: host }, timeout: 5_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', (error) => resolve({ status: 0, body: error.message }));
  });
}

/**
 * A lab/busybox container command serving `text` and its pod's name on `port`, after logging a
 * first line. The shell stays PID 1 and ends at once on SIGTERM (busybox's httpd as PID 1 would
 * ignore it: every pod would take its termination grace period to go).
 */
const serving = (text: string, port: number) => [
  'sh',
  '-c',
  `echo "${text} started on $(hostname)"; mkdir -p /www; echo "${text} $(hostname)" >/www/index.html; httpd -f -p ${port} -h /www & trap "exit 0" TERM; wait`,
];

/**
 * The shop manifest: a Deployment of two busybox httpd pods answering `shop v<version> (<mode>)`
 * (mode from the ConfigMap shop-settings, through the environment), Ready when `ready` answers,
 * rolled one surge pod at a time with none unavailable; its Service (port 80 → 8080); and, unless
 * left out, the ConfigMap. In `default`, named (an admin's choice): the project's namespace enforces
 * Pod Security `restricted`, which busybox's root httpd does not meet.
 */
const shopManifest = (version: number, ready = '/', withConfig = true, guarded = false) => {
  const deployment = [
    'apiVersion: apps/v1',
    'kind: Deployment',
    // Guarded: hangar rolls a rollout whose pods never get Ready back to the previous revision once its progress deadline passes.
    guarded ? 'metadata: {name: shop, namespace: default, annotations: {io.hangar.rollout: rollback, shop.example/owner: team-a}}' : 'metadata: {name: shop, namespace: default}',
    'spec:',
    '  replicas: 2',
    ...(guarded ? ['  progressDeadlineSeconds: 15'] : []),
    '  selector: {matchLabels: {app: shop}}',
    '  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}',
    '  template:',
    '    metadata: {labels: {app: shop}}',
    '    spec:',
    '      terminationGracePeriodSeconds: 2',
    '      containers:',
    '      - name: shop',
    '        image: lab/busybox:1',
    `        command: ${JSON.stringify(serving(`shop v${version} ($MODE)`, 8080))}`,
    '        env: [{name: MODE, valueFrom: {configMapKeyRef: {name: shop-settings, key: mode, optional: true}}}]',
    `        readinessProbe: {httpGet: {path: ${ready}, port: 8080}, periodSeconds: 2}`,
    '',
  ].join('\n');
  const service = 'apiVersion: v1\nkind: Service\nmetadata: {name: shop, namespace: default}\nspec: {selector: {app: shop}, ports: [{port: 80, targetPort: 8080}]}\n';
  const config = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shop-settings, namespace: default}\ndata: {mode: fast}\n';
  return [deployment, service, ...(withConfig ? [config] : [])].join('---\n');
};

describe('Kubernetes (k3s stand-in) clusters end to end in the machine lab [postgres]', function () {
  const dialect = new TestDialect('postgres');
  let lab: Lab;
  let t: TestHangar;
  let admin: Credentials;
  let machines: Machine[];
  let kubectl: (args: string[]) => { code: number; stdout: string; stderr: string };
  let k3sDir: string;
  const nodeOf = new Map<string, string>();
  const overlayOf = new Map<string, string>();
  let clusterId: string;
  let shopId: string;
  let lbId: string;
  let s3: S3Server;
  let bucket: S3Bucket;
  /** The control plane's data dir and schema (replaced by the restore drill's), and its fixed port (the agents' address of it). */
  let storage: { dataDir: string; schema: string | null };
  let port: number;
  const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning', 'kubernetes', 'swarms', 'volumes', 'secrets', 'compute', 'services', 'gateway', 'tags', 'backups'];
  const serve = () =>
    startHangar(dialect, {
      plugins: PLUGINS,
      storage,
      overrides: {
        drivers: ['ssh', 'swarm', 'k8s'],
        api: { host: '0.0.0.0', port },
        nodes: { heartbeat_interval_seconds: 2, offline_after_seconds: 10 },
        tasks: { poll_wait_seconds: 10 },
        // Members are advertised by their WireGuard overlay addresses (the default): the nodes'
        // addresses in the cluster, so the pod network's VXLAN runs over the overlay.
        clusters: { observe_interval_seconds: 2 },
        kubernetes: { k3s_dir: k3sDir },
        // The cluster's load balancer: the lab's ingress controller (HAProxy; not Traefik, which cannot be had here).
        gateway: { kubernetes_image: 'lab/hangar-ingress:1' },
      },
    });

  before(async function () {
    this.timeout(KUBE_START_TIMEOUT_MS);
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    await requireLab(this, { agents: true, s3: true });
    const kube = await kubeAvailability();
    requireService(this, kube.ok, kube.why);
    const executable = await ensureKubeBuild();
    kubectl = (args) => {
      const r = spawnSync(executable, ['kubectl', ...args], { encoding: 'utf8', timeout: 60_000 });
      return { code: r.status ?? 1, stdout: r.stdout, stderr: r.stderr };
    };
    // The operator's k3s binary, here the stand-in: what the control plane serves to agents.
    k3sDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-k3s-'));
    symlinkSync(executable, path.join(k3sDir, 'k3s-amd64'));
    lab = new Lab({ name: 'kubernetes', subnet: '172.31.75.0/24', log: () => undefined });
    // The build reaches the machines read-only only for lab-k8s-images (the ingress controller goes into an image).
    machines = await lab.start({ machines: 3, mounts: [`${path.dirname(executable)}:/opt/hangar-kube:ro`] });
    // k3s's airgap images tarball, as the operator places it beside the binary: here the lab's
    // images (sandbox, busybox, the ingress controller) in one `docker save` archive made on m1.
    const archive = '/tmp/k3s-airgap-images-amd64.tar';
    await machines[0]!.sh(`lab-k8s-images --ingress /opt/hangar-kube/hangar-ingress ${archive}`, { timeoutMs: 180_000 });
    const copied = spawnSync('docker', ['cp', `${machines[0]!.container}:${archive}`, path.join(k3sDir, 'k3s-airgap-images-amd64.tar')], { encoding: 'utf8' });
    expect(copied.status, copied.stderr).to.equal(0);
    // The real S3 server on the lab's gateway address: the backups' target.
    s3 = await S3Server.start({ host: lab.gateway });
    bucket = await s3.bucket('kube-backups');
    storage = dialect.freshStorage();
    port = await freePort('0.0.0.0');
    t = await serve();
    admin = await bootstrapAdmin(t);
    const deploys = await Promise.all(machines.map((m) => api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey })));
    for (const [i, res] of deploys.entries()) {
      expect(res.status, res.text).to.equal(202);
      nodeOf.set(machines[i]!.name, res.json.data.node_id);
    }
    for (const m of machines) await until(`${m.name} to be ready`, async () => (await api('GET', `/v1/nodes/${nodeOf.get(m.name)}`)).json.data.status === 'ready');
    // The overlay up with both peers answering on every machine: the cluster is then formed over it.
    for (const m of machines) {
      const node = await until(
        `${m.name}'s agent to report its overlay up with both peers answering`,
        async () => {
          const n = (await api('GET', `/v1/nodes/${nodeOf.get(m.name)}`)).json.data;
          return n.overlay?.up && n.overlay.address === n.overlay_ip && n.overlay.handshakes === 2 ? n : null;
        },
        180_000,
      );
      overlayOf.set(m.name, node.overlay_ip);
    }
  });
  after(async function () {
    this.timeout(180_000);
    await t?.stop();
    await lab?.teardown();
    await s3?.stop();
    await dialect.cleanup();
    if (k3sDir) rmSync(k3sDir, { recursive: true, force: true });
  });

  afterEach(function () {
    if (this.currentTest?.state !== 'failed' || !t) return;
    for (const line of t.logs.filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-20)) console.log(`    control plane: ${line.trim().slice(0, 1500)}`);
  });

  function api(method: string, p: string, body?: unknown) {
    return t.request(method, p, { headers: bearer(admin.token), body });
  }
  const ids = () => machines.map((m) => nodeOf.get(m.name)!);

  it('creates a cluster on three machines over the overlay: the agents install k3s with its airgap images (server on the first, agents with its token on the others)', async function () {
    this.timeout(600_000);
    const bad = await api('POST', '/v1/kubernetes/clusters', { name: 'kube', node_ids: ['node-nosuch'] });
    expect(bad.status, bad.text).to.equal(404);
    const res = await api('POST', '/v1/kubernetes/clusters', { name: 'kube', node_ids: ids() });
    expect(res.status, res.text).to.equal(202);
    clusterId = res.json.data.id;
    expect(res.json.data).to.include({ name: 'kube', status: 'forming', server_node_id: ids()[0] });
    const cluster = await until(
      'the cluster active with three nodes',
      async () => {
        const c = (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).json.data;
        if (c.nodes.some((n: { status: string; error: string | null }) => n.status === 'failed')) throw new FailNow(JSON.stringify(c.nodes));
        return c.status === 'active' && c.nodes.every((n: { status: string }) => n.status === 'active') ? c : null;
      },
      480_000,
    );
    expect(cluster.version).to.match(/^v1\.33\.\d+\+k3s-standin$/);
    expect(cluster.nodes.map((n: { role: string }) => n.role)).to.deep.equal(['server', 'agent', 'agent']);
    // The join token is nowhere a user of the machine can read it: not on the command line, only in a 0600 file.
    const argv = await machines[1]!.sh('test -x /usr/local/bin/k3s && cat /proc/$(cat /run/k3s.pid)/cmdline | tr "\\0" " "');
    expect(argv).to.equal(`/usr/local/bin/k3s agent --node-name ${ids()[1]} --node-ip ${overlayOf.get('m2')} --server https://${overlayOf.get('m1')}:6443`);
    const serverToken = await machines[0]!.sh('cat /var/lib/rancher/k3s/server/node-token');
    expect(argv).not.to.contain(serverToken);
    expect(await machines[1]!.sh('stat -c %a /etc/rancher/k3s/k3s-agent.env')).to.equal('600');
    expect(await machines[1]!.sh('cat /etc/rancher/k3s/k3s-agent.env')).to.contain(`K3S_TOKEN="${serverToken}"`);
    const listed = (await api('GET', '/v1/kubernetes/clusters')).json.data;
    expect(listed.map((c: { id: string }) => c.id)).to.deep.equal([clusterId]);
    // The images tarball reached every machine from the control plane and went into its containerd.
    for (const m of machines) {
      expect(await m.sh('stat -c %s /var/lib/rancher/k3s/agent/images/k3s-airgap-images-amd64.tar')).to.equal(String(statSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar')).size));
      expect(await m.sh('grep -o "images: imported k3s-airgap-images-amd64.tar" /var/log/k3s.log')).to.equal('images: imported k3s-airgap-images-amd64.tar');
    }
  });

  it('lists the nodes as the cluster reports them (Ready, roles, kubelet version)', async function () {
    this.timeout(120_000);
    const nodes = await until('three Ready nodes', async () => {
      const res = await api('GET', `/v1/kubernetes/clusters/${clusterId}/nodes`);
      expect(res.status, res.text).to.equal(200);
      return res.json.data.every((n: { ready: boolean }) => n.ready) ? res.json.data : null;
    });
    expect(nodes.map((n: { node_id: string }) => n.node_id)).to.deep.equal(ids());
    expect(nodes[0].roles).to.include('control-plane');
    expect(nodes[1].roles).to.deep.equal([]);
    // The upstream kubelet's own version (a k3s kubelet would say v1.33.x+k3s1).
    for (const n of nodes) expect(n.kubelet_version).to.match(/^v1\.33\.\d+$/);
  });

  it('hands out the admin’s own kubeconfig (a cluster-admin token; the CLI writes it 0600) that works with kubectl (`kubectl get nodes`)', async function () {
    this.timeout(120_000);
    const res = await t.request('GET', `/v1/kubernetes/clusters/${clusterId}/kubeconfig`, { headers: bearer(admin.token) });
    expect(res.status, res.text).to.equal(200);
    const { kubeconfig, server } = res.json.data as { kubeconfig: string; server: string };
    expect(server).to.equal(`https://${machines[0]!.ip}:6443`);
    expect(kubeconfig).to.include(`server: https://${machines[0]!.ip}:6443`);
    expect(t.logs.some((l) => l.includes('client-key-data') || l.includes(kubeconfig.match(/token: (\S+)/)![1]!)), 'never logged').to.equal(false);

    const file = path.join(k3sDir, 'kubeconfig');
    const ca = path.join(k3sDir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: k3sDir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    const cli = await hangarCli(['cluster', 'kubeconfig', 'kube', '--output', file], { env, timeoutMs: 60_000 });
    expect(cli.code, cli.stderr).to.equal(0);
    expect(cli.stdout).to.match(new RegExp(`wrote the kubeconfig of cluster kube \\(server https://${machines[0]!.ip.replaceAll('.', '\\.')}:6443; cluster-admin, expires \\S+\\) to ${file} \\(mode 0600\\)`));
    expect(statSync(file).mode & 0o777).to.equal(0o600);
    // Each download is a token of its own (the admin's ServiceAccount, cluster-admin): the same but for the token.
    const withoutToken = (text: string) => text.replace(/token: .*/, 'token: …');
    expect(withoutToken(readFileSync(file, 'utf8'))).to.equal(withoutToken(kubeconfig));
    const nodes = await hangarCli(['cluster', 'nodes', 'kube'], { env, timeoutMs: 60_000 });
    expect(nodes.code, nodes.stderr).to.equal(0);
    expect(nodes.stdout.split('\n').filter((l) => l.startsWith('node-'))).to.have.length(3);
    const got = kubectl(['--kubeconfig', file, 'get', 'nodes', '--no-headers']);
    expect(got.code, got.stderr).to.equal(0);
    const rows = got.stdout.trim().split('\n').map((l) => l.split(/\s+/).slice(0, 2));
    expect(rows.map((r) => r[0]).sort()).to.deep.equal([...ids()].sort());
    expect(rows.every((r) => r[1] === 'Ready')).to.equal(true);
  });

  it('an NFS volume attached through the API becomes a Bound claim (a static PersistentVolume of the share), detached again', async function () {
    this.timeout(240_000);
    const file = path.join(k3sDir, 'kubeconfig');
    const phase = () => kubectl(['--kubeconfig', file, 'get', 'pvc', 'hangar-vol-claimed', '-o', 'jsonpath={.status.phase}']);
    // On the third machine, a member: its NFS volumes are the cluster's (attached when prepared, as on a swarm).
    const created = await api('POST', '/v1/volumes', { name: 'claimed', node_id: ids()[2], folder: '/srv/hangar/claimed' });
    expect(created.status, created.text).to.equal(202);
    const volumeId = created.json.data.id as string;
    const ready = await until('the volume ready', async () => {
      const v = (await api('GET', `/v1/volumes/${volumeId}`)).json.data;
      if (v.status === 'failed') throw new FailNow(v.error);
      return v.status === 'ready' ? v : null;
    });
    // Served at the member's overlay address (the cluster's nodes reach each other over the overlay).
    expect(ready.server_ip).to.equal(overlayOf.get('m3'));

    const attached = await api('POST', `/v1/kubernetes/clusters/${clusterId}/volumes`, { volume_id: 'claimed' });
    expect([200, 201], attached.text).to.include(attached.status);
    expect(attached.json.data).to.include({ volume_id: volumeId, claim: 'hangar-vol-claimed', phase: 'Bound' });
    const listed = await api('GET', `/v1/kubernetes/clusters/${clusterId}/volumes`);
    expect(listed.status, listed.text).to.equal(200);
    expect(listed.json.data.map((v: { name: string; phase: string }) => [v.name, v.phase])).to.deep.equal([['claimed', 'Bound']]);
    const got = phase();
    expect(got.code, got.stderr).to.equal(0);
    expect(got.stdout, 'kubectl sees the claim Bound').to.equal('Bound');
    const pv = kubectl(['--kubeconfig', file, 'get', 'pv', 'hangar-vol-claimed', '-o', 'jsonpath={.spec.nfs.server}:{.spec.nfs.path}']);
    expect(pv.stdout).to.equal(`${overlayOf.get('m3')}:/srv/hangar/claimed`);

    const detached = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}/volumes/${volumeId}`);
    expect(detached.status, detached.text).to.equal(200);
    expect(phase().stderr).to.contain('NotFound');
    expect((await api('DELETE', `/v1/volumes/${volumeId}`)).status).to.equal(202);
    await until('the volume deleted', async () => (await api('GET', `/v1/volumes/${volumeId}`)).status === 404);
  });

  /** kubectl with the admin kubeconfig the CLI wrote (the kubeconfig case), failing on a non-zero exit. */
  const kc = (args: string[]) => kubectl(['--kubeconfig', path.join(k3sDir, 'kubeconfig'), ...args]);
  const ok = (args: string[]) => {
    const r = kc(args);
    expect(r.code, `kubectl ${args.join(' ')}: ${r.stderr}`).to.equal(0);
    return r.stdout;
  };
  /** A container command that sleeps and ends at once on SIGTERM (a shell as PID 1 ignores it unless trapped: the pod would take its 30 s grace). */
  const idle = ['sh', '-c', 'trap "exit 0" TERM; while :; do sleep 1; done'];
  const b64 = (text: string) => Buffer.from(text).toString('base64');
  const podsOf = (selector: string) =>
    JSON.parse(ok(['get', 'pods', '-l', selector, '-o', 'json'])).items as Array<{
      metadata: { name: string; labels: Record<string, string> };
      spec: { nodeName?: string };
      status: { phase: string; podIP?: string; conditions?: Array<{ type: string; status: string }> };
    }>;
  const isReady = (p: ReturnType<typeof podsOf>[number]) => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
  /** One HTTP request from a lab machine (curl on the machine: the machine's own kube-proxy routes cluster IPs). */
  const curlOn = (m: Machine, url: string) => m.exec(`curl -sS -m 5 ${url}`);

  /**
   * A drain through the nodes API, to its end: 200 when the cluster drained the node within
   * clusters.availability_wait_seconds, else 202 with the call's task, read until it completed.
   */
  const drain = async (node: string) => {
    const res = await api('POST', `/v1/nodes/${node}/drain`);
    expect([200, 202], res.text).to.include(res.status);
    if (res.status === 202) {
      const task = await until('the drain done', async () => {
        const t = (await api('GET', `/v1/nodes/${node}/availability/${res.json.data.task_id}`)).json.data;
        return t.status === 'completed' || t.status === 'failed' ? t : null;
      }, 180_000);
      expect(task.status, task.error).to.equal('completed');
    }
    expect((await api('GET', `/v1/nodes/${node}`)).json.data.availability, 'hangar says drained once the cluster did').to.equal('drained');
  };

  it('cordon, drain and uncordon of a member through the nodes API reach the cluster (drain evicts its real pods by the Eviction API)', async function () {
    this.timeout(240_000);
    // Pods spread over the three machines (made with kubectl: what hangar does with them is not this case's business).
    ok(['create', 'deployment', 'spread', '--image=lab/busybox:1', '--replicas=6', '--', ...idle]);
    const second = ids()[1]!;
    const podsOn = (node: string) => ok(['get', 'pods', '-l', 'app=spread', '--field-selector', `spec.nodeName=${node},status.phase=Running`, '-o', 'name']).trim().split('\n').filter(Boolean);
    await until('pods running on the second machine', async () => podsOn(second).length > 0, 120_000);
    // Real containers: their processes run on the machine.
    expect(Number(await machines[1]!.sh(['pgrep', '-c', '-f', 'while :; do sleep 1']))).to.be.greaterThan(0);
    const unschedulable = () => ok(['get', 'node', second, '-o', 'jsonpath={.spec.unschedulable}']).trim();

    expect((await api('POST', `/v1/nodes/${second}/cordon`)).status).to.equal(200);
    await until('the node cordoned in the cluster', async () => unschedulable() === 'true', 60_000);
    expect(podsOn(second).length, 'cordon leaves its pods').to.be.greaterThan(0);
    await drain(second);
    await until('its pods evicted', async () => podsOn(second).length === 0, 120_000);
    await until('their processes gone from the machine', async () => (await machines[1]!.exec(['pgrep', '-f', 'while :; do sleep 1'])).code === 1, 60_000);
    await until('six pods running on the other machines', async () => ok(['get', 'pods', '-l', 'app=spread', '--field-selector', 'status.phase=Running', '-o', 'name']).trim().split('\n').length === 6, 120_000);
    // The drain is done (and the node marked drained) once the evicted pods' objects are gone too:
    // a real kubelet deletes them only after their containers stopped.
    await until('the cluster reporting the node drained', async () => {
      const nodes = (await api('GET', `/v1/kubernetes/clusters/${clusterId}/nodes`)).json.data;
      return nodes.find((n: { node_id: string }) => n.node_id === second).availability === 'drained';
    }, 60_000);
    expect((await api('POST', `/v1/nodes/${second}/uncordon`)).status).to.equal(200);
    await until('the node schedulable again', async () => unschedulable() === '', 60_000);
    ok(['delete', 'deployment', 'spread']);
  });

  it('a drain honours a PodDisruptionBudget with real readiness: evictions wait until replacements are Ready elsewhere, the budget\'s minimum stays Ready throughout', async function () {
    this.timeout(300_000);
    const third = ids()[2]!;
    // Three replicas, all on the third machine; a replacement becomes Ready 4 s after it starts (its readiness probe).
    const deployment = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'guarded' },
      spec: {
        replicas: 3,
        selector: { matchLabels: { app: 'guarded' } },
        template: {
          metadata: { labels: { app: 'guarded' } },
          spec: {
            terminationGracePeriodSeconds: 5,
            containers: [
              {
                name: 'web',
                image: 'lab/busybox:1',
                command: serving('guarded', 8080),
                readinessProbe: { httpGet: { path: '/', port: 8080 }, initialDelaySeconds: 4, periodSeconds: 1 },
              },
            ],
          },
        },
      },
    };
    const budget = { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'guarded' }, spec: { minAvailable: 2, selector: { matchLabels: { app: 'guarded' } } } };
    const file = path.join(k3sDir, 'guarded.json');
    writeFileSync(file, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [deployment, budget] }));
    // Placed on the third machine only, then free to move: cordon the others while it starts.
    for (const node of ids().slice(0, 2)) ok(['cordon', node]);
    ok(['apply', '-f', file]);
    await until('three guarded pods Ready on the third machine', async () => {
      const pods = podsOf('app=guarded');
      return pods.length === 3 && pods.every((p) => isReady(p) && p.spec.nodeName === third);
    }, 120_000);
    for (const node of ids().slice(0, 2)) ok(['uncordon', node]);
    expect(ok(['get', 'pdb', 'guarded', '-o', 'jsonpath={.status.disruptionsAllowed}'])).to.equal('1');

    // Sample the Ready count while hangar drains the machine.
    let lowest = 3;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const ready = podsOf('app=guarded').filter(isReady).length;
        lowest = Math.min(lowest, ready);
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
    })();
    try {
      await drain(third);
      await until(
        'every guarded pod moved off the third machine and Ready',
        async () => {
          const pods = podsOf('app=guarded');
          return pods.length === 3 && pods.every((p) => isReady(p) && p.spec.nodeName !== third);
        },
        180_000,
      );
    } finally {
      sampling = false;
      await sampler;
    }
    expect(lowest, 'Ready pods never below the budget\'s minAvailable').to.be.at.least(2);
    expect((await machines[2]!.exec(['pgrep', '-x', 'httpd'])).code, 'no guarded process left on the drained machine').to.equal(1);
    expect((await api('POST', `/v1/nodes/${third}/uncordon`)).status).to.equal(200);
    ok(['delete', '-f', file]);
  });

  it('runs a manifest service (Deployment + Service + ConfigMap) whose real pods answer through its Service and whose logs are the containers\' output', async function () {
    this.timeout(300_000);
    const created = await api('POST', '/v1/services', { name: 'shop', cluster_id: clusterId, manifest: b64(shopManifest(1)) });
    expect(created.status, created.text).to.equal(202);
    shopId = created.json.data.id;
    const running = await until('the service running with 2 replicas', async () => {
      const sv = (await api('GET', `/v1/services/${shopId}`)).json.data;
      if (sv.status === 'failed') throw new FailNow(sv.error);
      return sv.status === 'running' && sv.replicas.shop?.running === 2 ? sv : null;
    });
    expect(running).to.deep.include({ backend: 'manifest', cluster_id: clusterId, manifest: shopManifest(1) });
    expect(running.applied_objects).to.deep.equal([
      { api_version: 'apps/v1', kind: 'Deployment', name: 'shop', namespace: 'default' },
      { api_version: 'v1', kind: 'Service', name: 'shop', namespace: 'default' },
      { api_version: 'v1', kind: 'ConfigMap', name: 'shop-settings', namespace: 'default' },
    ]);
    const pods = await until('both shop pods Ready', async () => {
      const listed = podsOf('app=shop');
      return listed.length === 2 && listed.every(isReady) ? listed : null;
    }, 120_000);
    for (const pod of pods) expect(ids()).to.include(pod.spec.nodeName);

    // Through the Service: its cluster IP from every machine (kube-proxy), answered by both pods over time.
    const clusterIP = ok(['get', 'service', 'shop', '-o', 'jsonpath={.spec.clusterIP}']).trim();
    const answers = new Set<string>();
    await until('both pods answering through the Service', async () => {
      for (const m of machines) {
        const r = await curlOn(m, `http://${clusterIP}/`);
        expect(r.code, r.stderr).to.equal(0);
        answers.add(r.stdout.trim());
      }
      return answers.size === 2;
    }, 60_000);
    expect([...answers].sort()).to.deep.equal(pods.map((p) => `shop v1 (fast) ${p.metadata.name}`).sort());

    // Its logs through the API: the containers' own first lines, prefixed by the part.
    const logs = await api('POST', `/v1/services/${shopId}/logs?lines=20`);
    expect(logs.status, logs.text).to.equal(202);
    const read = await until('the log read', async () => {
      const r = await api('GET', `/v1/services/${shopId}/logs/${logs.json.data.task_id}`);
      expect(r.status, r.text).to.equal(200);
      return r.json.data.status === 'completed' || r.json.data.status === 'failed' ? r.json.data : null;
    });
    expect(read.status, read.error).to.equal('completed');
    const lines = (read.lines as string[]).filter((l) => l.includes('started on'));
    expect(lines.map((l) => l.replace(/^shop \| \S+Z /, '')).sort()).to.deep.equal(pods.map((p) => `shop v1 (fast) started on ${p.metadata.name}`).sort());
  });

  it('a failing readiness probe holds a rollout: the new pod never gets Ready, the old ones keep serving through the Service', async function () {
    this.timeout(240_000);
    const before = podsOf('app=shop').map((p) => p.metadata.name).sort();
    // Version 2 is Ready only when /ready answers, which it never does.
    const put = await api('PUT', `/v1/services/${shopId}`, { manifest: b64(shopManifest(2, '/ready')) });
    expect(put.status, put.text).to.equal(202);
    const stuck = await until('a v2 pod running but not Ready', async () => {
      const pods = podsOf('app=shop');
      const fresh = pods.filter((p) => !before.includes(p.metadata.name));
      return fresh.length === 1 && fresh[0]!.status.phase === 'Running' ? fresh[0]! : null;
    }, 120_000);
    // Several failed probes later it is still not Ready, and the rollout has not gone past it.
    await new Promise((resolve) => setTimeout(resolve, 12_000));
    const pods = podsOf('app=shop');
    expect(pods.find((p) => p.metadata.name === stuck.metadata.name)!.status.conditions?.find((c) => c.type === 'Ready')?.status).to.equal('False');
    expect(pods.filter(isReady).map((p) => p.metadata.name).sort(), 'the old pods Ready, none replaced').to.deep.equal(before);
    const status = JSON.parse(ok(['get', 'deployment', 'shop', '-o', 'json'])).status;
    expect(status).to.include({ updatedReplicas: 1, readyReplicas: 2 });
    const described = ok(['get', 'events', '--field-selector', `involvedObject.name=${stuck.metadata.name},reason=Unhealthy`, '-o', 'jsonpath={.items[*].message}']);
    expect(described).to.contain('Readiness probe failed: HTTP probe failed with statuscode: 404');
    // The Service answers from the old pods only (the not-Ready one is not an endpoint).
    const clusterIP = ok(['get', 'service', 'shop', '-o', 'jsonpath={.spec.clusterIP}']).trim();
    for (let i = 0; i < 6; i++) {
      const r = await curlOn(machines[i % 3]!, `http://${clusterIP}/`);
      expect(r.stdout.trim()).to.match(/^shop v1 \(fast\) /);
    }
    // Back to version 1 (without the ConfigMap: pruned), and the rollout completes.
    const back = await api('PUT', `/v1/services/${shopId}`, { manifest: b64(shopManifest(1, '/', false)) });
    expect(back.status, back.text).to.equal(202);
    await until('the ConfigMap pruned and the Deployment settled on v1', async () => {
      const sv = (await api('GET', `/v1/services/${shopId}`)).json.data;
      const s = JSON.parse(ok(['get', 'deployment', 'shop', '-o', 'json'])).status;
      return sv.status === 'running' && sv.applied_objects.length === 2 && kc(['get', 'configmap', 'shop-settings']).code !== 0 && s.readyReplicas === 2 && s.updatedReplicas === 2 && !s.unavailableReplicas;
    }, 120_000);
  });

  it('a manifest Deployment annotated io.hangar.rollout: rollback whose new pods never get Ready is rolled back by hangar at its progress deadline: halted_rollouts says so, the Service answers v1 throughout; the next PUT clears it', async function () {
    this.timeout(300_000);
    const service = async () => (await api('GET', `/v1/services/${shopId}`)).json.data;
    const settledOn = (what: string, version: number) =>
      until(what, async () => {
        const s = JSON.parse(ok(['get', 'deployment', 'shop', '-o', 'json']));
        const pods = podsOf('app=shop');
        if ((await service()).status !== 'running') return false;
        return s.status.readyReplicas === 2 && s.status.updatedReplicas === 2 && !s.status.unavailableReplicas && pods.length === 2 && pods.every(isReady) && JSON.stringify(s.spec.template.spec.containers[0].command).includes(`shop v${version}`);
      }, 180_000);
    const guardedV1 = await api('PUT', `/v1/services/${shopId}`, { manifest: b64(shopManifest(1, '/', false, true)) });
    expect(guardedV1.status, guardedV1.text).to.equal(202);
    await settledOn('the guarded v1 rolled out', 1);
    const clusterIP = ok(['get', 'service', 'shop', '-o', 'jsonpath={.spec.clusterIP}']).trim();
    // Requests through the Service from a machine while v2 (never Ready) rolls out and is rolled back.
    const answers: string[] = [];
    let looping = true;
    const loop = (async () => {
      while (looping) {
        const r = await curlOn(machines[1]!, `http://${clusterIP}/`);
        answers.push(r.code === 0 ? r.stdout.trim() : `failed: ${r.stderr.trim()}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();
    try {
      const v2 = await api('PUT', `/v1/services/${shopId}`, { manifest: b64(shopManifest(2, '/ready', false, true)) });
      expect(v2.status, v2.text).to.equal(202);
      const halted = await until('hangar to roll the shop Deployment back', async () => {
        const sv = await service();
        return sv.halted_rollouts?.shop?.status === 'rolled_back' ? sv.halted_rollouts.shop : null;
      }, 180_000);
      expect(halted.message).to.match(/did not become available within 15 s/);
      await settledOn('the Deployment back on v1', 1);
    } finally {
      looping = false;
      await loop;
    }
    expect(answers.length).to.be.greaterThan(10);
    expect(answers.filter((a) => !/^shop v1 /.test(a)), 'answers not from v1 (or failed) while v2 rolled out and back').to.deep.equal([]);
    // The manifest's own annotation is kept by the rollback.
    expect(JSON.parse(ok(['get', 'deployment', 'shop', '-o', 'json'])).metadata.annotations).to.include({ 'shop.example/owner': 'team-a' });

    // A PUT rolls out what it says and clears the halted rollout.
    const back = await api('PUT', `/v1/services/${shopId}`, { manifest: b64(shopManifest(1, '/', false)) });
    expect(back.status, back.text).to.equal(202);
    await until('the halted rollout cleared', async () => {
      const sv = await service();
      return sv.status === 'running' && Object.keys(sv.halted_rollouts ?? {}).length === 0;
    }, 120_000);
    await settledOn('the unguarded v1 rolled out', 1);
    expect(JSON.parse(ok(['get', 'deployment', 'shop', '-o', 'json'])).metadata.annotations ?? {}).not.to.have.property('io.hangar.rollout-outcome');
  });

  it('leaves the manifest service out of the unmanaged scan that lists a kubectl Deployment; deleting it deletes its objects and its pods', async function () {
    this.timeout(240_000);
    // The unmanaged scan on the server node: a Deployment made with kubectl, none of hangar's.
    expect(kc(['create', 'deployment', 'manual', '--image=lab/busybox:1', '--replicas=0']).code).to.equal(0);
    const scan = await api('POST', `/v1/nodes/${ids()[0]}/unmanaged?backend=k8s`);
    expect(scan.status, scan.text).to.equal(202);
    const scanned = await until('the scan', async () => {
      const r = await api('GET', `/v1/nodes/${ids()[0]}/unmanaged/${scan.json.data.task_id}`);
      expect(r.status, r.text).to.equal(200);
      return r.json.data.status === 'completed' || r.json.data.status === 'failed' ? r.json.data : null;
    });
    expect(scanned.status, scanned.error).to.equal('completed');
    const resources = scanned.resources as Array<{ kind: string; name: string }>;
    expect(resources.map((r) => `${r.kind} ${r.name}`)).to.deep.equal(['deployment manual']);
    kc(['delete', 'deployment', 'manual']);

    const removed = await api('DELETE', `/v1/services/${shopId}`);
    expect(removed.status, removed.text).to.equal(202);
    await until('the service gone', async () => (await api('GET', `/v1/services/${shopId}`)).status === 404);
    expect(kc(['get', 'deployment,service', 'shop']).code, 'its objects deleted').to.not.equal(0);
    await until('its pods gone', async () => podsOf('app=shop').length === 0, 60_000);
  });

  it('a secret update rolls the Deployment that reads it: the new pods see the new value inside their containers; deleting it is refused while the Deployment uses it', async function () {
    this.timeout(300_000);
    const created = await api('POST', '/v1/secrets', { name: 'api-token', cluster_id: clusterId, data: b64('first-token') });
    expect(created.status, created.text).to.equal(201);
    expect(created.json.data).to.deep.include({ cluster_id: clusterId, swarm_id: null, namespace: 'default', runtime_name: 'api-token' });
    const secretValue = () => Buffer.from(kc(['get', 'secret', 'api-token', '-o', 'jsonpath={.data.value}']).stdout, 'base64').toString();
    expect(secretValue()).to.equal('first-token');

    // A Deployment made with kubectl (not through hangar) that reads the secret through envFrom, and logs what it read.
    const deployment = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'reader' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'reader' } },
        template: {
          metadata: { labels: { app: 'reader' } },
          spec: {
            terminationGracePeriodSeconds: 2,
            containers: [{ name: 'reader', image: 'lab/busybox:1', command: ['sh', '-c', 'echo "token=$value"; trap "exit 0" TERM; while :; do sleep 1; done'], envFrom: [{ secretRef: { name: 'api-token' } }] }],
          },
        },
      },
    };
    const manifest = path.join(k3sDir, 'reader.json');
    writeFileSync(manifest, JSON.stringify(deployment));
    ok(['apply', '-f', manifest]);
    /** The reader's pods that are Ready, with what their container logged and what its environment holds now. */
    const readers = async () => {
      const ready = podsOf('app=reader').filter(isReady);
      return Promise.all(ready.map(async (p) => ({
        name: p.metadata.name,
        hash: p.metadata.labels['pod-template-hash'],
        log: kc(['logs', p.metadata.name]).stdout.trim(),
        env: kc(['exec', p.metadata.name, '--', 'sh', '-c', 'echo "$value"']).stdout.trim(),
      })));
    };
    const [first] = await until('the reader running', async () => {
      const r = await readers();
      return r.length === 1 && r[0]!.log ? r : null;
    }, 120_000);
    expect(first).to.include({ log: 'token=first-token', env: 'first-token' });

    const put = await api('PUT', '/v1/secrets/api-token', { data: b64('second-token') });
    expect(put.status, put.text).to.equal(200);
    expect(put.json.data).to.deep.include({ version: 2, redeployed: ['deployment/reader'], services: ['deployment/reader'] });
    expect(secretValue()).to.equal('second-token');
    const [second] = await until('a new reader pod Ready, the old one gone', async () => {
      const r = await readers();
      return r.length === 1 && r[0]!.hash !== first!.hash && r[0]!.log ? r : null;
    }, 120_000);
    // Inside the new pod's container: the new value, in its log and in its environment.
    expect(second).to.include({ log: 'token=second-token', env: 'second-token' });

    const busy = await api('DELETE', '/v1/secrets/api-token');
    expect(busy.status).to.equal(409);
    expect(busy.json.message).to.equal('Secret api-token is used by deployment/reader');
    expect(kc(['delete', 'deployment', 'reader', '--wait=true']).code).to.equal(0);
    const removed = await api('DELETE', '/v1/secrets/api-token');
    expect(removed.status, removed.text).to.equal(200);
    expect(kc(['get', 'secret', 'api-token']).code, 'the Secret deleted').to.not.equal(0);
  });

  it('the cluster\'s load balancer (the lab\'s HAProxy ingress controller) routes an HTTP request from the host to the pods of a compute instance with cluster_id', async function () {
    this.timeout(360_000);
    const lb = await api('POST', `/v1/kubernetes/clusters/${clusterId}/lb`);
    expect(lb.status, lb.text).to.equal(202);
    expect(lb.json.data).to.include({ cluster_id: clusterId, image: 'lab/hangar-ingress:1', http_port: 80 });
    lbId = lb.json.data.id as string;
    await until('the load balancer running', async () => {
      const got = (await api('GET', `/v1/loadbalancers/${lbId}`)).json.data;
      if (got.status === 'failed') throw new FailNow(got.error);
      return got.status === 'running';
    }, 180_000);
    const controller = JSON.parse(ok(['-n', 'hangar-system', 'get', 'pods', '-o', 'json'])).items as Array<{ metadata: { name: string }; status: { phase: string } }>;
    expect(controller.map((p) => p.status.phase)).to.deep.equal(['Running']);

    // An instance on the cluster, with a domain: two replicas of busybox's httpd on port 80.
    const created = await api('POST', '/v1/compute/instances', {
      name: 'hello',
      cluster_id: clusterId,
      image: 'lab/busybox:1',
      replicas: 2,
      command: serving('instance hello', 80),
      domain: 'hello.kube.test',
      http_port: 80,
    });
    expect(created.status, created.text).to.equal(202);
    const instanceId = created.json.data.id as string;
    await until('the instance running with 2 replicas', async () => {
      const i = (await api('GET', `/v1/compute/instances/${instanceId}`)).json.data;
      if (i.status === 'failed') throw new FailNow(i.error);
      return i.status === 'running' && i.running === 2;
    }, 180_000);
    const pods = await until('both instance pods Ready', async () => {
      const listed = podsOf(`io.hangar.workload=${created.json.data.runtime_name}`);
      return listed.length === 2 && listed.every(isReady) ? listed : null;
    }, 120_000);

    // From the host to every machine's public address on port 80 (the LoadBalancer Service), Host: the instance's domain.
    const answers = new Set<string>();
    await until('both replicas answering through the load balancer on every machine', async () => {
      for (const m of machines) {
        const r = await get(`${m.ip}:80`, 'hello.kube.test');
        // 404 until the controller has read the instance's Ingress (its route comes a moment after the pods are Ready).
        expect(r.status, r.body).to.be.oneOf([200, 404, 503, 0]);
        if (r.status === 200) answers.add(r.body.trim());
      }
      return answers.size === 2;
    }, 120_000);
    expect([...answers].sort()).to.deep.equal(pods.map((p) => `instance hello ${p.metadata.name}`).sort());
    // Another host is none of its routes; the controller's health path answers.
    expect(await get(`${machines[1]!.ip}:80`, 'other.kube.test')).to.deep.include({ status: 404 });
    expect(await get(`${machines[2]!.ip}:80`, 'anything', '/ping')).to.deep.equal({ status: 200, body: 'OK' });
    // The controller logged the route and the requests (its container's real output).
    const controllerLog = ok(['-n', 'hangar-system', 'logs', controller[0]!.metadata.name]);
    expect(controllerLog).to.contain('hello.kube.test/ -> ');
    expect(controllerLog).to.match(/GET \/ HTTP\/1\.1/);

    // The instance's own logs through the API: its containers' first lines.
    const logs = await api('POST', `/v1/compute/instances/${instanceId}/logs?lines=20`);
    expect(logs.status, logs.text).to.equal(202);
    const read = await until('the instance log read', async () => {
      const r = await api('GET', `/v1/compute/instances/${instanceId}/logs/${logs.json.data.task_id}`);
      return r.json.data.status === 'completed' || r.json.data.status === 'failed' ? r.json.data : null;
    });
    expect(read.status, read.error).to.equal('completed');
    expect((read.lines as string[]).filter((l) => l.includes('started on')).length).to.equal(2);

    // Gone with the instance: the route, then the balancer.
    expect((await api('DELETE', `/v1/compute/instances/${instanceId}`)).status).to.equal(202);
    await until('the instance gone', async () => (await api('GET', `/v1/compute/instances/${instanceId}`)).status === 404, 120_000);
    await until('its host no longer routed', async () => (await get(`${machines[0]!.ip}:80`, 'hello.kube.test')).status === 404, 60_000);
  });

  it('zero downtime through the load balancer: an instance of two pods goes v1 → v2 with 0 failed requests; a v3 whose readiness never passes is rolled back to v2 by hangar with 0 failed requests and no answer from v3', async function () {
    this.timeout(300_000);
    const url = `http://${machines[0]!.ip}:80/`;
    const domain = 'versions.kube.test';
    const created = await api('POST', '/v1/compute/instances', {
      name: 'versions',
      cluster_id: clusterId,
      image: 'lab/busybox:1',
      replicas: 2,
      domain,
      http_port: 80,
      env: { VERSION: 'v1' },
      // busybox httpd answering $VERSION; /ready (the readiness check's path) unless READY=no; ends at once on SIGTERM.
      command: ['sh', '-c', 'mkdir -p /www; echo "$VERSION" >/www/index.html; [ "$READY" = no ] || echo ok >/www/ready; httpd -f -p 80 -h /www & trap "exit 0" TERM; wait'],
      health: { http: { path: '/ready', port: 80 }, interval_s: 1, timeout_s: 1, retries: 1 },
      rollout: { order: 'start-first', on_failure: 'rollback', parallelism: 1, monitor_s: 2 },
    });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const instance = async () => (await api('GET', `/v1/compute/instances/${id}`)).json.data;
    const settled = (version: string) =>
      until(`two ${version} pods Ready and nothing else`, async () => {
        const pods = podsOf(`io.hangar.workload=${created.json.data.runtime_name}`);
        return pods.length === 2 && pods.every(isReady);
      }, 180_000);
    await until('the instance running with 2 replicas', async () => {
      const i = await instance();
      if (i.status === 'failed') throw new FailNow(i.reason);
      return i.status === 'running' && i.running === 2;
    }, 180_000);
    await settled('v1');
    await answersOnly(url, domain, 'v1', 120_000);

    const update = new RequestLoop(url, domain);
    const t0 = Date.now();
    const v2 = await api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: 'v2' } });
    expect(v2.status, v2.text).to.equal(202);
    await until('the instance running v2', async () => {
      const i = await instance();
      return i.status === 'running' && i.running === 2 && i.env.VERSION === 'v2';
    }, 180_000);
    await settled('v2');
    const updatedIn = Date.now() - t0;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const updated = await update.stop();
    console.log(`      v1 → v2 in ${(updatedIn / 1000).toFixed(1)} s: ${describeLoop(updated)}`);
    expect(updated.failures, 'failed requests during v1 → v2').to.deep.equal([]);
    expect(Object.keys(updated.answers)).to.have.members(['v1', 'v2']);
    expect(updated.sequence.at(-1)).to.equal('v2');

    const failing = new RequestLoop(url, domain);
    const t1 = Date.now();
    const v3 = await api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: 'v3', READY: 'no' } });
    expect(v3.status, v3.text).to.equal(202);
    const rolledBack = await until('the instance rolled_back', async () => {
      const i = await instance();
      return i.status === 'rolled_back' ? i : null;
    }, 180_000);
    const rolledBackIn = Date.now() - t1;
    expect(rolledBack.reason).to.match(/what runs is revision 2/);
    await settled('v2 again');
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const rollback = await failing.stop();
    console.log(`      v3 rolled back after ${(rolledBackIn / 1000).toFixed(1)} s (${rolledBack.reason}): ${describeLoop(rollback)}`);
    expect(rollback.failures, 'failed requests during the failed update and its rollback').to.deep.equal([]);
    expect(Object.keys(rollback.answers)).to.deep.equal(['v2']);

    expect((await api('DELETE', `/v1/compute/instances/${id}`)).status).to.equal(202);
    await until('the instance gone', async () => (await api('GET', `/v1/compute/instances/${id}`)).status === 404, 120_000);
    expect((await api('DELETE', `/v1/kubernetes/clusters/${clusterId}/lb`)).status).to.equal(202);
    await until('the load balancer gone', async () => (await api('GET', `/v1/loadbalancers/${lbId}`)).status === 404, 120_000);
    await until('nothing answering on port 80', async () => (await get(`${machines[0]!.ip}:80`, 'hello.kube.test')).status === 0, 60_000);
  });

  it('backs up a local volume an instance’s pod writes with consistency stop (the Deployment scaled to zero for the snapshot, then back), and restores it with stop_workloads: the new pod reads the restored files', async function () {
    this.timeout(600_000);
    const m2 = machines[1]!;
    const folder = '/srv/hangar-data/keeper';
    const target = await api('POST', '/v1/backups/targets', { name: 'kube', endpoint: s3.endpoint, bucket: bucket.name, prefix: 'kube', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey });
    expect(target.status, target.text).to.equal(201);
    const volume = await api('POST', '/v1/volumes', { name: 'keeper-data', node_id: nodeOf.get(m2.name), folder, type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    const volumeId = volume.json.data.id as string;
    await until('the volume ready', async () => {
      const v = (await api('GET', `/v1/volumes/${volumeId}`)).json.data;
      if (v.status === 'failed') throw new FailNow(v.error);
      return v.status === 'ready';
    });
    await m2.sh(`echo precious >${folder}/precious.txt && head -c 2000000 /dev/urandom >${folder}/blob.bin`);
    const blobSum = await m2.sh(`sha256sum <${folder}/blob.bin`);

    // Each pod that starts appends its name and what it reads in the volume to /data/starts.
    const created = await api('POST', '/v1/compute/instances', {
      name: 'keeper',
      cluster_id: clusterId,
      image: 'lab/busybox:1',
      command: ['sh', '-c', 'echo "$(hostname): $(cat /data/precious.txt)" >>/data/starts; trap "exit 0" TERM; while :; do sleep 1; done'],
    });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const instance = async () => (await api('GET', `/v1/compute/instances/${id}`)).json.data;
    const runningOne = (what: string) =>
      until(what, async () => {
        const i = await instance();
        if (i.status === 'failed') throw new FailNow(i.reason);
        return i.status === 'running' && i.running === 1 ? i : null;
      }, 180_000);
    await runningOne('the instance running');
    const mounted = await api('POST', `/v1/compute/instances/${id}/volumes`, { volume_id: volumeId, path: '/data' });
    expect([200, 202], mounted.text).to.include(mounted.status);
    const starts = async () => (await m2.sh(`cat ${folder}/starts 2>/dev/null || true`)).split('\n').filter(Boolean);
    await until('a pod on the volume’s node that read it', async () => (await starts()).length === 1);
    expect((await starts())[0]).to.match(/: precious$/);
    const runs = (kind: 'backups' | 'restores', runId: string) =>
      until(`the ${kind} run ${runId} finished`, async () => {
        const found = ((await api('GET', `/v1/volumes/${volumeId}/${kind}`)).json.data as Array<Record<string, any>>).find((r) => r.id === runId);
        // Finished, and its workloads (stopped for it) brought back.
        return found && !['running', 'stopping'].includes(found.status) && (!found.workloads?.length || found.workloads_started_at) ? found : null;
      }, 300_000);

    // consistency stop: no pod runs while restic reads the folder; one runs again after.
    const backup = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: 'kube', consistency: 'stop' });
    expect(backup.status, backup.text).to.equal(202);
    const backedUp = await runs('backups', backup.json.data.backup.id);
    expect(backedUp.status, backedUp.error ?? '').to.equal('succeeded');
    expect(backedUp).to.include({ consistency: 'stop', node_id: nodeOf.get(m2.name) });
    expect(backedUp.workloads).to.deep.equal([{ type: 'instance', id, name: 'keeper', replicas: 1 }]);
    expect(backedUp.gap_seconds).to.be.a('number');
    await runningOne('the instance running again after the backup');
    await until('the pod started again after the snapshot', async () => (await starts()).length === 2);

    // Lost data; a restore while the instance uses the volume needs stop_workloads.
    await m2.sh(`echo ruined >${folder}/precious.txt && rm ${folder}/blob.bin`);
    const refused = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backup.json.data.backup.id });
    expect(refused.status, refused.text).to.equal(409);
    expect(refused.json.message).to.contain('give stop_workloads: true');
    const restore = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backup.json.data.backup.id, stop_workloads: true });
    expect(restore.status, restore.text).to.equal(202);
    const restored = await runs('restores', restore.json.data.restore.id);
    expect(restored.status, restored.error ?? '').to.equal('succeeded');
    expect(restored.workloads).to.deep.equal([{ type: 'instance', id, name: 'keeper', replicas: 1 }]);
    expect(await m2.sh(`cat ${folder}/precious.txt`)).to.equal('precious');
    expect(await m2.sh(`sha256sum <${folder}/blob.bin`)).to.equal(blobSum);
    // The snapshot was taken with no pod running: its starts file held the first pod's line only; the pod started after the restore reads the restored file.
    await runningOne('the instance running again after the restore');
    const after = await until('the pod started after the restore', async () => {
      const lines = await starts();
      return lines.length === 2 ? lines : null;
    });
    expect(after[1]).to.match(/: precious$/);
    expect(after[1]!.split(':')[0]).not.to.equal(after[0]!.split(':')[0]);

    expect((await api('DELETE', `/v1/compute/instances/${id}`)).status).to.equal(202);
    await until('the instance gone', async () => (await api('GET', `/v1/compute/instances/${id}`)).status === 404, 120_000);
    expect((await api('DELETE', `/v1/volumes/${volumeId}`)).status).to.equal(202);
    await until('the volume deleted', async () => (await api('GET', `/v1/volumes/${volumeId}`)).status === 404);
  });

  it('the control plane destroyed and restored from the bucket while the cluster runs: the agents come back, the cluster and its instance are there, observed running without a pod replaced, and managed (a scale)', async function () {
    this.timeout(600_000);
    const created = await api('POST', '/v1/compute/instances', { name: 'survivor', cluster_id: clusterId, image: 'lab/busybox:1', replicas: 2, command: idle });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const selector = `io.hangar.workload=${created.json.data.runtime_name}`;
    const running = (replicas: number, since = '') =>
      until(`the instance running ${replicas} pods${since ? ' (observed since the restore)' : ''}`, async () => {
        const i = (await api('GET', `/v1/compute/instances/${id}`)).json.data;
        if (i?.status === 'failed') throw new FailNow(i.reason);
        return i?.status === 'running' && i.running === replicas && (!since || i.observed_at > since) ? i : null;
      }, 180_000);
    await running(2);
    const podsBefore = podsOf(selector).map((p) => p.metadata.name).sort();
    expect(podsBefore).to.have.length(2);

    // `hangar backup create --target` while it serves, as an operator runs it on the control plane's machine.
    const work = mkdtempSync(path.join(os.tmpdir(), 'hangar-kube-drill-'));
    const passphraseFile = path.join(work, 'passphrase');
    writeFileSync(passphraseFile, 'a passphrase the operator keeps elsewhere\n', { mode: 0o600 });
    const envOf = (of: typeof storage) => ({ NODE_ENV: 'test', HANGAR_DATA_DIR: of.dataDir, HANGAR_PLUGINS: PLUGINS.join(','), HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: of.schema!, HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY });
    let restartedAt = '';
    try {
      const backup = await hangarCli(['backup', 'create', '--target', 'kube', '--passphrase-file', passphraseFile], { env: envOf(storage), timeoutMs: 180_000 });
      expect(backup.code, backup.stderr).to.equal(0);
      expect(await bucket.list('kube/hangar-control-plane/')).to.have.length(1);

      // The machine is lost: the control plane stops and its data dir is gone. A new one is restored from the bucket into a new schema.
      await t.stop();
      rmSync(storage.dataDir, { recursive: true, force: true });
      storage = dialect.freshStorage();
      const restore = await hangarCli(['restore', '--from', `s3://${bucket.name}/kube`, '--endpoint', s3.endpoint, '--passphrase-file', passphraseFile], {
        env: { ...envOf(storage), AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey },
        timeoutMs: 180_000,
      });
      expect(restore.code, restore.stderr).to.equal(0);
      restartedAt = new Date().toISOString();
      t = await serve();
    } finally {
      rmSync(work, { recursive: true, force: true });
    }

    // The same CA: the agents reconnect by themselves; the admin's token still verifies.
    for (const m of machines)
      await until(`${m.name} heartbeating to the restored control plane`, async () => {
        const n = (await api('GET', `/v1/nodes/${nodeOf.get(m.name)}`)).json.data;
        return n?.status === 'ready' && n.last_heartbeat_at > restartedAt;
      }, 180_000);
    expect((await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).json.data).to.include({ status: 'active' });
    await running(2, restartedAt);
    expect(podsOf(selector).map((p) => p.metadata.name).sort(), 'the same pods: nothing redeployed').to.deep.equal(podsBefore);

    const scaled = await api('POST', `/v1/compute/instances/${id}/scale`, { replicas: 3 });
    expect([200, 202], scaled.text).to.include(scaled.status);
    await running(3);
    const podsAfter = podsOf(selector).map((p) => p.metadata.name);
    expect(podsAfter).to.have.length(3);
    expect(podsAfter).to.include.members(podsBefore);
    expect((await api('DELETE', `/v1/compute/instances/${id}`)).status).to.equal(202);
    await until('the instance gone', async () => (await api('GET', `/v1/compute/instances/${id}`)).status === 404, 120_000);
  });

  it('refuses to remove the server node (409), removes an agent node (drained, k3s uninstalled on it)', async function () {
    this.timeout(300_000);
    const server = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}/nodes/${ids()[0]}`);
    expect(server.status, server.text).to.equal(409);
    expect(server.text).to.contain('is the server of cluster kube');
    const res = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}/nodes/${ids()[2]}`);
    expect(res.status, res.text).to.equal(202);
    await until('the third node gone from the cluster', async () => (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).json.data.nodes.length === 2);
    expect((await machines[2]!.exec('test -e /usr/local/bin/k3s || test -e /var/lib/rancher/k3s')).code, 'k3s removed').to.not.equal(0);
    const file = path.join(k3sDir, 'kubeconfig');
    const got = kubectl(['--kubeconfig', file, 'get', 'nodes', '--no-headers', '-o', 'name']);
    expect(got.stdout.trim().split('\n').sort()).to.deep.equal(ids().slice(0, 2).map((id) => `node/${id}`).sort());
  });

  it('deletes the cluster: k3s is uninstalled from every machine', async function () {
    this.timeout(300_000);
    const res = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}`);
    expect(res.status, res.text).to.equal(202);
    await until('the cluster gone', async () => (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).status === 404);
    for (const m of machines) {
      expect((await m.exec('test -e /usr/local/bin/k3s || test -e /etc/rancher/k3s/k3s.yaml || pgrep -f "k3s (server|agent)"')).code, `${m.name} clean`).to.not.equal(0);
      // Nor any container of it: the stand-in took its pods down when it stopped.
      expect((await m.exec(['pgrep', '-f', 'containerd-shim|kubelet|kube-proxy|httpd'])).code, `${m.name}: no pod, shim, kubelet or kube-proxy left`).to.equal(1);
      expect((await m.exec('ip link show cni0')).code, `${m.name}: no cni0`).to.not.equal(0);
    }
  });
});
