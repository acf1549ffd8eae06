import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { loadConfig } from '../../../core/config.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';

const SCRAPE_TOKEN = 'scrape-0123456789abcdef0123456789abcdef';

/** The sample lines of an exposition text (comments left out), each checked to be one. */
function samples(text: string): string[] {
  const lines = text.split('\n').filter((l) => l && !l.startsWith('#'));
  for (const line of lines) expect(line, 'an exposition sample').to.match(/^[a-zA-Z_:][\w:]*(\{.*\})? \S+$/);
  return lines;
}

/**
 * Issue 30, "/metrics labels": `/metrics` is the operator's (the scrape token's), refused to every
 * user credential, project members' and keys of a project included; a project's members read their
 * project's share at `GET /v1/projects/{id}/metrics`: the series naming its resources (its volumes'
 * backups) where their role reads that kind, and its alerts firing (hangar_alerts_firing) where it
 * reads alerts; nothing of another project or of the installation.
 */
describeEachDialect('metrics by project: /metrics is the scrape token’s, a project’s metrics its members’', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let vera: Credentials;
  let rolf: Credentials;
  let nobody: Credentials;
  const as = (creds: Credentials, path: string) => t.request('GET', path, { headers: bearer(creds.token) });
  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { metrics: { scrape_token: SCRAPE_TOKEN }, alerts: { interval_seconds: 3600 } } });
    admin = await bootstrapAdmin(t);
    const knex = t.hangar.services.db.knex;
    const at = new Date().toISOString();
    const alert = (id: string, rule: string, severity: string, projectId: string | null, more: Record<string, unknown> = {}) =>
      knex('alerts').insert({ id, rule, resource_type: 'service', resource_id: `svc-${id}`, subject: '', open_key: id, severity, state: 'firing', message: id, observed_at: at, started_at: at, resolved_at: null, project_id: projectId, created_at: at, updated_at: at, ...more });
    for (const p of ['a', 'b'] as const) {
      const made = await api('POST', '/v1/projects', { name: `team-${p}` });
      expect(made.status, made.text).to.equal(201);
      // Alerts firing (records: the rules are not checked within the test, every hour), two of team-a's service_not_running and one
      // of team-b's; a silenced one and a resolved one of team-a count for nothing.
      await alert(`alert-metrics${p}1`, 'service_not_running', 'critical', made.json.data.id);
      if (p === 'a') {
        await alert('alert-metricsa2', 'service_not_running', 'critical', made.json.data.id);
        await alert('alert-metricsa3', 'rollout_halted', 'warning', made.json.data.id, { silenced_until: '2100-01-01T00:00:00.000Z' });
        await alert('alert-metricsa4', 'instance_not_running', 'critical', made.json.data.id, { state: 'resolved', resolved_at: at });
      }
      await knex('volumes').insert({ id: `vol-metrics${p}`, name: `metrics-${p}`, node_id: 'node-metricsnobody', folder: `/srv/metrics-${p}`, type: 'local', status: 'ready', project_id: made.json.data.id, created_at: at, updated_at: at });
      await knex('backup_runs').insert({
        id: `bak-metrics${p}`,
        operation: 'backup',
        volume_id: `vol-metrics${p}`,
        target_id: 'bkt-metricsnone',
        node_id: 'node-metricsnobody',
        status: 'succeeded',
        snapshot_id: 'abcdef12',
        bytes: p === 'a' ? 1000 : 2000,
        files: 1,
        duration_seconds: 3,
        started_at: at,
        finished_at: at,
        created_at: at,
        updated_at: at,
      });
    }
    // The installation's (a node's): in /metrics, in no project's.
    await alert('alert-metricsnode', 'node_offline', 'critical', null, { resource_type: 'node', resource_id: 'node-metricsnobody' });
    vera = await createUser(t, admin, { username: 'vera' });
    rolf = await createUser(t, admin, { username: 'rolf' });
    nobody = await createUser(t, admin, { username: 'nobody' });
    expect((await api('PUT', '/v1/projects/team-a/members/vera', { role: 'viewer' })).status).to.equal(201);
    // A role that reads the project and its services, not its volumes or alerts.
    expect((await api('POST', '/v1/projects/team-a/roles', { name: 'service-watch', permissions: ['projects:read', 'services:read'] })).status).to.equal(201);
    expect((await api('PUT', '/v1/projects/team-a/members/rolf', { role: 'service-watch' })).status).to.equal(201);
  });
  const temp = new TempDirs();
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  it('/metrics answers the scrape token alone: every project’s series there, and a 403 to admins, members and keys of a project', async () => {
    const scraped = await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(scraped.status, scraped.text).to.equal(200);
    expect(samples(scraped.text)).to.include.members(['hangar_backup_last_bytes{volume="vol-metricsa"} 1000', 'hangar_backup_last_bytes{volume="vol-metricsb"} 2000']);
    const key = await api('POST', `/v1/iam/users/${vera.userId}/keys`, { description: 'team a', project: 'team-a', role: 'viewer' });
    expect(key.status, key.text).to.equal(201);
    const refusals = [
      await as(admin, '/metrics'),
      await as(vera, '/metrics'),
      await signed(t, { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key }, 'GET', '/metrics'),
    ];
    for (const res of refusals) {
      expect(res.status, res.text).to.equal(403);
      expect(res.text).not.to.contain('hangar_backup');
    }
  });

  it('a project’s metrics: its volumes’ series to a member whose role reads volumes, nothing of another project or of the installation', async () => {
    const res = await as(vera, '/v1/projects/team-a/metrics');
    expect(res.status, res.text).to.equal(200);
    expect(res.headers['content-type']).to.match(/^text\/plain; version=0\.0\.4/);
    expect(res.headers['cache-control']).to.equal('no-store');
    const lines = samples(res.text);
    expect(lines).to.include.members(['hangar_backup_last_bytes{volume="vol-metricsa"} 1000', 'hangar_backup_last_duration_seconds{volume="vol-metricsa"} 3']);
    expect(lines.filter((l) => l.startsWith('hangar_backup_last_success_timestamp_seconds{volume="vol-metricsa"}'))).to.have.length(1);
    expect(res.text).to.contain('# TYPE hangar_backup_last_bytes gauge');
    // Only series naming the project's resources, and its alerts firing: none of team-b's volume, no requests, agents or process.
    const alertLines = lines.filter((l) => l.startsWith('hangar_alerts_firing{'));
    expect(lines.filter((l) => !alertLines.includes(l)).every((l) => l.includes('volume="vol-metricsa"')), lines.join('\n')).to.equal(true);
    // Its alerts firing by rule and severity (not silenced; 0 for the rules on a project's resources that do not fire), not team-b's or the installation's.
    expect(alertLines).to.include.members([
      'hangar_alerts_firing{rule="service_not_running",severity="critical"} 2',
      'hangar_alerts_firing{rule="rollout_halted",severity="warning"} 0',
      'hangar_alerts_firing{rule="instance_not_running",severity="critical"} 0',
    ]);
    expect(alertLines.some((l) => l.includes('node_offline')), 'the installation’s rule').to.equal(false);
    expect(res.text).to.contain('# TYPE hangar_alerts_firing gauge');
    // /metrics counts every alert, as before.
    const scraped = samples((await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) })).text);
    expect(scraped).to.include.members(['hangar_alerts_firing{rule="service_not_running",severity="critical"} 3', 'hangar_alerts_firing{rule="node_offline",severity="critical"} 1']);

    // The CLI's generic call prints it, signed with the member's key.
    const dir = temp.make('hangar-cli-project-metrics-');
    writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
    const env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: vera.accessKeyId, HANGAR_SECRET_KEY: vera.secretAccessKey, HANGAR_CA_FILE: path.join(dir, 'ca.pem') };
    const cli = await hangarCli(['endpoint', 'GET', '/v1/projects/team-a/metrics'], { env });
    expect(cli.code, cli.stderr).to.equal(0);
    expect(cli.stdout).to.contain('hangar_backup_last_bytes{volume="vol-metricsa"} 1000').and.not.contain('vol-metricsb');

    const asAdmin = samples((await as(admin, '/v1/projects/team-b/metrics')).text);
    expect(asAdmin).to.include('hangar_backup_last_bytes{volume="vol-metricsb"} 2000').and.include('hangar_alerts_firing{rule="service_not_running",severity="critical"} 1');
    expect(asAdmin.every((l) => l.includes('volume="vol-metricsb"') || l.startsWith('hangar_alerts_firing{'))).to.equal(true);
  });

  it('another project answers as one that does not exist (404), a member of none gets a 403, and a role that reads no volumes or alerts gets none of their series', async () => {
    const other = await as(vera, '/v1/projects/team-b/metrics');
    expect(other.status, other.text).to.equal(404);
    const none = await as(nobody, '/v1/projects/team-a/metrics');
    expect(none.status, none.text).to.equal(403);
    expect(none.json.message).to.contain('projects:read');
    const watcher = await as(rolf, '/v1/projects/team-a/metrics');
    expect(watcher.status, watcher.text).to.equal(200);
    expect(samples(watcher.text)).to.deep.equal([]);
    // Removed from the project, the member reads it no more.
    expect((await api('DELETE', '/v1/projects/team-a/members/vera')).status).to.equal(200);
    expect((await as(vera, '/v1/projects/team-a/metrics')).status).to.equal(403);
  });
});
