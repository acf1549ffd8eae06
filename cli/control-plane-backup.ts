import { readFileSync, rmSync } from 'node:fs';
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
  file: string;
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

function stamp(): string {
  return new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
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
      const [{ loadConfig }, { createControlPlaneBackup, makeStaging, operatorConfiguration }, { checkPassphrase }] = await Promise.all([
        import('../core/config.js'),
        import('../core/backup/control-plane.js'),
        import('../core/backup/archive.js'),
      ]);
      await operatorErrors(async () => {
        checkPassphrase(passphrase);
        const config = loadConfig({ file: args.config, dataDir: args['data-dir'] });
        const name = `hangar-control-plane-${stamp()}.hcpb`;
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
          console.log('  restore it with: hangar restore <file> --passphrase-file <file> (into an empty data dir and database)');
        } finally {
          if (scratch) rmSync(scratch, { recursive: true, force: true });
        }
      });
      return EXIT.ok;
    }),
};

/** Uploads to a backup target with its sealed credentials, opened with this control plane's keys. */
async function targetUploader(config: import('../config/schema.js').HangarConfig, idOrName: string): Promise<(name: string, body: Buffer) => Promise<string>> {
  const [{ openStore }, { Pki }, { systemClock }, { TargetStore }, { putObject, ProbeFailure }] = await Promise.all([
    import('../core/db/store.js'),
    import('../core/pki/pki.js'),
    import('../core/clock.js'),
    import('../plugins/backups/store.js'),
    import('../plugins/backups/probe.js'),
  ]);
  const store = await openStore(config);
  try {
    const targets = new TargetStore(store, systemClock);
    const target = (await store.knex.schema.hasTable('backup_targets')) ? await targets.findByIdOrName(idOrName) : null;
    if (!target) throw failure(`no backup target ${idOrName}: hangar backup target list shows them`);
    const pki = await Pki.open({ dataDir: config.data_dir, store, clock: systemClock, tlsCertFile: config.api.tls_cert, tlsKeyFile: config.api.tls_key, masterKey: config.secrets.master_key });
    const box = pki.secretBox('backups');
    const location = {
      endpoint: target.endpoint,
      bucket: target.bucket,
      prefix: target.prefix ? `${target.prefix}/hangar-control-plane` : 'hangar-control-plane',
      region: target.region,
      credentials: { accessKeyId: target.access_key_id, secretAccessKey: box.openString(target.secret_sealed) },
    };
    return async (name, body) => {
      try {
        return `s3://${target.bucket}/${await putObject(location, name, body)}`;
      } catch (err) {
        if (err instanceof ProbeFailure) throw failure(`uploading to backup target ${target.name} failed: ${err.message}`);
        throw err;
      }
    };
  } finally {
    await store.close();
  }
}

/** `hangar restore FILE`: a control plane rebuilt from its backup. */
export const restoreCommand: CommandModule<object, RestoreArgs> = {
  command: 'restore <file>',
  describe: 'Restore a control-plane backup (hangar backup create) into an empty data dir and database; then hangar serve starts it',
  builder: (y) =>
    y
      .positional('file', { type: 'string', demandOption: true, describe: 'the archive' })
      .options({
        ...COMMON,
        force: { type: 'boolean', default: false, describe: 'replace a data dir and database that are not empty (hangar’s files and tables in them are lost; other tables are never dropped)' },
        'force-while-serving': { type: 'boolean', default: false, describe: 'as --force, even while a control plane holds leadership there (serves it): stop it first instead' },
      }) as never,
  handler: (args) =>
    runAndExit('restore', false, async () => {
      const passphrase = readPassphrase(args['passphrase-file']);
      const [{ restoreControlPlane }, { builtinCatalogue }] = await Promise.all([import('../core/backup/control-plane.js'), import('./catalogue.js')]);
      const result = await operatorErrors(() =>
        restoreControlPlane({
          file: args.file,
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
      console.log(`restored the control plane backed up at ${m.created_at} (hangar ${m.hangar_version}, ${m.hostname}) into ${result.dataDir}`);
      console.log(`  store: ${across}${result.rows === null ? ' (the SQLite snapshot)' : ` (${result.rows} rows)`}; ${result.files} data-dir files (CA, server certificate, secrets)`);
      console.log(`  start it with: hangar serve --config ${result.configFile}`);
      return EXIT.ok;
    }),
};
