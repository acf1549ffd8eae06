import { readFileSync } from 'node:fs';
import type { Argv, CommandModule, Options, PositionalOptions } from 'yargs';
import { hideBin } from 'yargs/helpers';
import { apiClient, apiFailure, type ApiClient } from './api-client.js';
import { EXIT, failure, runAndExit, usageError } from './runner/errors.js';
import { cellText, renderTable } from './runner/output.js';
import { sleep } from '../core/clock.js';

/**
 * The generic half of the resource commands: cli/resources.ts describes each resource as data (its
 * API path, list columns, flags → body, actions) and {@link resourceCommand} turns one description
 * into a yargs command with a subcommand per verb. Nothing here knows a particular resource.
 */

export type Args = Record<string, any>;
type Query = Record<string, string | number | boolean | string[] | undefined>;

/**
 * How a request body (or query) is made from the arguments: a function, or an object whose keys
 * are the body's fields and whose values name the flag or positional they come from (or compute
 * the value). Fields that come out undefined are left out.
 */
export type Mapping = ((a: Args) => Record<string, unknown> | undefined) | Record<string, string | ((a: Args) => unknown)>;

export interface Verb {
  /** The subcommand and its positionals, yargs style: `scale <id> <replicas>`. `''` (or positionals only) for a resource that is one command. */
  command: string;
  /** The help line; `{noun}`, `{a noun}` and `{plural}` are the resource's. */
  describe: string;
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Absolute (`/v1/…`) or after the resource's base (`/{id}/scale`); `{x}` is the positional or flag x, URL-encoded. */
  path?: string;
  /** Positionals other than the usual ones ({@link POSITIONALS}), or their type. */
  positionals?: Record<string, PositionalOptions>;
  options?: Record<string, Options>;
  /**
   * Arguments (positionals or flags) that name another resource the API knows by id only: a name
   * given there is looked up ({@link Lookup}) and the id sent. `<id>` is the resource's own
   * ({@link Resource.lookup}).
   */
  refs?: Record<string, Lookup>;
  /** Arguments of {@link refs} that, when not given, are the caller's own record (`--user`: the one whose key signs). */
  orSelf?: string[];
  query?: Mapping;
  body?: Mapping;
  /**
   * How the answer prints (tables and lines; `--json` always prints the data as it came):
   * - `list`: a table of `columns` (all pages); `record`: one resource, field by field;
   * - `done`: one line (`created swarm web (swm-…)`), or for a 202 what was accepted and how to follow it;
   * - `logs`: the answer is a log read to poll; its lines print once it completes;
   * - a function: prints what it returns (and may return an exit code instead); not called with `--json`.
   */
  output: 'list' | 'record' | 'done' | 'logs' | ((data: any, a: Args, api: ApiClient) => string | number | Promise<string | number>);
  /** Columns of a `list`; default: the resource's. */
  columns?: Column[];
  /** `done`: past and progressive forms of the verb (`['created', 'creating']`). */
  says?: [string, string];
  /** `done`: what the line names; default the resource and its name and id. */
  label?: (a: Args, data: any) => string;
  /** `done` with 202: the command to follow it with; default `<noun> get <id>`. */
  follow?: (a: Args, data: any) => string;
  /** `done`: lines printed after it (a generated password). */
  notes?: (data: any, a: Args) => string[];
  /** Adds `--wait`: poll the resource until its status settles, or (`gone`) until it is deleted. */
  wait?: 'settle' | 'gone';
  /** With {@link wait}: waiting is the default, `--no-wait` returns at once. */
  waitByDefault?: boolean;
  /** A 202 that answers a task ({@link TaskFollow}): followed until it completes or fails. */
  task?: TaskFollow;
  /** What an empty `list` says; default `no <plural>`. */
  empty?: string;
  /** `list`: false for a route that answers everything at once (no `limit`, no cursor). */
  paged?: boolean;
}

/**
 * A task the API answers 202 with (`{task_id}`), read at `path` until it completes or fails: a
 * drain the cluster is still at, a scan. A failed one ends with exit 1 and its error.
 */
export interface TaskFollow {
  /** Where it is read, after the resource's base: `/{id}/availability/{task_id}` (`{task_id}` is the answer's). */
  path: string;
  /** `always`: the task's outcome is the answer (a scan); `flag`: followed with `--wait` only. */
  when: 'always' | 'flag';
  /** What a completed task prints (its last read). */
  done: (read: any, a: Args) => string;
  /** What it was, for the line that names its failure: `draining node node-…`. */
  doing: (a: Args) => string;
}

