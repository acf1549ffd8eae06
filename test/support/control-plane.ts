import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { httpRequest, type HttpRequestOptions, type HttpResponse } from '../../core/http/client.js';
import { FakeAgent, waitFor } from './agents.js';
import { TEST_MASTER_KEY } from './dialects.js';
import type { TestHangar } from './hangar.js';
import { PG_URL } from './requirements.js';

const BIN = path.resolve('bin/hangar.mjs');

/** A `hangar serve` process of its own, with its own data dir: on PostgreSQL with the shared master key, or on SQLite. */
export interface ControlPlane {
  child: ChildProcess;
  url: string;
  dataDir: string;
  output: () => string;
  /** The TestHangar surface the identity helpers need: requests to this process. */
  client: TestHangar;
}

export interface ServeOptions {
  /** Names the process in messages and its data dir. */
  name: string;
  /** The PostgreSQL schema every control plane of the test shares; null: SQLite in the data dir. */
  schema: string | null;
  /** The API port (0: any free one, read from the start-up line). */
  port?: number;
  /** The CA certificate requests verify against (a getter: a test may learn it after start). */
  caPem: () => string;
  /** More HANGAR_* settings (plugins, intervals, leases). */
  env?: Record<string, string>;
  /** The log message that says it serves (default `hangar started`; `hangar workers serving` with api.workers). */
  readyMessage?: string;
  /** The hangar tree to run (default this checkout): another release's sources, for upgrade tests. */
  root?: string;
  /** The data dir to serve (the caller's: kept when the process exits); default a new one, removed at exit. */
  dataDir?: string;
  /** More arguments of `hangar serve` (`--config FILE`). */
  args?: string[];
}

/**
 * Starts `hangar serve` as a separate process on `schema` (or SQLite), with a data dir of its own (so that it is
 * a holder of leadership leases of its own, core/db/leadership.ts) and the test master key (the CA,
 * the JWT secret and sealed values are shared through the store's keyring). The data dir goes when
 * the process exits, unless the caller gave it.
 */
export async function serveControlPlane(options: ServeOptions): Promise<ControlPlane> {
  const dataDir = options.dataDir ?? mkdtempSync(path.join(os.tmpdir(), `hangar-cp-${options.name}-`));
  const bin = options.root ? path.join(options.root, 'bin/hangar.mjs') : BIN;
  const child = spawn(process.execPath, [bin, 'serve', '--data-dir', dataDir, ...(options.args ?? [])], {
    cwd: options.root ?? process.cwd(),
    env: {
      ...process.env,
      NODE_ENV: 'test',
      HANGAR_FROM_SOURCES: '1',
      HANGAR_LOG__LEVEL: 'info',
      HANGAR_API__HOST: '127.0.0.1',
      HANGAR_API__PORT: String(options.port ?? 0),
      HANGAR_LOGIN__PORT: '0',
      ...(options.schema === null
        ? {}
        : { HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: options.schema, HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY }),
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  if (!options.dataDir) child.once('exit', () => rmSync(dataDir, { recursive: true, force: true }));
  const started = await waitFor(
    () => {
      if (child.exitCode !== null) throw new Error(`control plane ${options.name} exited (code ${child.exitCode}):\n${output}`);
      const lines = output.split('\n');
      const line = lines.find((l) => l.includes('"hangar started"'));
      const ready = !options.readyMessage || lines.some((l) => l.includes(`"msg":"${options.readyMessage}"`));
      return line && ready ? (JSON.parse(line) as { urls: string[] }) : null;
    },
    { timeoutMs: 60_000, what: `control plane ${options.name} to start` },
  );
  const url = started.urls[0]!;
  const request = (method: string, p: string, requestOptions: HttpRequestOptions = {}) => httpRequest(`${url}${p}`, { ca: options.caPem(), ...requestOptions, method });
  return { child, url, dataDir, output: () => output, client: { request } as unknown as TestHangar };
}

/**
 * A node of `plane` whose agent is the test: made through `api` (an admin's requests), its client
 * certificate issued over the API, and one heartbeat answered.
 */
export async function nodeWithAgent(
  api: (method: string, p: string, body?: unknown) => Promise<HttpResponse<any>>,
  plane: ControlPlane,
  name: string,
  ip: string,
): Promise<{ id: string; cert: { certificate: string; private_key: string }; agent: FakeAgent }> {
  const node = await api('POST', '/v1/nodes', { name, ip_address: ip });
  expect(node.status, node.text).to.equal(201);
  const id = node.json.data.id as string;
  const cert = await api('POST', `/v1/nodes/${id}/cert`);
  expect(cert.status, cert.text).to.equal(201);
  const agent = FakeAgent.withCertificate(plane.client, id, cert.json.data.certificate, cert.json.data.private_key);
  expect((await agent.heartbeat()).status).to.equal(200);
  return { id, cert: cert.json.data, agent };
}
