import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { docker, dockerOk } from '../../../lab/docker.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { exportLines, NFS_OPTIONS, OUTSIDE } from '../../support/nfs-exports.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';
import { freePort } from '../../support/ports.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 'secrets', 'compute', 'services', 'gateway', 'cleanup'];
const STACK = `services:
  app:
    image: ${TEST_IMAGE}
    command: ['sleep', '3600']
    stop_grace_period: 1s
`;

const logged = (t: TestHangar, msg: string) => t.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === msg);

/**
 * A control plane stopped while background work is under way (its agent frozen, so nothing can
 * finish) leaves those records in their transitional states; started again on the same store, it
 * resumes the work, and the swarm ends up as the operator asked.
 */
describeEachDialect('a control-plane restart resumes the work it left half done', (dialect) => {
  const storage = dialect.freshStorage();
  const suffix = randomBytes(3).toString('hex');
  const named = (base: string) => `${base}-${dialect.name.slice(0, 2)}-${suffix}`;
  let port: number;
  let t: TestHangar | undefined;
  let admin: Credentials;
  let member: SwarmMember;
  const folders: string[] = [];
  // The agent writes NFS export entries here instead of /etc/exports.d (it reads it at its start).
  const exportsDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-resume-exports-'));
  const previousExportsDir = process.env.HANGAR_EXPORTS_DIR;

  const start = async () =>
    (t = await startHangar(dialect, { plugins: PLUGINS, overrides: { ...SWARM_TEST_OVERRIDES, api: { port }, volumes: { nfs_export_clients: [OUTSIDE] } }, storage }));
  const api = (method: string, p: string, body?: unknown) => t!.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    port = await freePort();
    process.env.HANGAR_EXPORTS_DIR = exportsDir;
    await start();
    admin = await bootstrapAdmin(t!);
    member = await hostSwarmMember(t!, admin, named('rs'));
  });
  after(async function () {
    this.timeout(60_000);
    if (member?.agent.exit() === null) member.agent.child.kill('SIGCONT');
    for (const name of ['kept', 'late']) await docker(['service', 'rm', `inst-${named(name)}`]);
    await docker(['stack', 'rm', `hangar-${named('stack')}`]);
    for (const folder of [...folders, exportsDir]) rmSync(folder, { recursive: true, force: true });
    await cleanupAgents();
    await t?.stop();
    if (previousExportsDir === undefined) delete process.env.HANGAR_EXPORTS_DIR;
    else process.env.HANGAR_EXPORTS_DIR = previousExportsDir;
  });

  it('an instance deploying, one terminating, a compose stack deploying and a volume being prepared at shutdown: all finish after the next start, which logs what it resumed', async function () {
    this.timeout(150_000);
    const kept = await api('POST', '/v1/compute/instances', { name: named('kept'), swarm_id: member.swarmId, image: TEST_IMAGE, command: ['sleep', '3600'] });
    expect(kept.status, kept.text).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/compute/instances/${kept.json.data.id}`)).json.data.status === 'running', {
      timeoutMs: 60_000,
      intervalMs: 300,
      what: 'the first instance to run',
    });

    // Frozen, the agent takes no task: whatever is asked now cannot finish before the shutdown.
    member.agent.child.kill('SIGSTOP');
    const late = await api('POST', '/v1/compute/instances', { name: named('late'), swarm_id: member.swarmId, image: TEST_IMAGE, command: ['sleep', '3600'] });
    expect(late.status, late.text).to.equal(202);
    expect((await api('DELETE', `/v1/compute/instances/${kept.json.data.id}`)).status).to.equal(202);
    const stack = await api('POST', '/v1/services', { name: named('stack'), swarm_id: member.swarmId, compose_file: Buffer.from(STACK).toString('base64') });
    expect(stack.status, stack.text).to.equal(202);
    const folder = mkdtempSync(path.join(os.tmpdir(), 'hangar-resume-'));
    folders.push(folder);
    rmSync(folder, { recursive: true });
    const volume = await api('POST', '/v1/volumes', { name: named('data'), node_id: member.nodeId, folder, type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    await t!.stop();
    expect(logged(t!, 'background job cut short by the shutdown; the next start resumes it').map((e) => e.job)).to.have.members([
      `creating instance ${named('late')}`,
      `terminate instance ${named('kept')}`,
      `deploy service ${named('stack')}`,
      `prepare volume ${named('data')}`,
    ]);

    member.agent.child.kill('SIGCONT');
    await start();
    const resumed = Object.fromEntries(logged(t!, 'resumed work a previous process left half done').map((e) => [e.plugin, e.resumed]));
    expect(resumed, 'the start-up log names what each plugin resumed').to.deep.equal({
      volumes: [`volume ${named('data')}: preparing`],
      compute: [`instance ${named('late')}: deploying`, `instance ${named('kept')}: terminating`],
      services: [`service ${named('stack')}: deploying`],
    });

    const running = await waitFor(
      async () => {
        const i = (await api('GET', `/v1/compute/instances/${late.json.data.id}`)).json.data;
        if (i.status === 'failed') throw new Error(`the resumed deploy failed: ${i.reason}`);
        return i.status === 'running' ? i : null;
      },
      { timeoutMs: 90_000, intervalMs: 500, what: 'the resumed deploy to run' },
    );
    expect(running).to.include({ name: named('late'), running: 1 });
    await waitFor(async () => (await api('GET', `/v1/compute/instances/${kept.json.data.id}`)).status === 404, {
      timeoutMs: 60_000,
      intervalMs: 500,
      what: 'the resumed termination to remove the record',
    });
    const services = (await dockerOk(['service', 'ls', '--format', '{{.Name}}'])).split('\n');
    expect(services).to.include(`inst-${named('late')}`).and.not.include(`inst-${named('kept')}`);
    await waitFor(async () => (await api('GET', `/v1/services/${stack.json.data.id}`)).json.data.status === 'running', {
      timeoutMs: 60_000,
      intervalMs: 500,
      what: 'the resumed stack deploy',
    });
    expect(services.concat((await dockerOk(['service', 'ls', '--format', '{{.Name}}'])).split('\n'))).to.include(`hangar-${named('stack')}_app`);
    await waitFor(async () => (await api('GET', `/v1/volumes/${volume.json.data.id}`)).json.data.status === 'ready', {
      timeoutMs: 60_000,
      intervalMs: 500,
      what: 'the resumed volume preparation',
    });
    expect(statSync(folder).isDirectory(), 'the agent created the volume folder').to.equal(true);
  });

  it('an NFS export an older hangar wrote for every address (no clients recorded) is narrowed at the next start to the swarm’s members and the configured network', async function () {
    this.timeout(90_000);
    const folder = mkdtempSync(path.join(os.tmpdir(), 'hangar-resume-nfs-'));
    folders.push(folder);
    const created = await api('POST', '/v1/volumes', { name: named('old-nfs'), node_id: member.nodeId, folder });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const ready = await waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${id}`)).json.data;
        return v.status === 'ready' ? v : null;
      },
      { timeoutMs: 30_000, intervalMs: 300, what: 'the NFS volume to be ready' },
    );
    expect(exportLines(ready.nfs_export.file)).to.deep.equal([`${folder} ${OUTSIDE}${NFS_OPTIONS}`]);

    // What a hangar from before restricted exports left: an entry for every address, and a record without clients.
    writeFileSync(ready.nfs_export.file, `${folder} *${NFS_OPTIONS}\n`);
    const { clients: _clients, ...unrestricted } = ready.nfs_export;
    await t!.hangar.store.knex('volumes').where({ id }).update({ nfs_export: JSON.stringify(unrestricted) });
    expect((await api('GET', `/v1/volumes/${id}`)).json.data.nfs_export.clients, 'the record as an older hangar wrote it').to.equal(undefined);

    await t!.stop();
    await start();
    const narrowed = await waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${id}`)).json.data;
        return v.nfs_export.clients ? v : null;
      },
      { timeoutMs: 30_000, intervalMs: 300, what: 'the export to be narrowed after the start' },
    );
    expect(narrowed.nfs_export.clients).to.deep.equal([OUTSIDE]);
    expect(exportLines(ready.nfs_export.file), 'the entry names the configured network, no longer every address').to.deep.equal([`${folder} ${OUTSIDE}${NFS_OPTIONS}`]);

    expect((await api('DELETE', `/v1/volumes/${id}`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/volumes/${id}`)).status === 404, { timeoutMs: 30_000, intervalMs: 300, what: 'the volume to be deleted' });
  });
});