/** A table column: a field, a dotted path (`manager.node_id`, `members.length`), `header=path`, or [header, compute]. */
export type Column = string | [string, (row: any) => unknown];

/**
 * How a resource the API knows by id only is found by name: an argument that looks like an id
 * (`node-…`) is sent as it is; anything else is looked for in the list, by its name field. None,
 * or more than one, is an error that names it.
 */
export interface Lookup {
  /** What it is, in messages: `node`. */
  noun: string;
  /** The list to look in; `{x}` is the argument x, already looked up (a user's keys: `/v1/iam/users/{user}/keys`). */
  list: string;
  /** What an id looks like. */
  id: RegExp;
  /** The field that holds the name (default `name`). */
  name?: string;
  /** false for a list answered at once (no `limit`, no cursor). */
  paged?: boolean;
  /** Where the caller's own record is ({@link Verb.orSelf}): a route and the path of the id in its answer. */
  self?: { path: string; id: string };
}

export interface Resource {
  /** The command: `hangar <noun> <verb>`. */
  noun: string;
  plural?: string;
  describe: string;
  base: string;
  columns: Column[];
  /** Statuses that are still moving (`--wait` goes on polling); `failed` ones end a wait with exit 1. */
  transitional?: string[];
  failed?: string[];
  /** What `--wait` prints of a status beside its reason (members joining one by one). */
  progress?: (data: any) => string | null;
  /**
   * For `--wait` on a settled status: what still moves (a member still joining: the wait goes on),
   * or what failed in it (a member whose install failed: the wait ends with exit 1 and this).
   */
  parts?: (data: any) => { moving: boolean; failed: string | null };
  /** Fields of `record` output printed as text blocks (a YAML file) after the rest. */
  blocks?: string[];
  /** When the API takes only ids for it: how a name given for `<id>` is looked up. */
  lookup?: Lookup;
  verbs: Verb[];
}

/** Descriptions of the positionals every resource uses alike. */
const POSITIONALS: Record<string, (r: Resource) => PositionalOptions> = {
  id: (r) => ({ describe: `the ${r.noun}: its id${r.noun === 'tag' ? '' : ` (or its ${(r.lookup?.name ?? 'name').replaceAll('_', ' ')})`}` }),
  name: (r) => ({ describe: `name of the new ${r.noun}` }),
  node: () => ({ describe: 'the node: its id (node-…) or its name' }),
};

// ——— small helpers the table uses ———

/** The values of a repeatable flag, or undefined when it was not given. */
export const many = (flag: string) => (a: Args) => (a[flag] === undefined ? undefined : ([] as unknown[]).concat(a[flag]).map(String));

/** `--env K=V` flags as an object. */
export function keyValues(flag: string) {
  return (a: Args): Record<string, string> | undefined => {
    const items = many(flag)(a);
    if (!items) return undefined;
    const out: Record<string, string> = {};
    for (const item of items) {
      const eq = item.indexOf('=');
      if (eq < 1) throw usageError(`--${flag} ${JSON.stringify(item)} must be KEY=VALUE`);
      out[item.slice(0, eq)] = item.slice(eq + 1);
    }
    return out;
  };
}

/** Splits a command line into words the way a POSIX shell does (quotes, backslashes), without expanding anything. */
export function shellWords(text: string): string[] {
  const words: string[] = [];
  let word: string | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end < 0) throw usageError(`unterminated ' in ${JSON.stringify(text)}`);
      word = (word ?? '') + text.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      word ??= '';
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === '\\' && i + 1 < text.length && '"\\$`\n'.includes(text[i + 1]!)) i++;
        word += text[i];
      }
      if (i >= text.length) throw usageError(`unterminated " in ${JSON.stringify(text)}`);
    } else if (c === '\\') {
      if (i + 1 >= text.length) throw usageError(`trailing \\ in ${JSON.stringify(text)}`);
      word = (word ?? '') + text[++i];
    } else word = (word ?? '') + c;
  }
  if (word !== null) words.push(word);
  return words;
}

