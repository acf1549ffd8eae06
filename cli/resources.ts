import { chmodSync, writeFileSync } from 'node:fs';
import type { Argv, CommandModule, Options } from 'yargs';
import { deployVerb, rolloutCancelVerb, rolloutVerb, updateAgentVerb } from './node.js';
import { fileText, keyValues, many, POLL_MS, readInput, renderRecord, resourceCommand, shellWords, table, usageExit, type Args, type Column, type Lookup, type Resource, type Verb } from './resource-commands.js';
import type { ApiClient } from './api-client.js';
import { usageError } from './runner/errors.js';
import { backupCreateCommand } from './control-plane-backup.js';
import { projectFilter, projectOf, projectOption } from './projects.js';

/**
 * The resources of the CLI, as data: `hangar <noun> <verb>` for each, built by
 * resourceCommand() (cli/resource-commands.ts). A verb names its route, the flags it takes, how
 * they become the request, and how the answer prints. docs/cli.md describes the commands.
 */

// ——— the verbs most resources have ———

const create = (verb: Partial<Verb>): Verb => ({
  command: 'create <name>',
  describe: 'Create {a noun}',
  method: 'POST',
  output: 'done',
  says: ['created', 'creating'],
  ...verb,
});
const list = (verb: Partial<Verb> = {}): Verb => ({ command: 'list', describe: 'List {plural}', method: 'GET', output: 'list', ...verb });
const get = (verb: Partial<Verb> = {}): Verb => ({ command: 'get <id>', describe: 'Show {a noun}', method: 'GET', path: '/{id}', output: 'record', ...verb });
const remove = (verb: Partial<Verb> = {}): Verb => ({ command: 'delete <id>', describe: 'Delete {a noun}', method: 'DELETE', path: '/{id}', output: 'done', says: ['deleted', 'deleting'], ...verb });
/** `force` adds `--force` (the route's `?force=true`). */
const removeForced = (force: string, verb: Partial<Verb> = {}): Verb =>
  remove({ options: { force: { type: 'boolean', default: false, describe: force } }, query: { force: (a) => (a.force ? true : undefined) }, ...verb });
/** A POST on one resource: `stop <id>` → POST …/{id}/stop. */
const action = (name: string, describe: string, says: [string, string], verb: Partial<Verb> = {}): Verb => ({
  command: `${name} <id>`,
  describe,
  method: 'POST',
  path: `/{id}/${name}`,
  output: 'done',
  says,
  ...verb,
});
/**
 * Cordon, drain or uncordon: 200 once the node's cluster did it; 202 while the cluster is still at
 * it, its task followed with `--wait` (`hangar node availability` reads it otherwise).
 */
const availability = (name: string, describe: string, says: [string, string]): Verb =>
  action(name, describe, says, {
    follow: (a, d) => `node availability ${a.id} ${d.task_id}`,
    task: { path: '/{id}/availability/{task_id}', when: 'flag', doing: (a) => `${says[1]} node ${a.id}`, done: (_read, a) => `${says[0]} node ${a.id}` },
  });
/** The load balancer of a swarm or a cluster: deployed (again: its routes re-applied with the image configured now) or removed. */
const lbVerbs = (noun: string): Verb[] =>
  (
    [
      ['lb-deploy', `Deploy the load balancer of ${noun === 'swarm' ? 'a swarm' : 'a cluster (an ingress controller)'} (again: deploy it anew with the image configured now)`, ['deployed', 'deploying'], 'POST'],
      ['lb-remove', `Remove the load balancer of a ${noun}`, ['removed', 'removing'], 'DELETE'],
    ] as const
  ).map(([name, describe, says, method]) =>
    action(name, describe, [...says], { method, path: '/{id}/lb', label: (a, d) => `the load balancer of ${noun} ${a.id} (${d.id})`, follow: (_a, d) => `lb get ${d.id}` }),
  );
/** A log read: POST …/{id}/logs → a task id, polled until it completes. */
const logs = (): Verb => ({
  command: 'logs <id>',
  describe: 'Print the last lines of the logs of {a noun} (read through its swarm manager)',
  method: 'POST',
  path: '/{id}/logs',
  options: {
    lines: { type: 'number', describe: 'the last N lines (default 100, at most 10000)', conflicts: 'since' },
    since: { type: 'string', describe: 'lines from this time on (RFC 3339, e.g. 2024-05-01T10:00:00Z)' },
  },
  query: { lines: 'lines', since: 'since' },
  output: 'logs',
});

// ——— what the API knows by id only: a name given in its place is looked up (Lookup) ———

const NODES: Lookup = { noun: 'node', list: '/v1/nodes', id: /^node-[0-9a-z]+$/ };
const USERS: Lookup = {
  noun: 'user',
  list: '/v1/iam/users',
  id: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  name: 'username',
  self: { path: '/v1/iam/session', id: 'user.id' },
};
const KEYS: Lookup = { noun: 'key', list: '/v1/iam/users/{user}/keys', id: /^key-[0-9a-z]+$/, name: 'access_key_id', paged: false };
/** A member in a cluster's view. */
interface ClusterNode {
  node_id: string;
  role: string;
  status: string;
  error?: string | null;
}
/** `<node>` or `--node`: a node's id or name. */
const nodeRef = { node: NODES };
/**
 * A swarm's or cluster's members: `<members> <id>` lists them as it reports them (not paged), and a
 * node joining or leaving (`<verb> <id> <node>`, the node by id or name) is followed there.
 */
const memberList = (members: string, describe: string, columns: string[]): Verb => ({
  command: `${members} <id>`,
  describe,
  method: 'GET',
  path: `/{id}/${members}`,
  output: 'list',
  paged: false,
  columns,
  empty: `no ${members}`,
});
const membership = (noun: 'swarm' | 'cluster', members: string, verb: Pick<Verb, 'command' | 'describe' | 'method' | 'path' | 'says' | 'label'> & Partial<Verb>): Verb => ({
  refs: nodeRef,
  output: 'done',
  follow: (a) => `${noun} ${members} ${a.id}`,
  ...verb,
});

const swarmFlag = (describe = 'the swarm (id or name)'): Options => ({ type: 'string', demandOption: true, describe });
const swarmFilter: Partial<Verb> = { options: { swarm: { type: 'string', describe: 'only those on this swarm (id)' } }, query: { swarm_id: 'swarm' } };
const repeatable = (describe: string): Options => ({ type: 'string', describe: `${describe} (repeatable)` });

/** The value of a secret or config: exactly one of --from-file (- is stdin), --from-literal, or `-` (stdin), as base64. */
function objectValue(a: Args): string {
  const stdin = a.source === '-';
  if (a.source !== undefined && !stdin) throw usageError(`unexpected argument ${JSON.stringify(a.source)}: give the value with --from-file, --from-literal or - (stdin)`);
  const sources = [a['from-file'] !== undefined, a['from-literal'] !== undefined, stdin].filter(Boolean).length;
  if (sources !== 1) throw usageError('give the value in exactly one way: --from-file FILE, --from-literal VALUE, or - (read from stdin)');
  const bytes = a['from-literal'] !== undefined ? Buffer.from(String(a['from-literal'])) : readInput(stdin ? '-' : String(a['from-file']), '--from-file');
  return bytes.toString('base64');
}

const objectSource: Partial<Verb> = {
  positionals: { source: { describe: '- to read the value from stdin' } },
  options: {
    'from-file': { type: 'string', describe: 'read the value from a file (- is stdin)' },
    'from-literal': { type: 'string', describe: 'the value itself (visible in the process list; prefer a file)' },
  },
};

/** Where something runs: exactly one of --swarm and --cluster (a Kubernetes cluster); `onCluster` says what it becomes there. */
const placeFlags = (onCluster: string): Record<string, Options> => ({
  swarm: { type: 'string', describe: 'the swarm (id or name); or --cluster' },
  cluster: { type: 'string', conflicts: 'swarm', describe: `a Kubernetes cluster (id or name): ${onCluster}; or --swarm` },
});
/** The body's swarm_id or cluster_id; neither is a usage error (both is yargs' `conflicts`). */
function place(a: Args): { swarm_id?: string; cluster_id?: string } {
  if (a.swarm === undefined && a.cluster === undefined) throw usageError('give the swarm (--swarm) or the Kubernetes cluster (--cluster) to create it on');
  return { swarm_id: a.swarm, cluster_id: a.cluster };
}
/** List filters by where it runs: --swarm or --cluster. */
const placeFilter: Partial<Verb> = {
  options: { ...swarmFilter.options, cluster: { type: 'string', conflicts: 'swarm', describe: 'only those on this Kubernetes cluster (id or name)' } },
  query: { swarm_id: 'swarm', cluster_id: 'cluster' },
};
/** The columns that say where it runs (a view has swarm_id or cluster_id; the other shows -). */
const placeColumns = ['swarm=swarm_id', 'cluster=cluster_id'];

