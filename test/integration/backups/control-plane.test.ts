import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import knexFactory from 'knex';
import YAML from 'yaml';
import { entryFromBytes, extractArchive, writeArchive, entryFromFile } from '../../../core/backup/archive.js';
import { httpRequest } from '../../../core/http/client.js';
import { randomToken } from '../../../core/ids.js';
import { cleanupAgents, FAST_NODES, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect, TEST_MASTER_KEY, TestDialect, type DialectName } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../../support/identity.js';
import { PG_URL, postgresAvailable, requireService } from '../../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, type S3Server, s3Availability, sharedS3Server, type S3Bucket } from '../../support/s3-server.js';
import { BIN, hangarCli } from '../runner/support.js';
import { signRequest } from '../../../core/auth/hmac.js';
import { archiveName } from '../../../plugins/backups/control-plane.js';
import { freePort } from '../../support/ports.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'volumes', 'backups'];
const PASSPHRASE = `drill-${randomToken(16)}`;

type Storage = { dataDir: string; schema: string | null };

/** The environment that points `hangar` (backup create, restore, serve) at one installation. */
function envFor(dialect: DialectName, storage: Storage, withMasterKey = dialect === 'postgres'): Record<string, string> {
  return {
    NODE_ENV: 'test',
    HANGAR_DATA_DIR: storage.dataDir,
    HANGAR_PLUGINS: PLUGINS.join(','),
    ...(dialect === 'postgres' ? { HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: storage.schema! } : {}),
    ...(withMasterKey ? { HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY } : {}),
  };
}

/**
 * The control plane's own backup and restore drill: an installation with users, API keys, a
 * backup target (its secret sealed) and a joined agent is backed up with `hangar backup create`
 * while it serves, restored with `hangar restore` into a new data dir and database, and started
 * with `hangar serve --config <restored-config.yaml>` on the same address: the users log in, an API
 * key's sealed secret still verifies HMAC requests, the CA is the same and the agent comes back on
 * its own with its client certificate. The same archive is also restored into the other dialect.
 */
