import { expect } from 'chai';
import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { ManualClock, systemClock } from '../../../core/clock.js';
import { coreMigrations } from '../../../core/db/core-migrations.js';
import { runMigrations } from '../../../core/db/migrations.js';
import { openStore } from '../../../core/db/store.js';
import { Pki } from '../../../core/pki/pki.js';
import { cleanupAgents, FAST_NODES, FakeAgent, NODE_PLUGINS, spawnAgent, waitFor, waitForExit } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

/** The certificate a fresh TLS connection is shown. */
function presentedCertificate(port: number): Promise<tls.PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.on('error', reject);
  });
}

function machineKey(): string {
  return generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
}

// The control plane runs on a ManualClock here: token expiry and event times move only when told.
// Agents (real processes) keep real time; only the control plane checks expiry.
describeEachDialect('nodes: the node API, join tokens and events', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  const clock = new ManualClock();

  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const createNode = async (body: Record<string, unknown>) => {
    const res = await api('POST', '/v1/nodes', body);
    expect(res.status, res.text).to.equal(201);
    return res.json.data;
  };
  const getNode = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data;
  const events = async (query: string) => {
    const res = await api('GET', `/v1/nodes/events?${query}`);
    expect(res.status, res.text).to.equal(200);
    return res.json.data as any[];
  };
  const newToken = async (body: Record<string, unknown> = {}) => {
    const res = await api('POST', '/v1/nodes/token', body);
    expect(res.status, res.text).to.equal(201);
    return res.json.data as { id: string; token: string; expires_at: string; overlay_ip: string; ca_sha256: string };
  };

  before(async function () {
    this.timeout(30_000);
    t = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides: FAST_NODES, clock });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'viewer', email: 'viewer@example.test' });
  });
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
  });

  describe('join tokens', () => {
    it('creates single-use tokens valid 10 minutes by default, each reserving an overlay address', async () => {
      const token = await newToken();
      expect(Date.parse(token.expires_at) - clock.now().getTime()).to.equal(600_000);
      expect(token.overlay_ip).to.match(/^10\.210\.\d+\.\d+$/);
      expect(token.overlay_ip, 'the first host is the control plane’s').not.to.equal('10.210.0.1');
      const other = await newToken({ ttl_seconds: 60 });
      expect(other.overlay_ip).not.to.equal(token.overlay_ip);
      expect(Date.parse(other.expires_at) - clock.now().getTime()).to.equal(60_000);
      expect((await api('POST', '/v1/nodes/token', { ttl_seconds: 9 })).status).to.equal(400);
      expect((await api('POST', '/v1/nodes/token', { node_id: 'node-nosuchnode' })).status).to.equal(404);
      expect((await t.request('POST', '/v1/nodes/token', { body: {} })).status).to.equal(401);
      expect((await t.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(user.token) })).status).to.equal(403);
    });

    it('revokes an unused token: its overlay address is free again and an agent joining with it is refused', async function () {
      this.timeout(20_000);
      const token = await newToken();
      const revoked = await api('DELETE', `/v1/nodes/token/${token.id}`);
      expect(revoked.status).to.equal(200);
      expect(revoked.json.data).to.deep.equal({ id: token.id, revoked: true });
      expect((await api('DELETE', `/v1/nodes/token/${token.id}`)).status, 'gone').to.equal(404);
      const next = await newToken();
      expect(next.overlay_ip, 'the reservation was dropped: the next token gets the same address').to.equal(token.overlay_ip);

      const agent = spawnAgent({ join: { token: token.token, api: t.url } });
      const exit = await waitForExit(agent);
      expect(exit.code, agent.output()).to.equal(1);
      expect(agent.output()).to.contain('HTTP 401');
      const failed = (await events('identifier=127.0.0.1')).filter((e) => e.kind === 'join_failed').at(-1);
      expect(failed?.message).to.contain('unknown token');
    });

    it('refuses an expired token (the control plane’s clock decides) with 401 and a join_failed event; an expired unused token can still be revoked', async function () {
      this.timeout(20_000);
      const token = await newToken({ ttl_seconds: 10 });
      clock.advance(11_000);
      const agent = spawnAgent({ join: { token: token.token, api: t.url } });
      const exit = await waitForExit(agent);
      expect(exit.code, agent.output()).to.equal(1);
      expect(agent.output()).to.contain('joining failed: HTTP 401');
      expect(agent.nodeId()).to.equal(null);
      const failed = (await events('identifier=127.0.0.1')).filter((e) => e.kind === 'join_failed').at(-1);
      expect(failed).to.include({ identifier: '127.0.0.1', node_id: null });
      expect(failed.message).to.contain('token expired');
      expect((await api('DELETE', `/v1/nodes/token/${token.id}`)).status).to.equal(200);
    });

    it('binds a token to a node created beforehand: the machine joins as that node; the token is then used up', async () => {
      const prepared = await createNode({ name: 'prepared' });
      const token = await newToken({ node_id: prepared.id });
      // Something recorded against the machine's hostname before it joined (an SSH deploy step, say).
      expect((await api('POST', '/v1/nodes/events', { identifier: 'prepared-host', kind: 'deploy_step', message: 'agent installed' })).status).to.equal(201);
      const joined = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'prepared-host', public_key: machineKey(), architecture: 'x86_64', ip_address: '198.51.100.40' } });
      expect(joined.status, joined.text).to.equal(201);
      expect(joined.json.data).to.include({ node_id: prepared.id, overlay_ip: token.overlay_ip, ca_pem: t.caPem, heartbeat_interval_seconds: 1 });
      expect(new X509Certificate(joined.json.data.certificate).subject).to.equal(`CN=${prepared.id}`);
      expect(await getNode(prepared.id)).to.include({ name: 'prepared', hostname: 'prepared-host', ip_address: '198.51.100.40', architecture: 'amd64', overlay_ip: token.overlay_ip, status: 'pending' });
      const log = await events(`node_id=${prepared.id}`);
      expect(log.map((e) => e.kind), 'events against its hostname are the node’s').to.deep.equal(['node_created', 'deploy_step', 'node_joined']);
      const reuse = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'again', public_key: machineKey() } });
      expect(reuse.status).to.equal(401);
      expect(reuse.json.message).to.equal('The join token is invalid, expired or already used');
      // Once it has heartbeated, no new token can be bound to it.
      const agent = await FakeAgent.forNode(t, prepared.id);
      expect((await agent.heartbeat()).status).to.equal(200);
      expect((await api('POST', '/v1/nodes/token', { node_id: prepared.id })).status).to.equal(409);
      // Silence on the control plane's clock: offline, so no later state change lands among other tests' events.
      clock.advance(10_000);
      await waitFor(async () => (await getNode(prepared.id)).status === 'offline', { timeoutMs: 5000, what: 'offline by the clock' });
    });

    it('refuses a token bound to a node that has joined, even before its first heartbeat (409)', async () => {
      const prepared = await createNode({ name: 'joined-silent' });
      const token = await newToken({ node_id: prepared.id });
      const joined = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'silent-host', public_key: machineKey() } });
      expect(joined.status, joined.text).to.equal(201);
      const second = await api('POST', '/v1/nodes/token', { node_id: prepared.id });
      expect(second.status, `a second token for a joined node: ${second.text}`).to.equal(409);
    });

    it('of two tokens bound to one node, used at the same moment, exactly one joins (the other gets 401; one certificate issued)', async () => {
      const prepared = await createNode({ name: 'two-tokens' });
      const tokens = [await newToken({ node_id: prepared.id }), await newToken({ node_id: prepared.id })];
      const joins = await Promise.all(tokens.map((token, i) => t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: `racer-${i}`, public_key: machineKey() } })));
      expect(joins.map((j) => j.status).sort(), joins.map((j) => j.json.message ?? j.json.data?.node_id).join(', ')).to.deep.equal([201, 401]);
      const certificates = await t.hangar.store.knex('certificates').where({ node_id: prepared.id });
      expect(certificates, 'certificates issued for the node').to.have.length(1);
    });

    it('a join refused for a malformed public key neither uses up the token nor leaves a node behind', async () => {
      const token = await newToken();
      const bad = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'typo-host', public_key: `-----BEGIN PUBLIC KEY-----\n${'A'.repeat(80)}\n-----END PUBLIC KEY-----\n` } });
      expect(bad.status).to.equal(400);
      expect(bad.json.message).to.contain('public_key');
      const leaked = ((await api('GET', '/v1/nodes?limit=1000')).json.data as any[]).filter((n) => n.name === 'typo-host').length;
      const retry = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'typo-host', public_key: machineKey() } });
      expect({ leaked_nodes: leaked, retry: retry.status }, retry.text).to.deep.equal({ leaked_nodes: 0, retry: 201 });
    });

    it('a join that fails at its last step (the certificate) leaves the token unused and no node behind: the retry joins', async () => {
      const token = await newToken();
      const knex = t.hangar.store.knex;
      // The database refuses the certificate's row: the last write of the join fails.
      if (dialect.name === 'postgres') {
        await knex.raw(`create function refuse_certificate() returns trigger as $$ begin raise exception 'certificates refused by the test'; end $$ language plpgsql`);
        await knex.raw('create trigger refuse_certificates before insert on certificates for each row execute function refuse_certificate()');
      } else {
        await knex.raw(`create trigger refuse_certificates before insert on certificates begin select raise(abort, 'certificates refused by the test'); end`);
      }
      let failed;
      try {
        failed = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'half-joined', public_key: machineKey() } });
      } finally {
        await knex.raw('drop trigger refuse_certificates' + (dialect.name === 'postgres' ? ' on certificates' : ''));
        if (dialect.name === 'postgres') await knex.raw('drop function refuse_certificate()');
      }
      expect(failed.status, failed.text).to.equal(500);
      const named = async (hostname: string) => ((await api('GET', '/v1/nodes?limit=1000')).json.data as any[]).filter((n) => n.hostname === hostname);
      const leaked = await named('half-joined');
      const retry = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'half-joined', public_key: machineKey() } });
      expect({ leaked_nodes: leaked.length, retry: retry.status }, retry.text).to.deep.equal({ leaked_nodes: 0, retry: 201 });
      expect(await named('half-joined')).to.have.length(1);
      expect(await getNode(retry.json.data.node_id), 'the overlay address the token reserved went to the node').to.include({ overlay_ip: token.overlay_ip, status: 'pending' });
    });

    it('two joins with one token at once: exactly one gets a node, the other is refused (401)', async () => {
      const token = await newToken();
      const hostnames = ['racer-a', 'racer-b'];
      const answers = await Promise.all(hostnames.map((hostname) => t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname, public_key: machineKey() } })));
      expect(answers.map((a) => a.status).sort(), answers.map((a) => a.text).join('\n')).to.deep.equal([201, 401]);
      const joined = ((await api('GET', '/v1/nodes?limit=1000')).json.data as any[]).filter((n) => hostnames.includes(n.hostname));
      const winner = answers.find((a) => a.status === 201)!.json.data.node_id;
      expect(joined.map((n) => n.id)).to.deep.equal([winner]);
      expect(joined[0].overlay_ip).to.equal(token.overlay_ip);
    });
  });

  describe('nodes', () => {
    it('creates, lists, gets and renames nodes; validation, 404 and roles', async () => {
      const node = await createNode({ name: 'alpha', ip_address: '198.51.100.1', interface: 'eth0' });
      expect(node).to.include({ name: 'alpha', ip_address: '198.51.100.1', interface: 'eth0', status: 'pending', availability: 'active', gpu_overcommit_factor: 1, is_control_plane: false, agent_running: false });
      expect(node.id).to.match(/^node-[0-9a-z]+$/);
      expect((await api('POST', '/v1/nodes', {})).status).to.equal(400);
      expect((await api('POST', '/v1/nodes', { name: 'x', ip_address: 'not-an-ip' })).status).to.equal(400);
      expect((await t.request('POST', '/v1/nodes', { body: { name: 'x' }, headers: bearer(user.token) })).status).to.equal(403);

      const list = await t.request('GET', '/v1/nodes', { headers: bearer(user.token) });
      expect(list.status, 'any signed-in user may list').to.equal(200);
      expect(list.json.data.map((n: any) => n.id)).to.include(node.id);
      expect(list.json).to.have.property('next_cursor');
      const pending = await api('GET', '/v1/nodes?status=pending');
      expect(pending.json.data.every((n: any) => n.status === 'pending')).to.equal(true);
      expect(pending.json.data.map((n: any) => n.id)).to.include(node.id);
      expect((await api('GET', '/v1/nodes?status=bogus')).status).to.equal(400);

      expect((await api('GET', `/v1/nodes/${node.id}`)).json.data).to.deep.equal(node);
      expect((await api('GET', '/v1/nodes/node-doesnotexist')).status).to.equal(404);
      expect((await api('GET', '/v1/nodes/not-a-node-id')).status).to.equal(400);

      const renamed = await api('PATCH', `/v1/nodes/${node.id}`, { name: 'alpha-renamed' });
      expect(renamed.status).to.equal(200);
      expect(renamed.json.data.name).to.equal('alpha-renamed');
      expect((await getNode(node.id)).name).to.equal('alpha-renamed');
      expect((await api('PATCH', `/v1/nodes/${node.id}`, { name: '' })).status).to.equal(400);
      expect((await api('PATCH', '/v1/nodes/node-doesnotexist', { name: 'x' })).status).to.equal(404);
      const created = (await events(`node_id=${node.id}`)).find((e) => e.kind === 'node_created');
      expect(created).to.exist;
    });

    it('lists by status page by page without skipping matches', async () => {
      const mine = [];
      for (const name of ['drain-1', 'drain-2', 'drain-3']) {
        const node = await createNode({ name });
        expect((await api('POST', `/v1/nodes/${node.id}/drain`)).status).to.equal(200);
        mine.push(node.id);
      }
      try {
        const seen: string[] = [];
        let cursor: string | null = null;
        for (let page = 0; page < 10; page++) {
          const res = await api('GET', `/v1/nodes?status=drained&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
          expect(res.status, res.text).to.equal(200);
          expect(res.json.data.length).to.be.at.most(1);
          seen.push(...res.json.data.map((n: any) => n.id));
          cursor = res.json.next_cursor;
          if (!cursor) break;
        }
        expect(seen, 'every drained node, one per page').to.include.members(mine);
      } finally {
        for (const id of mine) await api('POST', `/v1/nodes/${id}/uncordon`);
      }
    });

    it('filters by every status in the database, page by page, exactly as the nodes show it', async function () {
      this.timeout(20_000);
      const statusOf = async (id: string) => (await getNode(id)).status;
      // offline: heard from, then silent on the control plane's clock.
      const silent = await createNode({ name: 'by-status-offline' });
      expect((await (await FakeAgent.forNode(t, silent.id)).heartbeat()).status).to.equal(200);
      clock.advance(10_000);
      await waitFor(async () => (await statusOf(silent.id)) === 'offline', { timeoutMs: 5000, what: 'offline by the clock' });
      // ready and needs_reboot: heartbeats (online until the clock moves again).
      const ready = await createNode({ name: 'by-status-ready' });
      const reboot = await createNode({ name: 'by-status-reboot' });
      expect((await (await FakeAgent.forNode(t, ready.id)).heartbeat()).status).to.equal(200);
      expect((await (await FakeAgent.forNode(t, reboot.id)).heartbeat({ reboot_required: true })).status).to.equal(200);
      // drained: more than two pages of two; cordoned; pending.
      const drained: string[] = [];
      const cordoned: string[] = [];
      for (let i = 0; i < 5; i++) drained.push((await createNode({ name: `by-status-drained-${i}` })).id);
      for (let i = 0; i < 2; i++) cordoned.push((await createNode({ name: `by-status-cordoned-${i}` })).id);
      const pending = await createNode({ name: 'by-status-pending' });
      for (const id of drained) expect((await api('POST', `/v1/nodes/${id}/drain`)).status).to.equal(200);
      for (const id of cordoned) expect((await api('POST', `/v1/nodes/${id}/cordon`)).status).to.equal(200);
      try {
        const everyNode = (await api('GET', '/v1/nodes?limit=1000')).json.data as any[];
        expect(everyNode.length).to.be.below(1000);
        const pages = async (query: string) => {
          const ids: string[] = [];
          let cursor: string | null = null;
          for (let page = 0; page < 100; page++) {
            const res = await api('GET', `/v1/nodes?${query}&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
            expect(res.status, res.text).to.equal(200);
            expect(res.json.data.length).to.be.at.most(2);
            ids.push(...res.json.data.map((n: any) => n.id));
            cursor = res.json.next_cursor;
            if (!cursor) return ids;
          }
          throw new Error(`${query}: more than 100 pages`);
        };
        const shown = (statuses: string[]) => everyNode.filter((n) => statuses.includes(n.status)).map((n) => n.id);
        for (const status of ['pending', 'ready', 'offline', 'needs_reboot', 'cordoned', 'drained', 'removing']) {
          expect(await pages(`status=${status}`), `status=${status}: the nodes that show it, in list order`).to.deep.equal(shown([status]));
        }
        expect(await pages('status=cordoned&status=drained')).to.deep.equal(shown(['cordoned', 'drained']));
        expect(shown(['drained'])).to.include.members(drained);
        expect(shown(['cordoned'])).to.include.members(cordoned);
        expect(shown(['offline'])).to.include(silent.id);
        expect(shown(['ready'])).to.include(ready.id);
        expect(shown(['needs_reboot'])).to.include(reboot.id);
        expect(shown(['pending'])).to.include(pending.id);
      } finally {
        for (const id of [...drained, ...cordoned]) await api('POST', `/v1/nodes/${id}/uncordon`);
        // Silence on the control plane's clock: offline, so no later state change lands among other tests' events.
        clock.advance(10_000);
        await waitFor(async () => (await statusOf(ready.id)) === 'offline' && (await statusOf(reboot.id)) === 'offline', { timeoutMs: 5000, what: 'offline by the clock' });
      }
    });

    it('cordon, drain and uncordon (409 unless cordoned or drained), each recorded as an event', async () => {
      const node = await createNode({ name: 'sched' });
      expect((await api('POST', `/v1/nodes/${node.id}/uncordon`)).status).to.equal(409);
      const cordoned = await api('POST', `/v1/nodes/${node.id}/cordon`);
      expect(cordoned.status).to.equal(200);
      expect(cordoned.json.data).to.include({ status: 'cordoned', availability: 'cordoned' });
      expect((await api('GET', '/v1/nodes?status=cordoned')).json.data.map((n: any) => n.id)).to.deep.equal([node.id]);
      const drained = await api('POST', `/v1/nodes/${node.id}/drain`);
      expect(drained.json.data).to.include({ status: 'drained', availability: 'drained' });
      const back = await api('POST', `/v1/nodes/${node.id}/uncordon`);
      expect(back.status).to.equal(200);
      expect(back.json.data).to.include({ status: 'pending', availability: 'active' });
      expect((await api('POST', `/v1/nodes/${node.id}/uncordon`)).status).to.equal(409);
      const cordonAgain = await api('POST', `/v1/nodes/${node.id}/cordon`);
      expect(cordonAgain.json.data.status).to.equal('cordoned');
      expect((await api('POST', `/v1/nodes/${node.id}/uncordon`)).status).to.equal(200);
      const kinds = (await events(`node_id=${node.id}`)).map((e) => e.kind);
      expect(kinds).to.deep.equal(['node_created', 'node_cordoned', 'node_drained', 'node_uncordoned', 'node_cordoned', 'node_uncordoned']);
      expect((await api('POST', '/v1/nodes/node-doesnotexist/cordon')).status).to.equal(404);
    });

    it('gpu-overcommit accepts 1, 2, 4 or 8 only', async () => {
      const node = await createNode({ name: 'gpu' });
      for (const factor of [2, 4, 8, 1]) {
        const res = await api('POST', `/v1/nodes/${node.id}/gpu-overcommit`, { gpu_overcommit_factor: factor });
        expect(res.status).to.equal(200);
        expect(res.json.data.gpu_overcommit_factor).to.equal(factor);
      }
      for (const bad of [3, 0, 16, '2']) {
        const res = await api('POST', `/v1/nodes/${node.id}/gpu-overcommit`, { gpu_overcommit_factor: bad });
        expect(res.status, `factor ${JSON.stringify(bad)}`).to.equal(400);
      }
      expect((await api('POST', `/v1/nodes/${node.id}/gpu-overcommit`, {})).status).to.equal(400);
      expect((await getNode(node.id)).gpu_overcommit_factor).to.equal(1);
    });

    it('update-agent needs the node ready (409 otherwise)', async () => {
      const node = await createNode({ name: 'not-ready' });
      const res = await api('POST', `/v1/nodes/${node.id}/update-agent`);
      expect(res.status).to.equal(409);
      expect(res.json.message).to.contain('needs it ready');
    });

    it('logs: lines defaults to 100 and is at most 10000, or since an RFC 3339 time; results are looked up per node and kind', async () => {
      const node = await createNode({ name: 'logs' });
      const payload = async (query: string) => {
        const res = await api('POST', `/v1/nodes/${node.id}/logs${query}`);
        expect(res.status, `${query}: ${res.text}`).to.equal(202);
        return (await t.hangar.services.tasks.get(res.json.data.task_id))!.payload;
      };
      expect(await payload('')).to.deep.equal({ lines: 100 });
      expect(await payload('?lines=10000')).to.deep.equal({ lines: 10000 });
      expect(await payload('?since=2026-01-02T03:04:05Z')).to.deep.equal({ since: '2026-01-02T03:04:05.000Z' });
      for (const bad of ['?lines=10001', '?lines=0', '?lines=ten', '?since=yesterday', '?tail=5']) {
        expect((await api('POST', `/v1/nodes/${node.id}/logs${bad}`)).status, bad).to.equal(400);
      }
      const other = await createNode({ name: 'other' });
      const task = (await api('POST', `/v1/nodes/${node.id}/logs`)).json.data.task_id;
      expect((await api('GET', `/v1/nodes/${other.id}/logs/${task}`)).status, 'another node’s task').to.equal(404);
      expect((await api('GET', `/v1/nodes/${node.id}/unmanaged/${task}`)).status, 'another kind').to.equal(404);
      expect((await api('GET', `/v1/nodes/${node.id}/logs/${task}`)).json.data.status, 'unfinished: still there').to.equal('pending');
      expect((await api('GET', `/v1/nodes/${node.id}/logs/${task}`)).status).to.equal(200);
      expect((await api('GET', `/v1/nodes/${node.id}/logs/task-doesnotexist`)).status).to.equal(404);
      expect((await api('POST', '/v1/nodes/node-doesnotexist/logs')).status).to.equal(404);
    });

    it('issues a client certificate (shown once) that works over mTLS until revoked', async () => {
      const node = await createNode({ name: 'certs' });
      const issued = await api('POST', `/v1/nodes/${node.id}/cert`);
      expect(issued.status).to.equal(201);
      const data = issued.json.data;
      expect(data).to.include.keys('node_id', 'serial', 'certificate', 'private_key', 'ca_pem', 'expires_at');
      expect(new X509Certificate(data.certificate).subject).to.equal(`CN=${node.id}`);
      const body = { hostname: 'certs-host', architecture: 'amd64', agent_version: '0.0.0' };
      const ok = await t.request('POST', '/v1/internal/heartbeat', { cert: data.certificate, key: data.private_key, body });
      expect(ok.status, ok.text).to.equal(200);
      expect(ok.json.data).to.deep.equal({ node_id: node.id, heartbeat_interval_seconds: 1, poll_wait_seconds: 5 });
      const revoked = await api('POST', `/v1/nodes/${node.id}/cert/revoke`);
      expect(revoked.json.data).to.deep.equal({ node_id: node.id, revoked: 1 });
      const refused = await t.request('POST', '/v1/internal/heartbeat', { cert: data.certificate, key: data.private_key, body });
      expect(refused.status).to.equal(401);
      expect(refused.json.message).to.contain('revoked');
      const kinds = (await events(`node_id=${node.id}`)).map((e) => e.kind);
      expect(kinds).to.include.members(['certificate_issued', 'certificates_revoked']);
      // Silence on the control plane's clock: offline now, so the change does not land among a later test's events.
      clock.advance(10_000);
      await waitFor(async () => (await getNode(node.id)).status === 'offline', { timeoutMs: 5000, what: 'offline by the clock' });
      expect((await api('POST', '/v1/nodes/node-doesnotexist/cert')).status).to.equal(404);
    });

    it('DELETE: the node is removing (its certificates revoked, its work cancelled, operations refused), then the record goes', async function () {
      this.timeout(20_000);
      const node = await createNode({ name: 'doomed', ip_address: '198.51.100.66' });
      const agent = await FakeAgent.forNode(t, node.id);
      const queued = (await api('POST', `/v1/nodes/${node.id}/check-updates`)).json.data.task_id;
      const res = await api('DELETE', `/v1/nodes/${node.id}`);
      expect(res.status).to.equal(202);
      expect(res.json.data.status).to.equal('removing');
      expect((await getNode(node.id)).status).to.equal('removing');
      expect((await t.hangar.services.tasks.get(queued))).to.include({ status: 'failed', error: 'the node is being removed' });
      expect((await agent.heartbeat()).status, 'its certificates are revoked').to.equal(401);
      for (const verb of ['cordon', 'drain', 'os-update', 'reboot', 'stop', 'cert', 'update-agent']) {
        expect((await api('POST', `/v1/nodes/${node.id}/${verb}`)).status, verb).to.equal(409);
      }
      await waitFor(async () => (await api('GET', `/v1/nodes/${node.id}`)).status === 404, { timeoutMs: 8000, intervalMs: 250, what: 'the record to go' });
      const removed = (await events('identifier=198.51.100.66')).find((e) => e.kind === 'node_removed');
      expect(removed?.message).to.contain(node.id);
      expect(removed?.node_id, 'node_removed carries the node id').to.equal(node.id);
      expect((await events(`node_id=${node.id}`)).map((e) => e.kind).slice(-2)).to.deep.equal(['node_removing', 'node_removed']);
      expect((await api('DELETE', `/v1/nodes/${node.id}`)).status).to.equal(404);
    });

    it('?node_id= lists the events at the node’s address from before it joined, not the later ones of other machines there', async () => {
      expect((await api('POST', '/v1/nodes/events', { identifier: '198.51.100.77', kind: 'deploy_step', message: 'before the join' })).status).to.equal(201);
      const token = await newToken();
      const joined = await t.request('POST', '/v1/nodes/join', { body: { token: token.token, hostname: 'first-at-address', public_key: machineKey(), ip_address: '198.51.100.77' } });
      expect(joined.status, joined.text).to.equal(201);
      const stranger = await api('POST', '/v1/nodes/events', { identifier: '198.51.100.77', kind: 'join_failed', message: 'another machine behind the same address' });
      expect(stranger.status, stranger.text).to.equal(201);
      expect((await events(`node_id=${joined.json.data.node_id}`)).map((e) => e.kind)).to.deep.equal(['deploy_step', 'node_joined']);
      expect((await events('identifier=198.51.100.77')).map((e) => e.kind)).to.deep.equal(['deploy_step', 'node_joined', 'join_failed']);
    });

    it('a node being removed refuses new log fetches and scans too (queued work would hold its removal forever)', async function () {
      this.timeout(20_000);
      const node = await createNode({ name: 'doomed-too' });
      expect((await api('DELETE', `/v1/nodes/${node.id}`)).status).to.equal(202);
      const logs = await api('POST', `/v1/nodes/${node.id}/logs`);
      const scan = await api('POST', `/v1/nodes/${node.id}/unmanaged?backend=swarm`);
      const gone = await waitFor(async () => (await api('GET', `/v1/nodes/${node.id}`)).status === 404, { timeoutMs: 8000, intervalMs: 250, what: 'the record to go' }).catch(
        (err: Error) => err.message,
      );
      expect([logs.status, scan.status, gone], 'logs, unmanaged, removal').to.deep.equal([409, 409, true]);
    });
  });

  describe('the ip endpoint and the certificate hot swap', () => {
    it('needs ip_address or interface; regenerate_cert only for the control-plane node', async () => {
      const worker = await createNode({ name: 'worker', ip_address: '198.51.100.20' });
      const none = await api('POST', `/v1/nodes/${worker.id}/ip`, {});
      expect(none.status).to.equal(400);
      expect(none.json.message).to.match(/^Validation failed:/);
      expect((await api('POST', `/v1/nodes/${worker.id}/ip`, { regenerate_cert: true })).status).to.equal(400);
      const refused = await api('POST', `/v1/nodes/${worker.id}/ip`, { ip_address: '198.51.100.21', regenerate_cert: true });
      expect(refused.status).to.equal(400);
      expect(refused.json.message).to.contain('control-plane');
      expect((await getNode(worker.id)).ip_address, 'nothing changed').to.equal('198.51.100.20');
      expect((await api('POST', `/v1/nodes/${worker.id}/ip`, { ip_address: '300.1.1.1' })).status).to.equal(400);
      expect((await api('POST', `/v1/nodes/${worker.id}/ip`, { interface: 'not a name!' })).status).to.equal(400);

      const iface = await api('POST', `/v1/nodes/${worker.id}/ip`, { interface: 'ens5' });
      expect(iface.status).to.equal(200);
      expect(iface.json.data).to.include({ id: worker.id, interface: 'ens5', ip_address: '198.51.100.20' });
      expect(iface.json.data).not.to.have.property('certificate');
      const moved = await api('POST', `/v1/nodes/${worker.id}/ip`, { ip_address: '2001:db8::20' });
      expect(moved.json.data.ip_address).to.equal('2001:db8::20');
      const changes = (await events(`node_id=${worker.id}`)).filter((e) => e.kind === 'node_address_changed');
      expect(changes).to.have.length(2);
      expect((await api('POST', '/v1/nodes/node-doesnotexist/ip', { interface: 'eth0' })).status).to.equal(404);
    });

    it('reissues the API certificate for the control-plane node’s new address; new TLS connections see the SAN', async () => {
      const cp = await createNode({ name: 'control-plane', is_control_plane: true, ip_address: '198.51.100.2' });
      expect((await api('POST', '/v1/nodes', { name: 'second-cp', is_control_plane: true })).status).to.equal(409);
      const port = t.hangar.listeners.get('control')!.port;
      const before = await presentedCertificate(port);
      expect(before.subjectaltname).not.to.contain('192.0.2.10');

      const res = await api('POST', `/v1/nodes/${cp.id}/ip`, { ip_address: '192.0.2.10', regenerate_cert: true });
      expect(res.status, res.text).to.equal(200);
      expect(res.json.data).to.include({ id: cp.id, ip_address: '192.0.2.10', is_control_plane: true });
      expect(res.json.data.certificate).to.deep.equal({ reissued: true, added_sans: ['192.0.2.10'] });
      const after = await presentedCertificate(port);
      expect(after.serialNumber).not.to.equal(before.serialNumber);
      expect(after.subjectaltname).to.contain('IP Address:192.0.2.10');
      expect(after.subjectaltname, 'the old names stay').to.contain('IP Address:127.0.0.1');
      expect((await api('GET', `/v1/nodes/${cp.id}`)).status, 'the API still answers (verified against the CA)').to.equal(200);

      const same = await api('POST', `/v1/nodes/${cp.id}/ip`, { ip_address: '192.0.2.10', regenerate_cert: true });
      expect(same.json.data.certificate).to.deep.equal({ reissued: true, added_sans: [] });
    });
  });

  describe('events', () => {
    it('records events against an address before the node exists; node_id includes them once a node has that address', async () => {
      const early = await api('POST', '/v1/nodes/events', { identifier: '203.0.113.7', kind: 'deploy_step', message: 'ssh connected', data: { step: 1 } });
      expect(early.status, early.text).to.equal(201);
      expect(early.json.data).to.include({ node_id: null, identifier: '203.0.113.7', kind: 'deploy_step', message: 'ssh connected' });
      expect(early.json.data.id).to.be.a('number');
      expect(early.json.data.data).to.deep.equal({ step: 1 });
      clock.advance(1000);
      const node = await createNode({ name: 'late', ip_address: '203.0.113.7' });
      const own = await api('POST', '/v1/nodes/events', { node_id: node.id, kind: 'deploy_done' });
      expect(own.status).to.equal(201);

      const log = await events(`node_id=${node.id}`);
      expect(log.map((e) => e.kind), 'oldest first, the address event included').to.deep.equal(['deploy_step', 'node_created', 'deploy_done']);
      expect(log[0].id).to.equal(early.json.data.id);
      const byAddress = await events('identifier=203.0.113.7');
      expect(byAddress.map((e) => e.kind), 'by address: also the events of the node at that address').to.deep.equal(['deploy_step', 'node_created', 'deploy_done']);

      expect((await api('POST', '/v1/nodes/events', { kind: 'x' })).status, 'node_id or identifier').to.equal(400);
      expect((await api('POST', '/v1/nodes/events', { node_id: 'node-doesnotexist', kind: 'x' })).status).to.equal(404);
      expect((await api('POST', '/v1/nodes/events', { identifier: 'h', kind: 'Not A Kind' })).status).to.equal(400);
      expect((await t.request('POST', '/v1/nodes/events', { body: { identifier: 'h', kind: 'x' }, headers: bearer(user.token) })).status).to.equal(403);
      expect((await t.request('GET', '/v1/nodes/events?identifier=h', { headers: bearer(user.token) })).status).to.equal(200);
    });

    it('since keeps events strictly after it; limit keeps the newest N, still oldest first', async () => {
      const id = 'since-host.example.test';
      const first = (await api('POST', '/v1/nodes/events', { identifier: id, kind: 'one' })).json.data;
      clock.advance(1000);
      await api('POST', '/v1/nodes/events', { identifier: id, kind: 'two' });
      clock.advance(1000);
      await api('POST', '/v1/nodes/events', { identifier: id, kind: 'three' });
      expect((await events(`identifier=${id}`)).map((e) => e.kind)).to.deep.equal(['one', 'two', 'three']);
      expect((await events(`identifier=${id}&since=${encodeURIComponent(first.created_at)}`)).map((e) => e.kind)).to.deep.equal(['two', 'three']);
      const later = new Date(Date.parse(first.created_at) + 1500).toISOString();
      expect((await events(`identifier=${id}&since=${encodeURIComponent(later)}`)).map((e) => e.kind)).to.deep.equal(['three']);
      expect((await events(`identifier=${id}&limit=2`)).map((e) => e.kind)).to.deep.equal(['two', 'three']);
      expect((await events(`identifier=${id}&limit=1&since=${encodeURIComponent(first.created_at)}`)).map((e) => e.kind)).to.deep.equal(['three']);
      expect((await api('GET', '/v1/nodes/events?since=last-tuesday')).status).to.equal(400);
      // Nodes go by id: a name in the filter is a 400 saying so, not an empty list.
      const byName = await api('GET', '/v1/nodes/events?node_id=web-1');
      expect(byName.status).to.equal(400);
      expect(byName.json.message).to.contain('query.node_id');
    });

    it('without node_id or identifier the newest 200 by default; limit up to 1000, 400 above; with a filter no default', async function () {
      this.timeout(20_000);
      const at = clock.now().toISOString();
      const rows = Array.from({ length: 250 }, (_, i) => ({ identifier: 'bulk.example.test', kind: 'bulk', message: `bulk ${i}`, created_at: at }));
      await t.hangar.store.knex('node_events').insert(rows);
      const all = await events('');
      expect(all).to.have.length(200);
      const ids = all.map((e) => e.id);
      expect(ids, 'oldest first').to.deep.equal([...ids].sort((a, b) => a - b));
      expect(all.at(-1).message, 'the newest ones').to.equal('bulk 249');
      expect(all[0].message).to.equal('bulk 50');
      expect(await events('identifier=bulk.example.test'), 'no default with a filter').to.have.length(250);
      const most = await events('limit=1000');
      expect(most.length).to.be.greaterThan(250);
      expect(most.length).to.be.at.most(1000);
      expect((await events('limit=7')).map((e) => e.message)).to.deep.equal(Array.from({ length: 7 }, (_, i) => `bulk ${243 + i}`));
      for (const bad of ['limit=1001', 'limit=0', 'limit=-5', 'limit=many', 'colour=red']) expect((await api('GET', `/v1/nodes/events?${bad}`)).status, bad).to.equal(400);
      expect((await t.request('GET', '/v1/nodes/events')).status).to.equal(401);
    });
  });
});