/** A file's bytes (`-` is stdin); a file that cannot be read is a usage error. */
export function readInput(file: string, flag: string): Buffer {
  try {
    return readFileSync(file === '-' ? 0 : file);
  } catch (err) {
    throw usageError(`${flag} ${file}: ${(err as Error).message}`);
  }
}

/**
 * The text of the file a flag names (`-` is stdin), or undefined when the flag is not given; with
 * `oneLine` (a password) without its final line break. Secrets come this way, never on the command line.
 */
export const fileText =
  (flag: string, oneLine = false) =>
  (a: Args): string | undefined => {
    if (a[flag] === undefined) return undefined;
    const text = readInput(String(a[flag]), `--${flag}`).toString('utf8');
    return oneLine ? text.replace(/\r?\n$/, '') : text;
  };

// ——— output ———

function pick(row: unknown, path: string): unknown {
  let value: unknown = row;
  for (const key of path.split('.')) value = value == null ? undefined : (value as Record<string, unknown>)[key];
  return value;
}

/** One cell or one field: `-` for nothing, lists joined, flat objects as k=v pairs. */
function show(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  if (Array.isArray(value)) return value.length ? (value.every((v) => typeof v !== 'object' || v === null) ? value.join(', ') : cellText(value)) : '-';
  if (typeof value === 'object' && Object.values(value).every((v) => typeof v !== 'object' || v === null)) {
    const pairs = Object.entries(value).map(([k, v]) => `${k}=${v}`);
    return pairs.length ? pairs.join(', ') : '-';
  }
  return cellText(value);
}

export function table(rows: unknown[], columns: Column[]): string {
  return renderTable(
    rows.map((row) =>
      Object.fromEntries(
        columns.map((c) => {
          if (Array.isArray(c)) return [c[0], show(c[1](row))];
          const [header, path] = c.includes('=') ? (c.split('=', 2) as [string, string]) : [c.split('.')[0]!, c];
          return [header, show(pick(row, path))];
        }),
      ),
    ),
  );
}

const isRowList = (v: unknown): v is Record<string, unknown>[] => Array.isArray(v) && v.length > 0 && v.every((x) => x && typeof x === 'object' && !Array.isArray(x));
const isRowMap = (v: unknown): v is Record<string, Record<string, unknown>> =>
  !!v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0 && Object.values(v).every((x) => x && typeof x === 'object' && !Array.isArray(x));

/**
 * One resource field by field; lists of objects (members, routes) and maps of objects (replicas per
 * compose service) as tables below, `blocks` (a compose file) verbatim at the end.
 */
export function renderRecord(data: Record<string, unknown>, blocks: string[] = []): string {
  const fields: Array<[string, string]> = [];
  const tables: string[] = [];
  for (const [key, value] of Object.entries(data)) {
    if (blocks.includes(key)) continue;
    if (isRowList(value)) tables.push(`${key}:\n${renderTable(value.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, show(v)]))))}`);
    else if (isRowMap(value)) tables.push(`${key}:\n${renderTable(Object.entries(value).map(([name, r]) => ({ name, ...Object.fromEntries(Object.entries(r).map(([k, v]) => [k, show(v)])) })))}`);
    else fields.push([key, show(value)]);
  }
  const width = Math.max(0, ...fields.map(([k]) => k.length)) + 1;
  const text = [fields.map(([k, v]) => `${`${k}:`.padEnd(width)} ${v}`).join('\n'), ...tables];
  for (const key of blocks) {
    const value = data[key];
    if (typeof value === 'string') text.push(`${key}:\n${value.replace(/\n$/, '')}`);
  }
  return text.join('\n\n');
}

// ——— requests ———

function positionalNames(command: string): string[] {
  return [...command.matchAll(/[<[]([\w-]+)[\]>]/g)].map((m) => m[1]!);
}

function evaluate(mapping: Mapping | undefined, a: Args): Record<string, unknown> | undefined {
  if (!mapping) return undefined;
  const raw = typeof mapping === 'function' ? mapping(a) : Object.fromEntries(Object.entries(mapping).map(([field, from]) => [field, typeof from === 'function' ? from(a) : a[from]]));
  if (raw === undefined) return undefined;
  return Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined));
}

