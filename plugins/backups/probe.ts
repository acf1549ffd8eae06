import { randomBytes } from 'node:crypto';
import { httpRequest, type HttpResponse } from '../../core/http/client.js';
import { signS3Request, uriEncode, type S3Credentials } from '../../core/s3/sigv4.js';

/** Where a target's objects are: the endpoint (an origin), the bucket and a key prefix. */
export interface S3Location {
  endpoint: string;
  bucket: string;
  prefix: string;
  region: string;
  credentials: S3Credentials;
}

/** Why a target's check failed: what it could not do, and the S3 server's words. */
export class ProbeFailure extends Error {
  constructor(
    readonly what: 'endpoint_unreachable' | 'credentials_refused' | 'bucket_missing' | 'access_denied' | 'read_mismatch' | 's3_error',
    message: string,
  ) {
    super(message);
  }
}

const PROBE_TIMEOUT_MS = 15_000;
/** An archive upload: one PUT of the whole object. */
const UPLOAD_TIMEOUT_MS = 30 * 60_000;

/** An object key under a prefix (no leading or doubled slashes). */
export function keyUnder(prefix: string, name: string): string {
  return prefix ? `${prefix}/${name}` : name;
}

function s3Code(res: HttpResponse): { code: string | null; message: string | null } {
  return { code: /<Code>([^<]+)<\/Code>/.exec(res.text)?.[1] ?? null, message: /<Message>([^<]+)<\/Message>/.exec(res.text)?.[1] ?? null };
}

