import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ManualClock } from '../../../core/clock.js';
import { randomToken } from '../../../core/ids.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, type S3Server, s3Availability, sharedS3Server, type S3Bucket } from '../../support/s3-server.js';
import { TcpRelay } from '../../support/tcp-relay.js';
import { Receiver } from '../notifications/receiver.js';

const PLUGINS = ['system', 'iam', 'nodes', 'volumes', 'backups', 'metrics', 'alerts', 'notifications'];
const PASSPHRASE = `failing-${randomToken(16)}`;
const SCRAPE_TOKEN = 'scrape-cp-backups-0123456789abcdef0123456789';
/** control_plane_backup_stale's after_hours: 36 s of the test's clock. */
const AFTER_HOURS = 0.01;
const LOOPBACK = { allow_http: true, allow_private_addresses: true, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100, timeout_seconds: 5 };
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface Announced {
  type: string;
  severity: string;
  message: string;
  data: { trigger: string; target_id: string; error: string | null; key: string | null; failures_in_row: number };
}

/**
 * The control plane's own backups (backups.control_plane) failing and recovering, as an operator
 * hears of it: its target is the real S3 server behind a port that stops answering (a relay
 * closed) and answers again. A failure on request and on the schedule is recorded and announced
 * (`control_plane.backup.failed`, to a real webhook receiver), the schedule backs off, the metrics
 * say how it stands, `control_plane_backup_stale` fires once no backup has succeeded for
 * after_hours and resolves after the schedule's next backup succeeds. The control plane's clock is
 * the test's (moved on to make the schedule due and the alert's hours pass).
 */
