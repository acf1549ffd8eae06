import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type Koa from 'koa';
import type { ServerCredentials } from '../pki/pki.js';
import { ConfigError } from '../errors.js';
import { agentSpeaksHttp2, peekFirstRecord, wantsClientCertificate } from './client-hello.js';

/**
 * TLS 1.2 suites the control API offers: forward secrecy and AEAD only (no CBC, no SHA-1 MAC), for
 * hangar's ECDSA certificate and for an operator's RSA one. TLS 1.3 keeps Node's defaults.
 */
export const TLS12_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

/**
 * Connections the kernel may hold for the server before it accepts them (capped by
 * net.core.somaxconn). Node's default, 511, overflows when a fleet reconnects at once (a restart, a
 * network blip): the kernel then drops their SYNs and the clients retry after 1, 3, 7, 15… s.
 */
const LISTEN_BACKLOG = 4096;

/** How long an idle connection stays open (HTTP/1.1 keep-alive, an agent's HTTP/2 session). */
const KEEP_ALIVE_MS = 65_000;

/** How much longer than an agent's quietest stretch its session stays open (a heartbeat's own round trip, a late timer). */
const AGENT_QUIET_MARGIN_MS = 10_000;

/** Streams one agent's HTTP/2 session may have open at once (an agent uses a handful). */
const AGENT_MAX_STREAMS = 100;

type TlsConnectionHandler = (this: https.Server | http2.Http2SecureServer, socket: Socket) => void;

/** A running HTTP(S) server that can swap its certificate and shut down gracefully. */
export class Listener {
  private readonly sockets = new Set<Socket>();
  private readonly server: http.Server | https.Server;
  /**
   * Agents that offer HTTP/2 (and say they are agents) get one multiplexed session for their
   * heartbeats, long-polls and results instead of a connection each: this server takes those
   * connections over from the HTTPS one, which keeps everyone else on HTTP/1.1. It never listens.
   */
  private readonly agentSessions?: http2.Http2SecureServer;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private closing = false;

  constructor(
    readonly name: string,
    app: Koa,
    private readonly tls?: {
      credentials: ServerCredentials;
      caPem: string;
      /** api.agent_http2 */
      agentHttp2?: boolean;
      /** The longest a healthy agent goes without a request (its heartbeat interval's ceiling); its session outlives it. */
      agentQuietMs?: number;
    },
    requestTimeoutMs = 120_000,
  ) {
    const callback = app.callback();
    this.server = tls
      ? https.createServer({ ...this.secureOptions(tls.credentials), requestCert: true, rejectUnauthorized: false }, callback)
      : http.createServer(callback);
    if (tls?.agentHttp2) {
      this.agentSessions = http2.createSecureServer(
        { ...this.secureOptions(tls.credentials), requestCert: true, rejectUnauthorized: false, settings: { maxConcurrentStreams: AGENT_MAX_STREAMS } },
        withoutTrailers(callback as unknown as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void),
      );
      this.agentSessions.setTimeout(Math.max(KEEP_ALIVE_MS, (tls.agentQuietMs ?? 0) + AGENT_QUIET_MARGIN_MS));
      // A session quiet that long ends softly (GOAWAY): a long-poll still open is answered first
      // (without this listener Node destroys the session, open requests and all).
      this.agentSessions.on('timeout', (session: http2.ServerHttp2Session) => session.close());
      this.agentSessions.on('session', (session: http2.ServerHttp2Session) => {
        // One whose handshake ended after close() began gets its GOAWAY at once.
        if (this.closing) session.close();
        this.sessions.add(session);
        session.once('close', () => this.sessions.delete(session));
      });
      this.agentSessions.on('sessionError', () => undefined);
    }
    if (tls) this.routeConnectionsByClientHello(this.server as https.Server, this.agentSessions);
    // Long-polls hold requests open for up to tasks.max_poll_wait_seconds (a handler's time, which
    // requestTimeout does not count); receiving a request as a whole gets api.request_timeout_ms.
    this.server.headersTimeout = 30_000;
    this.server.requestTimeout = requestTimeoutMs;
    this.server.keepAliveTimeout = KEEP_ALIVE_MS;
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    // TLS handshake failures (a client refusing our certificate…) are the client's business.
    this.server.on('tlsClientError', () => undefined);
  }