function pathOf(r: Resource, verb: Verb, a: Args): string {
  const template = verb.path === undefined ? '' : verb.path;
  const full = template.startsWith('/v1/') ? template : `${r.base}${template}`;
  const path = full.replace(/\{([\w-]+)\}/g, (_, name: string) => {
    if (a[name] === undefined || a[name] === '') throw usageError(`${name} is required`);
    return encodeURIComponent(String(a[name]));
  });
  const query = evaluate(verb.query, a) as Query | undefined;
  // A list is the parameter repeated (`status=ready&status=offline`).
  const pairs = Object.entries(query ?? {}).flatMap(([k, v]) => ([] as unknown[]).concat(v).map((item): [string, string] => [k, String(item)]));
  const qs = new URLSearchParams(pairs).toString();
  return qs ? `${path}?${qs}` : path;
}

const withQuery = (path: string, extra: Record<string, string>) => `${path}${path.includes('?') ? '&' : '?'}${new URLSearchParams(extra).toString()}`;

/** Every page of a list. */
async function listAll(api: ApiClient, path: string): Promise<{ items: unknown[]; envelope: Record<string, unknown> }> {
  const items: unknown[] = [];
  let cursor: string | null | undefined;
  for (;;) {
    const res = await api.send<unknown[]>('GET', withQuery(path, { limit: '1000', ...(cursor ? { cursor } : {}) }));
    items.push(...(res.data ?? []));
    cursor = res.envelope.next_cursor as string | null | undefined;
    if (!cursor) return { items, envelope: res.envelope };
  }
}

/** How often `--wait` and other followers poll (HANGAR_CLI_POLL_MS: tests make it short). */
export const POLL_MS = Number(process.env.HANGAR_CLI_POLL_MS) || 1000;

function labelOf(r: Resource, data: any, a: Args): string {
  const id = data?.id ?? a.id;
  const name = data?.[r.lookup?.name ?? 'name'];
  return `${r.noun} ${name && name !== id ? `${name} (${id})` : id}`;
}

/**
 * Polls a resource until its status settles (or it is gone), printing each new status unless
 * quiet; answers the exit code and the resource as it last was (null once gone).
 */
async function waitFor(api: ApiClient, r: Resource, id: string, mode: 'settle' | 'gone', timeoutS: number, follow: string, quiet: boolean): Promise<{ code: number; data: unknown }> {
  const deadline = Date.now() + timeoutS * 1000;
  const transitional = r.transitional ?? [];
  const failed = r.failed ?? ['failed'];
  const path = `${r.base}/${encodeURIComponent(id)}`;
  const say = (line: string) => quiet || console.log(line);
  let last = '';
  let data: Record<string, any> | null = null;
  while (Date.now() < deadline) {
    const res = await api.call<{ data: Record<string, any> }>('GET', path);
    if (res.status === 404 && mode === 'gone') {
      say(`${r.noun} ${id} is gone`);
      return { code: EXIT.ok, data: null };
    }
    if (res.status >= 400) throw apiFailure('GET', path, res);
    data = res.json.data;
    const status = String(data.status ?? 'unknown');
    const reason = data.reason ?? data.error ?? null;
    const progress = r.progress?.(data);
    const line = `${status}${reason ? `: ${reason}` : ''}${progress ? ` (${progress})` : ''}`;
    if (line !== last) say(`· ${line}`);
    last = line;
    if (failed.includes(status)) {
      console.error(`hangar ${r.noun}: ${labelOf(r, data, {})} ${mode === 'gone' ? 'was not deleted' : 'failed'}${reason ? `: ${reason}` : ''}`);
      return { code: EXIT.failed, data };
    }
    const parts = mode === 'settle' ? r.parts?.(data) : undefined;
    if (parts?.failed && !transitional.includes(status)) {
      console.error(`hangar ${r.noun}: ${labelOf(r, data, {})} is ${status}, but ${parts.failed}`);
      return { code: EXIT.failed, data };
    }
    if (mode === 'settle' && !transitional.includes(status) && !parts?.moving) {
      say(`${labelOf(r, data, {})} is ${status}`);
      return { code: EXIT.ok, data };
    }
    await sleep(POLL_MS);
  }
  console.error(`hangar ${r.noun}: still ${String(data?.status ?? 'unknown')} after ${timeoutS} s; follow with: hangar ${follow}`);
  return { code: EXIT.failed, data };
}

/**
 * Reads a task until it completes or fails (each read of a finished one may be its last: it is
 * handed over once); `late` says why it did not finish within the timeout.
 */
