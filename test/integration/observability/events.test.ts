import { expect } from 'chai';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { Stream } from '../../support/event-stream.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { hangarCli } from '../runner/support.js';
import { spawn } from 'node:child_process';
import { BIN } from '../runner/support.js';

describeEachDialect('live events (GET /v1/events/stream)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  const streams: Stream[] = [];
  const open = async (creds: Credentials, extra: Record<string, string> = {}, query = '') => {
    const s = await Stream.open(t, { ...bearer(creds.token), ...extra }, query);
    streams.push(s);
    return s;
  };
  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'events', 'nodes', 'agent-internal'], overrides: { tasks: { lease_seconds: 30 } } });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'watcher', role: 'user' });
  });
  after(async () => {
    for (const s of streams) s.close();
    await t?.stop();
  });

  it('needs credentials and Accept: text/event-stream', async () => {
    expect((await t.request('GET', '/v1/events/stream', { headers: { accept: 'text/event-stream' } })).status).to.equal(401);
    const json = await t.request('GET', '/v1/events/stream', { headers: bearer(admin.token) });
    expect(json.status).to.equal(406);
    expect(json.json.message).to.contain('Accept: text/event-stream');
    const s = await open(admin);
    expect(s.status).to.equal(200);
  });

  it('streams resource changes, node status changes, node events and task states as they happen', async () => {
    const s = await open(admin);
    const created = await api('POST', '/v1/nodes', { name: 'live' });
    const nodeId = created.json.data.id as string;
    await s.until('the node’s insert', 'resource.changed', (d) => d.type === 'node' && d.id === nodeId && d.op === 'insert');
    const agent = await FakeAgent.forNode(t, nodeId);
    expect((await agent.heartbeat()).status).to.equal(200);
    const status = await s.until('the node going ready', 'node.status', (d) => d.node_id === nodeId);
    expect(status.json).to.include({ from: 'pending', to: 'ready' });
    expect(status.id).to.match(/^[a-z0-9]+-\d+$/);
    await s.until('the status change as a node event', 'node.event', (d) => d.node_id === nodeId && d.kind === 'node_status_changed');
    expect((await api('POST', `/v1/nodes/${nodeId}/cordon`)).status).to.equal(200);
    await s.until('the cordon event', 'node.event', (d) => d.node_id === nodeId && d.kind === 'node_cordoned');
    await s.until('the cordon as a change', 'resource.changed', (d) => d.id === nodeId && d.op === 'update');
    const queued = await api('POST', `/v1/nodes/${nodeId}/check-updates`);
    const taskId = queued.json.data.task_id as string;
    await s.until('the task queued', 'task.state', (d) => d.task_id === taskId && d.status === 'pending');
    await agent.poll(0);
    await s.until('the task leased', 'task.state', (d) => d.task_id === taskId && d.status === 'leased');
    await agent.report(taskId, { status: 'completed', output: { pending_updates: 0 } });
    const done = await s.until('the task completed', 'task.state', (d) => d.task_id === taskId && d.status === 'completed');
    expect(done.json).to.include({ node_id: nodeId, kind: queued.json.data.kind });
    expect(done.json.at).to.match(/^\d{4}-\d\d-\d\dT/);
    // Ids grow in the order the events happened.
    const seqs = s.events.map((e) => Number(e.id!.split('-')[1]));
    expect(seqs).to.deep.equal([...seqs].sort((a, b) => a - b));
  });

  it('shows users what they may list (no task states), and filters by type', async () => {
    const asUser = await open(user);
    const nodesOnly = await open(admin, {}, '?types=node.event,node.status');
    const created = await api('POST', '/v1/nodes', { name: 'seen-by-user' });
    const nodeId = created.json.data.id as string;
    const queued = await api('POST', `/v1/nodes/${nodeId}/check-updates`);
    await asUser.until('the insert, for a user', 'resource.changed', (d) => d.id === nodeId);
    expect((await api('POST', `/v1/nodes/${nodeId}/cordon`)).status).to.equal(200);
    await nodesOnly.until('the cordon event on the filtered stream', 'node.event', (d) => d.node_id === nodeId);
    await asUser.until('the cordon event, for a user', 'node.event', (d) => d.node_id === nodeId);
    expect(asUser.of('task.state', (d) => d.task_id === queued.json.data.task_id)).to.deep.equal([]);
    expect(nodesOnly.events.every((e) => e.event === 'node.event' || e.event === 'node.status')).to.equal(true);
    expect((await t.request('GET', '/v1/events/stream?types=nonsense', { headers: { ...bearer(admin.token), accept: 'text/event-stream' } })).status).to.equal(400);
  });

  it('resumes with Last-Event-ID: a reconnecting client gets what it missed, once; an id from another run gets a reset', async () => {
    const first = await open(admin);
    const a = await api('POST', '/v1/nodes', { name: 'before-drop' });
    await first.until('the first insert', 'resource.changed', (d) => d.id === a.json.data.id);
    const lastId = first.lastId!;
    first.close();
    const missed = await api('POST', '/v1/nodes', { name: 'while-away' });
    const again = await open(admin, { 'last-event-id': lastId });
    await again.until('the missed insert', 'resource.changed', (d) => d.id === missed.json.data.id);
    expect(again.of('resource.changed', (d) => d.id === a.json.data.id), 'nothing before the last id seen').to.deep.equal([]);
    expect(again.of('resource.changed', (d) => d.id === missed.json.data.id)).to.have.length(1);
    const stale = await open(admin, { 'last-event-id': 'otherrun-12' });
    const reset = await stale.until('a reset', 'reset');
    expect(reset.json.message).to.contain('reload');
  });

  it('lists the recent events as JSON (GET /v1/events?after=)', async () => {
    const all = (await api('GET', '/v1/events')).json.data as any[];
    expect(all.length).to.be.greaterThan(5);
    const later = (await api('GET', `/v1/events?after=${all[2].id}`)).json.data as any[];
    expect(later.map((e) => e.id)).to.deep.equal(all.slice(3).map((e) => e.id));
    expect((await api('GET', '/v1/events?after=otherrun-1')).status).to.equal(410);
  });

  it('hangar events --follow prints events as they happen', async function () {
    this.timeout(60_000);
    const env = { HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: undefined as string | undefined };
    const caFile = `${t.hangar.services.config.data_dir}/pki/ca.crt`;
    env.HANGAR_CA_FILE = caFile;
    const child = spawn(process.execPath, [BIN, 'events', '--follow', '--types', 'resource.changed'], { env: { ...process.env, ...env } as Record<string, string>, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    try {
      // The command is connected once the stream shows in the journal's listeners.
      const journal = t.hangar.services.provided.get('events') as { listeners: number };
      const before = journal.listeners;
      await waitFor(() => journal.listeners > before, { timeoutMs: 30_000, what: `the CLI to connect (stderr: ${err})` });
      const created = await api('POST', '/v1/nodes', { name: 'followed' });
      const line = await waitFor(() => out.split('\n').find((l) => l.includes(created.json.data.id)), { timeoutMs: 10_000, what: `the CLI to print the change (stdout: ${out}, stderr: ${err})` });
      expect(line).to.match(new RegExp(`^\\d{4}-\\d\\d-\\d\\dT\\S+ resource.changed node ${created.json.data.id} insert$`));
    } finally {
      child.kill('SIGTERM');
    }
    const listed = await hangarCli(['events', '--types', 'resource.changed', '--json'], { env });
    expect(listed.code, listed.stderr).to.equal(0);
    const lines = listed.stdout.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines.some((l) => l.type === 'resource.changed' && l.data.type === 'node' && l.data.op === 'insert' && l.id && l.at)).to.equal(true);
  });
});
