import path from 'node:path';
import { asList, parseEnvPairs } from './runner/args.js';
import { RunnerContext } from './runner/context.js';
import { applyEnv, resolveRootdir } from './runner/environment.js';
import { EXIT, runnerCommand, usageError } from './runner/errors.js';
import { checkArity, convertArgs, loadBootstrap, resolveTarget } from './runner/invoke.js';
import { builtinRegistry } from './runner/registry.js';
import { checkName, checkTemplate, installService, listServices, lookupUser, requireRoot, uninstallService } from './runner/system.js';
import { checkSchedule, TEMPLATES } from './runner/templates.js';

interface InstallArgs {
  name: string;
  template: string;
  class: string;
  rootdir?: string;
  arg?: string | string[];
  env?: string | string[];
  schedule?: string;
  bootstrap?: string;
  force?: boolean;
  'replace-foreign'?: boolean;
  user?: string;
  'root-prefix': string;
  verbose?: boolean;
}

function rootPrefix(value: string | undefined): string {
  const prefix = path.resolve(value ?? '/');
  return prefix;
}

export const installCommand = runnerCommand<InstallArgs>({
  command: 'install <name>',
  describe: 'Install a method as a system service: systemd unit, upstart job, SysV init script or cron entry (root)',
  builder: (y) =>
    y
      .positional('name', { type: 'string', demandOption: true, describe: 'service name (letters, digits, - and _)' })
      .option('template', { type: 'string', choices: [...TEMPLATES], demandOption: true, describe: 'which init system to write for' })
      .option('class', { type: 'string', demandOption: true, describe: '"Class::method" or "path/to/module.js#Class::method", as for hangar run' })
      .option('rootdir', { type: 'string', describe: 'working directory of the service (default: the current directory)' })
      .option('arg', { type: 'string', describe: 'an argument for the method, converted as by hangar run (repeatable)' })
      .option('env', { type: 'string', describe: 'KEY=VALUE stored in /etc/hangar/<name>.env (mode 0600) and loaded at start (repeatable)' })
      .option('schedule', { type: 'string', describe: 'crond only: when to run, five cron fields or @hourly… (default "* * * * *", every minute)' })
      .option('bootstrap', { type: 'string', describe: 'module the service imports first (as for hangar run)' })
      .option('force', { type: 'boolean', describe: 'replace a service of the same name that hangar installed' })
      .option('replace-foreign', { type: 'boolean', describe: 'also replace a unit or env file of that name that hangar did not write (implies --force)' })
      .option('user', { type: 'string', describe: 'run the service as this user instead of root (its env file becomes theirs)' })
      .option('root-prefix', { type: 'string', default: '/', describe: 'install under this directory instead of / (tests, images); init systems are not touched then' })
      .example('$0 install --template=systemd heartbeat --class "Runner::heartbeat" --arg /var/log/beat.log', 'a daemon')
      .example('$0 install --template=crond nightly --class "./jobs/report.ts#Report::run" --schedule "0 3 * * *" --env REPORT_TO=ops@example.com', 'a nightly job')
      .example('$0 install --template=systemd reports --class "Runner::heartbeat" --arg /srv/reports/beat.log --user reports', 'a daemon running as the user reports'),
  async run(args) {
    requireRoot('install');
    checkName(args.name);
    const template = checkTemplate(args.template);
    let schedule: string | null = null;
    if (args.schedule !== undefined) {
      if (template !== 'crond') throw usageError('--schedule applies to --template=crond only');
      try {
        schedule = checkSchedule(args.schedule);
      } catch (err) {
        throw usageError((err as Error).message);
      }
    }
    const prefix = rootPrefix(args['root-prefix']);
    const user = args.user !== undefined ? lookupUser(args.user, prefix) : null;
    const env = parseEnvPairs(asList(args.env));
    const rootdir = resolveRootdir(args.rootdir ?? process.cwd());
    const rawArgs = asList(args.arg);
    if (rawArgs.some((a) => /[\r\n\0]/.test(a))) throw usageError('--arg values may not contain line breaks or NUL in an installed service');
    if (/[\r\n\0]/.test(args.class) || /[\r\n\0]/.test(rootdir)) throw usageError('--class and --rootdir may not contain line breaks');
    // Check that the method exists and takes these arguments, in the service's directory and environment.
    const before = process.cwd();
    const saved = { ...process.env };
    process.chdir(rootdir);
    applyEnv(env);
    const bootstrap = args.bootstrap ? path.resolve(args.bootstrap) : null;
    const ctx = new RunnerContext();
    try {
      const registry = builtinRegistry();
      if (bootstrap) await loadBootstrap(bootstrap, registry, ctx);
      const target = await resolveTarget(args.class, registry, ctx);
      checkArity(target, rawArgs.length);
      convertArgs(target, rawArgs);
    } finally {
      await ctx.close();
      process.chdir(before);
      for (const key of Object.keys(env)) {
        if (saved[key] === undefined) delete process.env[key];
        else process.env[key] = saved[key];
      }
    }
    installService(
      {
        name: args.name,
        template,
        method: args.class,
        args: rawArgs,
        env,
        rootdir,
        bootstrap,
        schedule,
        force: Boolean(args.force),
        replaceForeign: Boolean(args['replace-foreign']),
        user,
        rootPrefix: prefix,
      },
      (line) => console.log(line),
    );
    return EXIT.ok;

  },
});

interface UninstallArgs {
  name: string;
  purge?: boolean;
  'root-prefix': string;
  verbose?: boolean;
}

export const uninstallCommand = runnerCommand<UninstallArgs>({
  command: 'uninstall <name>',
  describe: 'Stop a service installed by hangar install (where possible) and remove its unit or job and env file (root)',
  builder: (y) =>
    y
      .positional('name', { type: 'string', demandOption: true })
      .option('purge', { type: 'boolean', describe: "also delete the service's log file (initd, crond)" })
      .option('root-prefix', { type: 'string', default: '/', describe: 'as given to hangar install' }),
  async run(args) {
    requireRoot('uninstall');
    checkName(args.name);
    uninstallService(args.name, rootPrefix(args['root-prefix']), Boolean(args.purge), (line) => console.log(line));
    return EXIT.ok;

  },
});

interface ServicesArgs {
  'only-names'?: boolean;
  json?: boolean;
  'root-prefix': string;
  verbose?: boolean;
}

export const servicesCommand = runnerCommand<ServicesArgs>({
  command: 'services',
  describe: 'List the services hangar installed (template, method, schedule, status from the init system)',
  builder: (y) =>
    y
      .option('only-names', { type: 'boolean', describe: 'print bare names, one per line, nothing else' })
      .option('json', { type: 'boolean', describe: 'print a JSON array' })
      .option('root-prefix', { type: 'string', default: '/', describe: 'as given to hangar install' }),
  async run(args) {
    const prefix = rootPrefix(args['root-prefix']);
    if (args['only-names']) {
      for (const s of listServices(prefix, false)) process.stdout.write(`${s.name}\n`);
      return EXIT.ok;
    }
    const services = listServices(prefix);
    if (args.json) {
      console.log(JSON.stringify(services, null, 2));
      return EXIT.ok;
    }
    if (!services.length) {
      console.log('no services installed (hangar install adds one)');
      return EXIT.ok;
    }
    const rows = services.map((s) => [s.name, s.template, s.method, s.schedule ?? '-', s.status]);
    const header = ['NAME', 'TEMPLATE', 'CLASS', 'SCHEDULE', 'STATUS'];
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    for (const row of [header, ...rows]) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd());
    return EXIT.ok;

  },
});