describeEachDialect('control-plane backup and restore (hangar backup create, hangar restore)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let alice: Credentials;
  let s3: S3Server;
  let bucket: S3Bucket;
  let work: string;
  let storage: Storage;
  let archive: string;
  let passphraseFile: string;
  let nodeId: string;
  let targetId: string;
  let port: number;
  let caPem: string;
  /** An archive name written by someone with the bucket's keys (not an archive), newer than every real one. */
  let fake: string;
  let serve: ChildProcess | null = null;
  let serveOutput = '';
  const secrets: string[] = [];

  const cli = (args: string[], env: Record<string, string>) => hangarCli(args, { env, timeoutMs: 120_000 });
  const noSecretIn = (text: string) => {
    for (const s of secrets) expect(text, 'a secret in the CLI output').not.to.include(s);
  };

  /** The bucket's keys as a new machine gives them to `hangar restore --from`: in the environment. */
  const bucketKeys = (secret = s3.credentials.secretAccessKey) => ({ AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: secret });

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    s3 = await sharedS3Server(); // one for both dialects and both backups files; buckets of their own
    bucket = await s3.bucket(`cp-${randomToken(6).toLowerCase()}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-cp-backup-'));
    passphraseFile = path.join(work, 'passphrase');
    writeFileSync(passphraseFile, `${PASSPHRASE}\n`, { mode: 0o600 });
    archive = path.join(work, 'control-plane.hcpb');
    storage = dialect.freshStorage();
    // A fixed port, as an installation has: the restored control plane serves at the same address
    // (the agent's, and the issuer of the tokens handed out before the backup).
    port = await freePort();
    t = await startHangar(dialect, { plugins: PLUGINS, storage, overrides: { ...FAST_NODES, api: { port } } });
    caPem = t.caPem;
    admin = await bootstrapAdmin(t);
    alice = await createUser(t, admin, { username: `alice-${randomToken(4).toLowerCase()}`, role: 'user' });
    const target = await t.request('POST', '/v1/backups/targets', {
      headers: bearer(admin.token),
      body: { name: 'offsite', endpoint: s3.endpoint, bucket: bucket.name, prefix: 'prod', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey },
    });
    expect(target.status, target.text).to.equal(201);
    targetId = target.json.data.id;
    const token = await t.request('POST', '/v1/nodes/token', { headers: bearer(admin.token), body: {} });
    const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url } });
    nodeId = await joinedNodeId(agent);
    await waitFor(async () => (await t.request('GET', `/v1/nodes/${nodeId}`, { headers: bearer(admin.token) })).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the node to be ready' });
    secrets.push(PASSPHRASE, TEST_MASTER_KEY, GOOD_PASSWORD, admin.secretAccessKey, alice.secretAccessKey, s3.credentials.secretAccessKey);
    // The JWT secret and a line of the CA key, where they are files (SQLite without a master key).
    for (const f of ['jwt-secret', 'pki/ca.key']) {
      const file = path.join(storage.dataDir, f);
      if (existsSync(file)) secrets.push(readFileSync(file, 'utf8').split('\n').find((l) => l.length > 40 && !l.startsWith('-----'))!);
    }
  });

  after(async function () {
    this.timeout(60_000);
    await cleanupAgents();
    if (serve && serve.exitCode === null) {
      serve.kill('SIGTERM');
      await new Promise((r) => serve!.once('exit', r));
    }
    await t?.stop().catch(() => undefined);
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('backs the serving control plane up into one encrypted file; the output names it and carries no secret', async function () {
    this.timeout(120_000);
    // Files the restore must not carry as they are: a key readable by others, a setuid program, a symbolic link.
    writeFileSync(path.join(storage.dataDir, 'extra.key'), 'not really a key', { mode: 0o644 });
    chmodSync(path.join(storage.dataDir, 'extra.key'), 0o644);
    writeFileSync(path.join(storage.dataDir, 'tool.sh'), '#!/bin/sh\n');
    chmodSync(path.join(storage.dataDir, 'tool.sh'), 0o4755);
    symlinkSync(passphraseFile, path.join(storage.dataDir, 'linked'));
    const res = await cli(['backup', 'create', '--to', archive, '--passphrase-file', passphraseFile], envFor(dialect.name, storage));
    expect(res.code, res.stderr).to.equal(0);
    expect(res.stdout).to.include(`control-plane backup written to ${archive}`);
    expect(res.stdout).to.include('not carried (keep it yourself): data dir: linked (a symbolic link)');
    expect(existsSync(`${archive}.partial`)).to.equal(false);
    // No plaintext staging left next to the archive.
    expect(readdirSync(work).filter((n) => n.startsWith('.hangar-staging-'))).to.deep.equal([]);
    // An existing file is replaced only with --force.
    const again = await cli(['backup', 'create', '--to', archive, '--passphrase-file', passphraseFile], envFor(dialect.name, storage));
    expect(again.code).to.equal(1);
    expect(again.stderr).to.include(`${archive} exists: give another --to, or --force to replace it`);
    const forced = await cli(['backup', 'create', '--to', archive, '--passphrase-file', passphraseFile, '--force'], envFor(dialect.name, storage));
    expect(forced.code, forced.stderr).to.equal(0);
    // TLS files the configuration names outside the data dir are not carried: the output says so.
    const tls = await cli(['backup', 'create', '--to', path.join(work, 'tls.hcpb'), '--passphrase-file', passphraseFile], {
      ...envFor(dialect.name, storage),
      HANGAR_API__TLS_CERT: '/etc/hangar-test/server.crt',
      HANGAR_API__TLS_KEY: '/etc/hangar-test/server.key',
    });
    expect(tls.code, tls.stderr).to.equal(0);
    expect(tls.stdout).to.include('not carried (keep it yourself): api.tls_cert /etc/hangar-test/server.crt (outside the data dir)');
    expect(tls.stdout).to.include('not carried (keep it yourself): api.tls_key /etc/hangar-test/server.key (outside the data dir)');
    expect(res.stdout).to.include(`store: ${dialect.name}`);
    noSecretIn(res.stdout + res.stderr);
    expect(statSync(archive).mode & 0o777).to.equal(0o600);
    const bytes = readFileSync(archive);
    expect(bytes.subarray(0, 28).toString()).to.equal('HANGAR-CONTROL-PLANE-BACKUP ');
    // Encrypted: no key, user name or passphrase in the clear.
    for (const clear of ['PRIVATE KEY', alice.username, PASSPHRASE, 'hangar_migrations']) expect(bytes.includes(Buffer.from(clear)), clear).to.equal(false);
  });

  it('uploads the archive to a backup target with --target, under <prefix>/hangar-control-plane/', async function () {
    this.timeout(120_000);
    const res = await cli(['backup', 'create', '--target', 'offsite', '--passphrase-file', passphraseFile], envFor(dialect.name, storage));
    expect(res.code, res.stderr).to.equal(0);
    noSecretIn(res.stdout + res.stderr);
    const keys = await bucket.list('prod/hangar-control-plane/');
    expect(keys).to.have.length(1);
    expect(res.stdout).to.include(`target offsite: s3://${bucket.name}/${keys[0]}`);
    const uploaded = path.join(work, 'uploaded.hcpb');
    writeFileSync(uploaded, await bucket.get(keys[0]!));
    const manifest = await extractArchive(uploaded, PASSPHRASE, mkdtempSync(path.join(work, 'x-')));
    expect(manifest.dialect).to.equal(dialect.name);
    const unknown = await cli(['backup', 'create', '--target', 'nowhere', '--passphrase-file', passphraseFile], envFor(dialect.name, storage));
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.include('no backup target nowhere');
    expect(targetId).to.match(/^bkt-/);

    // What a new machine sees there: `hangar restore --from` lists the bucket's archives with the keys in the environment.
    const from = ['restore', '--from', `s3://${bucket.name}/prod`, '--endpoint', s3.endpoint];
    const listed = await cli([...from, '--list'], { ...bucketKeys(), HANGAR_DATA_DIR: work });
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.stdout).to.match(new RegExp(`^${path.posix.basename(keys[0]!).replace(/\./g, '\\.')}  \\d+ bytes  `));
    const refused = await cli([...from, '--list'], { ...bucketKeys('not-the-secret'), HANGAR_DATA_DIR: work });
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.include('credentials refused');
    noSecretIn(refused.stderr);
    const missing = await cli([...from, '--snapshot', 'hangar-control-plane-19990101T000000Z', '--passphrase-file', passphraseFile], { ...bucketKeys(), HANGAR_DATA_DIR: work });
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.include(`no archive hangar-control-plane-19990101T000000Z.hcpb under prod/hangar-control-plane/ (there: ${path.posix.basename(keys[0]!)}`);
    const noKeys = await cli([...from, '--list'], { HANGAR_DATA_DIR: work });
    expect(noKeys.code).to.equal(2);
    expect(noKeys.stderr).to.include('AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY');
  });

  it('backs itself up on POST /v1/backups/control-plane into backups.control_plane.target, keeping keep_last archives, and lists them', async function () {
    this.timeout(120_000);
    // As an operator does: the target's id into the configuration, and the control plane restarted at its address.
    await t.stop();
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      storage,
      overrides: { ...FAST_NODES, api: { port }, backups: { control_plane: { target: targetId, passphrase_file: passphraseFile, keep_last: 2 } } },
    });
    const [byCli] = await bucket.list('prod/hangar-control-plane/');
    const made: Array<{ key: string; bytes: number; created_at: string }> = [];
    for (let i = 0; i < 2; i++) {
      const res = await t.request('POST', '/v1/backups/control-plane', { headers: bearer(admin.token) });
      expect(res.status, res.text).to.equal(201);
      noSecretIn(res.text);
      made.push(res.json.data);
    }
    for (const archive of made) expect(archive.key).to.match(/^prod\/hangar-control-plane\/hangar-control-plane-\d{8}T\d{6}\.\d{3}Z\.hcpb$/);
    // keep_last 2: the one hangar backup create --target uploaded before is gone, the two new ones are there.
    expect(await bucket.list('prod/hangar-control-plane/')).to.deep.equal(made.map((a) => a.key));
    expect(byCli, 'the archive hangar backup create --target uploaded before, which keep_last removed').to.match(/\/hangar-control-plane-\d{8}T\d{6}(\.\d{3})?Z\.hcpb$/);
    const listed = await t.request('GET', '/v1/backups/control-plane', { headers: bearer(admin.token) });
    expect(listed.status, listed.text).to.equal(200);
    expect(listed.json.data).to.deep.equal(made.map((a) => ({ ...a, recorded: true })));
    // What it uploaded is an archive of this installation that the passphrase opens.
    const file = path.join(work, 'by-server.hcpb');
    writeFileSync(file, await bucket.get(made[1]!.key));
    expect((await extractArchive(file, PASSPHRASE, mkdtempSync(path.join(work, 'y-')))).dialect).to.equal(dialect.name);
    // Admins' only.
    const signed = signRequest({ accessKeyId: alice.accessKeyId, secretAccessKey: alice.secretAccessKey }, { method: 'POST', pathAndQuery: '/v1/backups/control-plane' });
    expect((await t.request('POST', '/v1/backups/control-plane', { headers: signed })).status).to.equal(403);
    // The target that holds them is not deleted from under them.
    const deleted = await t.request('DELETE', `/v1/backups/targets/${targetId}?force=true`, { headers: bearer(admin.token) });
    expect(deleted.status).to.equal(409);
    expect(deleted.json.message).to.include("holds the control plane's own backups (backups.control_plane.target)");
    // An archive named in the future (a machine whose clock ran ahead) does not stop the schedule: it is not the newest believed.
    await bucket.put('prod/hangar-control-plane/hangar-control-plane-99991231T000000.000Z.hcpb', 'not an archive');
    const future = 'prod/hangar-control-plane/hangar-control-plane-99991231T000000.000Z.hcpb';
    // Nor does a name anyone with the bucket's keys writes for the recent past (here five minutes ahead: within a clock's skew).
    fake = `prod/hangar-control-plane/${archiveName(new Date(Date.now() + 5 * 60_000))}`;
    await bucket.put(fake, 'not an archive either');
    const again = await t.request('POST', '/v1/backups/control-plane', { headers: bearer(admin.token) });
    expect(again.status, again.text).to.equal(201);
    // keep_last counts the archives it recorded uploading: the oldest of those goes; the future and the fake names are left alone and counted for nothing.
    expect(await bucket.list('prod/hangar-control-plane/')).to.deep.equal([made[1]!.key, again.json.data.key, fake, future]);
    const recorded = (await t.request('GET', '/v1/backups/control-plane', { headers: bearer(admin.token) })).json.data as Array<{ key: string; recorded: boolean }>;
    expect(recorded.map((a) => [a.key, a.recorded])).to.deep.equal([
      [made[1]!.key, true],
      [again.json.data.key, true],
      [fake, false],
      [future, false],
    ]);
  });

  it('refuses a wrong passphrase, a damaged or truncated archive, a short passphrase and a newer schema, with messages that say so', async function () {
    this.timeout(120_000);
    const fresh = dialect.freshStorage();
    const env = envFor(dialect.name, fresh);
    const wrong = path.join(work, 'wrong');
    writeFileSync(wrong, 'not-the-passphrase-at-all');
    let res = await cli(['restore', archive, '--passphrase-file', wrong], env);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include(`the passphrase does not open ${archive}`);

    const damaged = path.join(work, 'damaged.hcpb');
    const bytes = Buffer.from(readFileSync(archive));
    const middle = Math.floor(bytes.length / 2);
    bytes[middle] = bytes[middle]! ^ 0x01;
    writeFileSync(damaged, bytes);
    res = await cli(['restore', damaged, '--passphrase-file', passphraseFile], env);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/is damaged.*does not authenticate/);

    const truncated = path.join(work, 'truncated.hcpb');
    writeFileSync(truncated, readFileSync(archive).subarray(0, statSync(archive).size - 100));
    res = await cli(['restore', truncated, '--passphrase-file', passphraseFile], env);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/truncated|cut short/);

    const short = path.join(work, 'short');
    writeFileSync(short, 'tiny');
    res = await cli(['backup', 'create', '--to', path.join(work, 'never.hcpb'), '--passphrase-file', short], envFor(dialect.name, storage));
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include('the passphrase is too short');
    expect(existsSync(path.join(work, 'never.hcpb'))).to.equal(false);
    if (dialect.name === 'sqlite') {
      // A data dir that holds no control plane: said, and nothing made there.
      const empty = mkdtempSync(path.join(work, 'empty-'));
      res = await cli(['backup', 'create', '--to', path.join(work, 'never.hcpb'), '--passphrase-file', passphraseFile], envFor('sqlite', { dataDir: empty, schema: null }));
      expect(res.code).to.equal(1);
      expect(res.stderr).to.include(`there is no hangar store at ${path.join(empty, 'hangar.db')}`);
      expect(existsSync(path.join(empty, 'hangar.db'))).to.equal(false);
    }

    // An archive whose schema has a migration this hangar does not know: made by a newer one.
    const unpacked = mkdtempSync(path.join(work, 'newer-'));
    const manifest = await extractArchive(archive, PASSPHRASE, unpacked);
    const newer = path.join(work, 'newer.hcpb');
    const { files, ...rest } = manifest as unknown as { files: Array<{ name: string; mode?: number }>; schema: { migrations: string[] }; hangar_version: string };
    await writeArchive(
      newer,
      PASSPHRASE,
      { ...rest, hangar_version: '99.0.0', schema: { migrations: [...rest.schema.migrations, 'core/999_from_the_future'] } },
      await Promise.all(files.map(async (f) => ({ ...(await entryFromFile(f.name, path.join(unpacked, f.name))), mode: f.mode }))),
    );
    res = await cli(['restore', newer, '--passphrase-file', passphraseFile], env);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include('the archive was made by hangar 99.0.0 with a newer schema than this hangar');
    expect(res.stderr).to.include('core/999_from_the_future');
    for (const r of [res]) noSecretIn(r.stdout + r.stderr);

    // An archive (with the right passphrase) whose entry climbs out of the data dir: refused, nothing written.
    const climbing = path.join(work, 'climbing.hcpb');
    await writeArchive(climbing, PASSPHRASE, { ...rest }, [...(await Promise.all(files.map(async (f) => entryFromFile(f.name, path.join(unpacked, f.name))))), entryFromBytes('data/../evil', Buffer.from('owned'))]);
    res = await cli(['restore', climbing, '--passphrase-file', passphraseFile], env);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include('is refused: it names an entry "data/../evil", which is not a plain relative path');
    expect(existsSync(path.join(fresh.dataDir, 'evil'))).to.equal(false);
    expect(existsSync(path.join(path.dirname(fresh.dataDir), 'evil'))).to.equal(false);
    // Nor through a symbolic link the data dir keeps (k3s/ is left in place): refused before any file is written.
    const elsewhere = mkdtempSync(path.join(work, 'elsewhere-'));
    symlinkSync(elsewhere, path.join(fresh.dataDir, 'k3s'));
    const throughLink = path.join(work, 'through-link.hcpb');
    await writeArchive(throughLink, PASSPHRASE, { ...rest }, [...(await Promise.all(files.map(async (f) => entryFromFile(f.name, path.join(unpacked, f.name))))), entryFromBytes('data/k3s/evil', Buffer.from('owned'))]);
    res = await cli(['restore', throughLink, '--passphrase-file', passphraseFile], env);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include(`its entry "data/k3s/evil" would be written outside the data dir (through the symbolic link ${path.join(fresh.dataDir, 'k3s')})`);
    expect(readdirSync(elsewhere)).to.deep.equal([]);
    expect(readdirSync(fresh.dataDir)).to.deep.equal(['k3s']);
    // Nothing was restored by any of these.
    expect(existsSync(path.join(fresh.dataDir, 'restored-config.yaml'))).to.equal(false);
  });

  it('restores into an empty data dir and database only (--force replaces)', async function () {
    this.timeout(120_000);
    const res = await cli(['restore', archive, '--passphrase-file', passphraseFile], envFor(dialect.name, storage));
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include('the new installation is not empty');
    expect(res.stderr).to.include('--force');
    // --force does not replace an installation a control plane serves (it holds leadership leases there).
    const serving = await cli(['restore', archive, '--passphrase-file', passphraseFile, '--force'], envFor(dialect.name, storage));
    expect(serving.code).to.equal(1);
    expect(serving.stderr).to.match(/a control plane is serving this installation \(leadership \S+ held by /);
    expect(serving.stderr).to.include('--force-while-serving');
    expect((await t.request('GET', '/v1/backups/targets', { headers: bearer(admin.token) })).status).to.equal(200);
  });

  it('hangar serve starts on the restored installation: users log in, sealed secrets open, the CA is the same, the agent comes back', async function () {
    this.timeout(180_000);
    const fresh = dialect.freshStorage();
    const env = envFor(dialect.name, fresh);
    // Something there already: only --force replaces it.
    writeFileSync(path.join(fresh.dataDir, 'leftover'), 'x');
    // The staging dir a crashed restore left next to the data dir (its process is gone) is removed.
    const stale = path.join(path.dirname(fresh.dataDir), '.hangar-staging-999999999-crashed');
    mkdirSync(stale);
    const refused = await cli(['restore', archive, '--passphrase-file', passphraseFile], env);
    expect(refused.code).to.equal(1);
    if (dialect.name === 'postgres') {
      // A table that is not hangar's in the schema: --force refuses, naming it, and never drops it.
      const pg = knexFactory({ client: 'pg', connection: PG_URL });
      try {
        await pg.raw(`create schema if not exists "${fresh.schema}"`);
        await pg.raw(`create table "${fresh.schema}".operator_notes (id integer)`);
        const foreign = await cli(['restore', archive, '--passphrase-file', passphraseFile, '--force'], env);
        expect(foreign.code).to.equal(1);
        expect(foreign.stderr).to.include(`the database schema ${fresh.schema} has tables that are not hangar's: operator_notes`);
        expect(existsSync(path.join(fresh.dataDir, 'leftover'))).to.equal(true);
        await pg.raw(`drop table "${fresh.schema}".operator_notes`);
      } finally {
        await pg.destroy();
      }
    }
    const res = await cli(['restore', archive, '--passphrase-file', passphraseFile, '--force'], env);
    expect(res.code, res.stderr).to.equal(0);
    noSecretIn(res.stdout + res.stderr);
    const configFile = path.join(fresh.dataDir, 'restored-config.yaml');
    expect(res.stdout).to.include(`start it with: hangar serve --config ${configFile}`);
    expect(existsSync(path.join(fresh.dataDir, 'leftover'))).to.equal(false);
    // Staging dirs left by processes that are gone (the crashed one above, this restore's own): none. The
    // folder is the system's temporary one, where another restore running at the same time may be staging.
    const leftBehind = readdirSync(path.dirname(fresh.dataDir)).filter((n) => n.startsWith('.hangar-staging-') && !existsSync(`/proc/${n.split('-')[2]}`));
    expect(leftBehind).to.deep.equal([]);
    expect(existsSync(stale)).to.equal(false);
    // Modes: owner bits only, keys 0600 whatever they were; a symbolic link is not carried.
    expect(statSync(path.join(fresh.dataDir, 'extra.key')).mode & 0o7777).to.equal(0o600);
    expect(statSync(path.join(fresh.dataDir, 'tool.sh')).mode & 0o7777).to.equal(0o700);
    expect(existsSync(path.join(fresh.dataDir, 'linked'))).to.equal(false);
    expect(statSync(configFile).mode & 0o777).to.equal(0o600);
    expect(YAML.parse(readFileSync(configFile, 'utf8')).plugins).to.deep.equal(PLUGINS);

    // The old control plane goes away; the restored one serves at its address.
    await t.stop();
    const restartedAt = new Date().toISOString();
    serve = spawn(process.execPath, [BIN, 'serve', '--config', configFile], {
      env: {
        ...process.env,
        NODE_ENV: 'test',
        HANGAR_API__PORT: String(port),
        HANGAR_LOG__LEVEL: 'info',
        HANGAR_NODES__HEARTBEAT_INTERVAL_SECONDS: '1',
        HANGAR_NODES__OFFLINE_AFTER_SECONDS: '3',
        HANGAR_TASKS__POLL_WAIT_SECONDS: '5',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    serve.stdout!.on('data', (c: Buffer) => (serveOutput += c.toString()));
    serve.stderr!.on('data', (c: Buffer) => (serveOutput += c.toString()));
    const url = `https://127.0.0.1:${port}`;
    const call = (method: string, p: string, options: Record<string, unknown> = {}) => httpRequest(`${url}${p}`, { ca: caPem, method, ...options });
    await waitFor(
      async () => {
        if (serve!.exitCode !== null) throw new Error(`hangar serve exited (${serve!.exitCode}):\n${serveOutput}`);
        return (await call('GET', '/healthz').catch(() => null))?.status === 200;
      },
      { timeoutMs: 60_000, intervalMs: 300, what: 'the restored control plane to answer' },
    );
    // The same CA (the server certificate verified against it above).
    expect((await call('GET', '/v1/ca')).text.trim()).to.equal(caPem.trim());
    // Users log in with their passwords; a token issued before the backup still verifies (same JWT secret).
    const login = await call('POST', '/v1/iam/login', { body: { username: alice.username, password: alice.password } });
    expect(login.status, login.text).to.equal(200);
    const byToken = await call('GET', `/v1/backups/targets/${targetId}`, { headers: bearer(admin.token) });
    expect(byToken.status, byToken.text).to.equal(200);
    // An API key's secret is sealed at rest: an HMAC-signed request verifies only if it unseals.
    const signed = signRequest({ accessKeyId: alice.accessKeyId, secretAccessKey: alice.secretAccessKey }, { method: 'GET', pathAndQuery: '/v1/backups/targets' });
    const listed = await call('GET', '/v1/backups/targets', { headers: signed });
    expect(listed.status, listed.text).to.equal(200);
    expect(listed.json.data.map((x: { id: string }) => x.id)).to.deep.equal([targetId]);
    // The agent reconnects by itself, its client certificate verified against the restored CA.
    await waitFor(
      async () => {
        const node = (await call('GET', `/v1/nodes/${nodeId}`, { headers: bearer(admin.token) })).json.data;
        return node?.status === 'ready' && node.last_heartbeat_at > restartedAt;
      },
      { timeoutMs: 60_000, intervalMs: 500, what: `node ${nodeId} to heartbeat to the restored control plane` },
    );
    expect(serveOutput).not.to.include(PASSPHRASE);
  });

  it('restores the archive uploaded to the target into the other dialect, from the bucket (hangar restore --from)', async function () {
    this.timeout(180_000);
    const otherName: DialectName = dialect.name === 'sqlite' ? 'postgres' : 'sqlite';
    if (otherName === 'postgres') requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const other = new TestDialect(otherName);
    try {
      const fresh = other.freshStorage();
      // A SQLite archive keeps its CA in files: PostgreSQL needs a master key to move them into the store.
      const res = await cli(['restore', '--from', `s3://${bucket.name}/prod`, '--endpoint', s3.endpoint, '--passphrase-file', passphraseFile], {
        ...envFor(otherName, fresh, otherName === 'postgres'),
        ...bucketKeys(),
      });
      expect(res.code, res.stderr).to.equal(0);
      // The newest there that the passphrase opens: not the one named in the year 9999 (no clock says it is made yet), and the newer fake skipped, saying why.
      expect(res.stderr).to.include(`skipped ${path.posix.basename(fake)}: it is not a hangar control-plane backup`);
      const uploaded = (await bucket.list('prod/hangar-control-plane/')).filter((k) => !k.includes('-9999') && k !== fake).at(-1);
      expect(res.stdout).to.include(` from s3://${bucket.name}/${uploaded} into ${fresh.dataDir}`);
      expect(res.stdout).to.include(`store: ${dialect.name} → ${otherName}`);
      // The download was staged and is gone.
      expect(readdirSync(os.tmpdir()).filter((n) => n.startsWith('hangar-restore-') && readdirSync(path.join(os.tmpdir(), n)).includes(path.posix.basename(uploaded!)))).to.deep.equal([]);
      noSecretIn(res.stdout + res.stderr);
      const restored = YAML.parse(readFileSync(path.join(fresh.dataDir, 'restored-config.yaml'), 'utf8')) as { secrets?: { master_key?: string } };
      const u = await startHangar(other, { plugins: PLUGINS, storage: fresh, overrides: { secrets: { master_key: restored.secrets?.master_key ?? null } } });
      try {
        expect(u.caPem.trim()).to.equal(caPem.trim());
        const login = await u.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } });
        expect(login.status, login.text).to.equal(200);
        const signed = signRequest({ accessKeyId: alice.accessKeyId, secretAccessKey: alice.secretAccessKey }, { method: 'GET', pathAndQuery: `/v1/nodes/${nodeId}` });
        const node = await u.request('GET', `/v1/nodes/${nodeId}`, { headers: signed });
        expect(node.status, node.text).to.equal(200);
        expect((await u.request('GET', '/v1/backups/targets', { headers: bearer(login.json.data.token) })).json.data[0].id).to.equal(targetId);
        // Not configured there (its configuration has no backups.control_plane): a 409 that says what to set.
        const unconfigured = await u.request('POST', '/v1/backups/control-plane', { headers: bearer(login.json.data.token) });
        expect(unconfigured.status).to.equal(409);
        expect(unconfigured.json.message).to.include('set backups.control_plane.target and backups.control_plane.passphrase_file');
      } finally {
        await u.stop();
      }
    } finally {
      await other.cleanup();
    }
  });
});
