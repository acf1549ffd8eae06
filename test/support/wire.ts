import http from 'node:http';
import https from 'node:https';

/** An answer read off the wire (status, headers, the JSON body when there is one). */
export interface WireAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  json: any;
  text: string;
}

export interface HalfSent {
  /** The server's answer; a connection the server ends without one rejects. */
  answer: Promise<WireAnswer>;
  /** The request is on its way: its headers and `sent` bytes of its body were handed to the socket. */
  started: Promise<void>;
  destroy(): void;
}

export interface HalfSentOptions {
  ca?: string;
  method?: string;
  headers?: Record<string, string>;
  /** The Content-Length announced; without it the body goes in chunks (Transfer-Encoding: chunked). */
  announced?: number;
  /** Bytes of the body sent: a JSON string opened by `opening` and never closed, so the body is not complete. */
  sent: number;
  /** Close the JSON string and end the request after the `sent` bytes (a whole, slow body), instead of holding the connection open. */
  complete?: boolean;
  /** The start of the JSON body, up to the opening quote of the string that fills it (default `{"value":"`). */
  opening?: string;
  localAddress?: string;
}

/**
 * A request that sends `sent` bytes of a JSON body and then holds the connection open (a slow or
 * hostile client), or ends it with `complete`. With `announced` the body is announced by
 * Content-Length (`sent` may equal it to send a whole body at once), else sent in chunks. Large
 * bodies are written as the socket takes them.
 */
export function halfSent(base: string, target: string, options: HalfSentOptions): HalfSent {
  const req = open(base, target, options);
  const answer = answerOf(req);
  const opening = Buffer.from(options.opening ?? '{"value":"');
  const chunk = Buffer.alloc(Math.min(16 * 1024, Math.max(1, options.sent)), 'x');
  let left = Math.max(0, options.sent - opening.length);
  const started = new Promise<void>((resolve) => {
    const pump = () => {
      while (left > 0) {
        const part = left >= chunk.length ? chunk : chunk.subarray(0, left);
        left -= part.length;
        const more = req.write(part, left === 0 ? () => resolve() : undefined);
        if (!more && left > 0) return void req.once('drain', pump);
      }
      if (options.complete) req.end('"}');
    };
    req.write(opening, options.sent <= opening.length ? () => resolve() : undefined);
    pump();
  });
  req.on('error', () => undefined);
  return { answer, started, destroy: () => req.destroy() };
}

/** A whole request from a chosen source address (`localAddress`, e.g. 127.0.0.2), with a JSON body. */
export function fromAddress(
  base: string,
  target: string,
  options: { ca?: string; method?: string; headers?: Record<string, string>; body: unknown; localAddress: string },
): Promise<WireAnswer> {
  const bytes = Buffer.from(JSON.stringify(options.body));
  const req = open(base, target, { ...options, announced: bytes.length });
  const answer = answerOf(req);
  req.end(bytes);
  return answer;
}

function open(base: string, target: string, options: { ca?: string; method?: string; headers?: Record<string, string>; announced?: number; localAddress?: string }): http.ClientRequest {
  const url = new URL(base + target);
  const transport = url.protocol === 'https:' ? https : http;
  return transport.request(url, {
    method: options.method ?? 'POST',
    ca: options.ca,
    localAddress: options.localAddress,
    agent: false,
    headers: { 'content-type': 'application/json', ...(options.announced === undefined ? {} : { 'content-length': String(options.announced) }), ...options.headers },
  });
}

function answerOf(req: http.ClientRequest): Promise<WireAnswer> {
  const answer = new Promise<WireAnswer>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => {
        let json: any;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode!, headers: res.headers, json, text });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  answer.catch(() => undefined);
  return answer;
}
