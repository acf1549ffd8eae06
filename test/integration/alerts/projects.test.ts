import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { hangarCli } from '../runner/support.js';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { Stream } from '../../support/event-stream.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { swarmDouble } from '../../support/swarm-double.js';
import { Receiver } from '../notifications/receiver.js';
import { signRequest } from '../../../core/auth/hmac.js';

const PLUGINS = ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'swarms', 'compute', 'tags', 'alerts', 'notifications', 'events'];
const LOOPBACK = { allow_http: true, allow_private_addresses: true, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100, timeout_seconds: 5 };

/**
 * Alerts and notifications by project (issue 31): the installation's instance_not_running waits an
 * hour and is critical, project `default` overrides it (at once, a warning); an instance of
 * `default` that failed fires at once with the project's settings and is listed by
 * `GET /v1/alerts?project=`; a subscription naming a project receives the events of its
 * resources only (not another project's subscription, not a node's event); and a subscription
 * filtered by tags gets the tagged node's status change, not an untagged one's.
 */
describeEachDialect('alerts and notifications by project (and subscriptions by tag)', (dialect) => {
  const receiver = new Receiver();
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  let work = '';
  /** The state the swarm reports its one member in. */
  let memberState = 'ready';
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const cli = async (args: string[]) => {
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    const res = await hangarCli(args, { env, timeoutMs: 60_000 });
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(0);
    return res.stdout;
  };
  /** A user of role user, a member of `project` as `role` when given: its bearer header. */
  const member = async (username: string, project?: string, role?: string) => {
    const creds = await createUser(t, admin, { username: `${username}-${dialect.name}`, role: 'user' });
    if (project) expect((await api('PUT', `/v1/projects/${project}/members/${creds.username}`, { role })).status).to.equal(201);
    return bearer(creds.token);
  };
  /** What the receiver heard on a channel (each channel has its own path). */
  const heard = (channel: string, type: string, resourceId?: string) =>
    receiver.requests.filter((r) => r.headers['x-channel'] === channel && r.event === type && (!resourceId || r.body?.resource?.id === resourceId));

  before(async function () {
    this.timeout(60_000);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-alerts-projects-'));
    await receiver.start();
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: {
        clusters: { observe_interval_seconds: 1 },
        notifications: LOOPBACK,
        alerts: {
          interval_seconds: 1,
          rules: { instance_not_running: { for_seconds: 3600 }, cluster_member_not_ready: { for_seconds: 0 } },
          projects: { default: { rules: { instance_not_running: { for_seconds: 0, severity: 'warning' } } } },
        },
      },
    });
    admin = await bootstrapAdmin(t);
    manager = await swarmDouble(t, admin.token, {
      refusals: { deployWorkload: (input) => (String(input.spec.image).startsWith('missing/') ? `No such image: ${input.spec.image}` : undefined) },
      answers: { members: () => ({ members: [{ runtime_node_id: 'fake-runtime-node', hostname: 'fake-host', address: null, role: 'manager', state: memberState, availability: 'active', leader: true }] }) },
    });
    expect((await api('POST', '/v1/projects', { name: 'team-b' })).status).to.equal(201);
    // Three channels to one receiver, told apart by a header: default's, team-b's, and one of no project.
    for (const [name, project] of [['of-default', 'default'], ['of-team-b', 'team-b'], ['of-any', undefined]] as const) {
      const channel = await api('POST', '/v1/notifications/channels', { name, kind: 'webhook', url: receiver.url, headers: { 'X-Channel': name } });
      expect(channel.status, channel.text).to.equal(201);
      const subscription = await api('POST', '/v1/notifications/subscriptions', { channel_id: name, event_types: ['workload.failed', 'alert.firing', 'node.created'], ...(project ? { project } : {}) });
      expect(subscription.status, subscription.text).to.equal(201);
      expect(subscription.json.data.project_id).to.equal(project ? (await api('GET', `/v1/projects/${project}`)).json.data.id : null);
    }
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
    await receiver.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('fires with the project’s rule settings, lists by ?project=, and notifies only the subscription of the resource’s project', async function () {
    this.timeout(60_000);
    const defaultId = (await api('GET', '/v1/projects/default')).json.data.id as string;
    const created = await api('POST', '/v1/compute/instances', { name: 'broken', swarm_id: manager.swarmId, image: 'missing/app:1' });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;

    // The installation waits an hour; default's override fires at once, as a warning.
    const alert = await waitFor(async () => ((await api('GET', `/v1/alerts?rule=instance_not_running&resource_id=${id}`)).json.data as any[]).find((a) => a.state === 'firing'), {
      timeoutMs: 20_000,
      what: 'instance_not_running to fire',
    });
    expect(alert).to.include({ resource_type: 'instance', project_id: defaultId, severity: 'warning' });
    for (const project of ['default', defaultId]) {
      const listed = await api('GET', `/v1/alerts?project=${project}`);
      expect(listed.status, listed.text).to.equal(200);
      expect(listed.json.data.map((a: { id: string }) => a.id)).to.include(alert.id);
    }
    const other = await api('GET', '/v1/alerts?project=team-b');
    expect(other.status, other.text).to.equal(200);
    expect(other.json.data).to.deep.equal([]);
    const unknown = await api('GET', '/v1/alerts?project=no-such');
    expect(unknown.status).to.equal(400);
    expect(unknown.json.message).to.contain('query.project');

    // default's subscription and the one of no project hear the failure and the alert; team-b's does not.
    await waitFor(async () => ['of-default', 'of-any'].every((c) => heard(c, 'workload.failed', id).length && heard(c, 'alert.firing', id).length), { timeoutMs: 20_000, what: 'both events at both channels' });
    expect(heard('of-default', 'alert.firing', id)[0]!.body.data).to.include({ project_id: defaultId, rule: 'instance_not_running' });
    const deliveries = async (type: string) => ((await api('GET', `/v1/notifications/deliveries?event_type=${type}`)).json.data as Array<{ channel_id: string; event: { resource: { id: string } } }>).filter((d) => d.event.resource?.id === id);
    const teamB = (await api('GET', '/v1/notifications/channels/of-team-b')).json.data.id as string;
    // All of an event's deliveries are written in one transaction: none is team-b's.
    for (const type of ['workload.failed', 'alert.firing']) {
      const channels = (await deliveries(type)).map((d) => d.channel_id);
      expect(channels).to.have.length(2);
      expect(channels).not.to.include(teamB);
    }

    // A node is the installation's: its events reach the subscription of no project only.
    const node = await api('POST', '/v1/nodes', { name: `bare-${dialect.name}` });
    expect(node.status, node.text).to.equal(201);
    await waitFor(async () => heard('of-any', 'node.created', node.json.data.id).length > 0, { timeoutMs: 20_000, what: 'node.created at the channel of no project' });
    const nodeDeliveries = ((await api('GET', '/v1/notifications/deliveries?event_type=node.created')).json.data as Array<{ channel_id: string; event: { resource: { id: string } } }>).filter(
      (d) => d.event.resource?.id === node.json.data.id,
    );
    expect(nodeDeliveries.map((d) => d.channel_id)).to.deep.equal([(await api('GET', '/v1/notifications/channels/of-any')).json.data.id]);
  });

  it('answers a project member the alerts of its projects and the installation’s, on the list, by id and on the stream; another project’s are hidden', async function () {
    this.timeout(60_000);
    // A viewer of default, a maintainer of team-b (a member of another project), a user of no project.
    const viewer = await member('al-viewer', 'default', 'viewer');
    const other = await member('al-other', 'team-b', 'maintainer');
    const nobody = await member('al-nobody');
    const maintainer = await member('al-maint', 'default', 'maintainer');
    const as = (headers: Record<string, string>, method: string, p: string, body?: unknown) => t.request(method, p, { headers, body });
    // The installation's alert (a node's): every caller that lists alerts sees it, as before projects.
    const at = new Date().toISOString();
    const nodeAlert = `alert-node${dialect.name}`;
    await t.hangar.services.db.knex('alerts').insert({
      id: nodeAlert, rule: 'node_offline', resource_type: 'node', resource_id: 'node-gone', subject: '', open_key: nodeAlert, severity: 'critical', state: 'resolved',
      message: 'node gone (node-gone) is offline', observed_at: at, started_at: at, resolved_at: at, project_id: null, created_at: at, updated_at: at,
    });
    const streams = await Promise.all([bearer(admin.token), viewer, other].map((headers) => Stream.open(t, headers)));
    const [asAdmin, asViewer, asOther] = streams;
    try {
      const created = await api('POST', '/v1/compute/instances', { name: 'broken-again', swarm_id: manager.swarmId, image: 'missing/app:2' });
      expect(created.status, created.text).to.equal(202);
      const id = created.json.data.id as string;
      const fired = await asAdmin!.until('default’s alert, for the admin', 'alert.firing', (d) => d.resource_id === id);
      const alertId = fired.json.id as string;
      expect(fired.json.project_id).to.equal((await api('GET', '/v1/projects/default')).json.data.id);
      await asViewer!.until('default’s alert, for a viewer of default', 'alert.firing', (d) => d.id === alertId);

      const listed = async (headers: Record<string, string>, query = '') => {
        const res = await as(headers, 'GET', `/v1/alerts?limit=1000${query}`);
        expect(res.status, res.text).to.equal(200);
        return res.json.data as Array<{ id: string; project_id: string | null }>;
      };
      const ids = async (headers: Record<string, string>, query = '') => (await listed(headers, query)).map((a) => a.id);
      // An admin sees all; default's viewer its project's and the installation's; team-b's maintainer and a user of no project the installation's only.
      expect(await ids(bearer(admin.token))).to.include.members([alertId, nodeAlert]);
      expect(await ids(viewer)).to.include.members([alertId, nodeAlert]);
      for (const outsider of [other, nobody]) {
        const seen = await ids(outsider);
        expect(seen).to.include(nodeAlert);
        expect(seen).not.to.include(alertId);
        expect((await listed(outsider)).filter((a) => a.project_id !== null)).to.deep.equal([]);
        // By id: another project's alert is a 404 as a missing one; the installation's is read.
        let res = await as(outsider, 'GET', `/v1/alerts/${alertId}`);
        expect([res.status, res.json?.message], res.text).to.deep.equal([404, `No alert ${alertId}`]);
        res = await as(outsider, 'GET', `/v1/alerts/${nodeAlert}`);
        expect([res.status, res.json?.data?.id], res.text).to.deep.equal([200, nodeAlert]);
        // ?project= of a project it is not a member of: the 400 of one that does not exist.
        for (const project of ['default', 'no-such']) {
          res = await as(outsider, 'GET', `/v1/alerts?project=${project}`);
          expect([res.status, res.json?.message], res.text).to.deep.equal([400, `Validation failed: query.project: no project ${project}`]);
        }
        res = await as(outsider, 'POST', `/v1/alerts/${alertId}/silence`, { minutes: 5 });
        expect(res.status, res.text).to.equal(403);
      }
      // An admin's key limited to default (as a viewer there): its project's alert, and the installation's is none of its business — a 404 as a missing one.
      const key = await api('POST', `/v1/iam/users/${admin.userId}/keys`, { project: 'default', role: 'viewer' });
      expect(key.status, key.text).to.equal(201);
      const byKey = (p: string) => t.request('GET', p, { headers: signRequest({ accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key }, { method: 'GET', pathAndQuery: p }) });
      expect((await byKey(`/v1/alerts/${alertId}`)).json.data?.id).to.equal(alertId);
      const hidden = await byKey(`/v1/alerts/${nodeAlert}`);
      expect([hidden.status, hidden.json?.message], hidden.text).to.deep.equal([404, `No alert ${nodeAlert}`]);
      expect(await ids(viewer, '&project=default')).to.include(alertId).and.not.include(nodeAlert);
      expect((await as(viewer, 'GET', `/v1/alerts/${alertId}`)).json.data).to.include({ id: alertId, resource_id: id });
      expect((await as(other, 'GET', '/v1/alerts?project=team-b')).json.data).to.deep.equal([]);
      // Silencing is the installation's (alert-silences:write): a silence keeps the alert from the operator's
      // notifications and from hangar_alerts_firing, so no project role holds it — not even its project's maintainer.
      for (const who of [viewer, maintainer]) {
        for (const method of ['POST', 'DELETE'] as const) {
          const res = await as(who, method, `/v1/alerts/${alertId}/silence`, method === 'POST' ? { minutes: 5 } : undefined);
          expect([res.status, res.json?.message], res.text).to.deep.equal([403, 'Insufficient permissions: this needs alert-silences:write, and role user does not grant it']);
        }
      }
      expect((await api('GET', `/v1/alerts/${alertId}`)).json.data.silenced).to.equal(false);
      let res = await api('POST', `/v1/alerts/${alertId}/silence`, { minutes: 5 });
      expect([res.status, res.json?.data?.silenced], res.text).to.deep.equal([200, true]);
      res = await api('DELETE', `/v1/alerts/${alertId}/silence`);
      expect([res.status, res.json?.data?.silenced], res.text).to.deep.equal([200, false]);

      // The stream: a change the outsider receives, after the alert's events, shows it was passed over.
      const node = await api('POST', '/v1/nodes', { name: `after-alert-${dialect.name}` });
      expect(node.status, node.text).to.equal(201);
      await asOther!.until('the node, after the alert', 'resource.changed', (d) => d.id === node.json.data.id);
      await asViewer!.until('the node, after the alert', 'resource.changed', (d) => d.id === node.json.data.id);
      expect(asOther!.of('alert.firing', (d) => d.id === alertId)).to.deep.equal([]);
      expect(asOther!.of('resource.changed', (d) => d.id === alertId)).to.deep.equal([]);
      expect(asViewer!.of('resource.changed', (d) => d.id === alertId && d.project_id === fired.json.project_id)).to.not.deep.equal([]);
    } finally {
      for (const s of streams) s.close();
    }
  });

  it('records a cluster member’s readiness alert (its message names the cluster) under the cluster’s project: another project’s member and a user of no project neither list nor read it', async function () {
    this.timeout(60_000);
    const defaultId = (await api('GET', '/v1/projects/default')).json.data.id as string;
    const viewer = await member('cm-viewer', 'default', 'viewer');
    const other = await member('cm-other', 'team-b', 'maintainer');
    const nobody = await member('cm-nobody');
    const as = (headers: Record<string, string>, p: string) => t.request('GET', p, { headers });
    const query = `/v1/alerts?rule=cluster_member_not_ready&resource_id=${manager.nodeId}&limit=1000`;
    // The manager's agent heartbeats (an offline node's readiness is not judged) and the swarm reports it down.
    expect((await manager.agent.heartbeat()).status).to.equal(200);
    memberState = 'down';
    try {
      const firing = await waitFor(async () => ((await api('GET', query)).json.data as Array<Record<string, any>>).find((a) => a.state === 'firing'), { timeoutMs: 20_000, what: 'cluster_member_not_ready to fire' });
      expect(firing).to.include({ resource_type: 'node', resource_id: manager.nodeId, project_id: defaultId });
      expect(firing.message).to.contain('swarm live');
      expect(((await as(viewer, query)).json.data as Array<{ id: string }>).map((a) => a.id)).to.include(firing.id);
      expect((await as(viewer, `/v1/alerts/${firing.id}`)).json.data).to.include({ id: firing.id });
      for (const outsider of [other, nobody]) {
        const listed = await as(outsider, '/v1/alerts?limit=1000');
        expect(listed.status, listed.text).to.equal(200);
        expect((listed.json.data as Array<{ id: string }>).map((a) => a.id)).not.to.include(firing.id);
        expect(listed.text).not.to.contain('swarm live');
        const one = await as(outsider, `/v1/alerts/${firing.id}`);
        expect([one.status, one.json?.message], one.text).to.deep.equal([404, `No alert ${firing.id}`]);
      }
    } finally {
      memberState = 'ready';
    }
  });

  it('lists alerts by project and subscribes by project through the CLI', async function () {
    this.timeout(60_000);
    const firing = ((await api('GET', '/v1/alerts?rule=instance_not_running&state=firing')).json.data as Array<{ id: string }>).map((a) => a.id);
    expect(firing).to.have.length.above(0);
    const ofDefault = JSON.parse(await cli(['alerts', '--project', 'default', '--json'])) as Array<{ id: string }>;
    expect(ofDefault.map((a) => a.id)).to.include.members(firing);
    expect(await cli(['notify', 'subscribe', 'of-any', '--event', 'alert.resolved', '--project', 'team-b'])).to.match(/^subscribed channel nch-\S+ to alert.resolved \(nsub-/);
    const teamB = (await api('GET', '/v1/projects/team-b')).json.data.id as string;
    const listed = (await api('GET', '/v1/notifications/subscriptions')).json.data as Array<{ event_types: string[]; project_id: string | null }>;
    expect(listed.filter((s) => s.event_types.includes('alert.resolved')).map((s) => s.project_id)).to.deep.equal([teamB]);
  });

  it('delivers to a subscription filtered by tags only the events of resources carrying them', async function () {
    this.timeout(60_000);
    const channel = await api('POST', '/v1/notifications/channels', { name: 'of-red', kind: 'webhook', url: receiver.url, headers: { 'X-Channel': 'of-red' } });
    expect(channel.status, channel.text).to.equal(201);
    expect((await api('POST', '/v1/notifications/subscriptions', { channel_id: 'of-red', event_types: ['node.status_changed'], tags: { team: 'red' } })).status).to.equal(201);
    const [red, plain] = await Promise.all(
      ['red', 'plain'].map(async (name) => {
        const res = await api('POST', '/v1/nodes', { name: `${name}-${dialect.name}` });
        expect(res.status, res.text).to.equal(201);
        return FakeAgent.forNode(t, res.json.data.id as string);
      }),
    );
    expect((await api('PUT', '/v1/tags', { resource_type: 'node', resource_id: red!.nodeId, key: 'team', value: 'red' })).status).to.equal(200);
    // The untagged node becomes ready first; then the tagged one, whose change is delivered.
    expect((await plain!.heartbeat()).status).to.equal(200);
    await waitFor(async () => (await api('GET', `/v1/nodes/${plain!.nodeId}`)).json.data.status === 'ready', { timeoutMs: 15_000, what: 'the untagged node ready' });
    expect((await red!.heartbeat()).status).to.equal(200);
    await waitFor(async () => heard('of-red', 'node.status_changed', red!.nodeId).length > 0, { timeoutMs: 20_000, what: 'the tagged node’s change at the channel' });
    expect(heard('of-red', 'node.status_changed', plain!.nodeId)).to.deep.equal([]);
  });

  it('refuses a subscription naming no project with a 400 naming body.project', async () => {
    const res = await api('POST', '/v1/notifications/subscriptions', { channel_id: 'of-any', event_types: ['alert.firing'], project: 'no-such' });
    expect(res.status, res.text).to.equal(400);
    expect(res.json.message).to.contain('body.project').and.to.contain('no-such');
  });
});
