import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import repl from 'node:repl';
import { PassThrough } from 'node:stream';
import { inspect } from 'node:util';
import type { Knex } from 'knex';
import type { HangarConfig } from '../../config/schema.js';
import { CONFIG_DIR } from '../../core/config.js';
import type { Store } from '../../core/db/store.js';
import type { Logger } from '../../core/log.js';
import type { Services } from '../../core/plugin.js';
import { rowsOf } from './builtins.js';
import { configDir } from './connection.js';
import type { RunnerContext } from './context.js';
import { usageError } from './errors.js';
import { importOperatorModule, resolveTarget } from './invoke.js';
import { renderTable } from './output.js';
import { describeRegistry, type ClassRegistry } from './registry.js';

/**
 * What the terminal preloads (docs/runner.md, "Terminal"). Helper scripts and --preload modules
 * receive this object and may add to it.
 */
export interface TerminalGlobals {
  /** The effective configuration. */
  config: HangarConfig;
  /** The store: knex instance, dialect, PostgreSQL schema. */
  store: Store;
  /** The database executor: the configured knex instance. */
  executor: Knex;
  /** Services of core and of every enabled plugin, without listeners; null when they failed to load. */
  services: Services | null;
  log: Logger;
  /** The classes `hangar run` knows (also preloaded as globals: Runner, Clock, Config, Store, Hangar). */
  registry: ClassRegistry;
  /** Pretty-prints anything, fully expanded. */
  dump(value: unknown): void;
  /** Runs SQL (`?` placeholders) and prints the rows as a table. */
  qq(sql: string, params?: unknown[]): Promise<void>;
  /** Runs SQL and returns the rows. */
  query(sql: string, params?: unknown[]): Promise<unknown>;
  /** `"0f1e…-…"` → 16-byte Buffer. */
  uuid_to_bin(uuid: string): Buffer;
  /** 16-byte Buffer → `"0f1e…-…"`. */
  bin_to_uuid(bin: Uint8Array): string;
  /** What a plugin provides to others (`plugin('iam')` is the identity service). */
  plugin(name: string): unknown;
  /** Calls a registered method with ready values: `await run('Store::tables')`. */
  run(spec: string, ...args: unknown[]): Promise<unknown>;
  /** Lists all of the above. */
  help(): void;
  [name: string]: unknown;
}

/** The globals and one line about each: what help() prints and docs/runner.md lists. */
export const GLOBAL_DOCS: Array<[string, string]> = [
  ['config', 'the effective configuration (files + HANGAR_* variables)'],
  ['executor', 'the database executor: the configured knex instance (await executor("api_keys").select())'],
  ['store', 'the store: .knex, .dialect ("sqlite" | "postgres"), .schema'],
  ['services', 'services of core and of every enabled plugin (db, ca, events, drivers, tasks, auth, mail, provided…); nothing listens'],
  ['log', 'the logger (to stderr)'],
  ['registry', 'the runner classes by name; also preloaded as globals: Runner, Clock, Config, Store, Hangar'],
  ['dump(value)', 'pretty-prints anything, fully expanded'],
  ['qq(sql, params = [])', 'runs SQL with ? placeholders and prints the rows as a table'],
  ['query(sql, params = [])', 'runs SQL and returns the rows'],
  ['uuid_to_bin(uuid)', 'UUID text → 16-byte Buffer'],
  ['bin_to_uuid(buf)', '16-byte Buffer → UUID text'],
  ['plugin(name)', "what a plugin provides to others, e.g. plugin('iam')"],
  ['run(spec, ...args)', "calls a runner method with values, e.g. run('Store::tables')"],
  ['help()', 'this list'],
];

export function uuidToBin(uuid: string): Buffer {
  const hex = String(uuid).replace(/-/g, '');
  if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new TypeError(`"${uuid}" is not a UUID`);
  return Buffer.from(hex, 'hex');
}