async function followTask<T extends { status: string; error?: string }>(api: ApiClient, taskPath: string, timeoutS: number, late: string): Promise<T> {
  const deadline = Date.now() + timeoutS * 1000;
  while (Date.now() < deadline) {
    const read = await api.ok<T>('GET', taskPath);
    if (read.status === 'completed' || read.status === 'failed') return read;
    await sleep(Math.min(POLL_MS, 500));
  }
  throw failure(late);
}

/** A queued log read: polls it until it completes or fails, then prints its lines. */
async function readLogs(api: ApiClient, path: string, taskId: string, a: Args): Promise<number> {
  const taskPath = `${path.split('?')[0]}/${encodeURIComponent(taskId)}`;
  // A workload's read answers its lines; a node's is its task, the lines in its result.
  const late = `the logs were not read within ${a.timeout} s (task ${taskId}); is the agent that reads them (the swarm's manager, or the node) online?`;
  const read = await followTask<{ status: string; lines?: string[]; result?: { lines?: string[] }; error?: string }>(api, taskPath, a.timeout as number, late);
  if (read.status === 'failed') throw failure(`reading the logs failed: ${read.error ?? 'no reason given'}`);
  if (a.json) console.log(JSON.stringify(read, null, 2));
  else for (const line of read.lines ?? read.result?.lines ?? []) console.log(line);
  return EXIT.ok;
}

/** A 202's task followed to its end ({@link TaskFollow}): its outcome printed, exit 1 when it failed. */
async function finishTask(api: ApiClient, r: Resource, verb: Verb, a: Args, taskId: string): Promise<number> {
  const task = verb.task!;
  const taskPath = `${r.base}${task.path}`.replace(/\{([\w-]+)\}/g, (_, name: string) => encodeURIComponent(String(name === 'task_id' ? taskId : a[name])));
  const late = `${task.doing(a)}: not finished within ${a.timeout} s (task ${taskId}); follow with: hangar ${verb.follow?.(a, { task_id: taskId }) ?? `${r.noun} get ${a.id}`}`;
  const read = await followTask<{ status: string; error?: string }>(api, taskPath, a.timeout as number, late);
  if (a.json) console.log(JSON.stringify(read, null, 2));
  if (read.status === 'failed') {
    console.error(`hangar ${r.noun}: ${task.doing(a)} failed: ${read.error ?? 'no reason given'}`);
    return EXIT.failed;
  }
  if (!a.json) console.log(task.done(read, a));
  return EXIT.ok;
}

/** Every item of a list (all pages, or the one answer of an unpaged one). */
async function listItems(api: ApiClient, path: string, paged = true): Promise<unknown[]> {
  return paged ? (await listAll(api, path)).items : ((await api.ok<unknown[]>('GET', path)) ?? []);
}

/**
 * The arguments with every name that stands for an id replaced by the id ({@link Lookup}): the
 * verb's {@link Verb.refs} first (in their order), then `<id>` through the resource's own lookup.
 * An argument of {@link Verb.orSelf} that was not given becomes the caller's own record. Asks the
 * API only for what is not an id already; each list once.
 */
async function resolveNames(client: () => ApiClient, r: Resource, verb: Verb, a: Args): Promise<Args> {
  const refs: Array<[string, Lookup]> = Object.entries(verb.refs ?? {});
  if (r.lookup && positionalNames(verb.command).includes('id')) refs.push(['id', r.lookup]);
  if (!refs.length) return a;
  const out: Args = { ...a };
  const lists = new Map<string, Promise<unknown[]>>();
  const find = async (lookup: Lookup, value: string): Promise<string> => {
    if (lookup.id.test(value)) return value;
    const path = lookup.list.replace(/\{([\w-]+)\}/g, (_, name: string) => encodeURIComponent(String(out[name])));
    if (!lists.has(path)) lists.set(path, listItems(client(), path, lookup.paged));
    const field = lookup.name ?? 'name';
    const found = ((await lists.get(path)!) as Array<Record<string, unknown>>).filter((item) => item[field] === value);
    const noun = lookup.noun;
    if (found.length === 1) return String(found[0]!.id);
    if (!found.length) throw failure(`no ${noun} ${JSON.stringify(value)}: it is not a ${noun} id, and no ${noun} has that ${field.replaceAll('_', ' ')} (hangar ${noun} list shows them)`);
    throw failure(`${found.length} ${noun}s are named ${JSON.stringify(value)} (${found.map((item) => item.id).join(', ')}): give the id of the one you mean`);
  };
  for (const [name, lookup] of refs) {
    const value = out[name];
    if (value === undefined || value === '') {
      if (verb.orSelf?.includes(name) && lookup.self) out[name] = String(pick(await client().ok('GET', lookup.self.path), lookup.self.id));
      continue;
    }
    out[name] = Array.isArray(value) ? await Promise.all(value.map((v) => find(lookup, String(v)))) : await find(lookup, String(value));
  }
  return out;
}

