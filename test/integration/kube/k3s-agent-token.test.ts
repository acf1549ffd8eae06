import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { answerTasks, cleanupAgents, FAST_NODES, FakeAgent, joinedNodeId, spawnAgent, waitFor, type AgentProcess } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { KUBE_CLUSTER_PLUGINS } from '../../support/kube-cluster.js';

// The k3s join token is a secret of the whole cluster: whoever has it can add a node and read what
// the cluster gives nodes. A k3s agent node must not show it to every user of the machine: not on
// the command line (/proc/<pid>/cmdline is world-readable), not in the systemd unit (0644). As k3s's
// installer does, it is K3S_TOKEN in a 0600 environment file.
//
// Driven through the API and real agents (separate processes, the agent's own executor): a cluster
// whose server is a test double (FakeAgent: it answers the install and hands out TOKEN) and whose
// two other members are real agents that install "k3s" — a test double of k3s placed in
// kubernetes.k3s_dir, served to them by the control plane — under a temporary root each
// (HANGAR_K3S_ROOT): one machine without systemd (k3s as a detached process, as in the machine lab),
// one with systemd (its marker under the root, and a systemctl test double that starts the unit the
// way systemd does: a clean environment, the unit's EnvironmentFile=, its ExecStart=).

const TOKEN = 'K10aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999::server:do-not-show-me-0123456789';

/** The k3s test double: `agent` writes what it got in K3S_TOKEN and its kubelet kubeconfig (TLS bootstrapping done), then stays up. */
const FAKE_K3S = `#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
root="\${HANGAR_K3S_ROOT:?}"
case "$1" in
  --version) echo "k3s version v1.33.1+k3s-testdouble (hangar's k3s test double)"; exit 0 ;;
  agent)
    printf '%s' "\${K3S_TOKEN:-}" > "$root/k3s-agent-got-token"
    mkdir -p "$root/var/lib/rancher/k3s/agent"
    echo 'apiVersion: v1' > "$root/var/lib/rancher/k3s/agent/kubelet.kubeconfig"
    sleep 3600 &
    trap 'kill $! 2>/dev/null; exit 0' TERM INT
    wait
    exit 0 ;;
esac
echo "the k3s test double does not know $1" >&2
exit 2
`;

/** systemctl as far as k3s.ts uses it; it starts a unit as systemd would: `env -i`, EnvironmentFile=, ExecStart=. */
const FAKE_SYSTEMCTL = `#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
root="\${HANGAR_K3S_ROOT:?}"
echo "$*" >> "$root/systemctl.log"
pidfile() { echo "$root/run/$1.systemd-pid"; }
alive() {
  pid=$(cat "$(pidfile "$1")" 2>/dev/null) || return 1
  [ -r "/proc/$pid/stat" ] && [ "$(sed 's/^.*) \\(.\\).*$/\\1/' "/proc/$pid/stat")" != Z ]
}
case "$1" in
  daemon-reload) exit 0 ;;
  enable)
    [ "$2" = --now ] || exit 0
    unit="$root/etc/systemd/system/$3.service"
    envfile=$(sed -n 's/^EnvironmentFile=-\\{0,1\\}//p' "$unit")
    cmd=$(sed -n 's/^ExecStart=//p' "$unit")
    env -i HANGAR_K3S_ROOT="$root" /bin/sh -c "set -a; . '$envfile'; set +a; exec $cmd" >/dev/null 2>&1 &
    echo $! > "$(pidfile "$3")"
    exit 0 ;;
  is-active)
    [ "$2" = --quiet ] && shift
    alive "$2"
    exit ;;
  disable)
    [ "$2" = --now ] && shift
    alive "$2" && kill "$(cat "$(pidfile "$2")")"
    exit 0 ;;
esac
exit 0
`;

const mode = (file: string) => statSync(file).mode & 0o777;
/** A process's command line as everyone on the machine can read it. */
const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
const pidIn = (file: string) => Number(readFileSync(file, 'utf8').trim());