export function binToUuid(bin: Uint8Array): string {
  if (!(bin instanceof Uint8Array) || bin.length !== 16) throw new TypeError('bin_to_uuid needs 16 bytes (a Buffer or Uint8Array)');
  const hex = Buffer.from(bin).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export interface TerminalOptions {
  ctx: RunnerContext;
  registry: ClassRegistry;
  /** Helper script: a path, or false for none; undefined means the configured one or config/terminal.ts. */
  helpers?: string | false;
  preload: string[];
  /** Shown in the banner (a service whose environment was loaded). */
  service?: string;
}

/** The default project helper script. */
export const DEFAULT_HELPERS = path.join(CONFIG_DIR, 'terminal.ts');

function configuredHelpers(config: HangarConfig): string | undefined {
  const section = config.terminal as { helpers?: unknown } | undefined;
  if (section === undefined || section === null) return undefined;
  if (typeof section !== 'object' || (section.helpers !== undefined && section.helpers !== null && typeof section.helpers !== 'string')) {
    throw usageError('configuration: terminal.helpers must be a path (string)');
  }
  return (section.helpers as string | null | undefined) ?? undefined;
}

/**
 * Runs a helper script or --preload module: its default export (a function) is called with the
 * globals and may return more; its other exports become globals too.
 */
async function loadInto(globals: TerminalGlobals, file: string, what: string): Promise<void> {
  const mod = await importOperatorModule(file, what);
  const { default: main, ...named } = mod;
  for (const [name, value] of Object.entries(named)) globals[name] = value;
  if (typeof main === 'function') {
    const extra = await (main as (g: TerminalGlobals) => unknown)(globals);
    if (extra && typeof extra === 'object') Object.assign(globals, extra);
  }
}

async function buildGlobals(options: TerminalOptions): Promise<TerminalGlobals> {
  const { ctx, registry } = options;
  const config = ctx.config();
  const store = await ctx.store();
  let services: Services | null = null;
  try {
    services = await ctx.services();
  } catch (err) {
    console.error(`hangar terminal: the services did not load (${(err as Error).message}); executor and the helpers still work`);
  }
  const query = async (sql: string, params: unknown[] = []) => {
    const { rows, info } = rowsOf(await store.knex.raw(sql, params as never[]));
    return rows ?? info;
  };
  const globals: TerminalGlobals = {
    config,
    store,
    executor: store.knex,
    services,
    log: ctx.log(),
    registry,
    dump(value: unknown) {
      console.log(inspect(value, { depth: null, colors: Boolean(process.stdout.isTTY), maxArrayLength: null, maxStringLength: null }));
    },
    async qq(sql: string, params: unknown[] = []) {
      const { rows, info } = rowsOf(await store.knex.raw(sql, params as never[]));
      console.log(rows ? renderTable(rows) : info ? JSON.stringify(info) : 'OK');
    },
    query,
    uuid_to_bin: uuidToBin,
    bin_to_uuid: binToUuid,
    plugin(name: string) {
      if (!services) throw new Error('the services did not load; see the message at start');
      if (!services.plugins.includes(name)) throw new Error(`plugin ${name} is not enabled (enabled: ${services.plugins.join(', ')})`);
      return services.provided.get(name);
    },
    async run(spec: string, ...args: unknown[]) {
      return (await resolveTarget(spec, registry, ctx)).call(args);
    },
    help() {
      const width = Math.max(...GLOBAL_DOCS.map(([n]) => n.length));
      console.log(GLOBAL_DOCS.map(([n, d]) => `${n.padEnd(width)}  ${d}`).join('\n'));
      console.log(`\nRunner classes (await Store.tables(), or run('Store::tables')):\n${describeRegistry(registry)}`);
    },
  };
  for (const entry of registry.list()) globals[entry.name] = new entry.cls(ctx);
  return globals;
}

/** A line that leaves the terminal, as in most shells and REPLs: `exit`, `quit`, `exit()`, `quit()`. */
export const LEAVE_LINE = /^\s*(?:exit|quit)\s*(?:\(\s*\))?\s*;?\s*$/;

/**
 * Auto-awaits promises so that `qq("select 1")` finishes before the next line; counts failures;
 * `exit` and `quit` (with or without parentheses) close the terminal — node's REPL only knows
 * `.exit` and answers a bare `exit` with a ReferenceError.
 */
function wrapEval(server: repl.REPLServer, onError: () => void): void {
  const original = server.eval;
  const wrapped = function (this: repl.REPLServer, cmd: string, context: object, file: string, cb: (err: Error | null, result?: unknown) => void) {
    if (LEAVE_LINE.test(cmd)) {
      // Nothing after it runs (piped input: the lines after it are dropped); the exit code is as at close.
      server.close();
      return;
    }
    original.call(this, cmd, context, file, (err: Error | null, result?: unknown) => {
      if (err && !(err instanceof repl.Recoverable)) onError();
      if (!err && result && typeof (result as Promise<unknown>).then === 'function') {
        (result as Promise<unknown>).then(
          (value) => cb(null, value),
          (e: Error) => {
            onError();
            cb(e);
          },
        );
      } else cb(err, result);
    });
  };
  (server as { eval: unknown }).eval = wrapped;
  // Uncaught errors (a `throw` at top level, a rejected await) reach the REPL's domain, not the callback.
  const domain = (server as unknown as { _domain?: { on(event: 'error', listener: () => void): void } })._domain;
  domain?.on('error', onError);
}

/**
 * Starts the terminal and resolves with the exit code when it closes. On a TTY: prompt, history
 * in the config dir. Piped: one line at a time, each finished (awaited) before the next; no
 * prompt; exit code 1 if any line threw.
 */
export async function startTerminal(options: TerminalOptions): Promise<number> {
  const globals = await buildGlobals(options);
  const config = globals.config;
  const helpers = options.helpers === false ? null : (options.helpers ?? configuredHelpers(config) ?? DEFAULT_HELPERS);
  if (helpers && (helpers !== DEFAULT_HELPERS || existsSync(helpers))) await loadInto(globals, helpers, 'helper script');
  for (const file of options.preload) await loadInto(globals, file, 'preload module');
  Object.assign(globalThis, globals);

  const interactive = Boolean(process.stdin.isTTY && process.stdout.isTTY);
  let failures = 0;
  let server: repl.REPLServer;
  if (interactive) {
    const where = globals.store.dialect === 'postgres' ? `PostgreSQL${globals.store.schema ? ` (schema ${globals.store.schema})` : ''}` : 'SQLite';
    console.log(
      `hangar terminal — ${where}, plugins: ${globals.services?.plugins.join(', ') ?? '(not loaded)'}` +
        `${options.service ? `, environment of service ${options.service}` : ''}. help() lists what is loaded.`,
    );
    server = repl.start({ prompt: 'hangar> ', useGlobal: true, ignoreUndefined: true, breakEvalOnSigint: true });
    wrapEval(server, () => undefined);
    const dir = configDir();
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      server.setupHistory(path.join(dir, 'terminal_history'), () => undefined);
    } catch {
      // no history then
    }
  } else {
    const input = new PassThrough();
    server = repl.start({ prompt: '', input, output: process.stdout, terminal: false, useGlobal: true, ignoreUndefined: true });
    server.setPrompt = () => undefined; // no prompts, not even the "... " of a continued line
    wrapEval(server, () => failures++);
    const lines: string[] = [];
    let ended = false;
    let busy = false;
    const pump = () => {
      if (busy) return;
      const line = lines.shift();
      if (line === undefined) {
        if (ended) server.close();
        return;
      }
      busy = true;
      input.write(`${line}\n`);
    };
    const displayPrompt = server.displayPrompt.bind(server);
    server.displayPrompt = (preserveCursor?: boolean) => {
      displayPrompt(preserveCursor);
      busy = false;
      setImmediate(pump);
    };
    const source = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
    source.on('line', (line) => {
      lines.push(line);
      pump();
    });
    source.on('close', () => {
      ended = true;
      pump();
    });
  }
  return new Promise<number>((resolve) => {
    server.once('exit', () => resolve(failures ? 1 : 0));
  });
}
