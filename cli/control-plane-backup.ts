import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { CommandModule } from 'yargs';
import { ConfigError } from '../core/errors.js';
import { EXIT, failure, runAndExit, usageError } from './runner/errors.js';

interface CommonArgs {
  config?: string;
  'data-dir'?: string;
  'passphrase-file': string;
}

interface CreateArgs extends CommonArgs {
  to?: string;
  target?: string;
  force?: boolean;
}

interface RestoreArgs extends CommonArgs {
  file?: string;
  from?: string;
  endpoint?: string;
  region: string;
  snapshot?: string;
  list?: boolean;
  force?: boolean;
  'force-while-serving'?: boolean;
}

const COMMON = {
  config: { type: 'string', describe: 'the control plane’s YAML configuration file (HANGAR_* variables override it), as for hangar serve' },
  'data-dir': { type: 'string', describe: 'the control plane’s data dir, as for hangar serve' },
  'passphrase-file': {
    type: 'string',
    demandOption: true,
    describe: 'a file holding the archive’s passphrase, 12 characters or more (- is stdin; one trailing newline is dropped)',
  },
} as const;

/** The passphrase from its file (never an argument: it would show in the process list and shell history). */
function readPassphrase(file: string): string {
  let text: string;
  try {
    text = readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (err) {
    throw usageError(`--passphrase-file ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return text.replace(/\r?\n$/, '');
}

/** An archive or passphrase problem is the operator's to fix (exit 1); a configuration problem is a usage error (2). */
async function operatorErrors<T>(body: () => Promise<T>): Promise<T> {
  const { ArchiveError } = await import('../core/backup/archive.js');
  try {
    return await body();
  } catch (err) {
    if (err instanceof ArchiveError) throw failure(err.message);
    if (err instanceof ConfigError) throw usageError(err.message);
    throw err;
  }
}

/** `hangar backup create`: the control plane's own backup (docs/backups.md#the-control-plane). */
export const backupCreateCommand: CommandModule<object, CreateArgs> = {
  command: 'create',
  describe: 'Back the control plane up into one encrypted archive (store, CA and keys, configuration), to a file or a backup target',
  builder: (y) =>
    y
      .options({
        ...COMMON,
        to: { type: 'string', describe: 'the archive file to write (default ./hangar-control-plane-<time>.hcpb)' },
        target: { type: 'string', describe: 'a backup target (id or name) to upload the archive to, under <prefix>/hangar-control-plane/' },
        force: { type: 'boolean', default: false, describe: 'replace the --to file if it exists' },
      })
      .conflicts('to', 'target') as never,
  handler: (args) =>
    runAndExit('backup create', false, async () => {
      const passphrase = readPassphrase(args['passphrase-file']);
      const [{ loadConfig }, { createControlPlaneBackup, makeStaging, operatorConfiguration }, { checkPassphrase }, { archiveName }] = await Promise.all([
        import('../core/config.js'),
        import('../core/backup/control-plane.js'),
        import('../core/backup/archive.js'),
        import('../plugins/backups/control-plane.js'),
      ]);
      await operatorErrors(async () => {
        checkPassphrase(passphrase);
        const config = loadConfig({ file: args.config, dataDir: args['data-dir'] });
        const name = archiveName(new Date());
        const upload = args.target ? await targetUploader(config, args.target) : null;
        // Uploading, the archive and the store's copy are staged in the data dir (not in a shared /tmp); the backup skips them.
        const scratch = upload ? makeStaging(config.data_dir) : null;
        const file = upload ? path.join(scratch!, name) : path.resolve(args.to ?? name);
        try {
          const result = await createControlPlaneBackup({ config, operatorConfig: operatorConfiguration(args.config, process.env), passphrase, file, overwrite: Boolean(args.force) });
          const m = result.manifest;
          const where = upload ? `target ${args.target}: ${await upload(name, readFileSync(file))}` : file;
          console.log(`control-plane backup written to ${where} (${result.bytes} bytes, encrypted)`);
          console.log(`  made by hangar ${m.hangar_version} at ${m.created_at}; store: ${m.dialect} (${m.schema.migrations.length} migrations); ${m.files} files; secrets kept ${m.keyring === 'shared' ? 'in the store, sealed with the master key (carried in the archive)' : 'as data-dir files'}`);
          for (const what of result.notCarried) console.log(`  not carried (keep it yourself): ${what}`);
          console.log(
            upload
              ? `  restore it with: hangar restore --from s3://<bucket>[/<prefix>] --endpoint <url> --passphrase-file <file> (keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; into an empty data dir and database)`
              : '  restore it with: hangar restore <file> --passphrase-file <file> (into an empty data dir and database)',
          );
        } finally {
          if (scratch) rmSync(scratch, { recursive: true, force: true });
        }
      });
      return EXIT.ok;
    }),
};