const CREDENTIAL_CODES = new Set(['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'InvalidToken', 'ExpiredToken', 'AuthorizationHeaderMalformed', 'InvalidSecurity']);

/** One signed request for a key of the bucket (`null`: the bucket itself). */
async function send(location: S3Location, method: string, key: string | null, body?: Buffer, timeoutMs = PROBE_TIMEOUT_MS, query?: URLSearchParams): Promise<HttpResponse> {
  const objectPath = key === null ? '' : `/${key.split('/').map(uriEncode).join('/')}`;
  const url = new URL(`${location.endpoint.replace(/\/$/, '')}/${uriEncode(location.bucket)}${objectPath}`);
  if (query) url.search = [...query].map(([k, v]) => `${uriEncode(k)}=${uriEncode(v)}`).join('&');
  const headers = signS3Request({ method, url, region: location.region, credentials: location.credentials, body, headers: body ? { 'content-type': 'application/octet-stream' } : {} });
  try {
    return await httpRequest(url.toString(), { method, headers: { accept: '*/*', ...headers }, body, timeoutMs });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new ProbeFailure('endpoint_unreachable', `endpoint unreachable: ${location.endpoint} (${e.code ?? e.message})`);
  }
}

function refusal(location: S3Location, doing: string, res: HttpResponse): ProbeFailure {
  const { code, message } = s3Code(res);
  const said = `${res.status}${code ? ` ${code}` : ''}${message ? `: ${message}` : ''}`;
  if (code === 'NoSuchBucket') return new ProbeFailure('bucket_missing', `bucket missing: ${location.bucket} does not exist at ${location.endpoint} (${said})`);
  if ((code && CREDENTIAL_CODES.has(code)) || res.status === 401) {
    return new ProbeFailure('credentials_refused', `credentials refused: ${location.endpoint} does not accept access key ${location.credentials.accessKeyId} and its secret (${said})`);
  }
  if (res.status === 403) return new ProbeFailure('access_denied', `access denied ${doing} in bucket ${location.bucket} (${said}): the key needs to write, read and delete objects there`);
  return new ProbeFailure('s3_error', `${doing} failed: the S3 server answered ${said}`);
}

/**
 * Writes, reads back and deletes a probe object under the target's prefix; throws a ProbeFailure
 * naming what failed. The probe object is removed even when reading it back fails.
 */
export async function probeTarget(location: S3Location): Promise<void> {
  const key = keyUnder(location.prefix, `.hangar-probe-${randomBytes(6).toString('hex')}`);
  const content = randomBytes(32);
  // The bucket first: some servers (SeaweedFS) create a missing bucket on a write.
  const head = await send(location, 'HEAD', null);
  if (head.status === 404) throw new ProbeFailure('bucket_missing', `bucket missing: ${location.bucket} does not exist at ${location.endpoint} (404)`);
  const put = await send(location, 'PUT', key, content);
  if (put.status !== 200) throw refusal(location, 'writing a probe object', put);
  let failure: ProbeFailure | null = null;
  const got = await send(location, 'GET', key);
  if (got.status !== 200) failure = refusal(location, 'reading the probe object back', got);
  else if (!got.raw.equals(content)) failure = new ProbeFailure('read_mismatch', `reading the probe object back gave other bytes than were written (${got.raw.length} bytes for ${content.length})`);
  const deleted = await send(location, 'DELETE', key);
  if (failure) throw failure;
  if (deleted.status !== 204 && deleted.status !== 200) throw refusal(location, 'deleting the probe object', deleted);
}

/** Writes one object under the target's prefix (the control plane's backup archive); throws a ProbeFailure naming what failed. */
export async function putObject(location: S3Location, name: string, body: Buffer): Promise<string> {
  return (await putObjectTagged(location, name, body)).key;
}

/** Writes one object under the location's prefix; answers its whole key and the ETag the server gave it (unquoted; null: none). */
export async function putObjectTagged(location: S3Location, name: string, body: Buffer): Promise<{ key: string; etag: string | null }> {
  const key = keyUnder(location.prefix, name);
  const put = await send(location, 'PUT', key, body, UPLOAD_TIMEOUT_MS);
  if (put.status !== 200) throw refusal(location, `writing ${key}`, put);
  const etag = put.headers.etag;
  return { key, etag: typeof etag === 'string' ? unquoted(etag) : null };
}

/** An ETag without its quotes (S3 quotes them, in headers and listings alike). */
export const unquoted = (etag: string) => etag.replace(/^"|"$/g, '');

/** Reads one object of the bucket by its whole key; throws a ProbeFailure naming what failed (`what: 's3_error'` with 404 for a missing one). */
export async function getObject(location: S3Location, key: string): Promise<Buffer> {
  const got = await send(location, 'GET', key, undefined, UPLOAD_TIMEOUT_MS);
  if (got.status === 404 && s3Code(got).code === 'NoSuchKey') throw new ProbeFailure('s3_error', `no object ${key} in bucket ${location.bucket}`);
  if (got.status !== 200) throw refusal(location, `reading ${key}`, got);
  return got.raw;
}

/** An object listed under a prefix. */
export interface ListedObject {
  key: string;
  size: number;
  last_modified: string;
  /** Unquoted; absent when the listing gives none. */
  etag?: string;
}

const xmlText = (text: string) =>
  text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&#(x[0-9a-fA-F]+|[0-9]+);/g, (_, n: string) => String.fromCodePoint(n.startsWith('x') ? parseInt(n.slice(1), 16) : Number(n)))
    .replace(/&amp;/g, '&');

/** 1 000 keys a page: a million objects at most. */
const MAX_LIST_PAGES = 1000;

/** Every object whose key starts with `prefix` (ListObjectsV2, page after page). */
export async function listObjects(location: S3Location, prefix: string): Promise<ListedObject[]> {
  const objects: ListedObject[] = [];
  let token: string | null = null;
  const seen = new Set<string>();
  do {
    const query = new URLSearchParams({ 'list-type': '2', prefix });
    if (token) query.set('continuation-token', token);
    const res = await send(location, 'GET', null, undefined, PROBE_TIMEOUT_MS, query);
    if (res.status !== 200) throw refusal(location, `listing ${prefix || 'the bucket'}`, res);
    for (const [, body] of res.text.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)) {
      const field = (name: string) => xmlText(new RegExp(`<${name}>([^<]*)</${name}>`).exec(body!)?.[1] ?? '');
      const etag = unquoted(field('ETag'));
      objects.push({ key: field('Key'), size: Number(field('Size')), last_modified: field('LastModified'), ...(etag ? { etag } : {}) });
    }
    token = /<IsTruncated>true<\/IsTruncated>/.test(res.text) ? xmlText(/<NextContinuationToken>([^<]*)<\/NextContinuationToken>/.exec(res.text)?.[1] ?? '') || null : null;
    // A server that answers the same page again, or without end, is not followed round.
    if (token && (seen.has(token) || seen.size >= MAX_LIST_PAGES)) throw new ProbeFailure('s3_error', `listing ${prefix || 'the bucket'} failed: the S3 server's pages do not end (${seen.size + 1} pages)`);
    if (token) seen.add(token);
  } while (token);
  return objects;
}

/** Deletes one object by its whole key (a missing one is no error, as S3 answers). */
export async function deleteObject(location: S3Location, key: string): Promise<void> {
  const deleted = await send(location, 'DELETE', key);
  if (deleted.status !== 204 && deleted.status !== 200) throw refusal(location, `deleting ${key}`, deleted);
}
