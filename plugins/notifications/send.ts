import { createHmac } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Mailer } from '../../core/mail.js';
import { guardedLookup, isPrivateAddress, type AddressPolicy } from './address.js';
import type { NotificationEvent } from './events.js';

export const CHANNEL_KINDS = ['webhook', 'email', 'slack', 'discord', 'teams'] as const;
export type ChannelKind = (typeof CHANNEL_KINDS)[number];

/** The headers of a delivery (docs/notifications.md). */
export const HEADERS = {
  signature: 'X-Hangar-Signature',
  timestamp: 'X-Hangar-Timestamp',
  idempotencyKey: 'X-Hangar-Idempotency-Key',
  event: 'X-Hangar-Event',
} as const;

/** `v1=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed with the secret>`. */
export function signature(secret: string, timestamp: string, body: string | Buffer): string {
  return `v1=${createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex')}`;
}

/** A channel opened for sending: its secrets in the clear, in memory only. */
export interface OpenChannel {
  id: string;
  kind: ChannelKind;
  url: string | null;
  headers: Record<string, string>;
  recipients: string[];
  secret: string | null;
}

/** What the receiver said to one attempt. */
export interface AttemptResult {
  ok: boolean;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
}

const title = (e: NotificationEvent) => `[hangar] ${e.severity.toUpperCase()} ${e.type}`;

/** The body a channel of `kind` is sent for an event: the event itself, or the chat service's message JSON. */
export function bodyFor(kind: ChannelKind, event: NotificationEvent): unknown {
  const line = `${title(event)}: ${event.message}`;
  switch (kind) {
    case 'slack':
      return { text: line };
    case 'discord':
      return { content: line.slice(0, 2000) };
    case 'teams':
      return {
        type: 'message',
        attachments: [
          {
            contentType: 'application/vnd.microsoft.card.adaptive',
            contentUrl: null,
            content: {
              $schema: 'http://adaptivecards.io/schemas/adaptive-card.json',
              type: 'AdaptiveCard',
              version: '1.2',
              body: [
                { type: 'TextBlock', text: title(event), weight: 'bolder', wrap: true },
                { type: 'TextBlock', text: event.message, wrap: true },
              ],
            },
          },
        ],
      };
    default:
      return event;
  }
}

/** How much of an answer is read (the rest is dropped) and kept in an error. */
const ANSWER_BYTES = 65_536;
const ERROR_CHARS = 500;

const clip = (s: string) => (s.length > ERROR_CHARS ? `${s.slice(0, ERROR_CHARS)}…` : s);

/** One signed POST of `body` to a channel's URL; never throws. */
export function postTo(channel: OpenChannel, event: NotificationEvent, idempotencyKey: string, options: { policy: AddressPolicy; timeoutMs: number; signal?: AbortSignal; now: () => Date }): Promise<AttemptResult> {
  const started = Date.now();
  const done = (r: Omit<AttemptResult, 'latency_ms'>): AttemptResult => ({ ...r, latency_ms: Date.now() - started });
  const body = Buffer.from(JSON.stringify(bodyFor(channel.kind, event)));
  const timestamp = String(Math.floor(options.now().getTime() / 1000));
  const headers: Record<string, string> = {
    ...channel.headers,
    'content-type': 'application/json',
    'content-length': String(body.length),
    'user-agent': 'hangar-notifications/1',
    [HEADERS.idempotencyKey]: idempotencyKey,
    [HEADERS.event]: event.type,
    [HEADERS.timestamp]: timestamp,
  };
  if (channel.secret) headers[HEADERS.signature] = signature(channel.secret, timestamp, body);
  return new Promise((resolve) => {
    let target: URL;
    try {
      target = new URL(channel.url ?? '');
    } catch {
      return resolve(done({ ok: false, status_code: null, error: 'the channel has no valid URL' }));
    }
    const host = target.hostname.replace(/^\[|\]$/g, '');
    if (!options.policy.allowPrivate && net.isIP(host) && isPrivateAddress(host)) {
      return resolve(done({ ok: false, status_code: null, error: `${host} is a private address (notifications.allow_private_addresses is false)` }));
    }
    if (target.protocol === 'http:' && !options.policy.allowHttp) {
      return resolve(done({ ok: false, status_code: null, error: 'plain http is refused (notifications.allow_http is false)' }));
    }
    const transport = target.protocol === 'https:' ? https : http;
    let settled = false;
    const finish = (r: Omit<AttemptResult, 'latency_ms'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(done(r));
    };
    const req = transport.request(target, { method: 'POST', headers, lookup: guardedLookup(options.policy), signal: options.signal, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        if (size < ANSWER_BYTES) chunks.push(c);
        size += c.length;
      });
      res.on('error', (err) => finish({ ok: false, status_code: res.statusCode ?? null, error: clip(err.message) }));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        const text = Buffer.concat(chunks).toString('utf8').slice(0, ANSWER_BYTES);
        const ok = status >= 200 && status < 300;
        finish({ ok, status_code: status, error: ok ? null : clip(`the receiver answered ${status}${text.trim() ? `: ${text.trim()}` : ''}`) });
      });
    });
    // The whole attempt (connect, send, the answer) is bounded, not only idle time.
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${options.timeoutMs} ms`)), options.timeoutMs);
    req.on('error', (err: NodeJS.ErrnoException) => finish({ ok: false, status_code: null, error: clip(err.code && !err.message.includes(err.code) ? `${err.code}: ${err.message}` : err.message) }));
    req.end(body);
  });
}

/** Mails an event to a channel's recipients through the configured server; never throws. */
export async function mailTo(channel: OpenChannel, event: NotificationEvent, idempotencyKey: string, mail: Mailer, from: string): Promise<AttemptResult> {
  const started = Date.now();
  const text = [
    event.message,
    '',
    `type:      ${event.type}`,
    `severity:  ${event.severity}`,
    `at:        ${event.occurred_at}`,
    ...(event.resource ? [`resource:  ${event.resource.type} ${event.resource.id}`] : []),
    `event:     ${event.id}`,
    `delivery:  ${idempotencyKey}`,
    '',
    JSON.stringify(event.data, null, 2),
  ].join('\n');
  try {
    await mail.send({ to: channel.recipients.join(', '), from, subject: `${title(event)}: ${event.message}`.slice(0, 200), text });
    return { ok: true, status_code: null, latency_ms: Date.now() - started, error: null };
  } catch (err) {
    return { ok: false, status_code: null, latency_ms: Date.now() - started, error: clip(`the mail server refused it: ${(err as Error).message}`) };
  }
}
