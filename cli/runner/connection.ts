import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { failure, usageError } from './errors.js';

type Env = Record<string, string | undefined>;

/** How `hangar endpoint` reaches the control plane: what `hangar configure` stores. */
export interface Connection {
  api_url: string;
  access_key_id: string;
  secret_access_key: string;
  /** PEM of the control plane's CA, pinned for TLS; null means the system's trusted CAs. */
  ca_pem: string | null;
  username?: string;
  user_id?: string;
  /** The project new clusters go in when a command names none (`hangar configure --project`). */
  project?: string;
}

/** Environment variables that override the stored connection, field by field. */
export const CONNECTION_ENV = {
  api_url: 'HANGAR_API_URL',
  access_key_id: 'HANGAR_ACCESS_KEY',
  secret_access_key: 'HANGAR_SECRET_KEY',
  ca_file: 'HANGAR_CA_FILE',
  project: 'HANGAR_PROJECT',
} as const;

/** `$XDG_CONFIG_HOME/hangar`, else `~/.config/hangar`. */
export function configDir(env: Env = process.env): string {
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(env.HOME || os.homedir(), '.config');
  return path.join(base, 'hangar');
}

export function connectionFile(env: Env = process.env): string {
  return path.join(configDir(env), 'connection.json');
}

function checkUrl(url: string, where: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw usageError(`${where}: "${url}" is not a URL (e.g. https://cp.example.com:8443)`);
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') throw usageError(`${where}: "${url}" must be an http(s) URL`);
  return url.replace(/\/+$/, '');
}

/**
 * A connection from what an operator hands over: the bootstrap output (`{"data": {...}}`) or the
 * same fields at the top level.
 */
export function connectionFromJson(value: unknown, where: string): Connection {
  const root = value && typeof value === 'object' ? (value as Record<string, unknown>) : null;
  const data = (root && root.data && typeof root.data === 'object' ? root.data : root) as Record<string, unknown> | null;
  if (!data) throw usageError(`${where} must hold a JSON object (the output of POST /v1/bootstrap)`);
  const missing = ['api_url', 'access_key_id', 'secret_access_key'].filter((k) => typeof data[k] !== 'string' || !data[k]);
  if (missing.length) throw usageError(`${where} lacks ${missing.join(', ')} (expected the output of POST /v1/bootstrap)`);
  if (data.ca_pem !== undefined && data.ca_pem !== null && typeof data.ca_pem !== 'string') throw usageError(`${where}: ca_pem must be a PEM string or null`);
  return {
    api_url: checkUrl(data.api_url as string, where),
    access_key_id: data.access_key_id as string,
    secret_access_key: data.secret_access_key as string,
    ca_pem: (data.ca_pem as string | null | undefined) ?? null,
    ...(typeof data.username === 'string' ? { username: data.username } : {}),
    ...(typeof data.user_id === 'string' ? { user_id: data.user_id } : {}),
    ...(typeof data.project === 'string' && data.project ? { project: data.project } : {}),
  };
}

/** Writes the connection file with mode 0600 (its directory 0700), atomically. Returns its path. */
export function writeConnection(connection: Connection, env: Env = process.env): string {
  const file = connectionFile(env);
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(connection, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
  return file;
}

export function readStoredConnection(env: Env = process.env): Partial<Connection> | null {
  const file = connectionFile(env);
  if (!existsSync(file)) return null;
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Partial<Connection>;
  } catch (err) {
    throw usageError(`cannot read ${file}: ${(err as Error).message}; write it again with hangar configure`);
  }
}

/** Where each field of the effective connection came from. */
export interface ResolvedConnection extends Partial<Connection> {
  sources: Record<string, string>;
}

/** The stored connection with the HANGAR_* overrides applied (fields may be missing). */
export function resolveConnection(env: Env = process.env): ResolvedConnection {
  const file = connectionFile(env);
  const stored = readStoredConnection(env) ?? {};
  const out: ResolvedConnection = { ...stored, sources: {} };
  for (const key of Object.keys(stored)) out.sources[key] = file;
  const override = (key: 'api_url' | 'access_key_id' | 'secret_access_key' | 'project', name: string) => {
    const value = env[name];
    if (value) {
      out[key] = key === 'api_url' ? checkUrl(value, name) : value;
      out.sources[key] = name;
    }
  };
  override('api_url', CONNECTION_ENV.api_url);
  override('access_key_id', CONNECTION_ENV.access_key_id);
  override('secret_access_key', CONNECTION_ENV.secret_access_key);
  override('project', CONNECTION_ENV.project);
  const caFile = env[CONNECTION_ENV.ca_file];
  if (caFile) {
    try {
      out.ca_pem = readFileSync(caFile, 'utf8');
    } catch (err) {
      throw failure(`${CONNECTION_ENV.ca_file}=${caFile}: ${(err as Error).message}`);
    }
    out.sources.ca_pem = CONNECTION_ENV.ca_file;
  }
  return out;
}
