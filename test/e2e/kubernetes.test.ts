import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TestDialect } from '../support/dialects.js';
import { FailNow, until } from '../support/agents.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { ensureKubeBuild, KUBE_START_TIMEOUT_MS, kubeAvailability } from '../support/kube.js';
import { postgresAvailable, requireService } from '../support/requirements.js';
import { Lab, type Machine } from './lab/lab.js';
import { hangarCli } from '../integration/runner/support.js';

const AGENT_BUILT = existsSync(path.resolve('dist/agent/manifest.json'));

/**
 * Kubernetes clusters end to end on real machines through the HTTP API: three lab machines get
 * agents over SSH; a cluster is created on them, and hangar's agents install "k3s" — the k3s
 * STAND-IN (lab/kube: the real upstream control plane, kwok playing each machine's kubelet, no
 * container runs; docs/kubernetes.md), served by the control plane from its k3s folder as the
 * operator's k3s binary would be — `k3s server` on the first, `k3s agent` with the server's token
 * on the others. The kubeconfig hangar hands out works with kubectl; deleting the cluster
 * uninstalls k3s from the machines. Runs on PostgreSQL.
 */
describe('Kubernetes (k3s stand-in) clusters end to end in the machine lab [postgres]', function () {
  const dialect = new TestDialect('postgres');
  let lab: Lab;
  let t: TestHangar;
  let admin: Credentials;
  let machines: Machine[];
  let kubectl: (args: string[]) => { code: number; stdout: string; stderr: string };
  let k3sDir: string;
  const nodeOf = new Map<string, string>();
  let clusterId: string;

  before(async function () {
    this.timeout(KUBE_START_TIMEOUT_MS);
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const available = await Lab.availability();
    requireService(this, available.docker && available.image, available.why ?? 'the machine lab');
    requireService(this, AGENT_BUILT, 'the agent executables (npm run build)');
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
    machines = await lab.start({ machines: 3 });
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning', 'kubernetes', 'swarms', 'volumes', 'secrets', 'compute', 'services', 'tags'],
      overrides: {
        drivers: ['ssh', 'swarm', 'k8s'],
        api: { host: '0.0.0.0' },
        nodes: { heartbeat_interval_seconds: 2, offline_after_seconds: 10 },
        tasks: { poll_wait_seconds: 10 },
        clusters: { advertise: 'address' },
        kubernetes: { k3s_dir: k3sDir },
      },
    });
    admin = await bootstrapAdmin(t);
    const deploys = await Promise.all(machines.map((m) => api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey })));
    for (const [i, res] of deploys.entries()) {
      expect(res.status, res.text).to.equal(202);
      nodeOf.set(machines[i]!.name, res.json.data.node_id);
    }
    for (const m of machines) await until(`${m.name} to be ready`, async () => (await api('GET', `/v1/nodes/${nodeOf.get(m.name)}`)).json.data.status === 'ready');
  });
  after(async function () {
    this.timeout(180_000);
    await t?.stop();
    await lab?.teardown();
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

  it('creates a cluster on three machines: the agents install k3s (server on the first, agents with its token on the others)', async function () {
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
    expect(argv).to.match(/^\/usr\/local\/bin\/k3s agent --node-name node-\S+ --node-ip 172\.31\.75\.\d+ --server https:\/\/172\.31\.75\.\d+:6443$/);
    const serverToken = await machines[0]!.sh('cat /var/lib/rancher/k3s/server/node-token');
    expect(argv).not.to.contain(serverToken);
    expect(await machines[1]!.sh('stat -c %a /etc/rancher/k3s/k3s-agent.env')).to.equal('600');
    expect(await machines[1]!.sh('cat /etc/rancher/k3s/k3s-agent.env')).to.contain(`K3S_TOKEN="${serverToken}"`);
    const listed = (await api('GET', '/v1/kubernetes/clusters')).json.data;
    expect(listed.map((c: { id: string }) => c.id)).to.deep.equal([clusterId]);
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
    for (const n of nodes) expect(n.kubelet_version).to.match(/^v1\.33\.\d+\+k3s-standin$/);
  });

  it('hands out an admin kubeconfig (the CLI writes it 0600) that works with kubectl (`kubectl get nodes`)', async function () {
    this.timeout(120_000);
    const res = await t.request('GET', `/v1/kubernetes/clusters/${clusterId}/kubeconfig`, { headers: bearer(admin.token) });
    expect(res.status, res.text).to.equal(200);
    const { kubeconfig, server } = res.json.data as { kubeconfig: string; server: string };
    expect(server).to.equal(`https://${machines[0]!.ip}:6443`);
    expect(kubeconfig).to.include(`server: https://${machines[0]!.ip}:6443`);
    expect(t.logs.some((l) => l.includes('client-key-data')), 'never logged').to.equal(false);

    const file = path.join(k3sDir, 'kubeconfig');
    const ca = path.join(k3sDir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: k3sDir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    const cli = await hangarCli(['cluster', 'kubeconfig', 'kube', '--output', file], { env, timeoutMs: 60_000 });
    expect(cli.code, cli.stderr).to.equal(0);
    expect(cli.stdout).to.contain(`wrote the kubeconfig of cluster kube (server https://${machines[0]!.ip}:6443) to ${file} (mode 0600)`);
    expect(statSync(file).mode & 0o777).to.equal(0o600);
    expect(readFileSync(file, 'utf8')).to.equal(kubeconfig);
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
    expect(ready.server_ip).to.equal(machines[2]!.ip);

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
    expect(pv.stdout).to.equal(`${machines[2]!.ip}:/srv/hangar/claimed`);

    const detached = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}/volumes/${volumeId}`);
    expect(detached.status, detached.text).to.equal(200);
    expect(phase().stderr).to.contain('NotFound');
    expect((await api('DELETE', `/v1/volumes/${volumeId}`)).status).to.equal(202);
    await until('the volume deleted', async () => (await api('GET', `/v1/volumes/${volumeId}`)).status === 404);
  });

  it('cordon, drain and uncordon of a member through the nodes API reach the cluster (drain evicts its pods by the Eviction API)', async function () {
    this.timeout(180_000);
    const file = path.join(k3sDir, 'kubeconfig');
    const ok = (args: string[]) => {
      const r = kubectl(['--kubeconfig', file, ...args]);
      expect(r.code, r.stderr).to.equal(0);
      return r.stdout;
    };
    // Pods spread over the three machines (made with kubectl: what hangar does with them is not this case's business).
    ok(['create', 'deployment', 'spread', '--image=registry.invalid/web:1', '--replicas=6']);
    const second = ids()[1]!;
    const podsOn = (node: string) => ok(['get', 'pods', '-l', 'app=spread', '--field-selector', `spec.nodeName=${node},status.phase=Running`, '-o', 'name']).trim().split('\n').filter(Boolean);
    await until('pods running on the second machine', async () => podsOn(second).length > 0, 120_000);
    const unschedulable = () => ok(['get', 'node', second, '-o', 'jsonpath={.spec.unschedulable}']).trim();

    expect((await api('POST', `/v1/nodes/${second}/cordon`)).status).to.equal(200);
    await until('the node cordoned in the cluster', async () => unschedulable() === 'true', 60_000);
    expect(podsOn(second).length, 'cordon leaves its pods').to.be.greaterThan(0);
    expect((await api('POST', `/v1/nodes/${second}/drain`)).status).to.equal(200);
    await until('its pods evicted', async () => podsOn(second).length === 0, 120_000);
    await until('six pods running on the other machines', async () => ok(['get', 'pods', '-l', 'app=spread', '--field-selector', 'status.phase=Running', '-o', 'name']).trim().split('\n').length === 6, 120_000);
    const nodes = (await api('GET', `/v1/kubernetes/clusters/${clusterId}/nodes`)).json.data;
    expect(nodes.find((n: { node_id: string }) => n.node_id === second).availability).to.equal('drained');
    expect((await api('POST', `/v1/nodes/${second}/uncordon`)).status).to.equal(200);
    await until('the node schedulable again', async () => unschedulable() === '', 60_000);
    ok(['delete', 'deployment', 'spread']);
  });

  it('runs a manifest service (Deployment + Service + ConfigMap) Running on the cluster, prunes on PUT, reads its logs, leaves it out of the unmanaged scan that lists a kubectl Deployment, deletes its objects', async function () {
    this.timeout(300_000);
    const file = path.join(k3sDir, 'kubeconfig');
    const kc = (args: string[]) => kubectl(['--kubeconfig', file, ...args]);
    const b64 = (text: string) => Buffer.from(text).toString('base64');
    const deployment = 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: shop}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: shop}}\n  template:\n    metadata: {labels: {app: shop}}\n    spec: {containers: [{name: shop, image: registry.invalid/shop:1}]}\n';
    const service = 'apiVersion: v1\nkind: Service\nmetadata: {name: shop}\nspec: {selector: {app: shop}, ports: [{port: 80, targetPort: 8080}]}\n';
    const config = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shop-settings}\ndata: {mode: fast}\n';
    const manifest = [deployment, service, config].join('---\n');
    const created = await api('POST', '/v1/services', { name: 'shop', cluster_id: clusterId, manifest: b64(manifest) });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id;
    const running = await until('the service running with 2 replicas', async () => {
      const sv = (await api('GET', `/v1/services/${id}`)).json.data;
      if (sv.status === 'failed') throw new FailNow(sv.error);
      return sv.status === 'running' && sv.replicas.shop?.running === 2 ? sv : null;
    });
    expect(running).to.deep.include({ backend: 'manifest', cluster_id: clusterId, manifest });
    expect(running.applied_objects).to.deep.equal([
      { api_version: 'apps/v1', kind: 'Deployment', name: 'shop', namespace: 'default' },
      { api_version: 'v1', kind: 'Service', name: 'shop', namespace: 'default' },
      { api_version: 'v1', kind: 'ConfigMap', name: 'shop-settings', namespace: 'default' },
    ]);
    const pods = kc(['get', 'pods', '-l', 'app=shop', '-o', 'jsonpath={range .items[*]}{.status.phase} {.spec.nodeName}{"\\n"}{end}']);
    expect(pods.code, pods.stderr).to.equal(0);
    const rows = pods.stdout.trim().split('\n');
    expect(rows).to.have.length(2);
    for (const row of rows) expect(ids()).to.include(row.split(' ')[1]) && expect(row.split(' ')[0]).to.equal('Running');

    // PUT without the ConfigMap: it is pruned.
    const put = await api('PUT', `/v1/services/${id}`, { manifest: b64([deployment, service].join('---\n')) });
    expect(put.status, put.text).to.equal(202);
    await until('the ConfigMap pruned', async () => {
      const sv = (await api('GET', `/v1/services/${id}`)).json.data;
      return sv.status === 'running' && sv.applied_objects.length === 2 && kc(['get', 'configmap', 'shop-settings']).code !== 0;
    });

    // Logs from its pods (on the stand-in, kwok's line saying no container runs), prefixed by the part.
    const logs = await api('POST', `/v1/services/${id}/logs?lines=5`);
    expect(logs.status, logs.text).to.equal(202);
    const read = await until('the log read', async () => {
      const r = await api('GET', `/v1/services/${id}/logs/${logs.json.data.task_id}`);
      expect(r.status, r.text).to.equal(200);
      return r.json.data.status === 'completed' || r.json.data.status === 'failed' ? r.json.data : null;
    });
    expect(read.status, read.error).to.equal('completed');
    const lines = read.lines as string[];
    expect(lines.length).to.be.greaterThan(0);
    expect(lines[0]).to.match(/^shop \| \S+Z .*no container runs on this node/);

    // The unmanaged scan on the server node: a Deployment made with kubectl, none of hangar's.
    expect(kc(['create', 'deployment', 'manual', '--image=registry.invalid/manual:1', '--replicas=0']).code).to.equal(0);
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

    const removed = await api('DELETE', `/v1/services/${id}`);
    expect(removed.status, removed.text).to.equal(202);
    await until('the service gone', async () => (await api('GET', `/v1/services/${id}`)).status === 404);
    expect(kc(['get', 'deployment,service', 'shop']).code, 'its objects deleted').to.not.equal(0);
  });

  it('a secret update rolls the Deployment (new pod template hash); deleting it is refused while the Deployment uses it', async function () {
    this.timeout(300_000);
    const kc = (args: string[]) => kubectl(['--kubeconfig', path.join(k3sDir, 'kubeconfig'), ...args]);
    const b64 = (text: string) => Buffer.from(text).toString('base64');
    const created = await api('POST', '/v1/secrets', { name: 'api-token', cluster_id: clusterId, data: b64('first-token') });
    expect(created.status, created.text).to.equal(201);
    expect(created.json.data).to.deep.include({ cluster_id: clusterId, swarm_id: null, namespace: 'default', runtime_name: 'api-token' });
    const secretValue = () => Buffer.from(kc(['get', 'secret', 'api-token', '-o', 'jsonpath={.data.value}']).stdout, 'base64').toString();
    expect(secretValue()).to.equal('first-token');

    // A Deployment made with kubectl (not through hangar) that reads the secret through envFrom.
    const deployment = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'reader' },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: 'reader' } },
        template: { metadata: { labels: { app: 'reader' } }, spec: { containers: [{ name: 'reader', image: 'registry.invalid/reader:1', envFrom: [{ secretRef: { name: 'api-token' } }] }] } },
      },
    };
    const manifest = path.join(k3sDir, 'reader.json');
    writeFileSync(manifest, JSON.stringify(deployment));
    const applied = kc(['apply', '-f', manifest]);
    expect(applied.code, applied.stderr).to.equal(0);
    /** The pod-template-hash of the reader's ReplicaSets with a ready pod. */
    const readyHashes = () =>
      kc(['get', 'replicasets', '-l', 'app=reader', '-o', 'jsonpath={range .items[*]}{.metadata.labels.pod-template-hash} {.status.readyReplicas}{"\\n"}{end}'])
        .stdout.trim()
        .split('\n')
        .filter((row) => row.split(' ')[1] === '1')
        .map((row) => row.split(' ')[0]);
    const [first] = await until('the reader running', async () => (readyHashes().length === 1 ? readyHashes() : null), 120_000);

    const put = await api('PUT', '/v1/secrets/api-token', { data: b64('second-token') });
    expect(put.status, put.text).to.equal(200);
    expect(put.json.data).to.deep.include({ version: 2, redeployed: ['deployment/reader'], services: ['deployment/reader'] });
    expect(secretValue()).to.equal('second-token');
    const second = await until('a new ReplicaSet of the reader ready', async () => readyHashes().find((hash) => hash !== first), 120_000);
    expect(second).to.be.a('string').and.not.equal(first);

    const busy = await api('DELETE', '/v1/secrets/api-token');
    expect(busy.status).to.equal(409);
    expect(busy.json.message).to.equal('Secret api-token is used by deployment/reader');
    expect(kc(['delete', 'deployment', 'reader', '--wait=true']).code).to.equal(0);
    const removed = await api('DELETE', '/v1/secrets/api-token');
    expect(removed.status, removed.text).to.equal(200);
    expect(kc(['get', 'secret', 'api-token']).code, 'the Secret deleted').to.not.equal(0);
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
    }
  });
});