describeEachDialect('nodes: the certificate hot swap fails on its own with operator-provided certificates', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let operatorCa: string;
  let operatorCert: string;
  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token), ca: operatorCa });

  before(async function () {
    this.timeout(30_000);
    // The operator's certificate comes from a CA hangar does not control: make one elsewhere.
    const storage = dialect.freshStorage();
    const store = await openStore({ database: { url: null, schema: null, sqlite_file: path.join(storage.dataDir, 'op.db'), pool_max: 1 }, data_dir: storage.dataDir } as never);
    await runMigrations(store, [coreMigrations]);
    const operatorPki = await Pki.open({ dataDir: path.join(storage.dataDir, 'operator'), store, clock: systemClock, serverNames: ['ops.example.test'] });
    await store.close();
    operatorCa = operatorPki.caPem;
    operatorCert = operatorPki.serverCredentials.cert;
    writeFileSync(path.join(storage.dataDir, 'op.crt'), operatorCert);
    writeFileSync(path.join(storage.dataDir, 'op.key'), operatorPki.serverCredentials.key);
    t = await startHangar(dialect, {
      plugins: NODE_PLUGINS,
      overrides: { ...FAST_NODES, api: { tls_cert: path.join(storage.dataDir, 'op.crt'), tls_key: path.join(storage.dataDir, 'op.key') } },
    });
    // Requests must trust the operator's CA, not hangar's.
    const request = t.request.bind(t);
    t = { ...t, request: (method, p, options = {}) => request(method, p, { ca: operatorCa, ...options }) };
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('answers 200 with certificate.error and reissued false, and the address change stays', async () => {
    const cp = (await api('POST', '/v1/nodes', { name: 'cp', is_control_plane: true, ip_address: '198.51.100.2' })).json.data;
    const port = t.hangar.listeners.get('control')!.port;
    const res = await api('POST', `/v1/nodes/${cp.id}/ip`, { ip_address: '192.0.2.10', regenerate_cert: true });
    expect(res.status, res.text).to.equal(200);
    expect(res.json.data.ip_address).to.equal('192.0.2.10');
    expect(res.json.data.certificate).to.include({ reissued: false });
    expect(res.json.data.certificate.added_sans).to.deep.equal([]);
    expect(res.json.data.certificate.error).to.contain('provided by the operator');
    expect((await api('GET', `/v1/nodes/${cp.id}`)).json.data.ip_address, 'the address change stays').to.equal('192.0.2.10');
    const presented = await presentedCertificate(port);
    expect(presented.fingerprint256, 'the operator certificate is still served').to.equal(new X509Certificate(operatorCert).fingerprint256);
  });
});

