import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the receiver took, with whether its signature checked out. */
export interface Received {
  headers: http.IncomingHttpHeaders;
  raw: string;
  body: any;
  key: string | undefined;
  event: string | undefined;
  /** The signature matched the receiver's secret (null: no secret set, nothing checked). */
  verified: boolean | null;
}

export type Mode = 'ok' | 'fail' | 'hold' | 'flood';

/**
 * A real HTTP receiver on loopback, as a webhook's owner runs one: it records every request and
 * checks its signature the way docs/notifications.md tells receivers to. It can answer 503
 * (`fail`), answer 200 with a body that never ends (`flood`: 16 KiB every 5 ms until the sender
 * drops the connection), hold requests without answering (`hold`, until `release`), or be down (`stop`, then
 * `start` again on the same port).
 */
export class Receiver {
  readonly requests: Received[] = [];
  mode: Mode = 'ok';
  secret: string | null = null;
  private server: http.Server | null = null;
  private held: Array<() => void> = [];
  port = 0;

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  get holding(): number {
    return this.held.length;
  }

  /** The signature check of docs/notifications.md (Node). */
  static verify(secret: string, timestamp: string, body: string, header: string): boolean {
    const expected = Buffer.from(`v1=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`);
    const given = Buffer.from(header);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }

  async start(): Promise<void> {
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        const signatureHeader = req.headers['x-hangar-signature'] as string | undefined;
        const timestamp = req.headers['x-hangar-timestamp'] as string | undefined;
        this.requests.push({
          headers: req.headers,
          raw,
          body: JSON.parse(raw),
          key: req.headers['x-hangar-idempotency-key'] as string | undefined,
          event: req.headers['x-hangar-event'] as string | undefined,
          verified: this.secret ? Boolean(signatureHeader && timestamp && Receiver.verify(this.secret, timestamp, raw, signatureHeader)) : null,
        });
        const answer = () => {
          if (this.mode === 'flood') {
            res.writeHead(200, { 'content-type': 'text/plain' });
            const chunk = Buffer.alloc(16_384, 'x');
            const pump = setInterval(() => res.write(chunk), 5);
            res.on('close', () => clearInterval(pump));
          } else if (this.mode === 'fail') {
            res.writeHead(503, { 'content-type': 'text/plain' }).end('receiver unavailable');
          } else res.writeHead(200, { 'content-type': 'application/json' }).end('{"received":true}');
        };
        if (this.mode === 'hold') this.held.push(answer);
        else answer();
      });
    });
    await new Promise<void>((resolve) => server.listen(this.port, '127.0.0.1', resolve));
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Answers the held requests (as the mode is then) and stops holding. */
  release(): void {
    if (this.mode === 'hold') this.mode = 'ok';
    for (const answer of this.held.splice(0)) answer();
  }

  /** Goes down: the port refuses connections until start(). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (!server) return;
    this.release();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The requests that carried one idempotency key. */
  withKey(key: string): Received[] {
    return this.requests.filter((r) => r.key === key);
  }
}