async function run(r: Resource, verb: Verb, given: Args): Promise<number> {
  for (const [name, spec] of Object.entries({ ...verb.positionals, ...verb.options })) {
    const value = given[name];
    if ((spec as Options).type === 'number' && value !== undefined && ([] as unknown[]).concat(value).some((v) => !Number.isFinite(v))) {
      throw usageError(`${name} must be a number`);
    }
  }
  let client: ApiClient | undefined;
  const a = await resolveNames(() => (client ??= apiClient()), r, verb, given);
  const path = pathOf(r, verb, a);
  const body = evaluate(verb.body, a);
  const api = client ?? apiClient();

  if (verb.output === 'list') {
    const { items, envelope } = verb.paged === false ? await api.send<unknown[]>('GET', path).then((res) => ({ items: res.data ?? [], envelope: res.envelope })) : await listAll(api, path);
    if (typeof envelope.error === 'string') console.error(`hangar ${r.noun}: ${envelope.error}`);
    if (a.json) console.log(JSON.stringify(items, null, 2));
    else console.log(items.length ? table(items, verb.columns ?? r.columns) : (verb.empty ?? `no ${plural(r)}`));
    return EXIT.ok;
  }

  const res = await api.send(verb.method, path, body ?? (verb.method === 'POST' || verb.method === 'PUT' || verb.method === 'PATCH' ? {} : undefined));
  const data = res.data as any;
  if (verb.output === 'logs') {
    if (!data?.task_id) throw failure(`the API answered no task id: ${JSON.stringify(data)}`);
    return readLogs(api, path, data.task_id as string, a);
  }
  if (verb.task && res.status === 202 && data?.task_id && (verb.task.when === 'always' || a.wait)) {
    if (!a.json && verb.task.when === 'flag') console.log(`${verb.says?.[1] ?? 'accepted:'} ${labelOf(r, {}, a)}: the cluster is still at it (task ${data.task_id}); waiting`);
    return finishTask(api, r, verb, a, String(data.task_id));
  }
  const follow = verb.follow ? verb.follow(a, data) : `${r.noun} get ${data?.id ?? a.id}`;
  const waiting = res.status === 202 && a.wait && verb.wait ? () => waitFor(api, r, String(data?.id ?? a.id), verb.wait!, a.timeout as number, follow, Boolean(a.json)) : null;
  if (a.json) {
    // With --wait: the resource as it settled, over what the 202 said (which alone holds a
    // generated password); as it was accepted once it is gone.
    const end = waiting ? await waiting() : null;
    console.log(JSON.stringify(end?.data ? { ...data, ...end.data } : data, null, 2));
    return end?.code ?? EXIT.ok;
  } else if (typeof verb.output === 'function') {
    const out = await verb.output(data, a, api);
    if (typeof out === 'number') return out;
    if (out) console.log(out);
  } else if (verb.output === 'record') {
    console.log(renderRecord(data, r.blocks));
  } else {
    const [past, ing] = verb.says ?? ['done:', 'accepted:'];
    const label = verb.label ? verb.label(a, data) : labelOf(r, data, a);
    if (res.status !== 202) console.log(`${past} ${label}`);
    else {
      const state = data?.status ? `: ${data.status}${data.reason ? ` (${data.reason})` : ''}` : '';
      console.log(`${ing} ${label}${state}${waiting ? '' : `; follow with: hangar ${follow}`}`);
      if (data?.note) console.log(`note: ${data.note}`);
    }
    for (const line of verb.notes?.(data, a) ?? []) console.log(line);
    if (waiting) return (await waiting()).code;
  }
  return EXIT.ok;
}

// ——— yargs ———

/**
 * A bare `-` (stdin) reaches yargs as no value: `--from-file -` becomes '' plus a stray `-`
 * argument (which strict mode refuses), a `-` positional becomes '' or true. Before validation this
 * puts the `-` back where the command line had it.
 */
