import { signRequest } from '../core/auth/hmac.js';
import { httpRequest, type HttpResponse } from '../core/http/client.js';
import { resolveConnection } from './runner/connection.js';
import { failure, usageError } from './runner/errors.js';

/** The control API as the configured user (hangar configure), every request HMAC-signed. */
export interface ApiClient {
  url: string;
  call<T = any>(method: string, pathAndQuery: string, body?: unknown): Promise<HttpResponse<T>>;
  /** Like call, but a 4xx/5xx becomes an error carrying the API's message. */
  ok<T = any>(method: string, pathAndQuery: string, body?: unknown): Promise<T>;
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
        headers: { ...headers, ...(bytes ? { 'content-type': 'application/json' } : {}) },
        ca: conn.ca_pem ?? undefined,
      });
    } catch (err) {
      throw failure(`cannot reach ${conn.api_url}: ${(err as Error).message}`);
    }
  };
  return {
    url: conn.api_url,
    call,
    async ok<T>(method: string, pathAndQuery: string, body?: unknown) {
      const res = await call<{ data: T }>(method, pathAndQuery, body);
      if (res.status >= 400) throw failure(`${method} ${pathAndQuery}: HTTP ${res.status}: ${(res.json as { message?: string } | undefined)?.message ?? res.text}`);
      return res.json.data;
    },
  };
}
