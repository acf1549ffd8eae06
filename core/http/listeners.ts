import http from 'node:http';
import https from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type Koa from 'koa';
import type { ServerCredentials } from '../pki/pki.js';

/** A running HTTP(S) server that can swap its certificate and shut down gracefully. */
export class Listener {
  private readonly sockets = new Set<Socket>();
  private readonly server: http.Server | https.Server;

  constructor(
    readonly name: string,
    app: Koa,
    private readonly tls?: { credentials: ServerCredentials; caPem: string },
  ) {
    const callback = app.callback();
    this.server = tls
      ? https.createServer({ ...this.secureOptions(tls.credentials), requestCert: true, rejectUnauthorized: false }, callback)
      : http.createServer(callback);
    // Long-polls hold requests open; the default 300 s request timeout is fine, headers must come quickly.
    this.server.headersTimeout = 30_000;
    this.server.keepAliveTimeout = 65_000;
    this.server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    // TLS handshake failures (a client refusing our certificate…) are the client's business.
    this.server.on('tlsClientError', () => undefined);
  }

  private secureOptions(credentials: ServerCredentials) {
    return { cert: credentials.cert, key: credentials.key, ca: [this.tls!.caPem], minVersion: 'TLSv1.2' as const };
  }

  async listen(port: number, host: string): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
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
  }

  /** Stops accepting, lets in-flight requests finish for up to `graceMs`, then cuts what is left. */
  async close(graceMs: number): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    // Keep-alive connections become idle as their last response goes out: close them as they do.
    const sweep = setInterval(() => this.server.closeIdleConnections(), 50);
    this.server.closeIdleConnections();
    const timer = setTimeout(() => {
      for (const socket of this.sockets) socket.destroy();
    }, graceMs);
    timer.unref();
    await closed;
    clearInterval(sweep);
    clearTimeout(timer);
  }
}
