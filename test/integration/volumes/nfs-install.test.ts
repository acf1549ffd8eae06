import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ensureNfsClient } from '../../../agent/executors/nfs.js';
import { answerTasks, cleanupAgents, FAST_NODES, FakeAgent, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { KUBE_CLUSTER_PLUGINS } from '../../support/kube-cluster.js';
import { OUTSIDE } from '../../support/nfs-exports.js';

// The NFS packages a machine needs for volumes, installed by its agent: the server (nfs-kernel-server)
// on the node that holds an NFS volume, the client (nfs-common) on the members of a cluster with NFS volumes. This
// machine's kernel has no NFS (nothing can export or mount here), so the agents' PATH holds test
// doubles instead: apt-get (logs what it is asked, and "installs" by putting the package's programs
// beside itself, or fails like a machine that cannot reach its mirror), and the programs it installs —
// exportfs keeps an export table made from the entries the agent wrote, showmount answers from it.
// The volume is served only when the server lists its export, not when its entry is written.

const dirs: string[] = [];
const temp = (prefix: string) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
};

const HEAD = '#!/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\nbin=$(dirname "$0")\n';
const EXPORTFS = `${HEAD}case "$1" in\n  -ra) cat "$HANGAR_EXPORTS_DIR"/*.exports 2>/dev/null | grep -v '^#' > "$bin/etab" ;;\n  -v) cat "$bin/etab" 2>/dev/null ;;\nesac\nexit 0\n`;
const SHOWMOUNT = `${HEAD}[ "$*" = "-e --no-headers 127.0.0.1" ] || exit 2\nawk '{print $1, $2}' "$bin/etab"\n`;
const APT_GET = `${HEAD}echo "$*" >> "$bin/apt-get.log"
fail() { [ -e "$bin/offline" ] || return 1; echo "$1" >&2; exit 100; }
put() { printf '%s' "$2" > "$bin/$1"; chmod 755 "$bin/$1"; }
case "$*" in
  *" update "*|*" update") fail "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Could not connect to deb.debian.org:80 - connect (111: Connection refused)" ;;
  *" install "*nfs-common) fail "E: Unable to locate package nfs-common"; put mount.nfs '#!/bin/sh\nexit 0\n' ;;
  *" install "*nfs-kernel-server) fail "E: Unable to locate package nfs-kernel-server"; put exportfs "$(cat "$bin/exportfs.pkg")"; put showmount "$(cat "$bin/showmount.pkg")" ;;
esac
exit 0
`;

/** A bin folder for an agent's PATH with the apt-get double; `offline`: its installs fail as on a machine without its mirror. */
function machineBin(offline: boolean): string {
  const bin = temp('hangar-nfs-bin-');
  writeFileSync(path.join(bin, 'apt-get'), APT_GET, { mode: 0o755 });
  writeFileSync(path.join(bin, 'exportfs.pkg'), EXPORTFS);
  writeFileSync(path.join(bin, 'showmount.pkg'), SHOWMOUNT);
  if (offline) writeFileSync(path.join(bin, 'offline'), '');
  return bin;
}
const aptRuns = (bin: string) => (existsSync(path.join(bin, 'apt-get.log')) ? readFileSync(path.join(bin, 'apt-get.log'), 'utf8').split('\n').filter(Boolean) : []);
const installs = (bin: string) => aptRuns(bin).filter((l) => / install /.test(l)).map((l) => l.split(' ').pop());

