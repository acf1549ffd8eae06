import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { AGENT_ALPN } from '../core/http/client-hello.js';
import { encodeBody, httpRequest, readResponse, type HttpResponse } from '../core/http/client.js';

/** The agent's side of mutual TLS: the control plane's CA, the agent's certificate and key (PEM). */
export interface MutualTls {
  ca: string;
  cert: string;
  key: string;
}

export interface AgentRequest {
  method?: string;
  /** Objects are sent as JSON; strings and buffers as they are. */
  body?: unknown;
  headers?: Record<string, string>;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** How much of one answer, and of all answers together, the server may send ahead of the agent's reading. */
const STREAM_WINDOW_BYTES = 4 << 20;
const SESSION_WINDOW_BYTES = 32 << 20;

/** How long a ping may go unanswered before the session is given up. */
const PING_TIMEOUT_MS = 5_000;

/** Why a session ended without HTTP/2: the server chose no protocol, or one that is not h2. */
class NoHttp2 extends Error {}

/**
 * An agent's connection to its control plane: one HTTP/2 session over mutual TLS that carries the
 * heartbeats, the long-poll, results and downloads side by side, opened again on the next request
 * after it closes. A server that does not speak HTTP/2 to agents (`api.agent_http2: false`, a
 * control plane from before it did, a proxy that ends TLS) gets HTTP/1.1 keep-alive connections
 * instead, for good.
 */
export class AgentConnection {
  private session: http2.ClientHttp2Session | null = null;
  private http1: https.Agent | null = null;
  private readonly url: URL;
  /** The API URL without a trailing slash, and the path it has (https://host/hangar → /hangar), or ''. */
  private readonly base: string;
  private readonly prefix: string;
  /** The host to dial: an IPv6 literal comes bracketed in a URL ([::1]), and tls.connect wants it bare. */
  private readonly host: string;

  constructor(
    apiUrl: string,
    private readonly tls: MutualTls,
    /** Told once, when the server turns out not to speak HTTP/2. */
    private readonly onHttp1?: (why: string) => void,
  ) {
    this.url = new URL(apiUrl);
    this.base = apiUrl.replace(/\/+$/, '');
    this.prefix = this.url.pathname.replace(/\/+$/, '');
    this.host = this.url.hostname.replace(/^\[|\]$/g, '');
  }

  /** What the requests go over: `h2` until the server says otherwise. */
  get protocol(): 'h2' | 'http/1.1' {
    return this.http1 ? 'http/1.1' : 'h2';
  }

  async request<T = unknown>(path: string, options: AgentRequest = {}): Promise<HttpResponse<T>> {
    if (!this.http1) {
      try {
        return await this.overHttp2<T>(path, options);
      } catch (err) {
        const why = noHttp2(err);
        if (!why) throw err;
        this.useHttp1(why);
      }
    }
    return httpRequest<T>(`${this.base}${path}`, { ...options, ca: this.tls.ca, cert: this.tls.cert, key: this.tls.key, agent: this.http1! });
  }

  /** Closes the session (requests in flight are cut) and any HTTP/1.1 connections. */
  close(): void {
    this.session?.destroy();
    this.session = null;
    this.http1?.destroy();
  }

  private useHttp1(why: string): void {
    if (this.http1) return;
    this.session?.destroy();
    this.session = null;
    this.http1 = new https.Agent({ keepAlive: true, maxSockets: 4, ...this.tls });
    this.onHttp1?.(why);
  }

  private open(): http2.ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    // Node's own TLS connection for HTTP/2 offers `h2` alone; the server routes on the agent's id too,
    // and a control plane that answers agents over HTTP/1.1 (api.agent_http2: false) chooses that.
    const { host, url } = this;
    const session = http2.connect(url.origin, {
      // Node's default windows (64 KiB) would let a download (an agent update, k3s, images) move 64 KiB a round trip.
      settings: { initialWindowSize: STREAM_WINDOW_BYTES },
      createConnection: () => {
        const socket = tls.connect({ host, port: Number(url.port || 443), servername: net.isIP(host) ? undefined : host, ...this.tls, ALPNProtocols: ['h2', AGENT_ALPN, 'http/1.1'] });
        // A request is several small frames: Nagle would hold the later ones for the server's delayed ACK.
        socket.setNoDelay(true);
        return socket;
      },
    });
    session.once('connect', () => {
      if (session.alpnProtocol !== 'h2') session.destroy(new NoHttp2(`the server chose ${session.alpnProtocol || 'no protocol'} over TLS`));
      else session.setLocalWindowSize(SESSION_WINDOW_BYTES);
    });
    // Each request hears of a failure through its stream; the session only has to be forgotten.
    session.on('error', () => undefined);
    const forget = () => {
      if (this.session === session) this.session = null;
    };
    session.once('close', forget);
    session.once('goaway', forget);
    this.session = session;
    return session;
  }

  /**
   * A request timed out: the session may sit on a connection that died without a word (a network
   * that drops everything). A ping the server does not answer in time ends the session, so the next
   * request opens a new one instead of waiting on the dead one too.
   */
  private dropUnlessAlive(session: http2.ClientHttp2Session): void {
    // A closing session (the server's GOAWAY) finishes its open requests and is not used again.
    if (session.destroyed || session.closed) return;
    const timer = setTimeout(() => session.destroy(), PING_TIMEOUT_MS);
    const sent = session.ping((err) => {
      clearTimeout(timer);
      if (err) session.destroy();
    });
    if (!sent) {
      clearTimeout(timer);
      session.destroy();
    }
  }

  private overHttp2<T>(path: string, options: AgentRequest): Promise<HttpResponse<T>> {
    const { bytes, type } = encodeBody(options.body);
    const headers: http2.OutgoingHttpHeaders = { ':method': options.method ?? 'GET', ':path': `${this.prefix}${path}`, accept: 'application/json', ...lowercase(options.headers) };
    if (type && !headers['content-type']) headers['content-type'] = type;
    if (bytes) headers['content-length'] = bytes.length;
    return new Promise((resolve, reject) => {
      let session: http2.ClientHttp2Session;
      let stream: http2.ClientHttp2Stream;
      try {
        session = this.open();
        stream = session.request(headers, { endStream: !bytes, signal: options.signal });
      } catch (err) {
        reject(err as Error);
        return;
      }
      const timeoutMs = options.timeoutMs ?? 30_000;
      stream.setTimeout(timeoutMs, () => {
        stream.destroy(new Error(`request to ${this.url.host} timed out after ${timeoutMs} ms`));
        this.dropUnlessAlive(session);
      });
      stream.on('error', reject);
      // A session that ends (the server went away) closes its streams without an error.
      stream.once('close', () => {
        if (!stream.readableEnded) reject(new Error(`the connection to ${this.url.host} closed before the answer was complete`));
      });
      stream.once('response', (responseHeaders) => {
        readResponse<T>(stream, Number(responseHeaders[':status']), responseHeaders as Record<string, string>).then(resolve, reject);
      });
      if (bytes) stream.end(bytes);
    });
  }
}

/** The reason to fall back to HTTP/1.1 when `err` says the server does not speak HTTP/2, else null. */
function noHttp2(err: unknown): string | null {
  for (let e = err as (Error & { code?: string; cause?: unknown }) | undefined; e; e = e.cause as typeof e) {
    if (e instanceof NoHttp2) return e.message;
    if (e.code === 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL') return 'the server offers no HTTP/2 to agents';
  }
  return null;
}

function lowercase(headers: Record<string, string> = {}): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) out[k.toLowerCase()] = v;
  return out;
}
