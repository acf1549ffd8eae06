import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';

const FIXTURE = 'test/support/fixtures/toy-orchestrator';
const ARCH = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch];

/**
 * The single agent executable loads no module at run time: an operator builds one with the agent
 * half of its backend (`node scripts/build.mjs agent --driver MODULE --out DIR`). Built here with
 * the toy backend's driver (test/support/fixtures/toy-orchestrator), it advertises the toy
 * backend, reports its node fact and runs its calls as a toy cluster's member, through HTTP.
 */
describe('an agent executable built with an operator’s driver (scripts/build.mjs agent --driver)', function () {
  this.timeout(300_000);
  const out = mkdtempSync(path.join(os.tmpdir(), 'hangar-agent-build-'));
  const exe = path.join(out, `hangar-agent-linux-${ARCH}`);
  let built: ReturnType<typeof spawnSync>;

  before(function () {
    requireService(this, Boolean(ARCH), 'an amd64 or arm64 machine to build the agent executable on');
    built = spawnSync(process.execPath, ['scripts/build.mjs', 'agent', ARCH!, '--driver', `${FIXTURE}/driver.ts`, '--out', out], { encoding: 'utf8' });
  });
  after(() => rmSync(out, { recursive: true, force: true }));

  it('builds, naming the driver module it bundles', () => {
    expect(built.status, `${built.stdout}${built.stderr}`).to.equal(0);
    expect(built.stdout).to.contain(`with the drivers of ${FIXTURE}/driver.ts`);
  });

  it('refuses --driver at run time, saying how to build one with it', () => {
    const res = spawnSync(exe, ['--driver', `${FIXTURE}/driver.ts`], { encoding: 'utf8' });
    expect(res.status).to.equal(2);
    expect(res.stderr).to.contain(
      `hangar agent: cannot load driver module ${FIXTURE}/driver.ts: the agent executable loads no driver modules at run time: build one that has them (node scripts/build.mjs agent --driver MODULE)`,
    );
  });

  describeEachDialect('its toy driver in a toy cluster', (dialect) => {
    let t: TestHangar;
    let admin: Credentials;
    let child: ChildProcess | undefined;
    const dirs: string[] = [];
    const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

    before(async function () {
      t = await startHangar(dialect, {
        plugins: ['system', 'iam', 'nodes', 'agent-internal', 'compute', `${FIXTURE}/plugin.ts`],
        overrides: { drivers: ['swarm', 'k8s', `${FIXTURE}/backend.ts`], nodes: { heartbeat_interval_seconds: 1 } },
      });
      admin = await bootstrapAdmin(t);
    });
    after(async () => {
      child?.kill('SIGKILL');
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
      await t?.stop();
    });

    it('joins, reports the toy runtime, and runs the toy backend’s calls: a cluster forms on it and an instance runs', async function () {
      this.timeout(90_000);
      const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-exe-toy-'));
      dirs.push(dir);
      const token = await api('POST', '/v1/nodes/token', {});
      child = spawn(exe, ['--join', '--token', token.json.data.token, '--api', t.url, '--data-dir', path.join(dir, 'data')], { stdio: 'ignore' });
      const node = await waitFor(async () => (await api('GET', '/v1/nodes')).json.data.find((n: { status: string }) => n.status === 'ready'), { timeoutMs: 30_000, what: 'the node to be ready' });
      expect(node.toy).to.deep.equal({ present: true, runtime: 'simulated' });
      expect((await t.hangar.services.tasks.capabilities(node.id))?.backends).to.deep.equal(['swarm', 'k8s', 'toy']);
      const cluster = (await api('POST', '/v1/toy/clusters', { name: 'built' })).json.data;
      expect((await api('POST', `/v1/toy/clusters/${cluster.id}/members`, { node_id: node.id })).status).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/toy/clusters/${cluster.id}`)).json.data.status === 'active', { timeoutMs: 30_000, what: 'the toy cluster to be active' });
      const instance = await api('POST', '/v1/compute/instances', { name: 'hello', cluster_id: cluster.id, image: 'toy/web:1' });
      expect(instance.status, instance.text).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/compute/instances/${instance.json.data.id}`)).json.data.status === 'running', { timeoutMs: 30_000, what: 'the instance to run' });
    });
  });
});
