import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadPlugins, migrateAll } from './services.js';
import type { RunnerContext } from './context.js';
import type { ParamType } from './args.js';
import { versionInfo } from '../../core/version.js';

/** Documentation of one exposed method: what docs/runner.md and `hangar run --list` show. */
export interface MethodDoc {
  /** Parameters as shown to the operator, e.g. `file: string, text: string`. */
  signature: string;
  summary: string;
  /** How each `--arg` is converted (see args.ts); the last entry repeats for a rest parameter. */
  types?: ParamType[];
}

export type MethodDocs = Record<string, MethodDoc>;

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

/** Small methods for trying the runner out, for demonstrations and for testing installed services. */
export class Runner {
  static readonly summary = 'demonstration and diagnostics: echo arguments, write files, a heartbeat daemon';
  static readonly methods: MethodDocs = {
    echo: { signature: '...values', summary: 'returns its arguments (one value as itself, several as an array)' },
    types: { signature: '...values', summary: 'the type each argument was converted to (number, boolean, null, object, array, string)' },
    add: { signature: 'a: number, b: number', summary: 'a + b', types: ['number', 'number'] },
    sum: { signature: '...numbers: number', summary: 'the sum of all arguments', types: ['number'] },
    env: { signature: 'name: string', summary: 'the value of an environment variable, or null', types: ['string'] },
    write: { signature: 'file: string, text: string', summary: 'writes text to a file (creating directories); returns the absolute path', types: ['string', 'string'] },
    append: { signature: 'file: string, text: string', summary: 'appends text and a newline to a file; returns the absolute path', types: ['string', 'string'] },
    heartbeat: {
      signature: 'file: string, interval_ms: integer = 1000',
      summary: 'a daemon: appends a timestamp line to the file every interval until SIGTERM or SIGINT; returns the number of beats',
      types: ['string', 'integer'],
    },
    sleep: { signature: 'ms: integer', summary: 'waits, then returns ms', types: ['integer'] },
    fail: { signature: 'message: string = "failure requested"', summary: 'throws an Error with the message (exit code 1)', types: ['string'] },
  };

  constructor(_ctx?: RunnerContext) {}

  echo(...values: unknown[]): unknown {
    return values.length === 1 ? values[0] : values;
  }

  types(...values: unknown[]): string[] {
    return values.map(typeName);
  }

  add(a: number, b: number): number {
    return a + b;
  }

  sum(...numbers: number[]): number {
    return numbers.reduce((total, n) => total + n, 0);
  }

  env(name: string): string | null {
    return process.env[name] ?? null;
  }

  write(file: string, text: string): string {
    const target = path.resolve(file);
    mkdirSync(path.dirname(target), { recursive: true });
    writeFileSync(target, text);
    return target;
  }

  append(file: string, text: string): string {
    const target = path.resolve(file);
    mkdirSync(path.dirname(target), { recursive: true });
    appendFileSync(target, `${text}\n`);
    return target;
  }

  async heartbeat(file: string, interval_ms = 1000): Promise<number> {
    if (interval_ms < 10) throw new Error('interval_ms must be at least 10');
    const stop = new AbortController();
    const onSignal = () => stop.abort();
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
    let beats = 0;
    try {
      while (!stop.signal.aborted) {
        this.append(file, `beat ${++beats} ${new Date().toISOString()} pid ${process.pid}`);
        await sleep(interval_ms, undefined, { signal: stop.signal }).catch(() => undefined);
      }
    } finally {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    }
    return beats;
  }

  async sleep(ms: number): Promise<number> {
    await sleep(ms);
    return ms;
  }

  fail(message = 'failure requested'): never {
    throw new Error(message);
  }
}

export class Clock {
  static readonly summary = 'the time on this machine';
  static readonly methods: MethodDocs = {
    now: { signature: '', summary: 'the current time, ISO 8601 in UTC' },
    unix: { signature: '', summary: 'the current time in unix seconds' },
  };

  constructor(_ctx?: RunnerContext) {}

  now(): string {
    return new Date().toISOString();
  }

  unix(): number {
    return Math.floor(Date.now() / 1000);
  }
}

const SECRET_NAME = /(password|secret|master_key|private_key|token)/i;

/** Replaces secret values (by key name) and URL passwords with `[redacted]`. */
export function redact(value: unknown, key = ''): unknown {
  if (value === null || value === undefined) return value;
  if (typeof value === 'string') {
    if (key && SECRET_NAME.test(key)) return '[redacted]';
    return value.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@\s]*:)[^@/\s]*@/i, '$1[redacted]@');
  }
  if (Array.isArray(value)) return value.map((v) => redact(v, key));
  if (typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, redact(v, k)]));
  }
  return value;
}

export class Config {
  static readonly summary = 'the effective configuration (files + HANGAR_* variables), secrets redacted';
  static readonly methods: MethodDocs = {
    get: { signature: 'key: string = ""', summary: 'the value at a dotted key (api.port), or everything; secrets show as [redacted]', types: ['string'] },
  };

  constructor(private readonly ctx: RunnerContext) {}

