import { expect } from 'chai';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { httpRequest } from '../../core/http/client.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { until as waitUntil } from '../support/agents.js';
import { postgresAvailable, requireService } from '../support/requirements.js';
import { S3Client } from '../support/s3-client.js';
import { stays } from '../support/stays.js';
import { ensureS3BuildFolder, s3Availability } from '../support/s3-server.js';
import { Lab, type Machine } from './lab/lab.js';

const AGENT_BUILT = existsSync(path.resolve('dist/agent/manifest.json'));
const b64 = (text: string) => Buffer.from(text).toString('base64');

/** test/support/agents.ts until(): a failed assertion ends the wait at once; at the deadline the last error is named. Two minutes unless told. */
const until = <T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 120_000, intervalMs = 1000): Promise<T> => waitUntil(what, probe, timeoutMs, intervalMs);

/**
 * Swarm workloads end to end on real machines: three lab machines get agents over SSH, form a
 * swarm through the API, and run instances, compose stacks with secrets and configs, volumes, an
 * object store (the lab's MinIO stand-in image, real S3), the HAProxy load balancer and the unmanaged scan.
 * Runs on PostgreSQL; the integration suites cover both dialects against the host's engine.
 */
describe('swarm workloads end to end in the machine lab [postgres]', function () {
  const dialect = new TestDialect('postgres');
  let lab: Lab;
  let t: TestHangar;
  let admin: Credentials;
  let machines: Machine[];
  const nodeOf = new Map<string, string>();
  const machineOfNode = new Map<string, Machine>();
  let swarmId: string;
  let m1: Machine;

  before(async function () {
    this.timeout(900_000);
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const available = await Lab.availability();
    requireService(this, available.docker && available.image, available.why ?? 'the machine lab');
    requireService(this, AGENT_BUILT, 'the agent executables (npm run build)');
    const s3Available = s3Availability();
    requireService(this, s3Available.ok, s3Available.why);
    // The MinIO stand-in's executables (SeaweedFS's S3 gateway), mounted read-only for lab-minio-standin-image.
    const s3Build = await ensureS3BuildFolder();
    lab = new Lab({ name: 'swarm', subnet: '172.31.74.0/24', log: () => undefined });
    machines = await lab.start({ machines: 3, mounts: [`${s3Build}:/opt/hangar-s3:ro`] });
    m1 = machines[0]!;
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning', 'swarms', 'volumes', 'secrets', 'compute', 'services', 's3', 'gateway', 'tags', 'cleanup'],
      overrides: {
        drivers: ['ssh', 'swarm', 'k8s'],
        api: { host: '0.0.0.0' },
        nodes: { heartbeat_interval_seconds: 2, offline_after_seconds: 10 },
        tasks: { poll_wait_seconds: 10 },
        // The lab kernel has no IPVS: no routing mesh and no service VIPs; host ports and DNS round robin work.
        swarms: { observe_interval_seconds: 2, advertise: 'address', publish_mode: 'host', endpoint_mode: 'dnsrr', drain_wait_seconds: 3 },
        gateway: { image: 'lab/haproxy:latest' },
        s3: { image: 'lab/minio-standin:latest' },
      },
    });
    admin = await bootstrapAdmin(t);
    const deploys = await Promise.all(machines.map((m) => api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey })));
    for (const [i, res] of deploys.entries()) {
      expect(res.status, res.text).to.equal(202);
      nodeOf.set(machines[i]!.name, res.json.data.node_id);
      machineOfNode.set(res.json.data.node_id, machines[i]!);
    }
    // Images cannot be pulled: every machine builds the workload image; the manager builds the balancer's and the stand-in's.
    await Promise.all(machines.map((m) => m.sh('lab-busybox-image lab/busybox:latest')));
    await m1.sh('lab-haproxy-image lab/haproxy:latest && lab-minio-standin-image lab/minio-standin:latest', { timeoutMs: 300_000 });
    for (const m of machines) {
      await until(`${m.name} to be ready`, async () => (await api('GET', `/v1/nodes/${nodeOf.get(m.name)}`)).json.data.status === 'ready', 240_000);
    }
  });
  after(async function () {
    this.timeout(180_000);
    await t?.stop();
    await lab?.teardown();
    await dialect.cleanup();
  });

  afterEach(function () {
    // A failure shows what the control plane logged as an error (request failures, jobs, agents' task failures).
    if (this.currentTest?.state !== 'failed' || !t) return;
    for (const line of t.logs.filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-20)) console.log(`    control plane: ${line.trim().slice(0, 1500)}`);
  });

  function api(method: string, p: string, body?: unknown) {
    return t.request(method, p, { headers: bearer(admin.token), body });
  }
  const get = async (p: string) => {
    const res = await api('GET', p);
    expect(res.status, `${p}: ${res.text}`).to.equal(200);
    return res.json.data;
  };
  const instance = (id: string) => get(`/v1/compute/instances/${id}`);
  const waitInstance = (id: string, what: string, ok: (i: any) => boolean, timeoutMs = 180_000) =>
    until(`instance ${id}: ${what}`, async () => {
      const i = await instance(id);
      return ok(i) ? i : null;
    }, timeoutMs);
  /** Runs on whichever machine holds a task of the service; returns the output. */
  async function execInService(service: string, command: string): Promise<string> {
    for (const m of machines) {
      const id = (await m.sh(`docker ps -q --filter label=com.docker.swarm.service.name=${service}`)).split('\n')[0];
      if (id) return m.sh(`docker exec ${id} ${command}`);
    }
    throw new Error(`no running container of ${service} on any machine`);
  }

  it('forms a 3-machine swarm through the API: the first node manages, the others join as workers', async function () {
    this.timeout(300_000);
    const created = await api('POST', '/v1/swarms', { name: 'lab' });
    expect(created.status, created.text).to.equal(201);
    swarmId = created.json.data.id;
    expect((await api('POST', '/v1/swarms', { name: 'lab' })).status, 'name unique').to.equal(409);
    const first = await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get('m1') });
    expect(first.status, first.text).to.equal(202);
    await until('the manager', async () => (await get(`/v1/swarms/${swarmId}`)).manager?.status === 'active', 120_000);
    for (const m of machines.slice(1)) expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get(m.name) })).status).to.equal(202);
    const swarm = await until('three active members', async () => {
      const s = await get(`/v1/swarms/${swarmId}`);
      return s.members.length === 3 && s.members.every((m: any) => m.status === 'active') ? s : null;
    }, 180_000);
    expect(swarm.status).to.equal('active');
    expect(swarm.manager.node_id).to.equal(nodeOf.get('m1'));
    expect(swarm.members.filter((m: any) => m.role === 'worker')).to.have.length(2);
    const members = await get(`/v1/swarms/${swarmId}/members`);
    expect(members.map((m: any) => m.state)).to.deep.equal(['ready', 'ready', 'ready']);
    expect(members.map((m: any) => m.availability)).to.deep.equal(['active', 'active', 'active']);
    expect(members.map((m: any) => m.hostname).sort()).to.deep.equal(['m1', 'm2', 'm3']);
    expect(await m1.sh("docker node ls --format '{{.Hostname}} {{.ManagerStatus}}' | sort")).to.match(/m1 Leader\nm2 \nm3/);
  });

  let webId: string;
  it('runs an instance with 4 replicas spread over the machines; scales, stops, starts and reads its logs', async function () {
    this.timeout(600_000);
    const res = await api('POST', '/v1/compute/instances', {
      name: 'web',
      swarm_id: swarmId,
      image: 'lab/busybox:latest',
      type: 'nano',
      replicas: 4,
      http_port: 8080,
      env: { GREETING: 'hello' },
      command: stays('echo "$GREETING from $(hostname)"; mkdir -p /www; echo "web says $GREETING from $(hostname)" > /www/index.html', 'httpd -f -p 8080 -h /www'),
    });
    expect(res.status, res.text).to.equal(202);
    webId = res.json.data.id;
    expect(res.json.data.domain).to.equal('web.lab.hangar.local');
    const running = await waitInstance(webId, '4 running', (i) => i.status === 'running' && i.running === 4);
    const spread = new Set(running.placement.map((p: any) => p.node_id));
    expect(spread.size, JSON.stringify(running.placement)).to.be.greaterThan(1);
    for (const nodeId of spread) expect([...nodeOf.values()]).to.include(nodeId);
    expect(await m1.sh("docker service inspect inst-web --format '{{index .Spec.Labels \"io.hangar.role\"}} {{.Spec.TaskTemplate.Resources.Limits.MemoryBytes}}'")).to.equal(`instance ${256 * 1024 * 1024}`);

    expect((await api('POST', `/v1/compute/instances/${webId}/scale`, { replicas: 6 })).status).to.equal(202);
    await waitInstance(webId, '6 running', (i) => i.status === 'running' && i.running === 6);

    expect((await api('POST', `/v1/compute/instances/${webId}/stop`)).status).to.equal(202);
    const stopped = await waitInstance(webId, 'stopped', (i) => i.status === 'stopped' && i.running === 0);
    expect(stopped.replicas, 'remembered').to.equal(6);
    expect(stopped.desired_state).to.equal('stopped');
    expect((await api('POST', `/v1/compute/instances/${webId}/start`)).status).to.equal(202);
    await waitInstance(webId, '6 running again', (i) => i.status === 'running' && i.running === 6);

    const queued = await api('POST', `/v1/compute/instances/${webId}/logs?lines=50`);
    expect(queued.status, queued.text).to.equal(202);
    const taskId = queued.json.data.task_id;
    const logs = await until('the logs', async () => {
      const r = await api('GET', `/v1/compute/instances/${webId}/logs/${taskId}`);
      return r.status === 200 && r.json.data.status === 'completed' ? r.json.data : null;
    }, 60_000);
    expect(logs.lines.join('\n')).to.contain('hello from inst-web-');
    expect((await api('GET', `/v1/compute/instances/${webId}/logs/${taskId}`)).status, 'read once').to.equal(404);
  });

  it('drains a machine: its tasks move to the others; uncordon brings it back', async function () {
    this.timeout(300_000);
    const before = await instance(webId);
    const drained = before.placement.find((p: any) => p.node_id !== nodeOf.get('m1'))!.node_id as string;
    expect((await api('POST', `/v1/nodes/${drained}/drain`)).status).to.equal(200);
    const after = await waitInstance(webId, `no task on ${drained}`, (i) => i.running === 6 && i.placement.every((p: any) => p.node_id !== drained && p.state === 'running'));
    expect(after.placement).to.have.length(6);
    const members = await get(`/v1/swarms/${swarmId}/members`);
    expect(members.find((m: any) => m.node_id === drained).availability).to.equal('drain');
    expect((await api('POST', `/v1/nodes/${drained}/uncordon`)).status).to.equal(200);
    await until('active again', async () => (await get(`/v1/swarms/${swarmId}/members`)).find((m: any) => m.node_id === drained).availability === 'active', 60_000);
  });

  it('lets a worker leave (drained first; the manager forgets it) and join again', async function () {
    this.timeout(300_000);
    const worker = nodeOf.get('m3')!;
    const m3 = machineOfNode.get(worker)!;
    const left = await api('POST', `/v1/swarms/${swarmId}/leave`, { node_id: worker });
    expect(left.status, left.text).to.equal(202);
    expect(left.json.data.status).to.equal('leaving');
    await until('m3 to be gone from the swarm', async () => (await get(`/v1/swarms/${swarmId}`)).members.every((m: any) => m.node_id !== worker), 180_000);
    expect(await m3.sh("docker info --format '{{.Swarm.LocalNodeState}}'")).to.equal('inactive');
    expect(await m1.sh("docker node ls --format '{{.Hostname}}' | sort")).to.equal('m1\nm2');
    await waitInstance(webId, '6 running on the others', (i) => i.running === 6 && i.placement.every((p: any) => p.node_id !== worker));
    expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker })).status).to.equal(202);
    await until('m3 back as a worker', async () => (await get(`/v1/swarms/${swarmId}`)).members.find((m: any) => m.node_id === worker)?.status === 'active', 120_000);
    expect(await m1.sh("docker node ls --format '{{.Hostname}} {{.Status}}' | sort")).to.equal('m1 Ready\nm2 Ready\nm3 Ready');
  });

  it('deploys a compose stack using a secret and a config; rotating the secret redeploys it with the new value; deleting it in use is a 409', async function () {
    this.timeout(600_000);
    const secret = await api('POST', '/v1/secrets', { name: 'db-pass', swarm_id: swarmId, data: b64('first-s3cret') });
    expect(secret.status, secret.text).to.equal(201);
    const config = await api('POST', '/v1/configs', { name: 'app-conf', swarm_id: swarmId, data: b64('colour=blue') });
    expect(config.status, config.text).to.equal(201);
    const compose = [
      'version: "3.8"',
      'services:',
      '  reader:',
      '    image: lab/busybox:latest',
      // Trapping SIGTERM (and sleeping in the background): a shell as PID 1 ignores it otherwise, and each redeploy would wait 10 s per task.
      `    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do cat /run/secrets/db_pass; echo; cat /etc/app.conf; echo; sleep 5 & wait; done"]`,
      '    deploy:',
      '      replicas: 2',
      '      endpoint_mode: dnsrr',
      '    secrets: [db_pass]',
      '    configs:',
      '      - source: app_conf',
      '        target: /etc/app.conf',
      'secrets:',
      '  db_pass:',
      '    name: db-pass',
      '    external: true',
      'configs:',
      '  app_conf:',
      '    name: app-conf',
      '    external: true',
      '',
    ].join('\n');
    const bad = await api('POST', '/v1/services', { name: 'broken', swarm_id: swarmId, compose_file: b64('services: [unclosed') });
    expect(bad.status, 'bad YAML').to.equal(400);
    const unknown = await api('POST', '/v1/services', { name: 'nosecret', swarm_id: swarmId, compose_file: b64(compose.replace('name: db-pass', 'name: nope')) });
    expect(unknown.status, 'unknown secret').to.equal(400);
    expect(unknown.json.message).to.contain('nope');
    const created = await api('POST', '/v1/services', { name: 'app', swarm_id: swarmId, compose_file: b64(compose) });
    expect(created.status, created.text).to.equal(202);
    const serviceId = created.json.data.id;
    await until('the stack running', async () => {
      const s = await get(`/v1/services/${serviceId}`);
      return s.status === 'running' && s.replicas?.reader?.running === 2 ? s : null;
    }, 180_000);
    const listed = await get(`/v1/services/${serviceId}`);
    expect(listed.compose_file, 'readable YAML').to.contain('image: lab/busybox:latest');
    expect(await execInService('hangar-app_reader', 'cat /run/secrets/db_pass')).to.equal('first-s3cret');
    expect(await execInService('hangar-app_reader', 'cat /etc/app.conf')).to.equal('colour=blue');
    const secrets = await get('/v1/secrets');
    expect(secrets.find((s: any) => s.name === 'db-pass').services).to.deep.equal(['app']);
    expect(secrets.find((s: any) => s.name === 'db-pass')).to.not.have.property('data');

    const rotated = await api('PUT', '/v1/secrets/db-pass', { data: b64('second-s3cret') });
    expect(rotated.status, rotated.text).to.equal(200);
    await until('the new secret inside the containers', async () => (await execInService('hangar-app_reader', 'cat /run/secrets/db_pass')) === 'second-s3cret', 180_000, 2000);
    const objects = await m1.sh("docker secret ls --format '{{.Name}}'");
    expect(objects).to.contain('db-pass-v2');
    expect(objects).to.not.contain('db-pass-v1');

    const inUse = await api('DELETE', '/v1/secrets/db-pass');
    expect(inUse.status).to.equal(409);
    expect(inUse.json.message).to.contain('app');
  });

  it('manages volumes: nfs export and definitions on every member, local data path, 409 while attached', async function () {
    this.timeout(600_000);
    const nfs = await api('POST', '/v1/volumes', { name: 'shared', node_id: nodeOf.get('m1'), folder: '/srv/hangar/shared' });
    expect(nfs.status, nfs.text).to.equal(202);
    const nfsReady = await until('nfs volume ready', async () => {
      const v = await get(`/v1/volumes/${nfs.json.data.id}`);
      return v.status === 'ready' || v.status === 'failed' ? v : null;
    }, 120_000);
    expect(nfsReady.status, nfsReady.error).to.equal('ready');
    expect(nfsReady.type).to.equal('nfs');
    expect(nfsReady.server_ip).to.equal(m1.ip);
    expect(await m1.sh('cat /etc/exports.d/hangar-*.exports')).to.contain('/srv/hangar/shared');
    for (const m of machines.slice(1)) {
      expect(await m.sh("docker volume inspect hangar-vol-shared --format '{{.Options.type}} {{.Options.device}}'")).to.equal('nfs :/srv/hangar/shared');
    }
    const local = await api('POST', '/v1/volumes', { name: 'keep', node_id: nodeOf.get('m2'), folder: '/srv/hangar/keep', type: 'local' });
    expect(local.status, local.text).to.equal(202);
    const localId = local.json.data.id;
    const localReady = await until('local volume ready', async () => ((await get(`/v1/volumes/${localId}`)).status === 'ready' ? get(`/v1/volumes/${localId}`) : null), 120_000);
    expect(localReady.type).to.equal('local');
    expect(localReady).to.not.have.property('server_ip');

    const writer = await api('POST', '/v1/compute/instances', {
      name: 'writer',
      swarm_id: swarmId,
      image: 'lab/busybox:latest',
      volumes: ['keep:/data'],
      command: stays('echo "written by $(hostname)" > /data/proof.txt'),
    });
    expect(writer.status, writer.text).to.equal(202);
    const writerId = writer.json.data.id;
    await waitInstance(writerId, 'running', (i) => i.status === 'running');
    const m2 = machineOfNode.get(nodeOf.get('m2')!)!;
    await until('the file on the volume’s machine', async () => (await m2.sh('cat /srv/hangar/keep/proof.txt 2>/dev/null || true')).includes('written by'), 60_000);
    const refused = await api('DELETE', `/v1/volumes/${localId}`);
    expect(refused.status).to.equal(409);
    expect(refused.json.message).to.contain('writer');
    expect((await api('DELETE', `/v1/compute/instances/${writerId}/volumes/${localId}`)).status).to.equal(202);
    await waitInstance(writerId, 'detached', (i) => i.volumes.length === 0 && i.status === 'running');
    const deleted = await api('DELETE', `/v1/volumes/${localId}`);
    expect([200, 202], deleted.text).to.include(deleted.status);
    expect((await api('DELETE', `/v1/compute/instances/${writerId}`)).status).to.equal(202);
  });

  let storeDomain: string;
  let storePassword: string;
  it('runs an object store (the lab’s MinIO stand-in image) on a volume, with a generated password shown once', async function () {
    this.timeout(300_000);
    const volume = await api('POST', '/v1/volumes', { name: 's3data', node_id: nodeOf.get('m1'), folder: '/srv/hangar/s3data', type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    await until('s3 volume ready', async () => (await get(`/v1/volumes/${volume.json.data.id}`)).status === 'ready', 120_000);
    expect((await api('POST', '/v1/s3/instances', { name: 'short', swarm_id: swarmId, volume_id: volume.json.data.id, password: 'short' })).status).to.equal(400);
    const store = await api('POST', '/v1/s3/instances', { name: 'store', swarm_id: swarmId, volume_id: volume.json.data.id });
    expect(store.status, store.text).to.equal(202);
    expect(store.json.data.password).to.be.a('string').with.length.greaterThanOrEqual(8);
    storeDomain = store.json.data.domain;
    storePassword = store.json.data.password;
    expect(store.json.data.console_domain).to.be.a('string');
    await until('store running', async () => (await get('/v1/s3/instances')).find((s: any) => s.name === 'store')?.status === 'running', 180_000);
    expect((await get('/v1/s3/instances')).find((s: any) => s.name === 'store')).to.not.have.property('password');
    await until('the data dir initialised', async () => (await m1.sh('ls -A /srv/hangar/s3data')).includes('.minio.sys'), 60_000);
  });

  it('routes HTTP through the load balancer to the instance and the object store; the gateway lists the routes', async function () {
    this.timeout(300_000);
    const deployed = await api('POST', `/v1/swarms/${swarmId}/lb`);
    expect(deployed.status, deployed.text).to.equal(202);
    await until('the balancer running', async () => (await get(`/v1/swarms/${swarmId}`)).load_balancer?.status === 'running', 180_000);
    const via = (host: string) => httpRequest(`http://${m1.ip}/`, { headers: { host }, timeoutMs: 5000 });
    const page = await until('the instance through the balancer', async () => {
      const res = await via('web.lab.hangar.local');
      return res.status === 200 ? res.text : null;
    }, 120_000);
    expect(page).to.match(/^web says hello from inst-web-/);
    // The object store's S3 API through the balancer, signed for its domain with the root user and the password shown once.
    const s3 = new S3Client({ endpoint: `http://${storeDomain}`, connect: `http://${m1.ip}:80`, credentials: { accessKeyId: 'hangar', secretAccessKey: storePassword } });
    await until('the object store through the balancer', async () => (await s3.request('GET', '/minio/health/ready', { unsigned: true })).status === 200, 120_000);
    await s3.createBucket('releases');
    await s3.putObject('releases', 'v1/notes.txt', 'first release');
    expect((await s3.getObject('releases', 'v1/notes.txt')).toString()).to.equal('first release');
    expect(await s3.listObjects('releases')).to.deep.equal(['v1/notes.txt']);
    expect((await s3.request('GET', '/releases/v1/notes.txt', { unsigned: true })).status, 'anonymous').to.equal(403);
    expect((await via('nobody.example')).status).to.equal(503);
    const gateway = await get('/v1/gateway');
    expect(gateway.routes.map((r: any) => r.domain)).to.include.members(['web.lab.hangar.local', storeDomain]);
    expect(gateway.load_balancers).to.have.length(1);
    expect(gateway.load_balancers[0].swarm_id).to.equal(swarmId);
    const lbs = await get('/v1/loadbalancers');
    expect(lbs.map((l: any) => l.id)).to.deep.equal([gateway.load_balancers[0].id]);

    // A new route reaches the running balancer without restarting it.
    const containerBefore = await m1.sh('docker ps -q --filter label=com.docker.swarm.service.name=hangar-lb-lab');
    const api2 = await api('POST', '/v1/compute/instances', {
      name: 'second',
      swarm_id: swarmId,
      image: 'lab/busybox:latest',
      http_port: 8080,
      command: stays('mkdir -p /www; echo second > /www/index.html', 'httpd -f -p 8080 -h /www'),
    });
    expect(api2.status).to.equal(202);
    await until('the new route', async () => {
      const res = await via('second.lab.hangar.local');
      return res.status === 200 && res.text.trim() === 'second';
    }, 120_000);
    expect(await m1.sh('docker ps -q --filter label=com.docker.swarm.service.name=hangar-lb-lab'), 'same container: reloaded, not restarted').to.equal(containerBefore);
  });

  it('reports a service created by hand in the unmanaged scan, and none of hangar’s own', async function () {
    this.timeout(180_000);
    // (Its command stops at once on SIGTERM: the forced deletion of the swarm below would wait 10 s for a bare sleep.)
    await m1.sh(`docker service create -d --name handmade --endpoint-mode dnsrr lab/busybox:latest sh -c "trap 'exit 0' TERM; sleep 3600 & wait"`);
    const queued = await api('POST', `/v1/nodes/${nodeOf.get('m1')}/unmanaged?backend=swarm`);
    expect(queued.status, queued.text).to.equal(202);
    const result = await until('the scan', async () => {
      const r = await api('GET', `/v1/nodes/${nodeOf.get('m1')}/unmanaged/${queued.json.data.task_id}`);
      return r.status === 200 && r.json.data.status !== 'pending' && r.json.data.status !== 'leased' ? r.json.data : null;
    }, 60_000);
    expect(result.status, result.error).to.equal('completed');
    const names = result.resources.map((r: any) => r.name);
    expect(names).to.include('handmade');
    for (const ours of ['inst-web', 'hangar-app_reader', 'hangar-lb-lab']) expect(names).to.not.include(ours);
    expect(names.filter((n: string) => n.startsWith('s3-') || n.includes('store'))).to.deep.equal([]);
  });

  it('cleans up a deliberately broken instance: its service and its record are gone', async function () {
    this.timeout(180_000);
    const res = await api('POST', '/v1/compute/instances', { name: 'broken', swarm_id: swarmId, image: 'no-such-image:never' });
    expect(res.status).to.equal(202);
    const id = res.json.data.id;
    const failed = await waitInstance(id, 'failed', (i) => i.status === 'failed', 120_000);
    expect(failed.reason).to.be.a('string').and.not.be.empty;
    const cleaned = await api('POST', `/v1/cleanup/instance/${id}`);
    expect(cleaned.status, cleaned.text).to.equal(200);
    expect((await api('GET', `/v1/compute/instances/${id}`)).status).to.equal(404);
    expect((await m1.exec('docker service inspect inst-broken')).code).to.not.equal(0);
  });

  it('refuses to let the last manager leave while workloads run, and deleting the swarm needs force', async function () {
    this.timeout(60_000);
    const leave = await api('POST', `/v1/swarms/${swarmId}/leave`, { node_id: nodeOf.get('m1') });
    expect(leave.status).to.equal(409);
    const del = await api('DELETE', `/v1/swarms/${swarmId}`);
    expect(del.status).to.equal(409);
    expect(del.json.message).to.contain('web');
  });

  it('deletes the swarm with force: its workloads go, the workers leave, then the manager; 202, then 404', async function () {
    this.timeout(300_000);
    const res = await api('DELETE', `/v1/swarms/${swarmId}?force=true`);
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.status).to.equal('deleting');
    await until('the swarm record to go', async () => (await api('GET', `/v1/swarms/${swarmId}`)).status === 404, 240_000, 2000);
    for (const m of machines) expect(await m.sh("docker info --format '{{.Swarm.LocalNodeState}}'"), m.name).to.equal('inactive');
    expect((await get('/v1/compute/instances')).filter((i: any) => i.swarm_id === swarmId)).to.deep.equal([]);
    expect((await get('/v1/gateway')).load_balancers).to.deep.equal([]);
  });
});
