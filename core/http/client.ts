import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';

const DECODERS: Record<string, () => NodeJS.ReadWriteStream> = { br: () => zlib.createBrotliDecompress(), gzip: () => zlib.createGunzip() };

export interface HttpRequestOptions {
  method?: string;
  headers?: Record<string, string>;
  /** Objects are sent as JSON; strings and buffers as they are. */
  body?: unknown;
  /** PEM CA to verify the server with; `false` skips verification (never in production code paths). */
  ca?: string | false;
  /** Client certificate and key (PEM) for mutual TLS. */
  cert?: string;
  key?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  agent?: http.Agent | https.Agent;
}

/**
 * The JSON of an answer read without naming its shape: the default of {@link httpRequest}'s readers
 * outside product code (tests and benches read `res.json.data.x` loosely). Product code names its
 * `T` (the agent's join, heartbeat and task poll; the CLI).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the loose default of tests' and benches' reads (~280 of them); core, plugins and the agent pass T
export type UntypedJson = any;

export interface HttpResponse<T = UntypedJson> {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  raw: Buffer;
  /** Parsed JSON body, or undefined when the body is not JSON. */
  json: T;
}

/** Reads an answer's body (decoding what the caller accepted compressed) and parses JSON. */
export function readResponse<T>(res: NodeJS.ReadableStream, status: number, headers: http.IncomingHttpHeaders): Promise<HttpResponse<T>> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const decoder = DECODERS[String(headers['content-encoding'] ?? '').toLowerCase()];
    const body = decoder ? res.pipe(decoder()) : res;
    res.on('error', reject);
    body.on('data', (c: Buffer) => chunks.push(c));
    body.on('error', reject);
    body.on('end', () => {
      const raw = Buffer.concat(chunks);
      const text = raw.toString('utf8');
      let json: T | undefined;
      if (/json/.test(headers['content-type'] ?? '')) {
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
      }
      resolve({ status, headers, text, raw, json: json as T });
    });
  });
}

/** Encodes a request body: returns the bytes and the content type to send with them. */
export function encodeBody(body: unknown): { bytes?: Buffer; type?: string } {
  if (body === undefined) return {};
  if (Buffer.isBuffer(body)) return { bytes: body };
  if (typeof body === 'string') return { bytes: Buffer.from(body) };
  return { bytes: Buffer.from(JSON.stringify(body)), type: 'application/json' };
}

/** One HTTP(S) request with the TLS options hangar needs (pinned CA, client certificates). */
export function httpRequest<T = UntypedJson>(url: string, options: HttpRequestOptions = {}): Promise<HttpResponse<T>> {
  const target = new URL(url);
  const { bytes, type } = encodeBody(options.body);
  const headers: Record<string, string> = { accept: 'application/json', ...options.headers };
  if (type && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = type;
  if (bytes) headers['content-length'] = String(bytes.length);
  const secure = target.protocol === 'https:';
  const transport = secure ? https : http;
  return new Promise((resolve, reject) => {
    const req = transport.request(
      target,
      {
        method: options.method ?? 'GET',
        headers,
        agent: options.agent,
        signal: options.signal,
        timeout: options.timeoutMs ?? 30_000,
        ...(secure
          ? {
              ca: options.ca || undefined,
              rejectUnauthorized: options.ca !== false,
              cert: options.cert,
              key: options.key,
            }
          : {}),
      },
      (res) => readResponse<T>(res, res.statusCode ?? 0, res.headers).then(resolve, reject),
    );
    req.on('timeout', () => req.destroy(new Error(`request to ${target.host} timed out`)));
    req.on('error', reject);
    if (bytes) req.write(bytes);
    req.end();
  });
}