  get(key = ''): unknown {
    let node: unknown = this.ctx.config();
    for (const part of key.split('.').filter(Boolean)) {
      if (!node || typeof node !== 'object' || !(part in (node as object))) throw new Error(`configuration has no key ${key}`);
      node = (node as Record<string, unknown>)[part];
    }
    return redact(node, key.split('.').pop());
  }
}

type Row = Record<string, unknown>;

/** Rows of a raw query, whatever the dialect returns (better-sqlite3: an array or run info; pg: a result). */
export function rowsOf(result: unknown): { rows: Row[] | null; info: Row | null } {
  if (Array.isArray(result)) return { rows: result as Row[], info: null };
  if (result && typeof result === 'object') {
    const r = result as { rows?: unknown; command?: string; rowCount?: number; changes?: number };
    if (Array.isArray(r.rows) && (r.command === 'SELECT' || r.rows.length || (r as { fields?: unknown[] }).fields?.length)) return { rows: r.rows as Row[], info: null };
    if (r.command) return { rows: null, info: { command: r.command, row_count: r.rowCount ?? 0 } };
    if (typeof r.changes === 'number') return { rows: null, info: { changes: r.changes } };
  }
  return { rows: null, info: null };
}

export class Store {
  static readonly summary = 'the configured database (SQLite or PostgreSQL), as the control plane sees it';
  static readonly methods: MethodDocs = {
    dialect: { signature: '', summary: '"sqlite" or "postgres"' },
    ping: { signature: '', summary: '"ok" when the database answers' },
    tables: { signature: '', summary: "names of the tables in hangar's database (or PostgreSQL schema)" },
    query: { signature: 'sql: string, params: array = []', summary: 'runs SQL with ? placeholders; returns the rows', types: ['string', 'json'] },
    count: { signature: 'table: string', summary: 'number of rows in a table', types: ['string'] },
    migrations: { signature: '', summary: 'migrations applied so far, oldest first' },
  };

  constructor(private readonly ctx: RunnerContext) {}

  async dialect(): Promise<string> {
    return (await this.ctx.store()).dialect;
  }

  async ping(): Promise<string> {
    await (await this.ctx.store()).ping();
    return 'ok';
  }

  async tables(): Promise<string[]> {
    const store = await this.ctx.store();
    const rows =
      store.dialect === 'sqlite'
        ? await store.knex.raw(`select name from sqlite_master where type = 'table' and name not like 'sqlite_%' order by name`)
        : (await store.knex.raw('select table_name as name from information_schema.tables where table_schema = current_schema() order by table_name')).rows;
    return (rows as Array<{ name: string }>).map((r) => r.name);
  }

  async query(sql: string, params: unknown[] = []): Promise<unknown> {
    if (!Array.isArray(params)) throw new Error('params must be a JSON array, e.g. ["a", 1]');
    const store = await this.ctx.store();
    const { rows, info } = rowsOf(await store.knex.raw(sql, params as never[]));
    return rows ?? info;
  }

  async count(table: string): Promise<number> {
    const store = await this.ctx.store();
    const row = (await store.knex(table).count({ n: '*' }).first()) as { n: number | string } | undefined;
    return Number(row?.n ?? 0);
  }

  async migrations(): Promise<Array<{ id: string; applied_at: string }>> {
    const store = await this.ctx.store();
    if (!(await store.knex.schema.hasTable('hangar_migrations'))) return [];
    return store.knex('hangar_migrations').select('id', 'applied_at').orderBy([{ column: 'applied_at' }, { column: 'id' }]);
  }
}

export class Hangar {
  static readonly summary = 'the control plane assembled from configuration, without listeners';
  static readonly methods: MethodDocs = {
    version: { signature: '', summary: 'version of hangar and of its API' },
    plugins: { signature: '', summary: 'the enabled plugins with their descriptions (loaded, not set up)' },
    migrate: { signature: '', summary: 'applies pending core and plugin migrations, as `hangar serve` does at start; returns their ids' },
    routes: { signature: '', summary: 'every route of every enabled plugin (plugins are set up; nothing listens)' },
    drivers: { signature: '', summary: 'names of the loaded drivers' },
  };

  constructor(private readonly ctx: RunnerContext) {}

  version(): typeof versionInfo {
    return versionInfo;
  }

  async plugins(): Promise<Array<{ name: string; description: string | null }>> {
    return (await loadPlugins(this.ctx.config())).map((p) => ({ name: p.name, description: p.description ?? null }));
  }

  async migrate(): Promise<string[]> {
    return migrateAll(await this.ctx.store(), await loadPlugins(this.ctx.config()));
  }

  async routes(): Promise<Array<{ method: string; path: string; auth: unknown; plugin: string; listener: string; summary: string }>> {
    const services = await this.ctx.services();
    return services.routeTable().map(({ plugin, route }) => ({
      method: route.method,
      path: route.path,
      auth: route.auth,
      plugin,
      listener: route.listener ?? 'control',
      summary: route.summary,
    }));
  }

  async drivers(): Promise<string[]> {
    return (await this.ctx.services()).drivers.names();
  }
}
