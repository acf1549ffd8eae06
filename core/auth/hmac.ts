import { createHash, createHmac, randomBytes } from 'node:crypto';

/**
 * HMAC request signing, shared by the server, the CLI and the runner (docs/api-auth.md).
 *
 * Canonical string, lines joined by "\n":
 *   HANGAR-HMAC-SHA256
 *   <X-Timestamp: unix seconds>
 *   <X-Nonce, or empty>
 *   <METHOD, upper case>
 *   <path, as sent, without the query>
 *   <canonical query: each pair as name=value, both RFC 3986-encoded, sorted bytewise, joined by "&">
 *   <hex SHA-256 of the body bytes (of the empty string when there is none)>
 * X-Signature = hex HMAC-SHA256(secret, canonical string).
 */
export const HMAC_SCHEME = 'HANGAR-HMAC-SHA256';
export const HEADER_ACCESS_KEY = 'x-access-key';
export const HEADER_TIMESTAMP = 'x-timestamp';
export const HEADER_NONCE = 'x-nonce';
export const HEADER_SIGNATURE = 'x-signature';

function encode(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * `b=2&a=1&a=0` → `a=0&a=1&b=2`: each pair re-encoded the same way whatever the client sent, then
 * sorted bytewise as `name=value` strings (what `LC_ALL=C sort` does in a shell).
 */
export function canonicalQuery(search: string): string {
  const pairs = [...new URLSearchParams(search.startsWith('?') ? search.slice(1) : search)].map(([k, v]) => `${encode(k)}=${encode(v)}`);
  return pairs.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).join('&');
}

export interface SignableRequest {
  method: string;
  /** Path and optional query string, e.g. `/v1/nodes?status=ready`. */
  pathAndQuery: string;
  body?: Buffer | string;
  timestamp: number;
  nonce?: string;
}

export function canonicalString(req: SignableRequest): string {
  const q = req.pathAndQuery.indexOf('?');
  const path = q === -1 ? req.pathAndQuery : req.pathAndQuery.slice(0, q);
  const query = q === -1 ? '' : req.pathAndQuery.slice(q + 1);
  const bodyHash = createHash('sha256').update(req.body ?? '').digest('hex');
  return [HMAC_SCHEME, String(req.timestamp), req.nonce ?? '', req.method.toUpperCase(), path, canonicalQuery(query), bodyHash].join('\n');
}

export function signature(secret: string, req: SignableRequest): string {
  return createHmac('sha256', secret).update(canonicalString(req)).digest('hex');
}

/** The headers that sign a request with an API key pair. */
export function signRequest(
  credentials: { accessKeyId: string; secretAccessKey: string },
  req: Omit<SignableRequest, 'timestamp' | 'nonce'> & { timestamp?: number; nonce?: string },
): Record<string, string> {
  const timestamp = req.timestamp ?? Math.floor(Date.now() / 1000);
  const nonce = req.nonce ?? randomBytes(12).toString('hex');
  return {
    'X-Access-Key': credentials.accessKeyId,
    'X-Timestamp': String(timestamp),
    'X-Nonce': nonce,
    'X-Signature': signature(credentials.secretAccessKey, { ...req, timestamp, nonce }),
  };
}