describeEachDialect('nodes: refused joins are limited per address, and events have a retention', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const clock = new ManualClock();
  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const events = async (query: string) => (await api('GET', `/v1/nodes/events?${query}`)).json.data as any[];
  const join = (token: string) => t.request('POST', '/v1/nodes/join', { body: { token, hostname: 'guesser', public_key: machineKey() } });

  before(async function () {
    this.timeout(30_000);
    t = await startHangar(dialect, {
      plugins: NODE_PLUGINS,
      clock,
      overrides: { ...FAST_NODES, nodes: { ...FAST_NODES.nodes, join_failures_per_address: { max: 3, window_seconds: 600 }, event_retention_days: 2, event_prune_interval_seconds: 1 } },
    });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('stores a join_failed event for the first refused joins from an address, then answers 429 with Retry-After (no event) until the window ends; a good token is refused too meanwhile', async () => {
    for (let i = 0; i < 3; i++) expect((await join(`hjt1bogus-token-${i}`)).status).to.equal(401);
    const good = (await api('POST', '/v1/nodes/token', { ttl_seconds: 3600 })).json.data.token as string;
    for (const token of ['hjt1bogus-token-3', 'hjt1bogus-token-4', good]) {
      const res = await join(token);
      expect(res.status, res.text).to.equal(429);
      expect(res.json.message).to.match(/^Too many refused joins from this address; try again in \d+ s$/);
      expect(Number(res.headers['retry-after'])).to.be.within(1, 600);
    }
    expect((await events('identifier=127.0.0.1')).filter((e) => e.kind === 'join_failed')).to.have.length(3);
    clock.advance(601_000);
    const joined = await join(good);
    expect(joined.status, joined.text).to.equal(201);
  });

  it('deletes node events older than nodes.event_retention_days, on its own schedule', async function () {
    this.timeout(20_000);
    const early = (await api('POST', '/v1/nodes', { name: 'early' })).json.data;
    clock.advance(3 * 86_400_000);
    admin = { ...admin, token: (await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } })).json.data.token };
    const late = (await api('POST', '/v1/nodes', { name: 'late' })).json.data;
    await waitFor(async () => (await events(`node_id=${early.id}`)).length === 0, { timeoutMs: 10_000, what: 'the old events to be pruned' });
    expect((await events(`node_id=${late.id}`)).map((e) => e.kind)).to.deep.equal(['node_created']);
    expect(t.logs.some((l) => l.includes('nodes: events past their retention deleted'))).to.equal(true);
  });
});