/** Where a secret or config goes: a swarm, or a namespace of a Kubernetes cluster. */
const objectTarget: Record<string, Options> = {
  ...placeFlags('a Secret or ConfigMap of that name in --namespace'),
  namespace: { type: 'string', implies: 'cluster', describe: 'the namespace on --cluster (default: default)' },
};
const objectPlace = (a: Args) => ({ ...place(a), namespace: a.namespace });

/** Secrets and configs: the same API under /v1/secrets and /v1/configs. */
function swarmObject(kind: 'secret' | 'config'): Resource {
  return {
    noun: kind,
    describe:
      kind === 'secret'
        ? 'Secrets on swarms and Kubernetes clusters, used by services and workloads (a value is never shown again)'
        : 'Configs on swarms and Kubernetes clusters, used by services and workloads (get --decode prints a value)',
    base: `/v1/${kind}s`,
    columns: ['id', 'name', ...placeColumns, 'namespace', 'version', 'services', 'updated_at'],
    verbs: [
      create({
        command: 'create <name> [source]',
        describe: `Create a ${kind} on a swarm, or in a namespace of a Kubernetes cluster, from a file, a literal or stdin`,
        ...objectSource,
        options: { ...objectTarget, ...objectSource.options },
        body: (a) => ({ name: a.name, ...objectPlace(a), data: objectValue(a) }),
      }),
      list(placeFilter),
      kind === 'config'
        ? get({
            options: { decode: { type: 'boolean', conflicts: 'json', describe: 'print only the value, decoded (bytes as they are)' } },
            output: (data: { data?: string }, a) => {
              if (!a.decode) return renderRecord(data);
              process.stdout.write(Buffer.from(data.data ?? '', 'base64'));
              return '';
            },
          })
        : get(),
      {
        ...objectSource,
        command: 'update <id> [source]',
        describe: `Rotate a ${kind}: a new version; the services using it are redeployed with it (on a cluster: the workloads using it are rolled out)`,
        method: 'PUT',
        path: '/{id}',
        body: { data: objectValue },
        output: 'done',
        says: ['updated', 'updating'],
        label: (_a, d) => `${kind} ${d.name} (${d.id}) to version ${d.version}${d.redeployed?.length ? `; redeployed ${d.redeployed.join(', ')}` : ''}`,
      },
      remove(),
    ],
  };
}

/** Writes a file only its owner reads (0600, also when it existed with other permissions). */
function writeSecretFile(file: string, content: string): void {
  writeFileSync(file, content, { mode: 0o600 });
  chmodSync(file, 0o600);
}

/** An instance's spec from the create flags (where it runs is {@link place}). */
const instanceSpec = (a: Args) => ({
  image: a.image,
  type: a.type,
  replicas: a.replicas,
  ports: many('port')(a),
  http_port: a['http-port'],
  domain: a.domain,
  env: keyValues('env')(a),
  command: a.command === undefined && a.arg === undefined ? undefined : [...(a.command === undefined ? [] : shellWords(String(a.command))), ...(many('arg')(a) ?? [])],
  platform: a.platform,
  gpu: a.gpu,
  volumes: many('volume')(a),
});

/** A flag holding JSON, or `none` (null: clears it); a usage error (exit 2) naming the flag when it is neither. */
const jsonFlag = (flag: string) => (a: Args) => {
  const text = a[flag];
  if (text === undefined) return undefined;
  if (text === 'none') return null;
  try {
    return JSON.parse(String(text)) as unknown;
  } catch {
    throw usageError(`--${flag} takes a JSON object or none (got ${JSON.stringify(text)})`);
  }
};
/** `--http-port N`, or `none` (null: clears it). */
const orNone = (flag: string) => (a: Args) => (a[flag] === undefined ? undefined : a[flag] === 'none' ? null : Number(a[flag]));

/** An instance's spec change from the update flags (PATCH: only what is given changes; --env and --port replace the lists). */
const instanceChange = (a: Args) => {
  const given = instanceSpec(a);
  const http = orNone('http-port')(a);
  if (typeof http === 'number' && !Number.isInteger(http)) throw usageError(`--http-port takes a port number or none (got ${JSON.stringify(a['http-port'])})`);
  const change = {
    image: given.image,
    type: given.type,
    ports: given.ports,
    http_port: http,
    env: given.env,
    command: a.command === 'none' ? null : given.command,
    platform: a.platform === 'none' ? null : given.platform,
    gpu: given.gpu,
    health: jsonFlag('health')(a),
    rollout: jsonFlag('rollout')(a),
  };
  if (Object.values(change).every((v) => v === undefined)) throw usageError('name what to change: --image, --type, --port, --http-port, --env, --command, --platform, --gpu, --health or --rollout');
  return change;
};

/** A change of a revision, in one cell: `env.MODE: "a" → "b"`. */
const changeText = (c: { path: string; old: unknown; new: unknown }) => `${c.path}: ${JSON.stringify(c.old)} → ${JSON.stringify(c.new)}`;
/** `history <id>` and `rollback <id> --revision N` of an instance or a service (their kept spec revisions). */
const revisionVerbs = (noun: string): Verb[] => [
  list({
    command: 'history <id>',
    describe: `Show the kept spec revisions of a ${noun}, newest first: who made each, when, and what it changed`,
    path: '/{id}/revisions',
    paged: false,
    columns: [
      'revision=number',
      'time',
      ['who', (r) => r.who?.name ?? '-'],
      ['rollback of', (r) => r.rollback_of ?? ''],
      ['changes', (r) => (r.changes ?? []).map(changeText).join('; ')],
    ],
    empty: 'no revisions',
  }),
  action('rollback', `Roll a kept revision of a ${noun} out again, as a new revision (202: it deploys in the background)`, ['rolled back', 'rolling back'], {
    options: { revision: { type: 'number', demandOption: true, describe: `the revision to return to (hangar ${noun} history <id>)` } },
    body: { revision: 'revision' },
    wait: 'settle',
  }),
];

const composeFile = (a: Args) => readInput(String(a['compose-file']), '--compose-file').toString('base64');
const manifestFile = (a: Args) => readInput(String(a.manifest), '--manifest').toString('base64');

/**
 * What a service deploys, and (`placed`) where: a compose file on a swarm (`--swarm`,
 * `--compose-file`) or Kubernetes manifests on a cluster (`--cluster`, `--manifest`: multi-document
 * YAML, sent base64 as the API takes it). Exactly one of the two forms.
 */
function serviceSource(a: Args, placed: boolean): Record<string, unknown> {
  const compose = a['compose-file'] !== undefined;
  if (compose === (a.manifest !== undefined)) throw usageError('give --compose-file (a compose stack on a swarm) or --manifest (Kubernetes manifests on a cluster), one of them');
  if (placed && compose && (a.swarm === undefined || a.cluster !== undefined)) throw usageError('--compose-file goes with --swarm (a swarm), not --cluster');
  if (placed && !compose && (a.cluster === undefined || a.swarm !== undefined)) throw usageError('--manifest goes with --cluster (a Kubernetes cluster), not --swarm');
  if (compose) return { ...(placed ? { swarm_id: a.swarm } : {}), compose_file: composeFile(a) };
  return { ...(placed ? { cluster_id: a.cluster } : {}), manifest: manifestFile(a) };
}
const serviceFiles: Record<string, Options> = {
  'compose-file': { type: 'string', describe: 'the compose YAML (- is stdin), for a swarm' },
  manifest: { type: 'string', describe: 'Kubernetes manifests: multi-document YAML (- is stdin), for a cluster' },
};

/** An object store's generated (or given) root password: in the create answer only. */
const s3Password = (data: Record<string, any>): string[] =>
  data?.password ? [`root user: ${data.root_user}`, `password:  ${data.password}`, 'note: the password is shown this once; hangar cannot show it again. Store it now.'] : [];

/** A user's password from a file (or - stdin), never on the command line; the control plane's policy applies. */
const passwordFile = (describe: string): Options => ({ type: 'string', demandOption: true, describe: `${describe} from a file (- is stdin; its last line break is dropped)` });

/** A secret the API answers once: printed with the warning that nothing shows it again. */
const shownOnce = (what: string) => `note: the ${what} is shown this once; hangar cannot show it again. Store it now.`;

/** The verbs on a user's API keys: `--user` (id or username), by default the user whose key signs. */
const keyVerb = (verb: Partial<Verb>): Partial<Verb> => ({
  ...verb,
  options: { user: { type: 'string', describe: 'the user (id or username); default: you (the user of the key that signs)' }, ...verb.options },
  refs: { user: USERS },
  orSelf: ['user'],
});

