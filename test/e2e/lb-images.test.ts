import { expect } from 'chai';
import type { Route } from '../../core/orchestrator.js';
import { renderHaproxyConfig } from '../../drivers/swarm/haproxy.js';
import { waitFor } from '../support/agents.js';
import { requireService } from '../support/requirements.js';
import { S3Client, S3Error } from '../support/s3-client.js';
import { ensureS3BuildFolder, S3_START_TIMEOUT_MS, s3Availability } from '../support/s3-server.js';
import { Lab, type Machine } from './lab/lab.js';

const seconds = (since: number): string => `${((Date.now() - since) / 1000).toFixed(1)} s`;

const until = async (what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> => {
  await waitFor(check, { what, timeoutMs, intervalMs: 300 });
};

const route = (domain: string, service: string, port: number): Route => ({ domain, service, port, source: 'service', source_id: `svc-${service}` });

/** Where the balancer's configuration lives on the machine (bind-mounted read-only into the container). */
const LB_DIR = '/srv/hangar-lb';
const NETWORK = 'hangar-lb-net';

/**
 * The service images the load-balancer and object-store work needs, on a real lab machine (its
 * own dockerd, a one-node swarm): lab-busybox-image, lab-haproxy-image (Debian's HAProxy) and
 * lab-minio-standin-image (a MinIO STAND-IN serving real S3: SeaweedFS's S3 gateway, from the S3
 * build the lab mounts at /opt/hangar-s3), with a configuration from renderHaproxyConfig served by
 * HAProxy as a swarm service. S3 requests come from the host, signed as any S3 client signs them.
 */
describe('load-balancer service images on a lab machine (HAProxy, busybox httpd, MinIO stand-in)', function () {
  this.timeout(60_000);
  let lab: Lab;
  let m: Machine;

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS); // the first run after a recipe change builds the lab image; the S3 build may be under way
    const available = await Lab.availability();
    requireService(this, available.docker, 'Docker (dockerd)');
    requireService(this, available.image, available.why ?? 'the lab image');
    const s3Available = s3Availability();
    requireService(this, s3Available.ok, s3Available.why);
    const s3Build = await ensureS3BuildFolder();
    lab = new Lab({ name: 'lb-images', subnet: '172.31.81.0/24' });
    [m] = await lab.start({ machines: 1, mounts: [`${s3Build}:/opt/hangar-s3:ro`] });
  });

  after(async function () {
    this.timeout(120_000);
    await lab?.teardown();
  });

  /** An HTTP request from the machine itself to a host-mode port; the body without its final newline. */
  async function get(host: string, path = '/', port = 80): Promise<{ status: number; body: string }> {
    const result = await m.exec(['curl', '-sS', '--max-time', '5', '-H', `Host: ${host}`, '-w', '\n%{http_code}', `http://127.0.0.1:${port}${path}`]);
    if (result.code !== 0) return { status: 0, body: result.stderr };
    const at = result.stdout.lastIndexOf('\n');
    return { status: Number(result.stdout.slice(at + 1)), body: result.stdout.slice(0, at).trimEnd() };
  }

  async function writeConfig(routes: Route[]): Promise<string> {
    const config = renderHaproxyConfig(routes);
    await m.sh(`mkdir -p ${LB_DIR} && cat >${LB_DIR}/haproxy.cfg.new && mv ${LB_DIR}/haproxy.cfg.new ${LB_DIR}/haproxy.cfg`, { input: config });
    return config;
  }

  /** The running container of a one-task swarm service on the machine. */
  async function containerOf(service: string): Promise<string> {
    let id = '';
    await until(`a running container of ${service}`, async () => {
      id = (await m.sh(`docker ps -q --no-trunc --filter label=com.docker.swarm.service.name=${service}`)).trim();
      return id !== '' && !id.includes('\n');
    });
    return id;
  }

  async function logsOf(container: string): Promise<string> {
    const logs = await m.exec(['docker', 'logs', container]);
    return logs.stdout + logs.stderr;
  }

  it('builds the three images inside the machine, without a registry', async () => {
    const t0 = Date.now();
    expect(await m.sh('lab-busybox-image')).to.equal('lab/busybox:latest');
    expect(await m.sh('lab-haproxy-image')).to.equal('lab/haproxy:latest');
    expect(await m.sh('lab-minio-standin-image')).to.equal('lab/minio-standin:latest');
    console.log(`      images built in ${seconds(t0)}`);

    const haproxy = JSON.parse(await m.sh('docker image inspect lab/haproxy:latest'))[0];
    expect(haproxy.Config.Cmd).to.deep.equal(['haproxy', '-W', '-db', '-f', '/usr/local/etc/haproxy/haproxy.cfg']);
    expect(haproxy.Config.StopSignal).to.equal('SIGUSR1');
    expect(haproxy.Size, 'a minimal image').to.be.below(60 * 1024 * 1024);
    expect(await m.sh('docker run --rm lab/haproxy:latest haproxy -v')).to.match(/^HAProxy version 2\./);
    // The config check runs inside the image too (its libraries are all there).
    const config = renderHaproxyConfig([route('app.test.local', 'app', 8080)]);
    await m.sh('mkdir -p /tmp/hcheck && cat >/tmp/hcheck/haproxy.cfg', { input: config });
    expect(await m.sh('docker run --rm -v /tmp/hcheck:/usr/local/etc/haproxy:ro lab/haproxy:latest haproxy -c -f /usr/local/etc/haproxy/haproxy.cfg')).to.match(/Configuration file is valid/);

    const minio = JSON.parse(await m.sh('docker image inspect lab/minio-standin:latest'))[0];
    expect(minio.Config.Entrypoint).to.deep.equal(['/usr/bin/minio']);
    expect(minio.Config.Labels).to.deep.include({ 'hangar-lab.standin': 'minio' });
    expect(minio.Config.Labels['hangar-lab.seaweedfs']).to.match(/\b4\.\d+\b/);
    console.log(`      MinIO stand-in image: ${(minio.Size / 1024 / 1024).toFixed(0)} MB (SeaweedFS ${minio.Config.Labels['hangar-lab.seaweedfs']})`);
    // Made from the same build again, the image is kept.
    expect(await m.sh("lab-minio-standin-image && docker image inspect --format '{{.Id}}' lab/minio-standin:latest")).to.equal(`lab/minio-standin:latest\n${minio.Id}`);
  });

  it('HAProxy as a swarm service routes by Host to every task of a dnsrr service, 503 for other hosts, 200 on /.hangar/health', async function () {
    this.timeout(120_000);
    const t0 = Date.now();
    await m.sh(`docker swarm init --advertise-addr ${m.ip}`);
    await m.sh(`docker network create --driver overlay --attachable ${NETWORK}`);

    // The backend: busybox httpd, two tasks; its page, a CGI naming the task, and a slow CGI.
    const www = '/srv/app-www';
    await m.sh(`mkdir -p ${www}/cgi-bin && cat >${www}/index.html`, { input: 'hello from app\n' });
    await m.sh(`cat >${www}/cgi-bin/who && chmod 755 ${www}/cgi-bin/who`, { input: '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n%s\\n" "$(hostname)"\n' });
    await m.sh(`cat >${www}/cgi-bin/slow && chmod 755 ${www}/cgi-bin/slow`, { input: '#!/bin/sh\nsleep 4\nprintf "Content-Type: text/plain\\r\\n\\r\\nslow reply\\n"\n' });
    await m.sh(
      `docker service create --detach --no-resolve-image --name app --replicas 2 --network ${NETWORK} --endpoint-mode dnsrr ` +
        `--mount type=bind,src=${www},dst=/www,readonly lab/busybox:latest httpd -f -p 8080 -h /www`,
    );

    await writeConfig([route('app.test.local', 'app', 8080)]);
    await m.sh(
      `docker service create --detach --no-resolve-image --name lb --network ${NETWORK} --endpoint-mode dnsrr --constraint node.role==manager ` +
        `--mount type=bind,src=${LB_DIR},dst=/usr/local/etc/haproxy,readonly --publish mode=host,published=80,target=80 lab/haproxy:latest`,
    );

    await until('app.test.local served through HAProxy', async () => (await get('app.test.local')).body === 'hello from app', 60_000);
    console.log(`      swarm, backend and balancer answering in ${seconds(t0)}`);
    expect(await get('app.test.local')).to.deep.equal({ status: 200, body: 'hello from app' });
    expect(await get('APP.Test.Local:80'), 'case-insensitive, the port left off').to.deep.equal({ status: 200, body: 'hello from app' });
    expect(await get('unknown.test.local')).to.deep.equal({ status: 503, body: 'no route for this host' });
    expect(await get('app.test.local.evil'), 'exact match only').to.include({ status: 503 });
    expect((await get('anything', '/.hangar/health')).status).to.equal(200);

    // Both tasks get requests: tasks.app lists them, one server each.
    const tasks = new Set<string>();
    await until('requests reaching both tasks of app', async () => {
      const who = await get('app.test.local', '/cgi-bin/who');
      if (who.status === 200) tasks.add(who.body);
      return tasks.size === 2;
    });
  });

  it('SIGUSR2 reloads a changed configuration in the same container, finishing a request in flight', async function () {
    this.timeout(120_000);
    await m.sh(
      `docker service create --detach --no-resolve-image --name second --network ${NETWORK} --endpoint-mode dnsrr lab/busybox:latest ` +
        `sh -c 'echo "hello from second" >/www/index.html && exec httpd -f -p 9090 -h /www'`,
    );
    await until('the second service running', async () => (await m.sh("docker service ps second --filter desired-state=running --format '{{.CurrentState}}'")).startsWith('Running'));
    expect((await get('second.test.local')).status, 'not routed yet').to.equal(503);

    const container = await containerOf('lb');
    const before = JSON.parse(await m.sh(`docker inspect ${container}`))[0];

    // A slow request (4 s) is in flight through the current workers when the reload comes.
    const slow = m.exec(['curl', '-sS', '--max-time', '20', '-H', 'Host: app.test.local', 'http://127.0.0.1/cgi-bin/slow']);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await writeConfig([route('app.test.local', 'app', 8080), route('second.test.local', 'second', 9090)]);
    await m.sh(`docker kill --signal USR2 ${container}`);

    await until('second.test.local served after the reload', async () => (await get('second.test.local')).body === 'hello from second', 30_000);
    expect(await get('app.test.local')).to.deep.equal({ status: 200, body: 'hello from app' });
    const inFlight = await slow;
    expect(inFlight.code, inFlight.stderr).to.equal(0);
    expect(inFlight.stdout).to.equal('slow reply\n');

    expect(await containerOf('lb')).to.equal(container);
    const after = JSON.parse(await m.sh(`docker inspect ${container}`))[0];
    expect(after.State.StartedAt, 'not restarted').to.equal(before.State.StartedAt);
    expect(after.State.Pid, 'the same master process').to.equal(before.State.Pid);
    expect(after.RestartCount).to.equal(before.RestartCount);
    expect((await m.sh("docker service ps lb --format '{{.ID}}'")).split('\n'), 'one task, never replaced').to.have.length(1);
    await until('the former worker to exit once its request is done', async () => /Former worker \(\d+\) exited/.test(await logsOf(container)));
  });

  /** S3 as the store's clients speak it: to the machine's published port, or through HAProxy with the store's domain. */
  const s3At = (secretAccessKey: string, options: { port?: number; domain?: string } = {}): S3Client =>
    options.domain
      ? new S3Client({ endpoint: `http://${options.domain}`, connect: `http://${m.ip}:80`, credentials: { accessKeyId: 'hangar', secretAccessKey } })
      : new S3Client({ endpoint: `http://${m.ip}:${options.port ?? 9000}`, credentials: { accessKeyId: 'hangar', secretAccessKey } });

  it('MinIO stand-in as a swarm service: credentials from the environment, health 200, the data folder marked, real S3 directly and through HAProxy', async function () {
    this.timeout(120_000);
    await m.sh('mkdir -p /srv/s3-data');
    await m.sh(
      `docker service create --detach --no-resolve-image --name s3 --network ${NETWORK} --endpoint-mode dnsrr ` +
        '--env MINIO_ROOT_USER=hangar --env MINIO_ROOT_PASSWORD=lab-secret-1 ' +
        '--mount type=bind,src=/srv/s3-data,dst=/data ' +
        '--publish mode=host,published=9000,target=9000 --publish mode=host,published=9001,target=9001 ' +
        'lab/minio-standin:latest server /data --console-address :9001',
    );
    await until('the stand-in answering /minio/health/live', async () => (await get('localhost', '/minio/health/live', 9000)).status === 200, 60_000);
    await until('the stand-in ready (/minio/health/ready)', async () => (await get('localhost', '/minio/health/ready', 9000)).status === 200, 60_000);
    expect((await get('localhost', '/', 9001)).body).to.include('hangar lab MinIO stand-in: console');
    const format = JSON.parse(await m.sh('cat /srv/s3-data/.minio.sys/format.json'));
    expect(format.id).to.match(/^[0-9a-f-]{36}$/);

    // Real S3 on the published port, with the root user and password as the keys.
    const s3 = s3At('lab-secret-1');
    await s3.createBucket('lab');
    await s3.putObject('lab', 'hello.txt', 'hello from the host');
    expect((await s3.getObject('lab', 'hello.txt')).toString()).to.equal('hello from the host');
    expect(await s3.listObjects('lab')).to.deep.equal(['hello.txt']);
    const anonymous = await get('localhost', '/lab/hello.txt', 9000);
    expect(anonymous.status, 'unsigned: refused as MinIO refuses it').to.equal(403);
    expect(anonymous.body).to.include('AccessDenied');
    const wrong = await s3At('lab-secret-x').listBuckets().catch((error: unknown) => error);
    expect(wrong).to.be.instanceOf(S3Error);
    expect((wrong as S3Error).status).to.equal(403);

    // The balancer in front of it, as hangar routes an S3 instance's domain: signed for the domain, through HAProxy.
    await writeConfig([route('app.test.local', 'app', 8080), route('s3.test.local', 's3', 9000), route('second.test.local', 'second', 9090)]);
    await m.sh(`docker kill --signal USR2 ${await containerOf('lb')}`);
    await until('s3.test.local served through HAProxy', async () => (await get('s3.test.local', '/minio/health/live')).status === 200, 30_000);
    const routed = s3At('lab-secret-1', { domain: 's3.test.local' });
    await routed.putObject('lab', 'via/haproxy.txt', 'through the balancer');
    expect((await routed.getObject('lab', 'via/haproxy.txt')).toString()).to.equal('through the balancer');
    expect(await routed.listObjects('lab')).to.deep.equal(['hello.txt', 'via/haproxy.txt']);
  });

  it('MinIO stand-in: credentials from *_FILE (a docker secret name or a path); a second server on the folder keeps its id and its objects', async function () {
    this.timeout(90_000);
    const id = JSON.parse(await m.sh('cat /srv/s3-data/.minio.sys/format.json')).id;
    // One server per data folder, as with MinIO: the service's task stops first.
    await m.sh('docker service scale --detach s3=0');
    await until('the service s3 stopped', async () => (await m.sh('docker ps -q --filter label=com.docker.swarm.service.name=s3')) === '');
    await m.sh('mkdir -p /srv/s3-secrets && printf hangar >/srv/s3-secrets/user && printf "lab-secret-2\n" >/srv/s3-secrets/password');
    await m.sh(
      'docker run -d --name s3file -p 9100:9000 -v /srv/s3-data:/data -v /srv/s3-secrets:/run/secrets:ro ' +
        '-e MINIO_ROOT_USER_FILE=user -e MINIO_ROOT_PASSWORD_FILE=/run/secrets/password lab/minio-standin:latest server /data',
    );
    try {
      await until('s3file ready on its own :9000', async () => (await get('localhost', '/minio/health/ready', 9100)).status === 200, 60_000);
      expect(JSON.parse(await m.sh('cat /srv/s3-data/.minio.sys/format.json')).id).to.equal(id);
      const s3 = s3At('lab-secret-2', { port: 9100 });
      expect(await s3.listObjects('lab')).to.deep.equal(['hello.txt', 'via/haproxy.txt']);
      expect((await s3.getObject('lab', 'hello.txt')).toString()).to.equal('hello from the host');
      const before = await s3At('lab-secret-1', { port: 9100 }).listBuckets().catch((error: unknown) => error);
      expect((before as S3Error).status, 'the password of the environment before is not a key here').to.equal(403);
    } finally {
      await m.exec('docker rm -f s3file');
    }
  });

  it('MinIO stand-in with a short password: the task fails, with MinIO\'s message', async function () {
    this.timeout(90_000);
    await m.sh(
      `docker service create --detach --no-resolve-image --name s3short --restart-condition none --env MINIO_ROOT_USER=hangar --env MINIO_ROOT_PASSWORD=short ` +
        'lab/minio-standin:latest server /data --console-address :9001',
    );
    let state = '';
    await until('the task to fail', async () => {
      state = await m.sh("docker service ps s3short --no-trunc --format '{{.CurrentState}}|{{.Error}}'");
      return state.startsWith('Failed');
    }, 60_000);
    expect(state).to.include('non-zero exit (1)');
    const id = (await m.sh('docker ps -aq --no-trunc --filter label=com.docker.swarm.service.name=s3short')).trim();
    expect(await logsOf(id)).to.include('secret key length at least 8 characters');
  });

  it('a configuration HAProxy refuses leaves the running workers serving (SIGUSR2 with a broken file)', async function () {
    this.timeout(60_000);
    const container = await containerOf('lb');
    const good = await m.sh(`cat ${LB_DIR}/haproxy.cfg`);
    await m.sh(`cat >${LB_DIR}/haproxy.cfg`, { input: `${good}\nnot a keyword\n` });
    await m.sh(`docker kill --signal USR2 ${container}`);
    await until('the master to report the failed reload', async () => /Loading failure!/.test(await logsOf(container)), 20_000);
    expect(await get('app.test.local')).to.deep.equal({ status: 200, body: 'hello from app' });
    expect(await get('second.test.local')).to.deep.equal({ status: 200, body: 'hello from second' });
    expect(await containerOf('lb')).to.equal(container);
    await m.sh(`cat >${LB_DIR}/haproxy.cfg`, { input: `${good}\n` });
  });

  it('docker stop ends HAProxy softly (SIGUSR1): the worker finishes and exits 0, not terminated', async function () {
    this.timeout(60_000);
    const container = await containerOf('lb');
    const t0 = Date.now();
    await m.sh('docker service scale --detach lb=0');
    await until('the balancer container to exit', async () => JSON.parse(await m.sh(`docker inspect ${container}`))[0].State.Status === 'exited');
    const state = JSON.parse(await m.sh(`docker inspect ${container}`))[0].State;
    expect(state.ExitCode, 'exit code 137 would mean SIGKILL after the grace period').to.equal(0);
    expect(Date.now() - t0).to.be.below(10_000);
    // The master exits 0 after SIGTERM too; what tells the soft stop apart is how its worker ended.
    const logs = await logsOf(container);
    expect(logs).to.match(/Current worker \(\d+\) exited with code 0 \(Exit\)/);
    expect(logs).to.not.include('(Terminated)');
  });
});