  /**
   * Agents authenticate with a client certificate on this listener; browsers (the dashboard) must
   * never be asked for one. TLS asks in the handshake, before any request, so the decision is made
   * per connection from its ClientHello (core/http/client-hello.ts): the connection's first record
   * is read and put back, `requestCert` is set for that one connection, and Node's own TLS
   * connection handler takes over, synchronously (it reads `server.requestCert` as it wraps the
   * socket): the HTTP/2 server's for an agent that offers HTTP/2 (unless api.agent_http2 is off),
   * the HTTPS server's otherwise.
   */
  private routeConnectionsByClientHello(server: https.Server, agentSessions: http2.Http2SecureServer | undefined): void {
    const tlsHandler = (of: https.Server | http2.Http2SecureServer): TlsConnectionHandler => {
      const [handler] = of.listeners('connection') as TlsConnectionHandler[];
      if (!handler) throw new Error('the TLS server has no connection handler to wrap');
      of.removeListener('connection', handler);
      return handler;
    };
    const http1 = tlsHandler(server);
    const agentHttp2 = agentSessions && tlsHandler(agentSessions).bind(agentSessions);
    server.on('connection', (socket: Socket) => {
      void peekFirstRecord(socket, 10_000).then((record) => {
        if (socket.destroyed) return;
        if (agentHttp2 && agentSpeaksHttp2(record)) {
          // An answer is several small frames: without this, Nagle holds the later ones for the agent's ACK.
          socket.setNoDelay(true);
          return agentHttp2(socket);
        }
        (server as https.Server & { requestCert: boolean }).requestCert = wantsClientCertificate(record);
        http1.call(server, socket);
      });
    });
  }

  private secureOptions(credentials: ServerCredentials) {
    return { cert: credentials.cert, key: credentials.key, ca: [this.tls!.caPem], minVersion: 'TLSv1.2' as const, ciphers: TLS12_CIPHERS, honorCipherOrder: true };
  }

  async listen(port: number, host: string, configKey: string): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', (err: NodeJS.ErrnoException) => {
        const why = err.code === 'EADDRINUSE' ? 'is already in use' : err.code === 'EACCES' ? 'needs privileges this process lacks' : err.message;
        reject(new ConfigError(`${configKey}: cannot listen on ${host}:${port}: the port ${why}`));
      });
      this.server.listen({ port, host, backlog: LISTEN_BACKLOG }, () => {
        this.server.removeAllListeners('error');
        resolve();
      });
    });
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get secure(): boolean {
    return Boolean(this.tls);
  }

  /** Replaces the server certificate for new connections; established ones keep theirs. */
  swapCertificate(credentials: ServerCredentials): void {
    if (!this.tls) return;
    (this.server as https.Server).setSecureContext(this.secureOptions(credentials));
    this.agentSessions?.setSecureContext(this.secureOptions(credentials));
  }

  /** Stops accepting, lets in-flight requests finish for up to `graceMs`, then cuts what is left. */
  async close(graceMs: number): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    // Keep-alive connections become idle as their last response goes out: close them as they do.
    const sweep = setInterval(() => this.server.closeIdleConnections(), 50);
    this.server.closeIdleConnections();
    // Agents' sessions: no new streams (GOAWAY), those open finish, then the session closes.
    this.closing = true;
    for (const session of this.sessions) session.close();
    const timer = setTimeout(() => {
      for (const socket of this.sockets) socket.destroy();
    }, graceMs);
    timer.unref();
    await closed;
    clearInterval(sweep);
    clearTimeout(timer);
  }
}

/**
 * Node's compatibility layer answers every HTTP/2 request ready for trailers (res.addTrailers): the
 * stream then ends with a frame of its own, sent two event-loop turns after the body, which made an
 * agent's request over HTTP/2 ~2.5 ms slower than over HTTP/1.1 at a thousand requests a second.
 * hangar sends no trailers, so the body's last frame ends the stream.
 */
function withoutTrailers(handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void) {
  return (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse): void => {
    const stream = res.stream;
    const respond = stream.respond;
    stream.respond = (headers, options) => respond.call(stream, headers, { ...options, waitForTrailers: false });
    handler(req, res);
  };
}
