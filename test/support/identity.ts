import { signRequest } from '../../core/auth/hmac.js';
import type { HttpRequestOptions, HttpResponse } from '../../core/http/client.js';
import type { ListenerName } from '../../core/plugin.js';
import type { TestHangar } from './hangar.js';

/** A password that satisfies the default policy. */
export const GOOD_PASSWORD = 'Correct-Horse-97-Battery!';

export interface Credentials {
  userId: string;
  username: string;
  password: string;
  accessKeyId: string;
  secretAccessKey: string;
  token: string;
}

/** Bootstraps the first admin over loopback and logs it in. */
export async function bootstrapAdmin(t: TestHangar, body: Record<string, unknown> = {}): Promise<Credentials> {
  const res = await t.request('POST', '/v1/bootstrap', { body: { password: GOOD_PASSWORD, email: 'admin@example.test', ...body } });
  if (res.status !== 201) throw new Error(`bootstrap failed: ${res.status} ${res.text}`);
  const data = res.json.data;
  const password = (body.password as string | undefined) ?? data.password ?? GOOD_PASSWORD;
  const login = await t.request('POST', '/v1/iam/login', { body: { username: data.username, password } });
  if (login.status !== 200) throw new Error(`login failed: ${login.status} ${login.text}`);
  return {
    userId: data.user_id,
    username: data.username,
    password,
    accessKeyId: data.access_key_id,
    secretAccessKey: data.secret_access_key,
    token: login.json.data.token,
  };
}

/** Creates a user through the API as `admin` and returns its id and token. */
export async function createUser(
  t: TestHangar,
  admin: Credentials,
  input: { username: string; role?: string; email?: string; password?: string; name?: string },
): Promise<Credentials> {
  const password = input.password ?? GOOD_PASSWORD;
  const res = await t.request('POST', '/v1/iam/users', { body: { ...input, password }, headers: bearer(admin.token) });
  if (res.status !== 201) throw new Error(`create user failed: ${res.status} ${res.text}`);
  const login = await t.request('POST', '/v1/iam/login', { body: { username: input.username, password } });
  const key = await t.request('POST', `/v1/iam/users/${res.json.data.id}/keys`, { body: {}, headers: bearer(admin.token) });
  return {
    userId: res.json.data.id,
    username: input.username,
    password,
    accessKeyId: key.json.data.access_key_id,
    secretAccessKey: key.json.data.secret_access_key,
    token: login.json.data.token,
  };
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** A request signed with an API key pair (the same signing code the CLI uses). */
export function signed<T = any>(
  t: TestHangar,
  creds: Pick<Credentials, 'accessKeyId' | 'secretAccessKey'>,
  method: string,
  pathAndQuery: string,
  options: HttpRequestOptions & { timestamp?: number; nonce?: string; listener?: ListenerName } = {},
): Promise<HttpResponse<T>> {
  const body = options.body === undefined ? undefined : typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
  const headers = signRequest(
    { accessKeyId: creds.accessKeyId, secretAccessKey: creds.secretAccessKey },
    { method, pathAndQuery, body, timestamp: options.timestamp, nonce: options.nonce },
  );
  return t.request(method, pathAndQuery, {
    ...options,
    body,
    headers: { ...(body ? { 'content-type': 'application/json' } : {}), ...headers, ...options.headers },
  });
}