/** Whether a backup was proven restorable by its drill (`verify`). */
const VERIFIED: Column = ['verified', (r) => (r.verified === true ? 'yes' : r.verified === false ? `no: ${r.verify_error}` : r.verify && r.status === 'running' ? 'pending' : '-')];

/** The columns of a volume's backups. */
const RUN_COLUMNS: Column[] = [
  'id',
  'status',
  'snapshot=snapshot_id',
  'time',
  'size',
  'files',
  'duration=duration_seconds',
  'target=target_id',
  VERIFIED,
  ['commands', (r) => (['pre', 'post'] as const).flatMap((w) => (r[w] ? [`${w} ${r[w].exit_code !== null && r[w].exit_code !== undefined ? `exit ${r[w].exit_code}` : r[w].status}`] : [])).join(', ') || '-'],
  'error',
];

/**
 * `--pre-workload W --pre-command "…"` (and `--post-…`): a backup's command in a workload's
 * container, its command line split into words as a shell would (no shell runs it: give
 * `sh -c '…'` for one).
 */
const hookOptions = (when: 'pre' | 'post'): Record<string, Options> => ({
  [`${when}-workload`]: { type: 'string', implies: `${when}-command`, describe: `the instance or service (id or name) in a running container of which the ${when} command runs` },
  [`${when}-command`]: {
    type: 'string',
    implies: `${when}-workload`,
    describe: when === 'pre' ? 'a command run before the backup (e.g. "sh -c \'pg_dump app > /data/dump.sql\'"); one that fails fails the backup' : 'a command run after the backup, whether it succeeded or not',
  },
  [`${when}-timeout`]: { type: 'number', implies: `${when}-command`, describe: `seconds the ${when} command may run (default 600)` },
});
const hookOf = (when: 'pre' | 'post') => (a: Args) =>
  a[`${when}-command`] === undefined ? undefined : { workload: a[`${when}-workload`], command: shellWords(String(a[`${when}-command`])), timeout_s: a[`${when}-timeout`] };