describeEachDialect('NFS packages for volumes: the server on a volume’s node, the client on cluster members; a volume says whether it is served', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let exportsDir: string;
  const previousExportsDir = process.env.HANGAR_EXPORTS_DIR;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(60_000);
    exportsDir = temp('hangar-nfs-exports-');
    // The agents write their export entries here instead of /etc/exports.d (they read it at start).
    process.env.HANGAR_EXPORTS_DIR = exportsDir;
    const k3sDir = temp('hangar-nfs-k3s-');
    writeFileSync(path.join(k3sDir, 'k3s'), 'a k3s binary');
    t = await startHangar(dialect, {
      plugins: [...KUBE_CLUSTER_PLUGINS, 'volumes'],
      overrides: { ...FAST_NODES, kubernetes: { k3s_dir: k3sDir }, volumes: { nfs_export_clients: [OUTSIDE] } },
    });
    admin = await bootstrapAdmin(t);
  });
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
    if (previousExportsDir === undefined) delete process.env.HANGAR_EXPORTS_DIR;
    else process.env.HANGAR_EXPORTS_DIR = previousExportsDir;
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  async function machine(offline: boolean): Promise<{ bin: string; nodeId: string }> {
    const bin = machineBin(offline);
    const token = await api('POST', '/v1/nodes/token', {});
    expect(token.status, token.text).to.equal(201);
    const nodeId = await joinedNodeId(spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: bin }));
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${nodeId} ready` });
    return { bin, nodeId };
  }
  const settled = (id: string) =>
    waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${id}`)).json.data;
        return v && v.status !== 'preparing' ? v : null;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: `volume ${id} prepared` },
    );

  it('an NFS volume’s node gets the NFS server installed, and the volume is served once the server lists its export; the node reports the server', async function () {
    this.timeout(60_000);
    const { bin, nodeId } = await machine(false);
    expect((await api('GET', `/v1/nodes/${nodeId}`)).json.data.nfs, 'nothing of NFS before').to.deep.equal({ client: false, server: false });
    const folder = path.join(temp('hangar-nfs-data-'), 'shared');
    const created = await api('POST', '/v1/volumes', { name: `served-${dialect.name}`, node_id: nodeId, folder });
    expect(created.status, created.text).to.equal(202);
    expect(created.json.data).to.include({ status: 'preparing', served: false });
    const v = await settled(created.json.data.id);
    expect(v).to.include({ status: 'ready', served: true });
    expect(v.nfs_export).to.deep.equal({ file: path.join(exportsDir, `hangar-${v.id}.exports`), served: true, reason: null, clients: [OUTSIDE] });
    expect(installs(bin)).to.deep.equal(['nfs-kernel-server']);
    expect(aptRuns(bin)[0]).to.match(/ install -y -q --no-install-recommends nfs-kernel-server$/);
    expect(readFileSync(path.join(bin, 'etab'), 'utf8'), 'the server’s table lists the export').to.contain(`${folder} ${OUTSIDE}(`);
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data.nfs?.server === true, { timeoutMs: 10_000, what: 'the node to report the NFS server' });

    // Installed once: preparing again (another volume) finds it there.
    const again = await settled((await api('POST', '/v1/volumes', { name: `served2-${dialect.name}`, node_id: nodeId, folder: `${folder}-2` })).json.data.id);
    expect(again).to.include({ status: 'ready', served: true });
    expect(installs(bin)).to.have.length(1);
  });

  it('a node whose NFS server cannot be installed has the volume ready (folder and entry written) but not served, naming why', async function () {
    this.timeout(60_000);
    const { bin, nodeId } = await machine(true);
    const folder = path.join(temp('hangar-nfs-data-'), 'unserved');
    const v = await settled((await api('POST', '/v1/volumes', { name: `unserved-${dialect.name}`, node_id: nodeId, folder })).json.data.id);
    expect(v).to.include({ status: 'ready', served: false });
    expect(v.nfs_export.served).to.equal(false);
    expect(v.nfs_export.reason).to.equal(
      'installing nfs-kernel-server: apt-get update failed: E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Could not connect to deb.debian.org:80 - connect (111: Connection refused)',
    );
    expect(existsSync(v.nfs_export.file), 'the entry is written for when a server runs').to.equal(true);
    expect(aptRuns(bin).map((l) => l.split(' ').filter((w) => !w.startsWith('-') && !w.includes('::') && !w.includes('='))[0])).to.deep.equal(['install', 'update']);
  });

  it('a member whose agent reports no NFS client is asked to install it only for NFS volumes: not when it joins a cluster without any, when a volume is staged for it and when it joins a cluster that has one; a node event says what came of it', async function () {
    this.timeout(90_000);
    // What each agent reports: an agent that predates the task reports nothing of NFS, and is not asked.
    const reports = [{ nfs: { client: false, server: false } }, { nfs: { client: false, server: false } }, {}, { nfs: { client: false, server: false } }];
    const [server, member, old, later] = (await Promise.all(
      ['nfs-server', 'nfs-member', 'nfs-old', 'nfs-later'].map(async (name, i) => {
        const node = await api('POST', '/v1/nodes', { name: `${name}-${dialect.name}`, ip_address: `192.0.2.${60 + i}` });
        expect(node.status, node.text).to.equal(201);
        const agent = await FakeAgent.forNode(t, node.json.data.id);
        expect((await agent.heartbeat(reports[i])).status).to.equal(200);
        return agent;
      }),
    )) as [FakeAgent, FakeAgent, FakeAgent, FakeAgent];
    const joined = (agent: FakeAgent) => () => ({ runtime_node_id: agent.nodeId, version: 'v1.33.1+k3s1' });
    const installed = () => ({ package: 'nfs-common', present: true, installed: true, reason: null });
    const loops = [
      answerTasks(server, { answers: { 'k3s.install-server': joined(server), 'k3s.token': () => ({ token: 'K10abc::server:x' }), 'host.nfs-client': installed } }),
      answerTasks(member, {
        answers: {
          'k3s.join': joined(member),
          'host.nfs-client': () => ({ package: 'nfs-common', present: false, installed: false, reason: 'installing nfs-common failed: E: Unable to locate package nfs-common' }),
        },
      }),
      answerTasks(old, { answers: { 'k3s.join': joined(old) } }),
      answerTasks(later, { answers: { 'k3s.join': joined(later), 'host.nfs-client': installed } }),
    ];
    const asked = () => loops.map((loop) => loop.calls.filter((c) => c.method === 'host.nfs-client').length);
    const eventsOf = async (nodeId: string) =>
      ((await api('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as Array<{ kind: string; message: string }>).filter((e) => e.kind.startsWith('nfs_client')).map(pick);
    const eventsWhen = (nodeId: string, count: number) =>
      waitFor(
        async () => {
          const found = await eventsOf(nodeId);
          return found.length >= count ? found : null;
        },
        { timeoutMs: 30_000, what: `${count} NFS client event(s) of ${nodeId}` },
      );
    const missing = { kind: 'nfs_client_missing', message: 'NFS volumes cannot be mounted on this member: installing nfs-common failed: E: Unable to locate package nfs-common' };
    const allActive = (clusterId: string, count: number) =>
      waitFor(
        async () => {
          const nodes = (await api('GET', `/v1/kubernetes/clusters/${clusterId}`)).json.data?.nodes as Array<{ status: string }> | undefined;
          return nodes?.length === count && nodes.every((n) => n.status === 'active');
        },
        { timeoutMs: 30_000, what: `the ${count} members active` },
      );
    try {
      // A cluster without NFS volumes: no member is asked for the client (nfs-common brings rpcbind, port 111).
      const created = await api('POST', '/v1/kubernetes/clusters', { name: `nfs-${dialect.name}`, node_ids: [server.nodeId, member.nodeId, old.nodeId] });
      expect(created.status, created.text).to.equal(202);
      const clusterId = created.json.data.id as string;
      await allActive(clusterId, 3);
      await new Promise((resolve) => setTimeout(resolve, 2500));
      expect(asked(), 'no member asked for the NFS client without an NFS volume').to.deep.equal([0, 0, 0, 0]);
      for (const agent of [server, member, old]) expect(await eventsOf(agent.nodeId)).to.deep.equal([]);

      // An NFS volume staged on the cluster asks every member that reports no client (the old agent not).
      const volume = await api('POST', '/v1/volumes', { name: `staged-${dialect.name}`, node_id: server.nodeId, folder: '/srv/hangar/staged' });
      expect(volume.status, volume.text).to.equal(202);
      expect((await settled(volume.json.data.id)).status).to.equal('ready');
      expect(await eventsWhen(server.nodeId, 1)).to.deep.equal([{ kind: 'nfs_client_installed', message: 'installed nfs-common: this member can mount NFS volumes' }]);
      expect(await eventsWhen(member.nodeId, 1)).to.deep.equal([missing]);
      expect(asked(), 'asked once each, the old agent not at all').to.deep.equal([1, 1, 0, 0]);

      // The server's agent now reports the client; a node joining the cluster, which has an NFS volume, is asked (and the member again, still without it).
      expect((await server.heartbeat({ nfs: { client: true, server: false } })).status).to.equal(200);
      const added = await api('POST', `/v1/kubernetes/clusters/${clusterId}/nodes`, { node_id: later.nodeId });
      expect(added.status, added.text).to.equal(202);
      await allActive(clusterId, 4);
      expect(await eventsWhen(later.nodeId, 1)).to.deep.equal([{ kind: 'nfs_client_installed', message: 'installed nfs-common: this member can mount NFS volumes' }]);
      expect(await eventsWhen(member.nodeId, 2)).to.deep.equal([missing, missing]);
      const [serverAsked, ...others] = asked();
      expect(others, 'the member again (still without it), the old agent never, the joiner once').to.deep.equal([2, 0, 1]);
      // The server may be asked once more by a re-share queued before its report of the client landed: harmless (it answers present).
      expect(serverAsked).to.be.within(1, 2);
    } finally {
      for (const loop of loops) await loop.stop();
    }
  });
});

const pick = (e: { kind: string; message: string }) => ({ kind: e.kind, message: e.message });

describe('the agent’s NFS client executor (host.nfs-client)', () => {
  const previousPath = process.env.PATH;
  after(() => {
    process.env.PATH = previousPath;
  });

  it('installs nfs-common with apt-get when mount.nfs is missing, and only then', async () => {
    const bin = machineBin(false);
    process.env.PATH = bin;
    const ctx = {} as Parameters<typeof ensureNfsClient>[0];
    expect(await ensureNfsClient(ctx)).to.deep.equal({ package: 'nfs-common', present: true, installed: true, reason: null });
    expect(await ensureNfsClient(ctx)).to.deep.equal({ package: 'nfs-common', present: true, installed: false, reason: null });
    expect(installs(bin)).to.deep.equal(['nfs-common']);
    process.env.PATH = temp('hangar-nfs-nothing-');
    expect(await ensureNfsClient(ctx)).to.deep.equal({ package: 'nfs-common', present: false, installed: false, reason: 'mount.nfs is not installed and this machine has no apt-get: install nfs-common' });
  });
});