export function restoreDashes(argv: Args, positionals: string[]): void {
  const raw = hideBin(process.argv);
  const blank = (name: string) => argv[name] === '' || argv[name] === true;
  raw.forEach((token, i) => {
    if (token !== '-') return;
    const before = raw[i - 1];
    const flag = before?.startsWith('--') && !before.includes('=') ? before.slice(2) : undefined;
    if (flag && argv[flag] === '') {
      argv[flag] = '-';
      argv[flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())] = '-';
      const stray = (argv._ as unknown[]).indexOf('-');
      if (stray >= 0) (argv._ as unknown[]).splice(stray, 1);
      for (const name of positionals) if (blank(name)) delete argv[name];
    } else {
      const name = positionals.find(blank);
      if (name) argv[name] = '-';
    }
  });
}

/**
 * Usage errors (an unknown command or flag, a missing positional, a bad choice) print the help and
 * the problem and exit 2, as the runner's do. An error a command's handler throws is no usage
 * error: it exits 1.
 */
export function usageExit<T>(y: Argv<T>): Argv<T> {
  return y.fail((msg, err) => {
    if (!msg && err) {
      console.error(`hangar: ${err.message}`);
      process.exit(EXIT.failed);
    }
    y.showHelp((help) => console.error(help));
    console.error(`\n${msg ?? err?.message}`);
    process.exit(EXIT.usage);
  });
}

const plural = (r: Resource) => r.plural ?? `${r.noun}s`;
const fill = (r: Resource, text: string) =>
  text
    .replaceAll('{a noun}', `${/^[aeiou]/.test(r.noun) ? 'an' : 'a'} ${r.noun}`)
    .replaceAll('{noun}', r.noun)
    .replaceAll('{plural}', plural(r));

function verbCommand(r: Resource, verb: Verb, commandName: string): CommandModule<object, Args> {
  const root = !/^[a-z]/.test(verb.command);
  const label = root ? r.noun : `${r.noun} ${verb.command.split(' ')[0]}`;
  return {
    command: commandName,
    describe: fill(r, verb.describe),
    builder: (y) => {
      let b = y as Argv<any>;
      const positionals = positionalNames(verb.command);
      for (const name of positionals) {
        b = b.positional(name, { type: 'string', ...POSITIONALS[name]?.(r), ...verb.positionals?.[name] });
      }
      b = b.middleware((argv) => restoreDashes(argv, positionals), true);
      for (const [name, spec] of Object.entries(verb.options ?? {})) b = b.option(name, spec);
      if (verb.wait) {
        const what = verb.wait === 'gone' ? 'poll until it is gone' : 'poll until its status settles';
        b = b
          .option('wait', { type: 'boolean', default: Boolean(verb.waitByDefault), describe: verb.waitByDefault ? `${what} (the default; --no-wait returns at once)` : what })
          .option('timeout', { type: 'number', default: 300, describe: 'seconds to wait' });
      }
      if (verb.task) {
        if (verb.task.when === 'flag') b = b.option('wait', { type: 'boolean', default: false, describe: 'when the cluster is still at it (202), follow its task until it is done' });
        b = b.option('timeout', { type: 'number', default: 300, describe: 'seconds to wait for the task' });
      }
      if (verb.output === 'logs') b = b.option('timeout', { type: 'number', default: 60, describe: 'seconds to wait for the lines' });
      b = b.option('json', { type: 'boolean', describe: 'print the data the API answered, as JSON' });
      return usageExit(b) as Argv<Args>;
    },
    handler: (a) => runAndExit(label, false, () => run(r, verb, a)),
  };
}

/** The yargs command of one resource: `hangar <noun> <verb> …`, or `hangar <noun> …` when it has one verb named ''. */
export function resourceCommand(r: Resource): CommandModule<object, Args> {
  const root = r.verbs.find((v) => !/^[a-z]/.test(v.command));
  if (root) return verbCommand(r, root, `${r.noun}${root.command ? ` ${root.command}` : ''}`);
  return {
    command: `${r.noun} <verb>`,
    describe: r.describe,
    builder: (y) => usageExit(r.verbs.reduce((b, verb) => b.command(verbCommand(r, verb, verb.command)), y as Argv<any>).demandCommand(1)) as Argv<Args>,
    handler: () => undefined,
  };
}
