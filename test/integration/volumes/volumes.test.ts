import { expect } from 'chai';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomToken } from '../../../core/ids.js';
import { docker } from '../../../lab/docker.js';
import { volumesOf, VolumeUsersPoint } from '../../../plugins/volumes/api.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { dockerOnlyPath, hostSwarm } from '../../support/host-swarm.js';
import { exportLines, NFS_OPTIONS, OUTSIDE } from '../../support/nfs-exports.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';
import { ClusterMemberJoined, ClusterMemberLeft } from '../../../core/clusters/topics.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes'];
/**
 * Volumes through the API with real agents on this host: node A is the manager of a swarm group
 * (the host engine's swarm), node B a second agent on the same machine that is in no swarm. The
 * lab kernel cannot mount NFS, so what is checked is what hangar makes: folders, export files and
 * the volume definitions on the engine (`docker volume inspect`), never an NFS mount.
 */
describeEachDialect('volumes: API, NFS export files and volume definitions through real agents', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  let nodeB: string;
  let work: string;
  let exportsDir: string;
  const run = randomToken(6);
  const named = (n: string) => `${n}-${run}`;
  const users = new Map<string, Array<{ type: string; id: string; name: string }>>();
  const previousExportsDir = process.env.HANGAR_EXPORTS_DIR;

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const settled = (id: string) =>
    waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${id}`)).json.data;
        return v && v.status !== 'preparing' ? v : null;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: `volume ${id} to be prepared` },
    );
  const gone = (id: string) =>
    waitFor(async () => (await api('GET', `/v1/volumes/${id}`)).status === 404, { timeoutMs: 30_000, intervalMs: 200, what: `volume ${id} to be deleted` });
  const inspectVolume = async (name: string) => {
    const res = await docker(['volume', 'inspect', name]);
    return res.code === 0 ? (JSON.parse(res.stdout)[0] as { Options: Record<string, string>; Labels: Record<string, string> }) : null;
  };

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, !missing, missing ?? '');
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-volumes-'));
    exportsDir = path.join(work, 'exports.d');
    // The agents write NFS export entries here instead of /etc/exports.d (they read it at start).
    process.env.HANGAR_EXPORTS_DIR = exportsDir;
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { ...SWARM_TEST_OVERRIDES, volumes: { nfs_export_clients: [OUTSIDE] } } });
    admin = await bootstrapAdmin(t);
    t.hangar.services.provided.contribute(VolumeUsersPoint, async (volumeId) => users.get(volumeId) ?? []);
    member = await hostSwarmMember(t, admin, named('vols'));
    const token = await api('POST', '/v1/nodes/token', {});
    const agentB = spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: dockerOnlyPath() });
    nodeB = await joinedNodeId(agentB);
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeB}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${nodeB} to be ready` });
  });

  after(async function () {
    this.timeout(60_000);
    for (const n of ['nfs-a', 'nfs-b', 'local-a']) await docker(['volume', 'rm', '-f', `hangar-vol-${named(n)}`]);
    await cleanupAgents();
    await t?.stop();
    if (previousExportsDir === undefined) delete process.env.HANGAR_EXPORTS_DIR;
    else process.env.HANGAR_EXPORTS_DIR = previousExportsDir;
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('refuses bad input: name, relative or ".." folders, the root, an unknown type (400), an unknown node (404), an unknown volume (404)', async () => {
    const base = { name: named('bad'), node_id: member.nodeId, folder: path.join(work, 'bad') };
    for (const body of [
      { ...base, name: '-dash' },
      { ...base, name: 'x'.repeat(64) },
      { ...base, folder: 'relative/path' },
      { ...base, folder: '/srv/../etc' },
      { ...base, folder: '//' },
      { ...base, folder: '/srv/with space' },
      { ...base, type: 'ceph' },
      { ...base, extra: 1 },
    ]) {
      const res = await api('POST', '/v1/volumes', body);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.json.message).to.match(/^Validation failed:/);
    }
    const unknownNode = await api('POST', '/v1/volumes', { ...base, node_id: 'node-0000000000000000' });
    expect(unknownNode.status).to.equal(404);
    expect((await api('GET', '/v1/volumes/vol-0000000000000000')).status).to.equal(404);
    expect((await api('DELETE', '/v1/volumes/nope')).status).to.equal(404);
  });

  it('creates an NFS volume on a swarm member: folder (0755), export file naming no one but the configured network (the node is its swarm’s only member), a bind definition on its own engine; server_ip is the address members reach it at (swarms.advertise: address here)', async function () {
    this.timeout(60_000);
    const folder = path.join(work, 'data', 'nfs-a');
    const res = await api('POST', '/v1/volumes', { name: named('nfs-a'), node_id: member.nodeId, folder: `${folder}/` });
    expect(res.status).to.equal(202);
    const node = (await api('GET', `/v1/nodes/${member.nodeId}`)).json.data;
    expect(res.json.data).to.include({ name: named('nfs-a'), type: 'nfs', status: 'preparing', folder, node_id: member.nodeId, server_ip: node.ip_address });
    expect(res.json.data.id).to.match(/^vol-/);
    expect(res.json.data.runtime_name).to.equal(`hangar-vol-${named('nfs-a')}`);
    const v = await settled(res.json.data.id);
    expect(v.status, v.error).to.equal('ready');
    expect(existsSync(folder)).to.equal(true);
    // Not world-writable: root (what containers write as) writes, others read.
    expect(statSync(folder).mode & 0o777).to.equal(0o755);
    // No NFS server in the lab: the export entry is written, and the volume says it is not served.
    expect(v.nfs_export).to.include({ file: path.join(exportsDir, `hangar-${v.id}.exports`), served: false });
    expect(v.nfs_export.reason).to.contain('exportfs');
    // The swarm's only member is the node itself (it binds the folder): the export names the configured network alone.
    expect(v.nfs_export.clients).to.deep.equal([OUTSIDE]);
    expect(exportLines(v.nfs_export.file)).to.deep.equal([`${folder} ${OUTSIDE}${NFS_OPTIONS}`]);
    const defined = await inspectVolume(`hangar-vol-${named('nfs-a')}`);
    expect(defined?.Options).to.deep.equal({ type: 'none', o: 'bind', device: folder });
    expect(defined?.Labels).to.include({ 'io.hangar.id': v.id });
  });

  it('defines the swarm’s NFS volumes on a node that joins the swarm (NFS options, since it does not hold the folder) and exports them to it; when it leaves, the export no longer names it', async function () {
    this.timeout(30_000);
    const knex = t.hangar.services.db.knex;
    const v = (await api('GET', `/v1/volumes/${named('nfs-a')}`)).json.data;
    // Node B joins as far as hangar knows (the host engine cannot be in the swarm twice).
    const now = new Date().toISOString();
    const clusters = t.hangar.services.clusters;
    await knex('cluster_members').insert({ id: `member-${run}`, cluster_id: member.swarmId, node_id: nodeB, role: 'worker', status: 'joining', created_at: now, updated_at: now });
    // What the swarms plugin does once a join is done: the member active (with its reactions kept), then the change published.
    const joining = (await clusters.members.get(`member-${run}`))!;
    await clusters.memberJoined(joining, {});
    try {
      t.hangar.services.events.publish(ClusterMemberJoined, { clusterId: member.swarmId, nodeId: nodeB });
      await waitFor(async () => Boolean(await knex('volume_definitions').where({ volume_id: v.id, node_id: nodeB }).first()), { timeoutMs: 20_000, what: 'the definition on node B' });
      // Both agents share this engine: node B's definition replaced node A's bind.
      expect((await inspectVolume(`hangar-vol-${named('nfs-a')}`))?.Options).to.deep.equal({ type: 'nfs', o: `addr=${v.server_ip},rw,nfsvers=4`, device: `:${v.folder}` });
      // The export names node B's address (as hangar knows it) and the configured network; never every address.
      const b = (await api('GET', `/v1/nodes/${nodeB}`)).json.data;
      expect(b.ip_address).to.be.a('string');
      const joined = await waitFor(
        async () => {
          const current = (await api('GET', `/v1/volumes/${v.id}`)).json.data;
          return current.nfs_export.clients.includes(b.ip_address) ? current : null;
        },
        { timeoutMs: 20_000, intervalMs: 200, what: 'the export to name node B' },
      );
      expect(joined.nfs_export.clients).to.deep.equal([...[b.ip_address, b.overlay_ip].filter(Boolean).sort(), OUTSIDE]);
      const lines = exportLines(v.nfs_export.file);
      expect(lines).to.deep.equal([`${v.folder} ${joined.nfs_export.clients.map((c: string) => `${c}${NFS_OPTIONS}`).join(' ')}`]);
      expect(lines.join('\n')).not.to.contain('*');
    } finally {
      // Node B leaves (as far as hangar knows): the export narrows to the configured network again.
      await clusters.memberLeft((await clusters.members.get(`member-${run}`))!);
    }
    t.hangar.services.events.publish(ClusterMemberLeft, { clusterId: member.swarmId, nodeId: nodeB });
    const left = await waitFor(
      async () => {
        const current = (await api('GET', `/v1/volumes/${v.id}`)).json.data;
        return current.nfs_export.clients.length === 1 ? current : null;
      },
      { timeoutMs: 20_000, intervalMs: 200, what: 'the export to forget node B' },
    );
    expect(left.nfs_export.clients).to.deep.equal([OUTSIDE]);
    expect(exportLines(v.nfs_export.file)).to.deep.equal([`${v.folder} ${OUTSIDE}${NFS_OPTIONS}`]);
  });

  it('creates a local volume: no server_ip (absent, not null), no export, no definition; mounts as a bind pinned to its node', async function () {
    this.timeout(60_000);
    const folder = path.join(work, 'data', 'local-a');
    const res = await api('POST', '/v1/volumes', { name: named('local-a'), node_id: member.nodeId, folder, type: 'local' });
    expect(res.status).to.equal(202);
    expect(res.json.data).not.to.have.property('server_ip');
    const v = await settled(res.json.data.id);
    expect(v.status, v.error).to.equal('ready');
    expect(v).not.to.have.property('server_ip');
    expect(v).not.to.have.property('nfs_export');
    expect(existsSync(folder)).to.equal(true);
    expect(existsSync(path.join(exportsDir, `hangar-${v.id}.exports`))).to.equal(false);
    expect(await inspectVolume(`hangar-vol-${named('local-a')}`)).to.equal(null);

    const volumes = volumesOf(t.hangar.services);
    const swarm = (await t.hangar.services.db.knex('clusters').where({ id: member.swarmId }).first())!;
    const record = await volumes.require(named('local-a'));
    const node = (await api('GET', `/v1/nodes/${member.nodeId}`)).json.data;
    // A folder on its node (the driver binds it and pins the workload to that node).
    expect(await volumes.mountFor(record, '/data', swarm)).to.deep.equal({ source: { host_path: { node_id: node.id, path: folder } }, target: '/data' });
  });

  it('refuses a duplicate name and a folder that is another volume already (409)', async () => {
    const dup = await api('POST', '/v1/volumes', { name: named('nfs-a'), node_id: nodeB, folder: path.join(work, 'other') });
    expect(dup.status).to.equal(409);
    expect(dup.json.message).to.contain(`A volume named ${named('nfs-a')} exists`);
    const sameFolder = await api('POST', '/v1/volumes', { name: named('again'), node_id: member.nodeId, folder: path.join(work, 'data', 'local-a') });
    expect(sameFolder.status).to.equal(409);
    expect(sameFolder.json.message).to.contain(`is volume ${named('local-a')} already`);
  });

  it('mounts an NFS volume of another node: definitions with the NFS options on the swarm’s members; a local volume of a non-member is refused (409)', async function () {
    this.timeout(60_000);
    const folder = path.join(work, 'data', 'nfs-b');
    const res = await api('POST', '/v1/volumes', { name: named('nfs-b'), node_id: nodeB, folder });
    const v = await settled(res.json.data.id);
    expect(v.status, v.error).to.equal('ready');
    // Node B is in no swarm: nothing is defined until a workload on a swarm mounts the volume.
    expect(await inspectVolume(`hangar-vol-${named('nfs-b')}`)).to.equal(null);
    expect(exportLines(path.join(exportsDir, `hangar-${v.id}.exports`))).to.deep.equal([`${folder} ${OUTSIDE}${NFS_OPTIONS}`]);

    const volumes = volumesOf(t.hangar.services);
    const swarm = (await t.hangar.services.db.knex('clusters').where({ id: member.swarmId }).first())!;
    const options = { type: 'nfs', o: `addr=${v.server_ip},rw,nfsvers=4`, device: `:${folder}` };
    const mount = await volumes.mountFor(await volumes.require(v.id), '/srv/data', swarm);
    expect(mount).to.deep.equal({ source: { nfs: { name: `hangar-vol-${named('nfs-b')}`, server: v.server_ip, path: folder } }, target: '/srv/data' });
    const defined = await inspectVolume(`hangar-vol-${named('nfs-b')}`);
    expect(defined?.Options).to.deep.equal(options);
    expect(defined?.Labels).to.include({ 'io.hangar.id': v.id });
    // Mounted by a workload of the swarm: the export names the swarm's members (node A: both agents run on this machine).
    const a = (await api('GET', `/v1/nodes/${member.nodeId}`)).json.data;
    const exported = (await api('GET', `/v1/volumes/${v.id}`)).json.data.nfs_export;
    expect(exported.clients).to.deep.equal([...[a.ip_address, a.overlay_ip].filter(Boolean).sort(), OUTSIDE]);
    expect(exportLines(exported.file)).to.deep.equal([`${folder} ${exported.clients.map((c: string) => `${c}${NFS_OPTIONS}`).join(' ')}`]);
    // Idempotent: a second mount finds the definition in place.
    expect(await volumes.mountFor(await volumes.require(v.id), '/srv/data', swarm)).to.deep.equal(mount);

    const local = await api('POST', '/v1/volumes', { name: named('local-b'), node_id: nodeB, folder: path.join(work, 'data', 'local-b'), type: 'local' });
    expect((await settled(local.json.data.id)).status).to.equal('ready');
    const refused = await volumes.mountFor(await volumes.require(named('local-b')), '/x', swarm).catch((e) => e);
    expect(refused.status).to.equal(409);
    expect(refused.message).to.contain(`not a member of swarm ${swarm.name}`);
  });

  it('lists volumes a page at a time and finds one by id or name', async () => {
    const first = await api('GET', '/v1/volumes?limit=2');
    expect(first.status).to.equal(200);
    expect(first.json.data).to.have.length(2);
    expect(first.json.next_cursor).to.be.a('string');
    const rest = await api('GET', `/v1/volumes?limit=10&cursor=${first.json.next_cursor}`);
    const names = [...first.json.data, ...rest.json.data].map((v: { name: string }) => v.name);
    expect(names).to.have.members([named('nfs-a'), named('local-a'), named('nfs-b'), named('local-b')]);
    const byName = await api('GET', `/v1/volumes/${named('nfs-b')}`);
    expect(byName.status, byName.text).to.equal(200);
    expect(byName.json.data).to.include({ name: named('nfs-b') });
    expect(byName.json.data.id).to.match(/^vol-/);
    const byId = await api('GET', `/v1/volumes/${byName.json.data.id}`);
    expect(byId.status, byId.text).to.equal(200);
    expect(byId.json.data).to.deep.equal(byName.json.data);
  });

  it('refuses to delete a volume in use, naming the users (409); deletes the definitions and the export, keeps the folder', async function () {
    this.timeout(60_000);
    const v = (await api('GET', `/v1/volumes/${named('nfs-b')}`)).json.data;
    users.set(v.id, [
      { type: 'instance', id: 'inst-1', name: 'web' },
      { type: 's3', id: 's3-1', name: 'store1' },
    ]);
    const busy = await api('DELETE', `/v1/volumes/${v.id}`);
    expect(busy.status).to.equal(409);
    expect(busy.json.message).to.equal(`Volume ${v.name} is in use by instance web, s3 store1`);
    expect(busy.json.details).to.have.length(2);
    users.delete(v.id);

    for (const name of [named('nfs-b'), named('nfs-a'), named('local-a'), named('local-b')]) {
      const volume = (await api('GET', `/v1/volumes/${name}`)).json.data;
      const res = await api('DELETE', `/v1/volumes/${name}`);
      expect(res.status, res.text).to.equal(202);
      expect(res.json.data.status).to.equal('deleting');
      expect(res.json.data.note).to.contain(`the folder ${volume.folder} and its data stay`);
      await gone(volume.id);
      expect(await inspectVolume(`hangar-vol-${name}`)).to.equal(null);
      expect(existsSync(path.join(exportsDir, `hangar-${volume.id}.exports`))).to.equal(false);
      expect(existsSync(volume.folder)).to.equal(true);
    }
  });
});
