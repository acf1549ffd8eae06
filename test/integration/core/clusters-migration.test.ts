import { expect } from 'chai';
import { coreMigrations } from '../../../core/db/core-migrations.js';
import { runMigrations } from '../../../core/db/migrations.js';
import { openStore } from '../../../core/db/store.js';
import { nodeMigrations } from '../../../plugins/nodes/migrations.js';
import { volumeMigrations } from '../../../plugins/volumes/migrations.js';
import { describeEachDialect } from '../../support/dialects.js';
import { PRE_CLUSTER_MIGRATIONS } from '../../support/fixtures/pre-cluster-migrations.js';
import { startHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin } from '../../support/identity.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 'secrets', 'compute', 'services', 's3', 'gateway', 'tags'];
const NOW = '2024-05-01T10:00:00.000Z';

/**
 * An install made before swarm groups became clusters: its store is made with the migrations of
 * that release (frozen in test/support/fixtures) and filled the way that release filled it; the
 * current control plane then starts on it, migrates it and serves every record as before.
 */
describeEachDialect('migrating a store from swarm groups to clusters', (dialect) => {
  it('keeps every swarm, member, instance, service, object store, load balancer and secret, with the same ids and swarm_id fields', async function () {
    this.timeout(60_000);
    const storage = dialect.freshStorage();
    const db = await openStore(dialect.config(storage));
    try {
      // Core's tables as that release had them (certificates, tasks, rate limits, notices, keyring, leader leases), then the plugins' first migrations.
      await runMigrations(db, [{ owner: 'core', migrations: coreMigrations.migrations.filter((m) => ['001_certificates', '002_tasks', '003_rate_limits', '004_store_notices', '005_keyring', '006_leader_leases'].includes(m.id)) }]);
      await runMigrations(db, [{ owner: 'nodes', migrations: nodeMigrations.filter((m) => m.id === '001_nodes') }, ...PRE_CLUSTER_MIGRATIONS.slice(0, 1), { owner: 'volumes', migrations: volumeMigrations }, ...PRE_CLUSTER_MIGRATIONS.slice(1)]);
      const k = db.knex;
      const stamp = { created_at: NOW, updated_at: NOW };
      for (const id of ['node-m1', 'node-w1']) await k('nodes').insert({ id, name: id, connection: 'offline', availability: 'active', ...stamp });
      await k('nodes').insert({ id: 'node-d1', name: 'node-d1', connection: 'pending', availability: 'drained', ...stamp });
      await k('swarms').insert({ id: 'swarm-old1', name: 'legacy', status: 'active', manager_node_id: 'node-m1', cluster_id: 'runtime-xyz', error: null, ...stamp });
      await k('swarms').insert({ id: 'swarm-old2', name: 'spare', status: 'empty', manager_node_id: null, cluster_id: null, error: null, ...stamp });
      await k('swarm_members').insert({ id: 'member-1', swarm_id: 'swarm-old1', node_id: 'node-m1', role: 'manager', status: 'active', runtime_node_id: 'rt-m1', advertise_address: '10.0.0.1', error: null, ...stamp });
      await k('swarm_members').insert({ id: 'member-2', swarm_id: 'swarm-old1', node_id: 'node-w1', role: 'worker', status: 'active', runtime_node_id: 'rt-w1', advertise_address: '10.0.0.2', error: null, ...stamp });
      await k('compute_instances').insert({
        id: 'inst-old1', name: 'web', swarm_id: 'swarm-old1', runtime_name: 'inst-web', image: 'nginx:1', type: 'small', replicas: 2, desired: 'running', status: 'running', reason: null,
        domain: 'web.legacy.hangar.local', http_port: 80, ports: JSON.stringify([{ published: 8080, target: 80, protocol: 'tcp' }]), env: '{}', command: null, platform: null, gpu: 0,
        volumes: '[]', placement: '[]', running: 2, observed_at: NOW, ...stamp,
      });
      await k('services').insert({
        id: 'svc-old1', name: 'shop', backend: 'compose', swarm_id: 'swarm-old1', spec: 'services:\n  app:\n    image: x\n', status: 'running', error: null,
        secret_refs: JSON.stringify(['sec-old1']), config_refs: '[]', replicas: JSON.stringify({ app: { desired: 1, running: 1 } }), routes: '[]', observed_at: NOW, ...stamp,
      });
      await k('volumes').insert({ id: 'vol-old1', name: 'data', node_id: 'node-m1', folder: '/srv/data', type: 'local', server_ip: null, status: 'ready', error: null, nfs_export: null, ...stamp });
      await k('s3_instances').insert({
        id: 's3-old1', name: 'files', swarm_id: 'swarm-old1', volume_id: 'vol-old1', runtime_name: 's3-files', image: 'minio/minio:latest', root_user: 'hangar', password_sealed: 'v1:x',
        cert_id: null, sso: false, domain: 'files.s3.legacy.hangar.local', console_domain: 'console.files.s3.legacy.hangar.local', status: 'running', error: null, running: 1, observed_at: NOW, ...stamp,
      });
      await k('load_balancers').insert({
        id: 'lb-old1', name: 'lb-legacy', swarm_id: 'swarm-old1', cluster_id: null, runtime_name: 'hangar-lb-legacy', image: 'haproxy:lts', node_id: 'node-m1', http_port: 80,
        status: 'failed', error: 'stopped for the test', config_sha256: null, config_version: 3, routes: '[]', applied_at: null, ...stamp,
      });
      await k('secrets').insert({
        id: 'sec-old1', kind: 'secret', name: 'db-password', swarm_id: 'swarm-old1', cluster_id: null, namespace: null, version: 2, runtime_name: 'db-password-v2',
        data_sealed: 'v1:sealed', retired: '[]', ...stamp,
      });
    } finally {
      await db.close();
    }

    const t = await startHangar(dialect, { storage, plugins: PLUGINS });
    try {
      const admin = await bootstrapAdmin(t);
      const get = async (path: string) => {
        const res = await t.request('GET', path, { headers: bearer(admin.token) });
        expect(res.status, `${path}: ${res.text}`).to.equal(200);
        return res.json.data;
      };
      const applied = (await t.hangar.store.knex('hangar_migrations').select('id')).map((r: { id: string }) => r.id);
      expect(applied).to.include.members(['core/008_clusters', 'compute/002_cluster_id', 'services/002_cluster_id', 's3/002_cluster_id', 'gateway/002_cluster_id', 'secrets/002_cluster_id', 'nodes/002_node_status']);
      // The nodes' status column, filled in from what their rows said.
      expect((await get('/v1/nodes?status=offline')).map((n: { id: string }) => n.id)).to.deep.equal(['node-m1', 'node-w1']);
      expect((await get('/v1/nodes?status=drained')).map((n: { id: string }) => n.id)).to.deep.equal(['node-d1']);
      expect(await get('/v1/nodes?status=pending')).to.deep.equal([]);

      const swarm = await get('/v1/swarms/swarm-old1');
      expect(swarm).to.include({ id: 'swarm-old1', name: 'legacy', status: 'active' });
      expect(swarm.manager).to.include({ node_id: 'node-m1', role: 'manager', runtime_node_id: 'rt-m1' });
      expect(swarm.members.map((m: { node_id: string }) => m.node_id)).to.deep.equal(['node-m1', 'node-w1']);
      expect(swarm.load_balancer).to.include({ id: 'lb-old1', status: 'failed' });
      expect((await get('/v1/swarms')).map((s: { id: string }) => s.id).sort()).to.deep.equal(['swarm-old1', 'swarm-old2']);
      const row = await t.hangar.store.knex('clusters').where({ id: 'swarm-old1' }).first();
      expect(row).to.include({ backend: 'swarm', runtime_id: 'runtime-xyz' });

      expect(await get('/v1/compute/instances/inst-old1')).to.include({ name: 'web', swarm_id: 'swarm-old1', status: 'running', replicas: 2 });
      expect((await get('/v1/compute/instances?swarm_id=swarm-old1')).map((i: { id: string }) => i.id)).to.deep.equal(['inst-old1']);
      expect(await get('/v1/services/svc-old1')).to.include({ name: 'shop', swarm_id: 'swarm-old1', status: 'running' });
      // Each instance and service of the old store has its spec as revision 1, made by no one (the migration).
      const [instanceRevision, ...moreInstance] = await get('/v1/compute/instances/inst-old1/revisions');
      expect(moreInstance).to.deep.equal([]);
      expect(instanceRevision).to.include({ number: 1, who: null });
      expect(instanceRevision.changes).to.deep.include({ path: 'image', old: null, new: 'nginx:1' });
      const [serviceRevision, ...moreService] = await get('/v1/services/svc-old1/revisions');
      expect(moreService).to.deep.equal([]);
      expect(serviceRevision).to.include({ number: 1, who: null });
      expect(serviceRevision.changes).to.deep.equal([{ path: 'compose_file.services.app.image', old: null, new: 'x' }]);
      expect(await get('/v1/s3/instances/s3-old1')).to.include({ name: 'files', swarm_id: 'swarm-old1', volume_id: 'vol-old1' });
      expect(await get('/v1/loadbalancers/lb-old1')).to.include({ swarm_id: 'swarm-old1', config_version: 3 });
      const secret = await get('/v1/secrets/sec-old1');
      expect(secret).to.include({ name: 'db-password', swarm_id: 'swarm-old1', cluster_id: null, namespace: null, version: 2, runtime_name: 'db-password-v2' });
      expect(secret.services, 'its users are still found').to.deep.equal(['shop']);

      // Names stay unique per cluster (the swarm's objects have the namespace '').
      const again = await t.request('POST', '/v1/secrets', { headers: bearer(admin.token), body: { name: 'db-password', swarm_id: 'swarm-old1', data: 'eA==' } });
      expect(again.status, again.text).to.equal(409);
      expect(again.json.message).to.equal('A secret named db-password exists on swarm legacy');
      // What runs on the swarm is still counted against deleting it.
      const refused = await t.request('DELETE', '/v1/swarms/swarm-old1', { headers: bearer(admin.token) });
      expect(refused.status).to.equal(409);
      expect(refused.json.message).to.contain('instance web').and.contain('service shop').and.contain('s3 files').and.contain('loadbalancer lb-legacy');
      // The empty swarm is removed at once, as before.
      expect((await t.request('DELETE', '/v1/swarms/swarm-old2', { headers: bearer(admin.token) })).status).to.equal(200);
      // The members' reference followed the renamed table: a cluster's members go with its row.
      await t.hangar.store.knex('clusters').where({ id: 'swarm-old1' }).delete();
      expect(await t.hangar.store.knex('cluster_members').where({ cluster_id: 'swarm-old1' })).to.deep.equal([]);
    } finally {
      await t.stop();
    }
  });
});
