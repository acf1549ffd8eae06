import { signRequest } from '../core/auth/hmac.js';
import { httpRequest, type HttpResponse } from '../core/http/client.js';
import { resolveConnection } from './runner/connection.js';
import { failure, usageError } from './runner/errors.js';
import { versionInfo } from '../core/version.js';

/** What the CLI's requests say they are (the audit log records it). */
export const CLI_USER_AGENT = `hangar-cli/${versionInfo.version}`;

/** The control API as the configured user (hangar configure), every request HMAC-signed. */
export interface ApiClient {
  url: string;
  call<T = any>(method: string, pathAndQuery: string, body?: unknown): Promise<HttpResponse<T>>;
  /** Like call, but a 4xx/5xx becomes an error carrying the API's message. */
  ok<T = any>(method: string, pathAndQuery: string, body?: unknown): Promise<T>;
  /** Like ok, with the status (200, 201, 202…) and the whole envelope (`next_cursor` of a list). */
  send<T = any>(method: string, pathAndQuery: string, body?: unknown): Promise<{ status: number; data: T; envelope: Record<string, unknown> }>;
}

/** The error of a 4xx/5xx answer: the API's message, after the request that got it. */
export function apiFailure(method: string, pathAndQuery: string, res: HttpResponse): Error {
  return failure(`${method} ${pathAndQuery}: HTTP ${res.status}: ${(res.json as { message?: string } | undefined)?.message ?? res.text}`);
}

export function apiClient(env: Record<string, string | undefined> = process.env): ApiClient {
  const conn = resolveConnection(env);
  if (!conn.api_url || !conn.access_key_id || !conn.secret_access_key) {
    throw usageError('no connection to a control plane: run hangar configure --from <bootstrap output> (or set HANGAR_API_URL, HANGAR_ACCESS_KEY, HANGAR_SECRET_KEY)');
  }
  const call = async <T>(method: string, pathAndQuery: string, body?: unknown) => {
    const bytes = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers = signRequest({ accessKeyId: conn.access_key_id!, secretAccessKey: conn.secret_access_key! }, { method, pathAndQuery, body: bytes });
    try {
      return await httpRequest<T>(`${conn.api_url}${pathAndQuery}`, {
        method,
        body: bytes,
        headers: { ...headers, 'user-agent': CLI_USER_AGENT, ...(bytes ? { 'content-type': 'application/json' } : {}) },
        ca: conn.ca_pem ?? undefined,
      });
    } catch (err) {
      throw failure(`cannot reach ${conn.api_url}: ${(err as Error).message}`);
    }
  };
  const send = async <T>(method: string, pathAndQuery: string, body?: unknown) => {
    const res = await call<{ data: T } & Record<string, unknown>>(method, pathAndQuery, body);
    if (res.status >= 400) throw apiFailure(method, pathAndQuery, res);
    return { status: res.status, data: res.json?.data, envelope: res.json ?? {} };
  };
  return {
    url: conn.api_url,
    call,
    send,
    async ok<T>(method: string, pathAndQuery: string, body?: unknown) {
      return (await send<T>(method, pathAndQuery, body)).data;
    },
  };
}