/** A progress bar of `done` of `total` bytes: `[########------------]  40%  400.0 MB of 1.0 GB`. */
export function progressBar(done: number, total: number, width = 24): string {
  const share = total > 0 ? Math.min(1, done / total) : 0;
  const filled = Math.round(share * width);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${String(Math.floor(share * 100)).padStart(3)}%  ${megabytes(done)} of ${megabytes(total)}`;
}
const megabytes = (bytes: number) => (bytes >= 1e9 ? `${(bytes / 1e9).toFixed(1)} GB` : `${(bytes / 1e6).toFixed(1)} MB`);

/** What `hangar volume backup|restore` says of a run: accepted, ended, and while restic is at the folder before any byte is reported. */
const RUN_WORDS = {
  backup: {
    list: 'backups',
    accepted: (a: Args, d: any) => `backing up volume ${a.id} to target ${a.target} as ${d.backup?.id} (task ${d.task_id})`,
    ended: (a: Args, run: Record<string, any>) =>
      `backed up volume ${a.id} as ${run.id}: snapshot ${run.snapshot_id}, ${megabytes(Number(run.size ?? 0))} read, ${megabytes(Number(run.bytes_added ?? 0))} added${run.error ? ` (${run.error})` : ''}`,
    starting: 'restic is scanning the folder',
  },
  restore: {
    list: 'restores',
    accepted: (a: Args, d: any) => `restoring volume ${a.id} from ${a.snapshot} as ${d.restore?.id} (task ${d.task_id})`,
    ended: (a: Args, run: Record<string, any>) => `restored volume ${a.id} from snapshot ${run.snapshot_id} as ${run.id} in ${Number(run.duration_seconds ?? 0).toFixed(1)} s`,
    starting: 'restic is reading the snapshot',
  },
} as const;

/**
 * `hangar volume backup|restore --wait`: the run followed until it ends, with its phase (stopping
 * workloads, a pre or post command) and a progress bar of the bytes restic has read (a backup) or
 * written (a restore) on standard error (redrawn in place on a terminal, a line per tenth
 * otherwise); exit 1 when it failed.
 */
const followRun = (operation: 'backup' | 'restore') => async (data: any, a: Args, api: ApiClient): Promise<string | number> => {
  const words = RUN_WORDS[operation];
  const runId = String(data[operation]?.id);
  const accepted = words.accepted(a, data);
  if (!a.wait) return `${accepted}; follow with: hangar volume ${words.list} ${a.id}`;
  console.log(accepted);
  const tty = Boolean(process.stderr.isTTY);
  const deadline = Date.now() + (a.timeout as number) * 1000;
  let shown = '';
  for (;;) {
    const runs = (await api.ok<Array<Record<string, any>>>('GET', `/v1/volumes/${encodeURIComponent(String(a.id))}/${words.list}?limit=1000`)) ?? [];
    const run = runs.find((r) => r.id === runId);
    if (!run) throw usageError(`${operation} ${runId} is no longer listed`);
    if (run.status !== 'running' && run.status !== 'stopping') {
      if (tty && shown) process.stderr.write('\n');
      if (run.status === 'failed') {
        console.error(`hangar volume: ${operation} ${runId} failed: ${run.error ?? 'no reason given'}`);
        return 1;
      }
      return words.ended(a, run);
    }
    const line =
      run.status === 'stopping'
        ? 'stopping the workloads using the volume'
        : run.phase === 'pre' || run.phase === 'post'
          ? `running the ${run.phase} command in ${run[run.phase]?.workload?.type} ${run[run.phase]?.workload?.name}`
          : run.bytes_total
            ? progressBar(Number(run.bytes_done ?? 0), Number(run.bytes_total))
            : words.starting;
    // Off a terminal: a line when the phase changes or another tenth is done.
    const step = tty ? line : line.replace(/\] +(\d+)%.*/, (_, pct: string) => `] ${Math.floor(Number(pct) / 10) * 10}%`);
    if (step !== shown) {
      if (tty) process.stderr.write(`\r${line.padEnd(shown.length)}`);
      else console.error(line);
      shown = step;
    }
    if (Date.now() > deadline) {
      if (tty) process.stderr.write('\n');
      console.error(`hangar volume: ${operation} ${runId} still running after ${a.timeout} s; follow with: hangar volume ${words.list} ${a.id}`);
      return 1;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
};

/** Backup targets: `hangar backup target <verb>` (an S3 bucket holding a restic repository; docs/backups.md). */
export const BACKUP_TARGETS: Resource = {
  noun: 'target',
  plural: 'backup targets',
  describe: 'Backup targets: S3 buckets (and prefixes), or folders of nodes, that hold a restic repository each',
  base: '/v1/backups/targets',
  columns: ['id', 'name', 'kind', ['where', (t) => (t.kind === 'local' ? `${t.node_id}:${t.path}` : `${t.endpoint}/${t.bucket}${t.prefix ? `/${t.prefix}` : ''}`)], 'region', 'checked_at'],
  verbs: [
    create({
      describe:
        'Create a backup target: an S3 bucket (--endpoint, --bucket, keys; the control plane writes, reads and deletes a probe object first) or a folder of a node (--node, --path; its agent writes, reads and deletes a probe file there) for the volumes of that node; 400 naming what failed',
      options: {
        endpoint: { type: 'string', describe: 'S3: the API’s origin, http(s)://host[:port]' },
        bucket: { type: 'string', describe: 'S3: an existing bucket' },
        prefix: { type: 'string', describe: 'S3: key prefix of the repository in the bucket' },
        region: { type: 'string', describe: 'S3: default us-east-1' },
        'access-key-id': { type: 'string', describe: 'S3: the access key id' },
        'secret-key-file': { type: 'string', describe: 'S3: the secret key from a file (- is stdin), never on the command line' },
        node: { type: 'string', implies: 'path', conflicts: ['endpoint', 'bucket'], describe: 'local: the node (id) whose folder holds the repository' },
        path: { type: 'string', implies: 'node', describe: 'local: an absolute folder on that node (made when missing)' },
        ...projectOption,
      },
      body: {
        name: 'name',
        kind: (a) => (a.node === undefined ? 's3' : 'local'),
        endpoint: 'endpoint',
        bucket: 'bucket',
        prefix: 'prefix',
        region: 'region',
        access_key_id: 'access-key-id',
        secret_access_key: fileText('secret-key-file', true),
        node_id: 'node',
        path: 'path',
        project_id: projectOf,
      },
      label: (_a, d) => `backup target ${d.name} (${d.id}): ${d.repository}${d.kind === 'local' ? ` on node ${d.node_id}` : ''}`,
    }),
    list({ options: projectFilter, query: { project: 'project' } }),
    get(),
    removeForced('delete it although it holds backups (their records are forgotten; the bucket keeps the repository)', { describe: 'Delete a backup target', label: (a) => `backup target ${a.id}` }),
  ],
};

const BACKUP_LIST_DESCRIBE = 'List every volume’s backups at once, oldest first (--volume, --target, --status narrow it)';

/** Every volume's backups at once: `hangar backup list` (docs/backups.md). */
export const BACKUP_LIST: Resource = {
  noun: 'list',
  plural: 'backups',
  describe: BACKUP_LIST_DESCRIBE,
  base: '/v1/backups',
  columns: ['volume=volume_id', 'id', 'snapshot=snapshot_id', 'time', 'size', 'status', VERIFIED, 'target=target_id', 'error'],
  verbs: [
    {
      command: '',
      describe: BACKUP_LIST_DESCRIBE,
      method: 'GET',
      output: 'list',
      options: {
        volume: { type: 'string', describe: 'only this volume’s (id or name)' },
        target: { type: 'string', describe: 'only those in this backup target (id or name)' },
        status: { type: 'string', choices: ['stopping', 'running', 'succeeded', 'failed', 'forgotten'], describe: 'only those in this status' },
      },
      refs: { volume: { noun: 'volume', list: '/v1/volumes', id: /^vol-[0-9a-z]+$/ }, target: { noun: 'backup target', list: '/v1/backups/targets', id: /^bkt-[0-9a-z]+$/ } },
      query: { volume_id: 'volume', target_id: 'target', status: 'status' },
      empty: 'no backups',
    },
  ],
};

/** Backup schedules: `hangar backup schedule <verb>` (volumes backed up at an interval, with a retention; docs/backups.md). */
export const BACKUP_SCHEDULES: Resource = {
  noun: 'schedule',
  plural: 'backup schedules',
  describe: 'Backup schedules: volumes backed up to a target at an interval or on a cron expression, with a retention applied by restic forget --prune',
  base: '/v1/backups/schedules',
  columns: ['id', 'name', 'target=target_id', 'volumes=volume_ids', 'tags=volume_tags', 'every=every_seconds', 'cron', 'retention', 'next=next_run_at', 'last=last_run_at'],
  verbs: [
    create({
      describe: 'Create a backup schedule: at an interval (the first backup at once) or on a cron expression (UTC)',
      options: {
        target: { type: 'string', demandOption: true, describe: 'the backup target (id or name)' },
        volume: { type: 'string', array: true, describe: 'a volume (id or name) to back up; repeat for more' },
        'volume-tag': { type: 'string', array: true, describe: 'KEY=VALUE: back up every volume carrying this tag when a backup is due (all given tags); repeat for more' },
        every: { type: 'number', describe: 'seconds between backups (at least backups.min_schedule_seconds, default 300); or --cron' },
        cron: { type: 'string', describe: 'when backups run, five cron fields or @daily… in UTC (e.g. "30 3 * * *"); or --every' },
        'keep-last': { type: 'number', describe: 'keep the last N snapshots' },
        'keep-daily': { type: 'number', describe: 'keep one snapshot a day for N days' },
        'keep-weekly': { type: 'number', describe: 'keep one snapshot a week for N weeks' },
        'keep-monthly': { type: 'number', describe: 'keep one snapshot a month for N months' },
        verify: { type: 'boolean', describe: 'prove each backup restorable (a restore drill after it: restic check and a restore into a scratch folder compared with the snapshot)' },
        consistency: { type: 'string', choices: ['live', 'stop'], describe: 'stop: scale the workloads using each volume to zero for its snapshot and bring them back after (default live)' },
        ...hookOptions('pre'),
        ...hookOptions('post'),
      },
      body: (a) => ({
        name: a.name,
        target_id: a.target,
        volume_ids: many('volume')(a),
        volume_tags: keyValues('volume-tag')(a),
        every_seconds: a.every,
        cron: a.cron,
        keep_last: a['keep-last'],
        keep_daily: a['keep-daily'],
        keep_weekly: a['keep-weekly'],
        keep_monthly: a['keep-monthly'],
        verify: a.verify ? true : undefined,
        consistency: a.consistency,
        pre: hookOf('pre')(a),
        post: hookOf('post')(a),
      }),
      label: (_a, d) => `backup schedule ${d.name} (${d.id}): ${d.cron ? `cron "${d.cron}" (UTC)` : `every ${d.every_seconds} s`}, next ${d.next_run_at}`,
    }),
    list(),
    get(),
    remove({ describe: 'Delete a backup schedule (its backups stay)', label: (a) => `backup schedule ${a.id}` }),
  ],
};

export const RESOURCES: Resource[] = [
  {
    noun: 'node',
    describe: 'Nodes (machines with an agent): deploy over SSH, join tokens, cordon, drain, rename, logs, remove',
    base: '/v1/nodes',
    lookup: NODES,
    columns: ['id', 'name', 'status', 'hostname', 'ip_address', 'overlay_ip', 'architecture', 'agent=agent_version'],
    transitional: ['removing'],
    verbs: [
      deployVerb,
      create({
        describe: 'Create a node record ahead of its machine (then: hangar node token --node <name>, or node deploy)',
        options: { ip: { type: 'string', describe: 'its IP address' }, interface: { type: 'string', describe: 'the network interface its address is on (e.g. eth0)' } },
        body: { name: 'name', ip_address: 'ip', interface: 'interface' },
      }),
      list({
        options: { status: { ...repeatable('only nodes in this status'), choices: ['pending', 'ready', 'offline', 'needs_reboot', 'cordoned', 'drained', 'removing'] } },
        query: { status: many('status') },
      }),
      get(),
      {
        command: 'token',
        describe: 'Create a single-use join token for a machine to join with (the token is shown once)',
        method: 'POST',
        path: '/token',
        options: {
          node: { type: 'string', describe: 'bind it to a node created beforehand (id or name: hangar node create)' },
          ttl: { type: 'number', describe: 'seconds it stays valid (10 to 604800; default: the control plane’s nodes.join_token_ttl_seconds)' },
        },
        refs: nodeRef,
        body: { node_id: 'node', ttl_seconds: 'ttl' },
        output: (d: { id: string; token: string; expires_at: string; overlay_ip: string; join_commands: Record<string, string> }) =>
          [
            `created join token ${d.id}: valid until ${d.expires_at}, overlay address ${d.overlay_ip}`,
            `token: ${d.token}`,
            // The commands the control plane makes: download the agent through the address machines reach it by, and join.
            ...Object.entries(d.join_commands).map(([arch, command]) => `join a machine (${arch}): ${command}`),
            shownOnce('token'),
          ].join('\n'),
      },
      {
        command: 'token-revoke <token>',
        describe: 'Revoke an unused join token (its overlay address is released)',
        method: 'DELETE',
        path: '/token/{token}',
        positionals: { token: { describe: 'the token’s id (tok-…)' } },
        output: (d: { id: string }) => `revoked join token ${d.id}`,
      },
      availability('cordon', 'Cordon a node: no new workloads on it; those running stay', ['cordoned', 'cordoning']),
      availability('drain', 'Drain a node: cordoned, and its workloads moved off (PodDisruptionBudgets honoured on a Kubernetes cluster)', ['drained', 'draining']),
      availability('uncordon', 'Return a cordoned or drained node to service', ['uncordoned', 'uncordoning']),
      {
        command: 'availability <id> <task>',
        describe: 'Read a cordon, drain or uncordon the cluster was still at (its task, from the 202); a finished one is read once',
        method: 'GET',
        path: '/{id}/availability/{task}',
        positionals: { task: { describe: 'the task’s id (task-…)' } },
        output: (d: { task_id: string; status: string; error?: string }) => {
          if (d.status !== 'failed') return `task ${d.task_id}: ${d.status}`;
          console.error(`hangar node: task ${d.task_id} failed: ${d.error ?? 'no reason given'}`);
          return 1;
        },
      },
      {
        command: 'unmanaged <id>',
        describe: 'Scan the node’s orchestrator for workloads hangar did not create (on a cluster member: the whole cluster, through its manager or server)',
        method: 'POST',
        path: '/{id}/unmanaged',
        options: { backend: { type: 'string', demandOption: true, describe: 'the orchestrator to scan: swarm or k8s' } },
        query: { backend: 'backend' },
        output: 'done',
        task: {
          path: '/{id}/unmanaged/{task_id}',
          when: 'always',
          doing: (a) => `scanning node ${a.id}`,
          done: (read: { resources: unknown[] }) => (read.resources.length ? table(read.resources, ['kind', 'name', 'namespace', 'image', 'stack']) : 'no unmanaged workloads'),
        },
      },
      {
        command: 'rename <id> <name>',
        describe: 'Rename a node: its display name in hangar (never the machine, swarm or Kubernetes)',
        method: 'PATCH',
        path: '/{id}',
        positionals: { name: { describe: 'the new display name' } },
        body: { name: 'name' },
        output: 'done',
        says: ['renamed', 'renaming'],
        label: (_a, d) => `node ${d.id} to ${d.name}`,
      },
      { ...logs(), describe: 'Print the last lines of the agent’s own log on a node (read by its agent)' },
      updateAgentVerb,
      rolloutVerb,
      rolloutCancelVerb,
      removeForced('remove it even while it is a member of a swarm or cluster (one it manages is left without this manager)', {
        command: 'remove <id>',
        describe: 'Remove a node: its certificates are revoked and its overlay address released at once, the record goes once its tasks are done (202)',
        says: ['removed', 'removing'],
        wait: 'gone',
      }),
    ],
  },
  {
    noun: 'swarm',
    describe: 'Swarm groups: create, join and leave nodes, members, load balancer',
    base: '/v1/swarms',
    columns: ['id', 'name', 'status', 'manager=manager.node_id', 'members=members.length', 'lb=load_balancer.status', 'created_at'],
    transitional: ['forming', 'deleting'],
    verbs: [
      create({ describe: 'Create an empty swarm group (join a node to it next)', options: projectOption, body: { name: 'name', project_id: projectOf } }),
      list({ options: projectFilter, query: { project: 'project' } }),
      get(),
      removeForced('also remove the instances, services and stores that run on it', { describe: 'Delete a swarm: its nodes leave (409 while workloads run, unless --force)', wait: 'gone' }),
      membership('swarm', 'members', {
        command: 'join <id> <node>',
        describe: 'Add a node: the first one initialises the swarm and manages it, later ones join as workers',
        method: 'POST',
        path: '/{id}/join',
        options: { manager: { type: 'boolean', default: false, describe: 'join as a manager' } },
        body: { node_id: 'node', role: (a) => (a.manager ? 'manager' : 'worker') },
        says: ['joined', 'joining'],
        label: (a, d) => `node ${a.node} to swarm ${a.id} as ${d.role}`,
      }),
      membership('swarm', 'members', {
        command: 'leave <id> <node>',
        describe: 'Remove a node (a worker is drained first; the last manager leaves only an empty swarm)',
        method: 'POST',
        path: '/{id}/leave',
        body: { node_id: 'node' },
        says: ['left', 'leaving'],
        label: (a) => `node ${a.node} from swarm ${a.id}`,
      }),
      memberList('members', 'List the members as the swarm reports them', ['node_id', 'role', 'status', 'hostname', 'state', 'availability', 'leader', 'error']),
      ...lbVerbs('swarm'),
    ],
  },
  {
    noun: 'cluster',
    describe: 'Kubernetes (k3s) clusters: create on nodes, nodes, kubeconfig, load balancer, volumes',
    base: '/v1/kubernetes/clusters',
    columns: ['id', 'name', 'status', 'server=server_node_id', 'nodes=nodes.length', 'version', 'created_at'],
    transitional: ['forming', 'deleting'],
    // While it forms: each node's install, one after the other.
    progress: (d: { nodes?: ClusterNode[] }) => d.nodes?.map((n) => `${n.node_id} ${n.role} ${n.status}`).join(', ') || null,
    // Active once its server is; ready once every node's install is done.
    parts: (d: { nodes?: ClusterNode[] }) => {
      const failed = (d.nodes ?? []).filter((n) => n.status === 'failed');
      return {
        moving: (d.nodes ?? []).some((n) => n.status === 'joining'),
        failed: failed.length ? `${failed.map((n) => `node ${n.node_id} failed: ${n.error ?? 'no reason given'}`).join('; ')}` : null,
      };
    },
    verbs: [
      create({
        describe: 'Create a Kubernetes cluster on nodes: k3s server on the first --node, k3s agents on the others; waits until it is active, printing each node’s progress (--no-wait: return once accepted)',
        options: {
          node: { ...repeatable('a node (id or name) to install k3s on; the first is the server'), demandOption: true },
          'kubeconfig-endpoint': { type: 'string', describe: 'where the kubeconfig points: public (default), overlay, or an IPv4 address' },
          ...projectOption,
        },
        refs: nodeRef,
        body: { name: 'name', node_ids: many('node'), options: (a) => (a['kubeconfig-endpoint'] ? { kubeconfig_endpoint: a['kubeconfig-endpoint'] } : undefined), project_id: projectOf },
        wait: 'settle',
        waitByDefault: true,
      }),
      list({ options: projectFilter, query: { project: 'project' } }),
      get(),
      removeForced('also remove the workloads that run on it', { describe: 'Delete a cluster: k3s is uninstalled from its nodes (409 while workloads run, unless --force)', wait: 'gone' }),
      memberList('nodes', 'List the nodes as the cluster reports them (Ready, roles, kubelet version)', ['node_id', 'role', 'status', 'ready', 'roles', 'kubelet_version', 'availability', 'error']),
      membership('cluster', 'nodes', {
        command: 'add-node <id> <node>',
        describe: 'Add a node as a k3s agent',
        method: 'POST',
        path: '/{id}/nodes',
        body: { node_id: 'node' },
        says: ['added', 'adding'],
        label: (a) => `node ${a.node} to cluster ${a.id}`,
      }),
      membership('cluster', 'nodes', {
        command: 'remove-node <id> <node>',
        describe: 'Remove a node: drained (PodDisruptionBudgets honoured), k3s uninstalled on it (not the server node)',
        method: 'DELETE',
        path: '/{id}/nodes/{node}',
        says: ['removed', 'removing'],
        label: (a) => `node ${a.node} from cluster ${a.id}`,
      }),
      ...lbVerbs('cluster'),
      {
        command: 'attach <id> <volume>',
        describe: 'Attach an NFS volume: a PersistentVolume and its claim (hangar-vol-<name>) on the cluster, once the claim is Bound',
        method: 'POST',
        path: '/{id}/volumes',
        positionals: { volume: { describe: 'the volume (id or name)' } },
        body: { volume_id: 'volume' },
        output: 'done',
        says: ['attached', 'attaching'],
        label: (a, d) => `volume ${d.name} (${d.volume_id}) to cluster ${a.id} as claim ${d.claim}`,
      },
      {
        command: 'volumes <id>',
        describe: 'List the volumes attached to the cluster, with their claims’ phase as the cluster reports it',
        method: 'GET',
        path: '/{id}/volumes',
        output: 'list',
        paged: false,
        columns: ['volume_id', 'name', 'type', 'claim', 'phase', 'node_id', 'server_ip', 'folder'],
        empty: 'no volumes attached',
      },
      {
        command: 'detach <id> <volume>',
        describe: 'Detach a volume: its claim and PersistentVolume removed from the cluster (the data stays)',
        method: 'DELETE',
        path: '/{id}/volumes/{volume}',
        positionals: { volume: { describe: 'the volume (id or name)' } },
        output: 'done',
        says: ['detached', 'detaching'],
        label: (a, d) => `volume ${d.name} (${d.volume_id}) from cluster ${a.id}`,
      },
      {
        command: 'kubeconfig <id>',
        describe: 'Write a kubeconfig of your own (a token of your ServiceAccount, cluster-admin for admins, view otherwise) to a file (mode 0600), or print it with --output -',
        method: 'GET',
        path: '/{id}/kubeconfig',
        options: {
          output: { alias: 'o', type: 'string', demandOption: true, describe: 'the file to write (0600), or - for stdout' },
          ttl: { type: 'number', describe: 'how long the token is valid, in seconds (default 28800 = 8 h; 600–86400)' },
          'admin-certificate': { type: 'boolean', default: false, describe: 'admins only: k3s’s admin kubeconfig (not revocable per user) instead of a token' },
        },
        query: { ttl: 'ttl', admin_certificate: (a) => (a['admin-certificate'] ? true : undefined) },
        output: (data: { kubeconfig: string; server: string; expires_at: string | null; cluster_role?: string }, a) => {
          if (a.output === '-') {
            process.stdout.write(data.kubeconfig);
            return '';
          }
          writeSecretFile(String(a.output), data.kubeconfig);
          const what = data.expires_at ? `${data.cluster_role}, expires ${data.expires_at}` : 'the admin certificate';
          return `wrote the kubeconfig of cluster ${a.id} (server ${data.server}; ${what}) to ${a.output} (mode 0600)`;
        },
      },
      {
        command: 'kubeconfig-revoke <id>',
        describe: 'Revoke your kubeconfig credentials on the cluster (admins: anyone’s with --user): its ServiceAccount is deleted, every token of it refused at once',
        method: 'DELETE',
        path: '/{id}/kubeconfig',
        options: { user: { type: 'string', describe: 'admins only: whose credentials (user id; default yours)' } },
        query: { user_id: 'user' },
        output: (data: { revoked: boolean; user_id: string }, a) =>
          data.revoked ? `revoked the kubeconfig credentials of ${data.user_id} on cluster ${a.id}` : `no kubeconfig credentials of ${data.user_id} on cluster ${a.id} to revoke`,
      },
    ],
  },
  {
    noun: 'instance',
    describe: 'Compute instances: replicated containers on a swarm or a Kubernetes cluster',
    base: '/v1/compute/instances',
    columns: ['id', 'name', ...placeColumns, 'image', 'type', 'replicas', 'running', 'status', 'domain'],
    transitional: ['deploying', 'rolling_out', 'terminating'],
    // A rollout the cluster rolled back or paused did not do what was asked: --wait ends with exit 1.
    failed: ['failed', 'rolled_back', 'paused'],
    verbs: [
      create({
        describe: 'Create an instance on a swarm or a Kubernetes cluster (202: it deploys in the background)',
        options: {
          ...placeFlags('a Deployment'),
          image: { type: 'string', demandOption: true, describe: 'the image (it must exist on the nodes or be pullable)' },
          type: { type: 'string', describe: 'instance type: CPU and memory per task (hangar instance types); default micro' },
          replicas: { type: 'number', describe: 'tasks to run (default 1)' },
          port: repeatable('publish HOST:CONTAINER[/udp]'),
          'http-port': { type: 'number', describe: 'container port the load balancer sends the domain to' },
          domain: { type: 'string', describe: 'routed by the load balancer (default <name>.<swarm or cluster>.<local domain>)' },
          env: repeatable('KEY=VALUE'),
          command: { type: 'string', describe: "the command, split like a shell would: --command 'sh -c \"echo hi\"'" },
          arg: repeatable('one argument of the command, as it is (after --command’s words)'),
          platform: { type: 'string', describe: 'linux/amd64 or linux/arm64' },
          gpu: { type: 'number', describe: 'GPU slots per task' },
          volume: repeatable('mount VOLUME:/path (volume name or id)'),
        },
        body: (a) => ({ name: a.name, ...place(a), ...instanceSpec(a) }),
        wait: 'settle',
      }),
      list(placeFilter),
      get(),
      remove({ describe: 'Terminate an instance (202; it goes once its service is removed)', wait: 'gone' }),
      action('stop', 'Stop an instance (its replica count is kept for start)', ['stopped', 'stopping'], { wait: 'settle' }),
      action('start', 'Start a stopped instance again', ['started', 'starting'], { wait: 'settle' }),
      action('scale', 'Set the number of replicas', ['scaled', 'scaling'], {
        command: 'scale <id> <replicas>',
        positionals: { replicas: { type: 'number', describe: 'tasks to run' } },
        body: { replicas: 'replicas' },
        wait: 'settle',
      }),
      action('update', 'Change an instance’s spec (a rolling update kept as a new revision): only what is given changes; the replica count is `scale`’s', ['updated', 'updating'], {
        method: 'PATCH',
        path: '/{id}',
        options: {
          image: { type: 'string', describe: 'the new image' },
          type: { type: 'string', describe: 'the new instance type' },
          port: repeatable('publish HOST:CONTAINER[/udp] (replaces every published port)'),
          'http-port': { type: 'string', describe: 'container port the load balancer sends the domain to (none: clears it)' },
          env: repeatable('KEY=VALUE (replaces the whole environment)'),
          command: { type: 'string', describe: "the command, split like a shell would (none: the image's own)" },
          arg: repeatable('one argument of the command, as it is (after --command’s words)'),
          platform: { type: 'string', describe: 'linux/amd64 or linux/arm64 (none: any)' },
          gpu: { type: 'number', describe: 'GPU slots per task' },
          health: { type: 'string', describe: `the health check as JSON, e.g. '{"http":{"path":"/healthz","port":80}}' (none: removes it)` },
          rollout: { type: 'string', describe: `how the update rolls out, as JSON, e.g. '{"parallelism":2,"monitor_s":10}' (none: the backend's defaults)` },
        },
        body: instanceChange,
        wait: 'settle',
      }),
      logs(),
      action('attach', 'Attach a volume at a path (a rolling update)', ['attached', 'attaching a volume to'], {
        command: 'attach <id> <volume> <path>',
        path: '/{id}/volumes',
        positionals: { volume: { describe: 'volume id or name' }, path: { describe: 'absolute path in the container' } },
        body: { volume_id: 'volume', path: 'path' },
        wait: 'settle',
      }),
      action('detach', 'Detach a volume (a rolling update)', ['detached', 'detaching a volume from'], {
        command: 'detach <id> <volume>',
        method: 'DELETE',
        path: '/{id}/volumes/{volume}',
        positionals: { volume: { describe: 'volume id or name' } },
        wait: 'settle',
      }),
      ...revisionVerbs('instance'),
      list({ command: 'types', describe: 'List the instance types (CPU and memory per task)', path: '/v1/compute/instance-types', paged: false, columns: ['name', 'cpus', 'memory_mb', 'default'] }),
    ],
  },
  {
    noun: 'volume',
    describe: 'Volumes: folders on nodes shared with swarm workloads (over NFS, or bound locally)',
    base: '/v1/volumes',
    columns: ['id', 'name', 'type', 'node_id', 'folder', 'status'],
    transitional: ['preparing', 'restoring', 'deleting'],
    verbs: [
      create({
        describe: 'Create a volume: a folder on a node (202 while it is prepared); with --restore-from, filled from a backup first',
        options: {
          node: { type: 'string', demandOption: true, describe: 'the node that holds the folder (id or name)' },
          folder: { type: 'string', demandOption: true, describe: 'absolute path on the node, created when missing' },
          type: { type: 'string', choices: ['nfs', 'local'], describe: 'nfs (default: shared with every node of a swarm) or local (bound on its node only)' },
          'restore-from': { type: 'string', describe: 'fill it from a finished backup: its id (bak-…) or restic’s snapshot id (hangar volume backups <volume>); the folder must be missing or empty' },
          'restore-target': { type: 'string', implies: 'restore-from', describe: 'the backup target holding --restore-from’s snapshot (id or name)' },
          ...projectOption,
        },
        refs: nodeRef,
        body: {
          name: 'name',
          node_id: 'node',
          folder: 'folder',
          type: 'type',
          project_id: projectOf,
          restore_from: (a) => (a['restore-from'] ? { snapshot_id: a['restore-from'], target_id: a['restore-target'] } : undefined),
        },
        notes: (d) => (d.restore ? [`restoring backup ${d.restore.source_id} (snapshot ${d.restore.snapshot_id}) into it as ${d.restore.id}: hangar volume restores ${d.id}`] : []),
        wait: 'settle',
      }),
      list({ options: projectFilter, query: { project: 'project' } }),
      get(),
      removeForced('delete the record even when its node does not answer', { describe: 'Delete a volume (the folder and its data stay on the node)', wait: 'gone' }),
      action('backup', 'Back a volume up to a backup target with restic, on its node’s agent (202: follow with volume backups, or --wait for a progress bar)', ['backed up', 'backing up'], {
        path: '/{id}/backups',
        options: {
          target: { type: 'string', demandOption: true, describe: 'the backup target (id or name): hangar backup target list' },
          verify: { type: 'boolean', describe: 'prove the backup restorable after it is taken (a restore drill; hangar volume backups shows verified)' },
          consistency: { type: 'string', choices: ['live', 'stop'], describe: 'stop: scale the workloads using the volume to zero for the snapshot and bring them back after (default live)' },
          ...hookOptions('pre'),
          ...hookOptions('post'),
          wait: { type: 'boolean', default: false, describe: 'follow the backup until it ends: its commands, and a progress bar of the bytes read on standard error' },
          timeout: { type: 'number', default: 3600, describe: 'seconds to wait with --wait' },
        },
        body: { target_id: 'target', verify: (a) => (a.verify ? true : undefined), consistency: 'consistency', pre: hookOf('pre'), post: hookOf('post') },
        output: followRun('backup'),
        follow: (a) => `volume backups ${a.id}`,
      }),
      list({ command: 'backups <id>', describe: 'List a volume’s backups (restic snapshots), oldest first', path: '/{id}/backups', columns: RUN_COLUMNS, empty: 'no backups' }),
      action('restore', 'Restore one of a volume’s backups into it: its folder then holds exactly the snapshot (409 while a workload uses it)', ['restored', 'restoring'], {
        command: 'restore <id> <snapshot>',
        positionals: { snapshot: { describe: 'the backup: its id (bak-…) or restic’s snapshot id (hangar volume backups <id>)' } },
        options: {
          'stop-workloads': { type: 'boolean', describe: 'a volume in use: its workloads are scaled to zero first and brought back after (hangar volume restores shows the gap)' },
          wait: { type: 'boolean', default: false, describe: 'follow the restore until it ends: a progress bar of the bytes written on standard error' },
          timeout: { type: 'number', default: 3600, describe: 'seconds to wait with --wait' },
        },
        body: { snapshot_id: 'snapshot', stop_workloads: (a) => (a['stop-workloads'] ? true : undefined) },
        output: followRun('restore'),
        follow: (a) => `volume restores ${a.id}`,
      }),
      list({ command: 'restores <id>', describe: 'List a volume’s restores, oldest first', path: '/{id}/restores', columns: ['id', 'status', 'snapshot=snapshot_id', 'backup=source_id', 'time', 'duration=duration_seconds', 'gap=gap_seconds', 'error'], empty: 'no restores' }),
    ],
  },
  swarmObject('secret'),
  swarmObject('config'),
  {
    noun: 'service',
    describe: 'Services: compose stacks on swarms, manifests on Kubernetes clusters',
    base: '/v1/services',
    columns: ['id', 'name', 'swarm=swarm_id', 'cluster=cluster_id', 'status', ['replicas', (s) => Object.entries(s.replicas ?? {}).map(([k, r]: [string, any]) => `${k} ${r.running}/${r.desired ?? '-'}`)], 'updated_at'],
    transitional: ['deploying', 'removing'],
    blocks: ['compose_file', 'manifest'],
    verbs: [
      create({
        describe: 'Deploy a compose file to a swarm (--swarm, --compose-file) or manifests to a Kubernetes cluster (--cluster, --manifest) as a service (202 while it deploys)',
        options: {
          swarm: { type: 'string', describe: 'the swarm (id or name), with --compose-file' },
          cluster: { type: 'string', describe: 'the Kubernetes cluster (id or name), with --manifest' },
          ...serviceFiles,
        },
        body: (a) => ({ name: a.name, ...serviceSource(a, true) }),
        wait: 'settle',
      }),
      list(),
      get({ describe: 'Show a service: status, replicas per part, routes, and its compose file or manifest (YAML) with the objects it applied' }),
      {
        command: 'update <id>',
        describe: 'Replace the compose file (a swarm’s service) or the manifest (a cluster’s: objects no longer in it are deleted) and redeploy',
        method: 'PUT',
        path: '/{id}',
        options: serviceFiles,
        body: (a) => serviceSource(a, false),
        output: 'done',
        says: ['updated', 'redeploying'],
        wait: 'settle',
      },
      action('stop', 'Stop a service: its stack is removed from the swarm, its spec kept', ['stopped', 'stopping'], { wait: 'settle' }),
      action('start', 'Start a stopped service again', ['started', 'starting'], { wait: 'settle' }),
      remove({ describe: 'Delete a service (202; it goes once its stack is removed)', wait: 'gone' }),
      logs(),
      ...revisionVerbs('service'),
    ],
  },
  {
    noun: 's3',
    plural: 'object stores',
    describe: 'Object stores (MinIO, the S3 API) on swarms, their data on a volume',
    base: '/v1/s3/instances',
    columns: ['id', 'name', 'swarm=swarm_id', 'volume=volume_id', 'status', 'domain'],
    transitional: ['deploying', 'removing'],
    verbs: [
      create({
        describe: 'Create an object store (202; prints its root password, once)',
        options: {
          swarm: swarmFlag(),
          volume: { type: 'string', demandOption: true, describe: 'the volume that holds its data (id or name), one per store' },
          'password-file': { type: 'string', describe: 'the root password from a file (- is stdin; 8-40 characters) instead of a generated one' },
          cert: { type: 'string', describe: 'a certificate id for console single sign-on' },
        },
        body: {
          name: 'name',
          swarm_id: 'swarm',
          volume_id: 'volume',
          password: fileText('password-file', true),
          cert_id: 'cert',
        },
        label: (_a, d) => `object store ${d.name} (${d.id})`,
        notes: s3Password,
        wait: 'settle',
      }),
      list(),
      get(),
      remove({ describe: 'Delete an object store (202; its data stays on the volume)', label: (a, d) => `object store ${d?.name ?? a.id} (${d?.id ?? a.id})`, wait: 'gone' }),
    ],
  },
  {
    noun: 'lb',
    plural: 'load balancers',
    describe: 'Load balancers (one per swarm: hangar swarm lb-deploy)',
    base: '/v1/loadbalancers',
    columns: ['id', 'name', 'swarm=swarm_id', 'node_id', 'status', 'http_port', 'routes=routes.length', 'error'],
    verbs: [
      list(),
      get({ describe: 'Show a load balancer with the routes it serves' }),
      action('redeploy', 'Deploy a load balancer anew: with the image the control plane is configured with now (gateway.image) and the current routes', ['redeployed', 'redeploying'], {
        label: (_a, d) => `load balancer ${d.name} (${d.id})`,
        follow: (_a, d) => `lb get ${d.id}`,
      }),
    ],
  },
  {
    noun: 'gateway',
    describe: 'The routing table of every swarm and the load balancers serving it',
    base: '/v1/gateway',
    columns: [],
    verbs: [{ command: '', describe: 'The routing table of every swarm and the load balancers serving it', method: 'GET', output: 'record' }],
  },
  {
    noun: 'tag',
    describe: 'Key/value tags on any resource; find resources by tag',
    base: '/v1/tags',
    columns: ['resource_type', 'resource_id', 'key', 'value'],
    verbs: [
      {
        command: 'set <type> <id> <key> <value>',
        describe: 'Set a tag on a resource (replaces the value of an existing key)',
        method: 'PUT',
        positionals: { type: { describe: 'node, swarm, instance, volume, secret, config, service, s3, loadbalancer, cluster' }, id: { describe: 'the resource’s id' } },
        body: { resource_type: 'type', resource_id: 'id', key: 'key', value: 'value' },
        output: (d) => `tagged ${d.resource_type} ${d.resource_id}: ${d.key}=${d.value}`,
      },
      list({
        describe: 'Find the resources with a tag',
        options: { key: { type: 'string', demandOption: true, describe: 'the tag’s key' }, value: { type: 'string', describe: 'only this value' }, type: { type: 'string', describe: 'only this resource type' } },
        query: { key: 'key', value: 'value', resource_type: 'type' },
        empty: 'no resources with this tag',
      }),
      {
        command: 'delete <type> <id> <key>',
        describe: 'Remove a tag from a resource',
        method: 'DELETE',
        positionals: { id: { describe: 'the resource’s id' } },
        query: { resource_type: 'type', resource_id: 'id', key: 'key' },
        output: (d) => `removed tag ${d.key} from ${d.resource_type} ${d.resource_id}`,
      },
    ],
  },
  {
    noun: 'cleanup',
    describe: 'Force-clean a resource stuck in an error state',
    base: '/v1/cleanup',
    columns: [],
    verbs: [
      {
        command: '<type> <id>',
        describe: 'Force-clean a resource stuck in an error state: what exists of it in the runtime (failures ignored), then its record',
        method: 'POST',
        path: '/{type}/{id}',
        positionals: { type: { describe: 'instance, swarm, volume, s3, loadbalancer or service' }, id: { describe: 'the resource’s id' } },
        output: (d) => `removed ${d.resource_type} ${d.resource_id} (what existed of it in the runtime, and its record)`,
      },
    ],
  },
  {
    noun: 'user',
    describe: 'Users of the control plane: create, list, update, delete, password, unlock, properties (admins)',
    base: '/v1/iam/users',
    lookup: USERS,
    columns: ['id', 'username', 'name', 'email', 'role', 'created_at'],
    verbs: [
      create({
        command: 'create <username>',
        describe: 'Create a user (the password from a file or stdin, never on the command line)',
        positionals: { username: { describe: 'letters, digits, . _ @ - (at most 20)' } },
        options: {
          'password-file': passwordFile('the password'),
          email: { type: 'string', describe: 'e-mail address' },
          'display-name': { type: 'string', describe: 'full name, as shown' },
          role: { type: 'string', describe: 'admin, auditor (reads everything, changes nothing) or user (default user); docs/tenancy.md' },
          property: repeatable('NAME=VALUE: metadata on the user'),
        },
        body: {
          username: 'username',
          password: fileText('password-file', true),
          email: 'email',
          name: 'display-name',
          role: 'role',
          properties: (a) => {
            const pairs = keyValues('property')(a);
            return pairs && Object.entries(pairs).map(([name, value]) => ({ name, value }));
          },
        },
      }),
      list(),
      get({ describe: 'Show a user, with its properties' }),
      remove({ describe: 'Delete a user: it cannot log in, its tokens and API keys stop working' }),
      action('password', 'Set a user’s password; its API keys are deleted too unless --keep-api-keys (yours included, when it is you)', ['set the password of', 'setting the password of'], {
        options: {
          'password-file': passwordFile('the new password'),
          'current-password-file': { type: 'string', describe: 'your current password from a file (- is stdin): needed to change your own' },
          'keep-api-keys': { type: 'boolean', default: false, describe: 'keep the user’s API keys working' },
        },
        body: (a) => {
          if (a['password-file'] === '-' && a['current-password-file'] === '-') throw usageError('only one of --password-file and --current-password-file can be - (stdin)');
          return { password: fileText('password-file', true)(a), current_password: fileText('current-password-file', true)(a), keep_api_keys: a['keep-api-keys'] || undefined };
        },
        label: (a, d) => `user ${a.id}${d.keys_deleted ? `; ${d.keys_deleted} API key(s) deleted` : ''}`,
      }),
      {
        command: 'update <id>',
        describe: 'Change a user’s name, email or role: the role by admins only; your own name or email with --current-password-file',
        method: 'PATCH',
        path: '/{id}',
        options: {
          email: { type: 'string', describe: 'the new e-mail address ("" removes it: no password reset by email then)' },
          'display-name': { type: 'string', describe: 'the new full name ("" removes it)' },
          role: { type: 'string', describe: 'admin, auditor or user (moves the user’s token epoch on: earlier tokens and sessions stop working)' },
          'current-password-file': { type: 'string', describe: 'your current password from a file (- is stdin): needed to change your own name or email' },
        },
        body: (a) => {
          const cleared = (flag: string) => (a[flag] === undefined ? undefined : a[flag] === '' ? null : a[flag]);
          return { email: cleared('email'), name: cleared('display-name'), role: a.role, current_password: fileText('current-password-file', true)(a) };
        },
        output: 'done',
        says: ['updated', 'updating'],
        label: (_a, d) => `user ${d.username} (${d.id})`,
      },
      action('unlock', 'Clear a user’s login lockouts: its failed logins from every address and its back-off are forgotten (admins)', ['unlocked', 'unlocking'], {
        method: 'DELETE',
        path: '/{id}/lockout',
        label: (a, d) => `user ${a.id} (${d.cleared} failure counter(s) forgotten)`,
      }),
      action('add-property', 'Add a property (NAME VALUE metadata) to a user', ['added', 'adding'], {
        command: 'add-property <id> <name> <value>',
        path: '/{id}/properties',
        positionals: { name: { describe: 'the property’s name' }, value: { describe: 'its value' } },
        body: { name: 'name', value: 'value' },
        label: (a, d) => `property ${d.name}=${d.value} (${d.id}) to user ${a.id}`,
      }),
      remove({
        command: 'remove-property <id> <property>',
        describe: 'Remove a property from a user (its number: hangar user get)',
        path: '/{id}/properties/{property}',
        positionals: { property: { type: 'number', describe: 'the property’s id (a number, in hangar user get)' } },
        says: ['removed', 'removing'],
        label: (a) => `property ${a.property} from user ${a.id}`,
      }),
    ],
  },
  {
    noun: 'key',
    describe: 'API keys (HMAC) of a user, yours by default: create (the secret is shown once; a project, a role or permissions, an expiry, source networks), list, delete',
    base: '/v1/iam/users/{user}/keys',
    lookup: KEYS,
    columns: [
      'id',
      'access_key_id',
      'description',
      ['scope', (k) => (k.scope === 'project' ? `project ${k.project_name ?? k.project_id}` : 'installation')],
      ['holds', (k) => k.role ?? (k.permissions ? (k.permissions as string[]).join(' ') : 'owner’s')],
      ['expires', (k) => (k.expires_at ? `${k.expired ? 'EXPIRED ' : ''}${k.expires_at}` : 'never')],
      'last_used_at',
      ['source', (k) => (k.source_networks as string[]).join(' ') || 'anywhere'],
    ],
    verbs: [
      create(
        keyVerb({
          command: 'create',
          describe: 'Create an API key, of the installation or of one project (--project), holding a role or permissions no wider than its owner’s; its secret is printed this once',
          options: {
            description: { type: 'string', describe: 'what it is for (at most 200 characters)' },
            project: { type: 'string', describe: 'limit the key to this project (id or name); its owner must be a member of it' },
            role: { type: 'string', describe: 'the key holds what this role grants: a project role with --project (viewer, deployer, maintainer, owner, a custom one), else an installation role (admin, auditor, user)' },
            permission: { type: 'string', array: true, describe: 'the key holds this permission (kind:verb; repeat it); instead of --role' },
            'expires-in': { type: 'string', describe: 'the key stops working after this long: a number and s, m, h, d or w (30d)' },
            'expires-at': { type: 'string', describe: 'the key stops working at this time (ISO 8601)' },
            source: { type: 'string', array: true, describe: 'accept the key from this network only (a CIDR, IPv4 or IPv6; repeat it)' },
          },
          body: (a) => {
            if (a.role !== undefined && a.permission !== undefined) throw usageError('give --role or --permission, not both');
            return {
              description: a.description,
              project: a.project,
              role: a.role,
              permissions: many('permission')(a),
              expires_in: a['expires-in'],
              expires_at: a['expires-at'],
              source_networks: many('source')(a),
            };
          },
          label: (a, d) => `key ${d.access_key_id} (${d.id}) for user ${a.user}`,
          notes: (d) => [
            `access key id:     ${d.access_key_id}`,
            `secret access key: ${d.secret_access_key}`,
            `scope:             ${d.scope === 'project' ? `project ${d.project_name} (${d.project_id})` : 'the installation'}${d.role ? `, role ${d.role}` : d.permissions ? `, ${(d.permissions as string[]).join(' ')}` : ', its owner’s permissions'}`,
            `expires:           ${d.expires_at ?? 'never'}${d.source_networks?.length ? `; from ${(d.source_networks as string[]).join(', ')} only` : ''}`,
            shownOnce('secret access key'),
          ],
        }),
      ),
      list(keyVerb({ paged: false, empty: 'no API keys' })),
      remove(keyVerb({ describe: 'Delete an API key: requests signed with it fail from now on', label: (a) => `key ${a.id} of user ${a.user}` })),
    ],
  },
  {
    noun: 'ssh-profile',
    describe: 'SSH profiles: stored credentials for node deploy (a key or password is kept encrypted, never shown)',
    base: '/v1/ssh-profiles',
    columns: ['id', 'name', 'user', 'port', 'has_key', 'has_password', 'created_at'],
    verbs: [
      create({
        describe: 'Store SSH credentials under a name: a user, a port, and a key and/or a password from files (- is stdin)',
        options: {
          user: { type: 'string', describe: 'the SSH user (default root; another needs sudo)' },
          port: { type: 'number', describe: 'the SSH port (default 22)' },
          'key-file': { type: 'string', describe: 'a private key file (- is stdin)' },
          'password-file': { type: 'string', describe: 'a file holding the password (- is stdin)' },
        },
        body: (a) => {
          if (a['key-file'] === '-' && a['password-file'] === '-') throw usageError('only one of --key-file and --password-file can be - (stdin)');
          return { name: a.name, user: a.user, port: a.port, key: fileText('key-file')(a), password: fileText('password-file', true)(a) };
        },
      }),
      list(),
      get(),
      remove(),
    ],
  },
];

/** `hangar backup target|create`: backups group their commands under one noun. */
const backupCommand: CommandModule<object, Args> = {
  command: 'backup <group>',
  describe: 'Backups: targets (S3 buckets for restic repositories), schedules, every volume’s backups (list), and the control plane’s own backup (create); one volume’s are hangar volume backup|backups|restore',
  builder: (y) =>
    usageExit(
      (y as Argv<any>).command(resourceCommand(BACKUP_TARGETS)).command(resourceCommand(BACKUP_SCHEDULES)).command(resourceCommand(BACKUP_LIST)).command(backupCreateCommand as CommandModule<any, any>).demandCommand(1),
    ) as Argv<Args>,
  handler: () => undefined,
};

export const resourceCommands = [...RESOURCES.map(resourceCommand), backupCommand];