describeEachDialect('control-plane backups that fail: recorded, announced, alerted', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let s3: S3Server;
  let bucket: S3Bucket;
  let relay: TcpRelay;
  let work: string;
  let targetId: string;
  // Behind the wall clock, as it is moved on (the notifications' outbox takes deliveries due by the wall clock).
  const clock = new ManualClock(Date.now() - 15 * 60_000);
  const receiver = new Receiver();
  const storage = dialect.freshStorage();

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const announced = (type: string) => receiver.requests.filter((r) => r.event === type).map((r) => r.body as Announced);
  const metric = async (name: string): Promise<number | null> => {
    const res = await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(res.status, res.text).to.equal(200);
    const line = res.text.split('\n').find((l) => l.startsWith(`${name} `));
    return line ? Number(line.split(' ')[1]) : null;
  };
  const alert = (state: string) =>
    waitFor(async () => ((await api('GET', `/v1/alerts?rule=control_plane_backup_stale&state=${state}`)).json.data as Array<Record<string, string>>)[0] ?? null, {
      timeoutMs: 20_000,
      what: `control_plane_backup_stale to be ${state}`,
    });
  const noSecretIn = (text: string) => {
    for (const secret of [s3.credentials.secretAccessKey, PASSPHRASE]) expect(text, 'a secret').not.to.include(secret);
  };

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    s3 = await sharedS3Server();
    bucket = await s3.bucket(`cpf-${randomToken(6).toLowerCase()}`);
    const upstream = new URL(s3.endpoint);
    relay = new TcpRelay({ host: upstream.hostname, port: Number(upstream.port) });
    await relay.open();
    await receiver.start();
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-cp-failures-'));
    const passphraseFile = path.join(work, 'passphrase');
    writeFileSync(passphraseFile, `${PASSPHRASE}\n`, { mode: 0o600 });
    const overrides = {
      metrics: { scrape_token: SCRAPE_TOKEN },
      notifications: LOOPBACK,
      alerts: { interval_seconds: 1, hold_down_seconds: 0, rules: { control_plane_backup_stale: { after_hours: AFTER_HOURS } } },
    };
    // The target first (its id goes into the configuration), then the control plane as an operator restarts it with the schedule.
    t = await startHangar(dialect, { plugins: PLUGINS, storage, clock, overrides });
    admin = await bootstrapAdmin(t);
    const target = await api('POST', '/v1/backups/targets', {
      name: 'offsite',
      endpoint: `http://127.0.0.1:${relay.port}`,
      bucket: bucket.name,
      prefix: 'prod',
      access_key_id: s3.credentials.accessKeyId,
      secret_access_key: s3.credentials.secretAccessKey,
    });
    expect(target.status, target.text).to.equal(201);
    targetId = target.json.data.id;
    await t.stop();
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      storage,
      clock,
      overrides: { ...overrides, backups: { schedule_check_seconds: 1, control_plane: { target: targetId, passphrase_file: passphraseFile, cron: '* * * * *', keep_last: 2 } } },
    });
    const channel = await api('POST', '/v1/notifications/channels', { name: 'ops', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    const subscription = await api('POST', '/v1/notifications/subscriptions', { channel_id: channel.json.data.id, event_types: ['control_plane.backup.failed', 'control_plane.backup.succeeded'] });
    expect(subscription.status, subscription.text).to.equal(201);
  });

  after(async function () {
    this.timeout(60_000);
    await t?.stop().catch(() => undefined);
    await relay?.close();
    await receiver.stop();
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('a backup on request to an unreachable target answers 409 with the reason, and is recorded and announced (control_plane.backup.failed) with no secret', async function () {
    this.timeout(60_000);
    await relay.close();
    const res = await api('POST', '/v1/backups/control-plane');
    expect(res.status, res.text).to.equal(409);
    expect(res.json.message).to.match(/^uploading to backup target offsite failed: .*ECONNREFUSED/);
    const [failed] = await waitFor(() => (announced('control_plane.backup.failed').length ? announced('control_plane.backup.failed') : null), { timeoutMs: 20_000, what: 'control_plane.backup.failed at the receiver' });
    expect(failed).to.deep.include({ type: 'control_plane.backup.failed', severity: 'critical' });
    expect(failed!.data).to.include({ trigger: 'request', target_id: targetId, key: null, failures_in_row: 1 });
    expect(failed!.data.error).to.equal(res.json.message);
    expect(failed!.message).to.equal(`the control plane’s backup to backup target ${targetId} failed: ${res.json.message}`);
    expect(receiver.requests.at(-1)!.verified, 'the delivery is signed').to.equal(true);
    for (const r of receiver.requests) noSecretIn(r.raw);
    noSecretIn(res.text);
    expect(await metric('hangar_control_plane_backup_consecutive_failures')).to.equal(1);
    expect(await metric('hangar_control_plane_backup_last_success_timestamp_seconds'), 'no backup has succeeded: 0').to.equal(0);
  });

  it('the schedule’s backup that fails is announced too, and tried again only after a back-off', async function () {
    this.timeout(60_000);
    // The cron expression's next minute comes.
    clock.advance(61_000);
    const scheduled = await waitFor(() => announced('control_plane.backup.failed').find((e) => e.data.trigger === 'schedule'), { timeoutMs: 20_000, what: 'the scheduled backup to fail' });
    expect(scheduled.data).to.include({ failures_in_row: 2 });
    expect(scheduled.data.error).to.match(/^listing backup target offsite failed: .*ECONNREFUSED/);
    expect(scheduled.message).to.match(/^the control plane’s scheduled backup to backup target bkt-\w+ failed \(2 in a row\): /);
    // Its next try waits for the back-off (2 s of the control plane's clock, which stands still here) however often the schedule is checked.
    await sleep(3000);
    expect(announced('control_plane.backup.failed')).to.have.length(2);
    expect(await metric('hangar_control_plane_backup_consecutive_failures')).to.equal(2);
    // The state the Backups page shows: the failures in a row, the last one's reason and when the schedule tries again.
    const state = await api('GET', '/v1/backups/control-plane/state');
    expect(state.status, state.text).to.equal(200);
    expect(state.json.data).to.include({ target_id: targetId, scheduled: true, last_success_at: null, consecutive_failures: 2, last_error: scheduled.data.error });
    expect(Date.parse(state.json.data.next_retry_at) - Date.parse(state.json.data.last_failure_at), 'the back-off after 2 failures: twice schedule_check_seconds').to.equal(2000);
    noSecretIn(state.text);
  });

  it('control_plane_backup_stale fires once no backup has succeeded for after_hours, and resolves after the schedule’s next backup succeeds', async function () {
    this.timeout(60_000);
    clock.advance(40_000);
    const firing = await alert('firing');
    expect(firing).to.include({ resource_type: 'control_plane', resource_id: 'backup', severity: 'critical', project_id: null });
    expect(firing.message).to.match(new RegExp(`^the control plane: no backup to backup target ${targetId} has succeeded since the first was tried \\(.+\\); \\d+ failed since, the last on .+: (uploading to|listing) backup target offsite failed: .*ECONNREFUSED`));
    noSecretIn(JSON.stringify(firing));

    // The target answers again: the schedule's next try (after its back-off) uploads an archive.
    await relay.open();
    clock.advance(60_000);
    const [succeeded] = await waitFor(() => (announced('control_plane.backup.succeeded').length ? announced('control_plane.backup.succeeded') : null), { timeoutMs: 30_000, what: 'control_plane.backup.succeeded' });
    expect(succeeded!.severity).to.equal('info');
    expect(succeeded!.data).to.include({ trigger: 'schedule', target_id: targetId, error: null, failures_in_row: 0 });
    expect(await bucket.list('prod/hangar-control-plane/')).to.deep.equal([succeeded!.data.key]);
    const resolved = await alert('resolved');
    expect(resolved.id).to.equal(firing.id);
    expect(await metric('hangar_control_plane_backup_consecutive_failures')).to.equal(0);
    const archived = ((await api('GET', '/v1/backups/control-plane')).json.data as Array<{ key: string; created_at: string }>)[0]!;
    expect(await metric('hangar_control_plane_backup_last_success_timestamp_seconds')).to.equal(Math.floor(Date.parse(archived.created_at) / 1000));
    const state = (await api('GET', '/v1/backups/control-plane/state')).json.data;
    expect(state).to.include({ consecutive_failures: 0, last_failure_at: null, last_error: null, next_retry_at: null });
    expect(Date.parse(state.last_success_at)).to.equal(Date.parse(archived.created_at));
  });
});
