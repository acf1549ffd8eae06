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
  /** Not worth trying again (the channel is gone): the delivery fails at once. */
  final?: boolean;
}

const title = (e: NotificationEvent) => `[hangar] ${e.severity.toUpperCase()} ${e.type}`;

/**
 * Text for chat services, where an event's message (which can carry what an unauthenticated caller
 * sent, e.g. a joining machine's hostname) must not become a mention, a link or markup:
 * Slack's control characters & < > as its entities; Markdown of an Adaptive Card escaped with a backslash.
 */
export const slackText = (text: string) => text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
export const markdownText = (text: string) => text.replace(/[\\`*_~[\]()<>#|!+\-.{}]/g, '\\$&');

/** The body a channel of `kind` is sent for an event: the event itself, or the chat service's message JSON. */
export function bodyFor(kind: ChannelKind, event: NotificationEvent): unknown {
  const line = `${title(event)}: ${event.message}`;
  switch (kind) {
    case 'slack':
      return { text: slackText(line) };
    case 'discord':
      // No @everyone, @here, user or role mention is acted on, whatever the text says.
      return { content: line.slice(0, 2000), allowed_mentions: { parse: [] } };
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
                { type: 'TextBlock', text: markdownText(title(event)), weight: 'bolder', wrap: true },
                { type: 'TextBlock', text: markdownText(event.message), wrap: true },
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
    let req: http.ClientRequest;
    try {
      req = transport.request(target, { method: 'POST', headers, lookup: guardedLookup(options.policy), signal: options.signal, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const answered = () => {
          const status = res.statusCode ?? 0;
          const text = Buffer.concat(chunks).subarray(0, ANSWER_BYTES).toString('utf8');
          const ok = status >= 200 && status < 300;
          finish({ ok, status_code: status, error: ok ? null : clip(`the receiver answered ${status}${text.trim() ? `: ${text.trim()}` : ''}`) });
        };
        res.on('data', (c: Buffer) => {
          if (size < ANSWER_BYTES) chunks.push(c);
          size += c.length;
          // Past the cap the rest is not waited for: the answer so far decides, the connection is dropped.
          if (size > ANSWER_BYTES) {
            answered();
            res.destroy();
          }
        });
        res.on('error', (err) => finish({ ok: false, status_code: res.statusCode ?? null, error: clip(err.message) }));
        res.on('end', answered);
      });
    } catch (err) {
      // Node refuses some header values (characters above \xff, control characters) before sending anything.
      return resolve(done({ ok: false, status_code: null, error: clip(`the request could not be made: ${(err as Error).message}`) }));
    }
    // The whole attempt (connect, send, the answer) is bounded, not only idle time.
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${options.timeoutMs} ms`)), options.timeoutMs);
    req.on('error', (err: NodeJS.ErrnoException) => finish({ ok: false, status_code: null, error: clip(err.code && !err.message.includes(err.code) ? `${err.code}: ${err.message}` : err.message) }));
    req.end(body);
  });
}

/**
 * Mails an event to a channel's recipients through the configured server; never throws. The attempt
 * ends (failed) after `timeoutMs` or when `signal` aborts, whatever the mail server does meanwhile.
 */
export async function mailTo(channel: OpenChannel, event: NotificationEvent, idempotencyKey: string, mail: Mailer, options: { from: string; timeoutMs: number; signal?: AbortSignal }): Promise<AttemptResult> {
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
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const bound = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(`no answer from the mail server within ${options.timeoutMs} ms`), options.timeoutMs);
    onAbort = () => resolve('the attempt was abandoned (the sender stops)');
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener('abort', onAbort, { once: true });
  });
  const sent = mail.send({ to: channel.recipients.join(', '), from: options.from, subject: `${title(event)}: ${event.message}`.slice(0, 200), text }).then(
    () => null,
    (err: Error) => `the mail server refused it: ${err.message}`,
  );
  try {
    const error = await Promise.race([sent, bound]);
    return { ok: error === null, status_code: null, latency_ms: Date.now() - started, error: error === null ? null : clip(error) };
  } finally {
    clearTimeout(timer);
    if (onAbort) options.signal?.removeEventListener('abort', onAbort);
  }
}
