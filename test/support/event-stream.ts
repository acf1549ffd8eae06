import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { SseParser, type ServerSentEvent } from '../../core/http/sse.js';
import { waitFor } from './agents.js';
import type { TestHangar } from './hangar.js';

/** A client of GET /v1/events/stream that collects what arrives. */
export class Stream {
  readonly events: Array<ServerSentEvent & { json: any }> = [];
  private readonly parser = new SseParser();
  private res?: IncomingMessage;
  status = 0;
  ended = false;

  static open(t: TestHangar, headers: Record<string, string>, query = ''): Promise<Stream> {
    const stream = new Stream();
    return new Promise((resolve, reject) => {
      const req = https.request(`${t.url}/v1/events/stream${query}`, { ca: t.caPem, headers: { accept: 'text/event-stream', ...headers } }, (res) => {
        stream.res = res;
        stream.status = res.statusCode ?? 0;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          for (const e of stream.parser.push(chunk)) stream.events.push({ ...e, json: JSON.parse(e.data) });
        });
        res.on('end', () => (stream.ended = true));
        res.on('error', () => (stream.ended = true));
        resolve(stream);
      });
      req.on('error', reject);
      req.end();
    });
  }

  get lastId(): string | undefined {
    return this.parser.lastEventId;
  }

  of(type: string, match: (data: any) => boolean = () => true) {
    return this.events.filter((e) => e.event === type && match(e.json));
  }

  until(what: string, type: string, match: (data: any) => boolean = () => true) {
    return waitFor(() => this.of(type, match)[0], { timeoutMs: 10_000, intervalMs: 50, what: `${what} (events so far: ${this.events.map((e) => `${e.event} ${e.data}`).join('; ')})` });
  }

  close(): void {
    this.res?.destroy();
  }
}