/** Uploads to a backup target with its sealed credentials, opened with this control plane's keys. */
async function targetUploader(config: import('../config/schema.js').HangarConfig, idOrName: string): Promise<(name: string, body: Buffer) => Promise<string>> {
  const [{ openStore }, { Pki }, { systemClock }, { TargetStore, ArchiveStore }, { putObjectTagged, ProbeFailure }, { archiveLocation, archiveTime }, { newId }] = await Promise.all([
    import('../core/db/store.js'),
    import('../core/pki/pki.js'),
    import('../core/clock.js'),
    import('../plugins/backups/store.js'),
    import('../plugins/backups/probe.js'),
    import('../plugins/backups/control-plane.js'),
    import('../core/ids.js'),
  ]);
  const store = await openStore(config);
  let closed = false;
  const close = async () => {
    if (!closed) await store.close();
    closed = true;
  };
  try {
    const targets = new TargetStore(store, systemClock);
    const target = (await store.knex.schema.hasTable('backup_targets')) ? await targets.findByIdOrName(idOrName) : null;
    if (!target) throw failure(`no backup target ${idOrName}: hangar backup target list shows them`);
    const pki = await Pki.open({ dataDir: config.data_dir, store, clock: systemClock, tlsCertFile: config.api.tls_cert, tlsKeyFile: config.api.tls_key, masterKey: config.secrets.master_key });
    const location = archiveLocation(target, pki.secretBox('backups'));
    // The store stays open for the upload's record (the control plane's schedule and keep_last believe recorded uploads only).
    return async (name, body) => {
      try {
        const { key, etag } = await putObjectTagged(location, name, body);
        const made = archiveTime(key) ?? new Date();
        if (await store.knex.schema.hasTable('backup_control_plane_archives')) await new ArchiveStore(store).insert({ id: newId('cpa'), target_id: target.id, key, bytes: body.length, etag, made_at: made.toISOString(), created_at: new Date().toISOString() });
        return `s3://${target.bucket}/${key}`;
      } catch (err) {
        if (err instanceof ProbeFailure) throw failure(`uploading to backup target ${target.name} failed: ${err.message}`);
        throw err;
      } finally {
        await close();
      }
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * `--from s3://BUCKET[/PREFIX][/hangar-control-plane[/NAME.hcpb]]` on a machine that has no store yet:
 * the bucket's coordinates come from the command line, its keys from the environment as every S3
 * tool reads them (never an argument: the process list shows arguments).
 */
async function archiveSource(args: RestoreArgs) {
  const match = /^s3:\/\/([^/]+)(?:\/(.*?))?\/?$/.exec(args.from!);
  if (!match) throw usageError(`--from ${args.from}: give s3://BUCKET[/PREFIX], where hangar backup create --target uploaded (it prints that address)`);
  if (!args.endpoint) throw usageError('--from needs --endpoint: the S3 server’s URL, e.g. https://s3.example.net (the backup target’s endpoint)');
  const accessKeyId = process.env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = process.env.AWS_SECRET_ACCESS_KEY;
  if (!accessKeyId || !secretAccessKey) throw usageError('--from reads the bucket’s keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both');
  const [bucket, rest = ''] = [match[1]!, match[2] ?? ''];
  const named = rest.endsWith('.hcpb') ? rest : null;
  const [{ getObject, ProbeFailure }, { ARCHIVE_FOLDER, believedArchives, listArchives }] = await Promise.all([import('../plugins/backups/probe.js'), import('../plugins/backups/control-plane.js')]);
  const folder = named ? path.posix.dirname(named) : rest.split('/').pop() === ARCHIVE_FOLDER ? rest : rest ? `${rest}/${ARCHIVE_FOLDER}` : ARCHIVE_FOLDER;
  const location = { endpoint: args.endpoint, bucket, prefix: folder, region: args.region, credentials: { accessKeyId, secretAccessKey } };
  const s3Errors = async <T>(body: () => Promise<T>): Promise<T> => {
    try {
      return await body();
    } catch (err) {
      if (err instanceof ProbeFailure) throw failure(`--from ${args.from}: ${err.message}`);
      throw err;
    }
  };
  return {
    /** The archives there, oldest first (their names carry the time they were made). */
    list: () => s3Errors(() => listArchives(location)),
    /** The archives whose names are not in the future (a clock ahead, or a name anyone with the keys wrote), newest first. */
    candidates: (archives: Awaited<ReturnType<typeof listArchives>>) => believedArchives(archives, new Date()).reverse().map((a) => a.key),
    named,
    folder,
    get: (key: string) => s3Errors(() => getObject({ ...location, prefix: '' }, key)),
  };
}

/** The archive file to restore: the positional file, or one downloaded from --from into a private scratch folder. */
async function archiveToRestore(args: RestoreArgs, passphrase: string): Promise<{ file: string; from: string | null; cleanup: () => void } | null> {
  if (!args.from) return { file: args.file!, from: null, cleanup: () => undefined };
  const source = await archiveSource(args);
  const archives = await source.list();
  if (args.list) {
    if (archives.length === 0) console.log(`no control-plane archives under s3://${args.from!.slice(5).split('/')[0]}/${source.folder}/`);
    for (const a of archives) console.log(`${path.posix.basename(a.key)}  ${a.size} bytes  ${a.last_modified}`);
    return null;
  }
  const named = source.named ?? (args.snapshot && args.snapshot !== 'latest' ? `${source.folder}/${args.snapshot.endsWith('.hcpb') ? args.snapshot : `${args.snapshot}.hcpb`}` : null);
  const candidates = named ? [named] : source.candidates(archives);
  if (!candidates.length) throw failure(`--from ${args.from}: no control-plane archive under ${source.folder}/ (hangar backup create --target uploads them there)`);
  if (named && !archives.some((a) => a.key === named)) {
    const names = archives.map((a) => path.posix.basename(a.key));
    throw failure(`--from ${args.from}: no archive ${path.posix.basename(named)} under ${source.folder}/${names.length ? ` (there: ${names.slice(-5).join(', ')}${names.length > 5 ? ', …' : ''}; --list shows all)` : ''}`);
  }
  // Staged in a private folder (0700) of the machine's temporary space, removed after the restore; the archive is encrypted.
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'hangar-restore-'));
  const cleanup = () => rmSync(scratch, { recursive: true, force: true });
  const { checkArchive, ArchiveError } = await import('../core/backup/archive.js');
  // Without --snapshot: the newest that the passphrase opens and that authenticates throughout (anyone with the bucket's keys can write a name there, not an archive).
  const skipped: string[] = [];
  try {
    for (const key of candidates) {
      const file = path.join(scratch, path.posix.basename(key));
      try {
        writeFileSync(file, await source.get(key), { mode: 0o600 });
      } catch (err) {
        throw failure(`--from ${args.from}: cannot stage the archive in ${scratch} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      }
      if (named) return { file, from: `s3://${args.from!.slice(5).split('/')[0]}/${key}`, cleanup };
      try {
        await checkArchive(file, passphrase);
      } catch (err) {
        if (!(err instanceof ArchiveError)) throw err;
        const why = err.message.split(file).join('it');
        skipped.push(path.posix.basename(key));
        console.error(`skipped ${path.posix.basename(key)}: ${why}`);
        rmSync(file, { force: true });
        continue;
      }
      return { file, from: `s3://${args.from!.slice(5).split('/')[0]}/${key}`, cleanup };
    }
  } catch (err) {
    cleanup();
    throw err;
  }
  cleanup();
  throw failure(`--from ${args.from}: no archive under ${source.folder}/ opens with this passphrase (skipped ${skipped.join(', ')}); give another --passphrase-file, or --snapshot NAME to see why one fails`);
}

/** `hangar restore FILE` or `hangar restore --from s3://…`: a control plane rebuilt from its backup. */
export const restoreCommand: CommandModule<object, RestoreArgs> = {
  command: 'restore [file]',
  describe: 'Restore a control-plane backup (hangar backup create) into an empty data dir and database; then hangar serve starts it',
  builder: (y) =>
    y
      .positional('file', { type: 'string', describe: 'the archive (or --from)' })
      .options({
        ...COMMON,
        'passphrase-file': { ...COMMON['passphrase-file'], demandOption: false },
        from: { type: 'string', describe: 'restore from a bucket instead of a file: s3://BUCKET[/PREFIX] as backup create --target printed (keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)' },
        endpoint: { type: 'string', describe: 'with --from: the S3 server’s URL (the backup target’s endpoint)' },
        region: { type: 'string', default: 'us-east-1', describe: 'with --from: the S3 region' },
        snapshot: { type: 'string', describe: 'with --from: the archive’s name (hangar-control-plane-<time>), default the newest' },
        list: { type: 'boolean', default: false, describe: 'with --from: list the archives there and restore nothing' },
        force: { type: 'boolean', default: false, describe: 'replace a data dir and database that are not empty (hangar’s files and tables in them are lost; other tables are never dropped)' },
        'force-while-serving': { type: 'boolean', default: false, describe: 'as --force, even while a control plane holds leadership there (serves it): stop it first instead' },
      })
      .conflicts('file', 'from')
      .check((a) => {
        if (!a.file && !a.from) throw new Error('give the archive file, or --from s3://BUCKET[/PREFIX] with --endpoint');
        for (const only of ['endpoint', 'snapshot'] as const) if (a[only] !== undefined && !a.from) throw new Error(`--${only} goes with --from`);
        if (a.list && !a.from) throw new Error('--list goes with --from');
        if (!a.list && !a['passphrase-file']) throw new Error('Missing required argument: passphrase-file');
        return true;
      }) as never,
  handler: (args) =>
    runAndExit('restore', false, async () => {
      const passphrase = args.list ? '' : readPassphrase(args['passphrase-file']!);
      const archive = await archiveToRestore(args, passphrase);
      if (!archive) return EXIT.ok;
      try {
        const [{ restoreControlPlane }, { builtinCatalogue }] = await Promise.all([import('../core/backup/control-plane.js'), import('./catalogue.js')]);
        const result = await operatorErrors(() =>
          restoreControlPlane({
            file: archive.file,
            passphrase,
            configFile: args.config,
            env: process.env,
            dataDir: args['data-dir'],
            catalogue: builtinCatalogue,
            force: Boolean(args.force || args['force-while-serving']),
            forceWhileServing: Boolean(args['force-while-serving']),
          }),
        );
        const m = result.manifest;
        const across = m.dialect === result.dialect ? result.dialect : `${m.dialect} → ${result.dialect}`;
        console.log(`restored the control plane backed up at ${m.created_at} (hangar ${m.hangar_version}, ${m.hostname})${archive.from ? ` from ${archive.from}` : ''} into ${result.dataDir}`);
        console.log(`  store: ${across}${result.rows === null ? ' (the SQLite snapshot)' : ` (${result.rows} rows)`}; ${result.files} data-dir files (CA, server certificate, secrets)`);
        console.log(`  start it with: hangar serve --config ${result.configFile}`);
      } finally {
        archive.cleanup();
      }
      return EXIT.ok;
    }),
};
