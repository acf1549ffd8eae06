/**
 * A small S3 client for tests: requests signed with AWS Signature Version 4 by aws4fetch's
 * AwsV4Signer (the payload's SHA-256 signed too), sent with node:http, answers' XML read with
 * fast-xml-parser. Path-style addressing (`/<bucket>/<key>`), which SeaweedFS and MinIO serve.
 *
 *   const s3 = new S3Client({ endpoint: 'http://127.0.0.1:8333', credentials });
 *   await s3.createBucket('photos');
 *   await s3.putObject('photos', 'a/b.txt', 'hello');
 *   (await s3.getObject('photos', 'a/b.txt')).toString();   // 'hello'
 *
 * `connect` sends the requests elsewhere than the endpoint names while signing for the endpoint's
 * host: a store's domain routed by a load balancer (`endpoint: 'http://photos.s3.lab.hangar.local'`,
 * `connect: 'http://172.31.74.11:80'`) — the Host header is the domain, as a client resolving it
 * would send. `socketPath` connects through a Unix socket instead (test/support/netns-forward.ts:
 * a server inside a container's network namespace).
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import { AwsV4Signer } from 'aws4fetch';
import { XMLParser } from 'fast-xml-parser';

export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
}

export interface S3ClientOptions {
  /** The S3 endpoint as clients name it: http://host[:port]. */
  endpoint: string;
  /** Where to connect instead (http://address[:port]); the endpoint's host is still the Host header and what is signed. */
  connect?: string;
  /** Connect through this Unix socket instead (the endpoint is still what is signed and the Host header). */
  socketPath?: string;
  credentials: S3Credentials;
  /** Default us-east-1 (what SeaweedFS and MinIO expect unless configured otherwise). */
  region?: string;
  timeoutMs?: number;
}

export interface S3Response {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
}

/** An answer that is not 2xx: the HTTP status and S3's error code and message. */
export class S3Error extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly response: S3Response,
  ) {
    super(message);
    this.name = 'S3Error';
  }
}

const xml = new XMLParser({ ignoreAttributes: true, parseTagValue: false, isArray: (name) => ['Contents', 'Bucket', 'CommonPrefixes'].includes(name) });

/** Each segment of a key percent-encoded, the slashes kept (S3's path encoding). */
function encodeKey(key: string): string {
  return key
    .split('/')
    .map((part) => encodeURIComponent(part).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`))
    .join('/');
}

export class S3Client {
  readonly endpoint: URL;
  private readonly connect: URL;

  constructor(private readonly options: S3ClientOptions) {
    this.endpoint = new URL(options.endpoint);
    this.connect = new URL(options.connect ?? options.endpoint);
  }

  /** One signed request; `path` starts with `/`, `query` is added sorted. Never throws for an HTTP status. */
  async request(method: string, path: string, init: { query?: Record<string, string>; body?: string | Buffer; headers?: Record<string, string>; credentials?: S3Credentials; unsigned?: boolean } = {}): Promise<S3Response> {
    const url = new URL(path, this.endpoint);
    for (const [name, value] of Object.entries(init.query ?? {})) url.searchParams.set(name, value);
    const body = init.body === undefined ? Buffer.alloc(0) : Buffer.from(init.body);
    let headers: Record<string, string> = { ...init.headers };
    if (!init.unsigned) {
      const credentials = init.credentials ?? this.options.credentials;
      const signer = new AwsV4Signer({
        method,
        url: url.toString(),
        headers: { ...headers, 'X-Amz-Content-Sha256': createHash('sha256').update(body).digest('hex') },
        accessKeyId: credentials.accessKeyId,
        secretAccessKey: credentials.secretAccessKey,
        service: 's3',
        region: this.options.region ?? 'us-east-1',
      });
      const signed = await signer.sign();
      headers = Object.fromEntries(signed.headers.entries());
    }
    headers.host = url.host;
    if (body.length > 0 || ['PUT', 'POST'].includes(method)) headers['content-length'] = String(body.length);
    return new Promise<S3Response>((resolve, reject) => {
      const req = http.request(
        {
          ...(this.options.socketPath ? { socketPath: this.options.socketPath } : { host: this.connect.hostname, port: this.connect.port || 80 }),
          method,
          path: url.pathname + url.search,
          headers,
          timeout: this.options.timeoutMs ?? 30_000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const raw = Buffer.concat(chunks);
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: raw, text: raw.toString('utf8') });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`S3 request ${method} ${url.pathname} to ${this.options.socketPath ?? this.connect.host} timed out`)));
      req.on('error', reject);
      req.end(body);
    });
  }

  /** The request, or an S3Error naming S3's code and message when the answer is not 2xx. */
  async ok(method: string, path: string, init: Parameters<S3Client['request']>[2] = {}): Promise<S3Response> {
    const res = await this.request(method, path, init);
    if (res.status >= 200 && res.status < 300) return res;
    const error = res.text.startsWith('<') ? (xml.parse(res.text) as { Error?: { Code?: string; Message?: string } }).Error : undefined;
    const code = error?.Code ?? `HTTP ${res.status}`;
    throw new S3Error(res.status, code, `${method} ${path}: ${res.status} ${code}${error?.Message ? `: ${error.Message}` : res.text && !res.text.startsWith('<') ? `: ${res.text.slice(0, 200)}` : ''}`, res);
  }

  async listBuckets(): Promise<string[]> {
    const parsed = xml.parse((await this.ok('GET', '/')).text) as { ListAllMyBucketsResult?: { Buckets?: { Bucket?: Array<{ Name: string }> } } };
    return (parsed.ListAllMyBucketsResult?.Buckets?.Bucket ?? []).map((b) => b.Name);
  }

  async createBucket(bucket: string): Promise<void> {
    await this.ok('PUT', `/${bucket}`);
  }

  async deleteBucket(bucket: string): Promise<void> {
    await this.ok('DELETE', `/${bucket}`);
  }

  async putObject(bucket: string, key: string, body: string | Buffer, contentType = 'application/octet-stream'): Promise<{ etag: string }> {
    const res = await this.ok('PUT', `/${bucket}/${encodeKey(key)}`, { body, headers: { 'Content-Type': contentType } });
    return { etag: String(res.headers.etag ?? '') };
  }

  async getObject(bucket: string, key: string): Promise<Buffer> {
    return (await this.ok('GET', `/${bucket}/${encodeKey(key)}`)).body;
  }

  /** The keys under a prefix (ListObjectsV2, every page). */
  async listObjects(bucket: string, prefix = ''): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const query: Record<string, string> = { 'list-type': '2', prefix };
      if (token) query['continuation-token'] = token;
      const parsed = xml.parse((await this.ok('GET', `/${bucket}`, { query })).text) as {
        ListBucketResult?: { Contents?: Array<{ Key: string }>; IsTruncated?: string; NextContinuationToken?: string };
      };
      keys.push(...(parsed.ListBucketResult?.Contents ?? []).map((c) => c.Key));
      token = parsed.ListBucketResult?.IsTruncated === 'true' ? parsed.ListBucketResult.NextContinuationToken : undefined;
    } while (token);
    return keys;
  }

  async deleteObject(bucket: string, key: string): Promise<void> {
    await this.ok('DELETE', `/${bucket}/${encodeKey(key)}`);
  }
}
