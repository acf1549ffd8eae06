import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { randomToken } from '../../core/ids.js';
import { cleanupAgents, FAST_NODES, joinedNodeId, spawnAgent, waitFor } from '../support/agents.js';
import { logIn, navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../support/identity.js';
import { holdingRestic } from '../support/holding-restic.js';
import { requireService } from '../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, s3Availability, sharedS3Server, type S3Server } from '../support/s3-server.js';
import { loadConfig } from '../../core/config.js';

/**
 * The dashboard's Backups page in chromium against a real control plane, a real agent with restic
 * and the real S3 server: a volume's last backup with its size and restore drill, the targets and
 * schedules, the control plane's archives (not configured: the page says what to set), and a
 * restore started from the page with its confirmation, after which the folder holds the backup
 * again. On SQLite and PostgreSQL; the backups themselves are test/integration/backups.
 */
describeEachDialect('the dashboard in chromium: backups', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let s3: S3Server | undefined;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  let work: string;
  let folder: string;
  let volumeId: string;
  let backupId: string;
  let hold: string;
  let targetId: string;
  const storage = dialect.freshStorage();
  const overrides = { ...FAST_NODES, tasks: { poll_wait_seconds: 5 } };
  const api = (method: string, url: string, body?: unknown) => t.request(method, url, { headers: bearer(admin.token), body });

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS + 90_000);
    requireBrowser(this);
    const restic = spawnSync('sh', ['-c', 'command -v restic'], { encoding: 'utf8' }).stdout.trim();
    requireService(this, !!restic, 'restic on this machine (apt-get install restic; .ci/run installs it)');
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    s3 = await sharedS3Server();
    const bucket = await s3.bucket(`dash-${randomToken(6).toLowerCase()}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-dash-backups-'));
    const bin = path.join(work, 'bin');
    mkdirSync(bin);
    // The real restic, which the progress case holds mid-backup while it looks at the page.
    hold = path.join(work, 'hold');
    holdingRestic(bin, restic, hold);
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, storage, overrides });
    admin = await bootstrapAdmin(t);
    const token = await api('POST', '/v1/nodes/token', {});
    const nodeId = await joinedNodeId(spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: bin }));
    await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the node to be ready' });
    const target = await api('POST', '/v1/backups/targets', {
      name: 'offsite',
      endpoint: s3.endpoint,
      bucket: bucket.name,
      access_key_id: s3.credentials.accessKeyId,
      secret_access_key: s3.credentials.secretAccessKey,
    });
    expect(target.status, target.text).to.equal(201);
    targetId = target.json.data.id;
    folder = path.join(work, 'data', 'pgdata');
    mkdirSync(folder, { recursive: true });
    writeFileSync(path.join(folder, 'table.dat'), 'the rows as backed up\n');
    const volume = await api('POST', '/v1/volumes', { name: 'pgdata', node_id: nodeId, folder, type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    volumeId = volume.json.data.id;
    await waitFor(async () => (await api('GET', `/v1/volumes/${volumeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the volume to be ready' });
    const backup = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: 'offsite', verify: true });
    expect(backup.status, backup.text).to.equal(202);
    backupId = backup.json.data.backup.id;
    await waitFor(
      async () => ((await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Array<{ id: string; verified: boolean | null }>).find((r) => r.id === backupId && r.verified !== null),
      { timeoutMs: 60_000, intervalMs: 300, what: 'the backup and its drill to finish' },
    );
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
  });
  after(async function () {
    this.timeout(60_000);
    await closeBrowser?.();
    await cleanupAgents();
    await t?.stop();
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('shows the volume’s last backup (size, verified), the target and the control plane’s state', async function () {
    this.timeout(60_000);
    await logIn(page, t.url, admin.username, admin.password);
    await navigate(page, 'Backups');
    await page.getByRole('heading', { name: 'Backups' }).waitFor();
    const row = tableRow(page, 'Volume backups', 'pgdata');
    await row.getByText('succeeded').waitFor();
    const text = await row.textContent();
    expect(text).to.contain('1 files').and.to.contain('yes');
    expect(await tableRow(page, 'Backup targets', 'offsite').textContent()).to.contain(s3!.endpoint);
    await page.getByText('No backup schedules.').waitFor();
    // Not configured here: the section says what to set.
    await page.getByText('set backups.control_plane.target and backups.control_plane.passphrase_file').waitFor();
    await shot('backups');
  });

  it('restores the volume from the page after its confirmation: the folder holds the backup again', async function () {
    this.timeout(60_000);
    writeFileSync(path.join(folder, 'table.dat'), 'rows written after the backup\n');
    const row = tableRow(page, 'Volume backups', 'pgdata');
    await row.getByRole('button', { name: 'Restore' }).click();
    const dialog = page.getByRole('dialog', { name: 'Restore volume pgdata' });
    expect(await dialog.textContent()).to.contain(backupId).and.to.contain('what was written since is lost');
    await dialog.getByRole('button', { name: 'Restore' }).click();
    await page.getByText('restore of pgdata started').waitFor();
    await waitFor(async () => ((await api('GET', `/v1/volumes/${volumeId}/restores`)).json.data as Array<{ status: string }>).at(-1)?.status === 'succeeded', {
      timeoutMs: 30_000,
      intervalMs: 300,
      what: 'the restore to succeed',
    });
    expect(readFileSync(path.join(folder, 'table.dat'), 'utf8')).to.equal('the rows as backed up\n');
  });

  it('a backup started from the page shows its progress while restic reads: the share and the bytes', async function () {
    this.timeout(60_000);
    writeFileSync(path.join(folder, 'big.dat'), randomBytes(6 * 2 ** 20));
    writeFileSync(hold, String(6 * 2 ** 20 + 'the rows as backed up\n'.length));
    try {
      const row = tableRow(page, 'Volume backups', 'pgdata');
      await row.getByRole('button', { name: 'Back up' }).click();
      const dialog = page.getByRole('dialog', { name: 'Back volume pgdata up' });
      await dialog.getByLabel('Target (id or name)').fill('offsite');
      await dialog.getByRole('button', { name: 'Back up' }).click();
      await page.getByText('backup of pgdata started').waitFor();
      // restic is held once it has scanned the folder; the row reads the figures its agent reports.
      await row.getByText(/\d+% · \d+ MiB of 6 MiB/).waitFor({ timeout: 30_000 });
      await shot('backup-progress');
    } finally {
      rmSync(hold, { force: true });
    }
    await waitFor(async () => ((await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Array<{ status: string }>).at(-1)?.status === 'succeeded', {
      timeoutMs: 30_000,
      intervalMs: 300,
      what: 'the backup to succeed',
    });
    rmSync(path.join(folder, 'big.dat'));
  });

  it('a restore started from the page shows its progress while restic writes: the share and the bytes of the snapshot', async function () {
    this.timeout(60_000);
    const restores = async () => (await api('GET', `/v1/volumes/${volumeId}/restores`)).json.data as Array<{ id: string; status: string }>;
    const earlier = new Set((await restores()).map((r) => r.id));
    // restic is stopped once it has written 1 MiB of the backup just taken (6 MiB and the rows).
    writeFileSync(hold, String(2 ** 20));
    try {
      const row = tableRow(page, 'Volume backups', 'pgdata');
      // The row has read the backup's end (its size): the restore button restores that backup.
      await row.getByText('6 MiB · 2 files').waitFor();
      await row.getByRole('button', { name: 'Restore' }).click();
      await page.getByRole('dialog', { name: 'Restore volume pgdata' }).getByRole('button', { name: 'Restore' }).click();
      await page.getByText('restore of pgdata started').waitFor();
      await row.getByText(/\d+% · [\d.]+ MiB of 6 MiB/).waitFor({ timeout: 30_000 });
      await shot('restore-progress');
    } finally {
      rmSync(hold, { force: true });
    }
    await waitFor(async () => (await restores()).find((r) => !earlier.has(r.id))?.status === 'succeeded', { timeoutMs: 30_000, intervalMs: 300, what: 'the restore to succeed' });
    expect(readFileSync(path.join(folder, 'big.dat')).length).to.equal(6 * 2 ** 20);
  });

  it('the control plane’s own backups with a target set: the last success, then the failures in a row and the last error, no secret', async function () {
    this.timeout(120_000);
    // The operator sets backups.control_plane.target and restarts the control plane (the last case: the agent is left behind).
    const passphraseFile = path.join(work, 'passphrase');
    writeFileSync(passphraseFile, 'a passphrase of the dashboard suite\n', { mode: 0o600 });
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'Log in to hangar' }).waitFor();
    await t.stop();
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, storage, overrides: { ...overrides, backups: { control_plane: { target: targetId, passphrase_file: passphraseFile } } } });
    const facts = page.getByLabel('Control-plane backups', { exact: true });
    const fact = (name: string) => facts.locator('div', { has: page.locator('dt', { hasText: name }) }).locator('dd');
    const backUp = async () => {
      await page.getByRole('button', { name: 'Back up the control plane' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Back up', exact: true }).click();
    };
    await logIn(page, t.url, admin.username, admin.password);
    await navigate(page, 'Backups');
    await fact('Target').getByText(targetId).waitFor();
    expect(await fact('Last success').innerText()).to.equal('never');
    expect(await fact('Failures in a row').innerText()).to.equal('0');

    await backUp();
    await page.locator('.notice').filter({ hasText: /control-plane archive uploaded|failed|cannot/ }).first().waitFor({ timeout: 60_000 });
    expect(await page.locator('.notice').allInnerTexts()).to.deep.equal(['control-plane archive uploaded']);
    await fact('Last success').locator('time').waitFor();
    expect(await fact('Failures in a row').innerText()).to.equal('0');
    expect(await fact('Last error').innerText()).to.equal('–');

    // The passphrase file gone: the next backup fails, and the page says so with the API's reason.
    rmSync(passphraseFile);
    await backUp();
    await page.locator('.notice.error').filter({ hasText: 'cannot read it (ENOENT)' }).waitFor({ timeout: 30_000 });
    await fact('Failures in a row').getByText('1', { exact: true }).waitFor();
    expect(await fact('Last error').innerText()).to.contain(`backups.control_plane.passphrase_file ${passphraseFile}: cannot read it (ENOENT)`);
    await fact('Last success').locator('time').waitFor();
    await shot('backups-control-plane-failing');

    const state = await api('GET', '/v1/backups/control-plane/state');
    expect(state.status, state.text).to.equal(200);
    expect(state.json.data).to.include({ target_id: targetId, consecutive_failures: 1, scheduled: false });
    expect(state.text).not.to.contain(s3!.credentials.secretAccessKey);
    // The installation's own: a user without control-plane:read is refused.
    const user = await createUser(t, admin, { username: 'uma' });
    expect((await t.request('GET', '/v1/backups/control-plane/state', { headers: bearer(user.token) })).status).to.equal(403);
  });
});