describeEachDialect('k3s agent nodes: the join token only in a 0600 environment file (K3S_TOKEN), never on a command line or in the unit', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let server: FakeAgent;
  let fakeServer: { stop(): Promise<void> };
  const dirs: string[] = [];
  const temp = (prefix: string) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  /** A machine with its own root for k3s's files; `systemd`: systemd runs there (its marker, and systemctl on the agent's PATH). */
  async function machine(systemd: boolean): Promise<{ root: string; agent: AgentProcess; nodeId: string }> {
    const root = temp('hangar-k3s-machine-');
    const bin = temp('hangar-k3s-bin-');
    if (systemd) {
      mkdirSync(path.join(root, 'run/systemd/system'), { recursive: true });
      writeFileSync(path.join(bin, 'systemctl'), FAKE_SYSTEMCTL, { mode: 0o755 });
    }
    mkdirSync(path.join(root, 'run'), { recursive: true });
    const token = await api('POST', '/v1/nodes/token', {});
    expect(token.status, token.text).to.equal(201);
    const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: bin, env: { HANGAR_K3S_ROOT: root } });
    const nodeId = await joinedNodeId(agent);
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${nodeId} ready` });
    return { root, agent, nodeId };
  }

  before(async function () {
    this.timeout(60_000);
    const k3sDir = temp('hangar-k3s-dir-');
    writeFileSync(path.join(k3sDir, 'k3s'), FAKE_K3S, { mode: 0o755 });
    t = await startHangar(dialect, { plugins: KUBE_CLUSTER_PLUGINS, overrides: { ...FAST_NODES, kubernetes: { k3s_dir: k3sDir } } });
    admin = await bootstrapAdmin(t);
    const node = await api('POST', '/v1/nodes', { name: 'k3s-server', ip_address: '192.0.2.50' });
    expect(node.status, node.text).to.equal(201);
    server = await FakeAgent.forNode(t, node.json.data.id);
    expect((await server.heartbeat()).status).to.equal(200);
    fakeServer = answerTasks(server, {
      answers: {
        'k3s.install-server': () => ({ runtime_node_id: server.nodeId, version: 'v1.33.1+k3s1' }),
        'k3s.token': () => ({ token: TOKEN }),
      },
    });
  });
  after(async function () {
    this.timeout(30_000);
    await fakeServer?.stop();
    await cleanupAgents();
    await t?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('installs k3s agents with the token in K3S_TOKEN of a 0600 file: the unit (0644) and every command line are without it; uninstalling removes the file', async function () {
    this.timeout(120_000);
    const plain = await machine(false);
    const withSystemd = await machine(true);
    const created = await api('POST', '/v1/kubernetes/clusters', { name: `tokens-${dialect.name}`, node_ids: [server.nodeId, plain.nodeId, withSystemd.nodeId] });
    expect(created.status, created.text).to.equal(202);
    const clusterId = created.json.data.id as string;
    const cluster = await waitFor(
      async () => {
        const c = (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).json.data;
        const failed = c?.nodes.find((n: { status: string }) => n.status === 'failed');
        if (failed) throw new Error(`a member failed: ${JSON.stringify(failed)}\n${plain.agent.output()}\n${withSystemd.agent.output()}`);
        return c?.nodes.length === 3 && c.nodes.every((n: { status: string }) => n.status === 'active') ? c : null;
      },
      { timeoutMs: 90_000, intervalMs: 250, what: 'the three members active' },
    );
    const serverUrl = 'https://192.0.2.50:6443';
    const addressOf = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data.ip_address as string;
    const expectedArgs = async (id: string) => ['agent', '--node-name', id, '--node-ip', await addressOf(id), '--server', serverUrl];
    expect(cluster.nodes.map((n: { role: string }) => n.role)).to.deep.equal(['server', 'agent', 'agent']);

    // Without systemd: a detached process, given the token in its environment only.
    {
      const { root, nodeId } = plain;
      expect(existsSync(path.join(root, 'etc/systemd/system/k3s-agent.service')), 'no unit').to.equal(false);
      const envFile = path.join(root, 'etc/rancher/k3s/k3s-agent.env');
      expect(mode(envFile)).to.equal(0o600);
      expect(readFileSync(envFile, 'utf8')).to.contain(`K3S_TOKEN="${TOKEN}"`);
      const argv = cmdline(pidIn(path.join(root, 'run/k3s.pid')));
      expect(argv.slice(-7)).to.deep.equal(await expectedArgs(nodeId));
      expect(argv.join(' ')).not.to.contain(TOKEN).and.not.to.contain('--token');
      expect(readFileSync(path.join(root, 'k3s-agent-got-token'), 'utf8'), 'k3s got it from its environment').to.equal(TOKEN);
    }
    // With systemd: the unit names the environment file and carries no token.
    {
      const { root, nodeId } = withSystemd;
      const unitFile = path.join(root, 'etc/systemd/system/k3s-agent.service');
      const envFile = path.join(root, 'etc/systemd/system/k3s-agent.service.env');
      expect(mode(unitFile)).to.equal(0o644);
      expect(mode(envFile)).to.equal(0o600);
      const unit = readFileSync(unitFile, 'utf8');
      expect(unit).not.to.contain(TOKEN).and.not.to.contain('--token');
      expect(unit.split('\n')).to.include(`EnvironmentFile=${envFile}`);
      expect(unit.split('\n')).to.include(`ExecStart=${[path.join(root, 'usr/local/bin/k3s'), ...(await expectedArgs(nodeId))].join(' ')}`);
      expect(readFileSync(envFile, 'utf8')).to.contain(`K3S_TOKEN="${TOKEN}"`);
      expect(readFileSync(path.join(root, 'systemctl.log'), 'utf8').split('\n')).to.include.members(['daemon-reload', 'enable --now k3s-agent']);
      const argv = cmdline(pidIn(path.join(root, 'run/k3s-agent.systemd-pid')));
      expect(argv.slice(-7)).to.deep.equal(await expectedArgs(nodeId));
      expect(argv.join(' ')).not.to.contain(TOKEN);
      expect(readFileSync(path.join(root, 'k3s-agent-got-token'), 'utf8'), 'k3s got it from the EnvironmentFile').to.equal(TOKEN);
    }
    // No agent wrote the token in its log either.
    expect(plain.agent.output() + withSystemd.agent.output()).not.to.contain(TOKEN);

    const deleted = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}?force=true`);
    expect([200, 202], deleted.text).to.include(deleted.status);
    await waitFor(async () => (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).status === 404, { timeoutMs: 60_000, what: 'the cluster deleted' });
    expect(existsSync(path.join(plain.root, 'etc/rancher/k3s')), 'the environment file went with k3s').to.equal(false);
    expect(existsSync(path.join(withSystemd.root, 'etc/systemd/system/k3s-agent.service.env')), 'the unit’s environment file went with it').to.equal(false);
    expect(existsSync(path.join(withSystemd.root, 'etc/systemd/system/k3s-agent.service'))).to.equal(false);
  });

  it('adds a k3s agent to an active cluster (POST …/nodes): joining, then active with the server’s token in K3S_TOKEN; a node already in it, or in another cluster, is refused (409)', async function () {
    this.timeout(120_000);
    const created = await api('POST', '/v1/kubernetes/clusters', { name: `grow-${dialect.name}`, node_ids: [server.nodeId] });
    expect(created.status, created.text).to.equal(202);
    const clusterId = created.json.data.id as string;
    const clusterOf = async () => (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).json.data;
    await waitFor(async () => (await clusterOf()).status === 'active', { timeoutMs: 30_000, what: 'the cluster active with its server' });

    const worker = await machine(false);
    const added = await api('POST', `/v1/kubernetes/clusters/${clusterId}/nodes`, { node_id: worker.nodeId });
    expect(added.status, added.text).to.equal(202);
    expect(added.json.data).to.deep.include({ node_id: worker.nodeId, role: 'agent', status: 'joining' });
    const joined = await waitFor(
      async () => {
        const member = (await clusterOf()).nodes.find((n: { node_id: string }) => n.node_id === worker.nodeId);
        if (member?.status === 'failed') throw new Error(`the join failed: ${member.error}\n${worker.agent.output()}`);
        return member?.status === 'active' ? member : null;
      },
      { timeoutMs: 90_000, intervalMs: 250, what: 'the added node active' },
    );
    expect(joined).to.include({ role: 'agent', runtime_node_id: worker.nodeId, address: await (async () => (await api('GET', `/v1/nodes/${worker.nodeId}`)).json.data.ip_address)() });
    expect(readFileSync(path.join(worker.root, 'k3s-agent-got-token'), 'utf8'), 'joined with the server’s token').to.equal(TOKEN);
    expect(cmdline(pidIn(path.join(worker.root, 'run/k3s.pid'))).slice(-2)).to.deep.equal(['--server', 'https://192.0.2.50:6443']);
    expect((await clusterOf()).nodes.map((n: { role: string }) => n.role)).to.deep.equal(['server', 'agent']);

    const again = await api('POST', `/v1/kubernetes/clusters/${clusterId}/nodes`, { node_id: worker.nodeId });
    expect(again.status, again.text).to.equal(409);
    const other = await api('POST', '/v1/kubernetes/clusters', { name: `other-${dialect.name}`, node_ids: [worker.nodeId] });
    expect(other.status, other.text).to.equal(409);
    expect(other.json.message).to.contain(worker.nodeId);

    const deleted = await api('DELETE', `/v1/kubernetes/clusters/${clusterId}?force=true`);
    expect([200, 202], deleted.text).to.include(deleted.status);
    await waitFor(async () => (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).status === 404, { timeoutMs: 60_000, what: 'the cluster deleted' });
    expect(existsSync(path.join(worker.root, 'etc/rancher/k3s')), 'k3s uninstalled from the added node').to.equal(false);
  });
});
