import https from 'node:https';
import http from 'node:http';
import { signRequest } from '../core/auth/hmac.js';
import { sleep } from '../core/clock.js';
import { SseParser, type ServerSentEvent } from '../core/http/sse.js';
import { apiClient, CLI_USER_AGENT } from './api-client.js';
import { resolveConnection } from './runner/connection.js';
import { failure, runnerCommand } from './runner/errors.js';

interface EventsArgs {
  follow?: boolean;
  types?: string;
  json?: boolean;
  verbose?: boolean;
}

/** One event as a line: time, type, and what it says (the data's fields, in a fixed order for each type). */
export function eventLine(type: string, data: Record<string, any>): string {
  const at = data.at ?? '';
  switch (type) {
    case 'resource.changed':
      return `${at} ${type} ${data.type} ${data.id} ${data.op}`;
    case 'node.status':
      return `${at} ${type} ${data.node_id} ${data.from} → ${data.to}`;
    case 'node.event':
      return `${at} ${type} ${data.node_id ?? data.identifier ?? '-'} ${data.kind}${data.message ? `: ${data.message}` : ''}`;
    case 'task.state':
      return `${at} ${type} ${data.task_id} ${data.kind} ${data.status} (node ${data.node_id}${data.subject ? `, for ${data.subject}` : ''})`;
    default:
      return `${at} ${type} ${JSON.stringify(data)}`;
  }
}

/** One event: a line, or with --json the object GET /v1/events lists ({id, type, at, data}). */
function print(event: { type: string; id?: string; data: Record<string, any> }, json: boolean): void {
  const { at, ...data } = event.data;
  process.stdout.write(`${json ? JSON.stringify({ id: event.id, type: event.type, at, data }) : eventLine(event.type, event.data)}\n`);
}

/**
 * Follows GET /v1/events/stream until interrupted, reconnecting (with Last-Event-ID, signed anew)
 * when the stream ends or the control plane restarts, the way a browser's EventSource does.
 */
async function follow(args: EventsArgs): Promise<never> {
  const conn = resolveConnection();
  apiClient(); // checks that a connection is configured, with the same message as every command
  const parser = new SseParser();
  let failures = 0;
  for (;;) {
    const pathAndQuery = `/v1/events/stream${args.types ? `?types=${encodeURIComponent(args.types)}` : ''}`;
    const headers: Record<string, string> = {
      accept: 'text/event-stream',
      'user-agent': CLI_USER_AGENT,
      ...signRequest({ accessKeyId: conn.access_key_id!, secretAccessKey: conn.secret_access_key! }, { method: 'GET', pathAndQuery }),
      ...(parser.lastEventId ? { 'last-event-id': parser.lastEventId } : {}),
    };
    const outcome = await new Promise<{ status: number; message?: string }>((resolve) => {
      const target = new URL(`${conn.api_url}${pathAndQuery}`);
      const transport = target.protocol === 'https:' ? https : http;
      const req = transport.request(target, { method: 'GET', headers, ca: conn.ca_pem ?? undefined }, (res) => {
        res.setEncoding('utf8');
        if (res.statusCode !== 200) {
          let body = '';
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, message: (() => { try { return JSON.parse(body).message; } catch { return body; } })() }));
          return;
        }
        failures = 0;
        res.on('data', (chunk: string) => {
          for (const e of parser.push(chunk) as ServerSentEvent[]) {
            if (e.event === 'reset') process.stderr.write(`hangar events: ${JSON.parse(e.data).message}\n`);
            // The server ended the stream (credentials revoked or expired, shutdown): say why, then reconnect (a refusal stops below).
            else if (e.event === 'end') process.stderr.write(`hangar events: the stream ended (${JSON.parse(e.data).reason}): ${JSON.parse(e.data).message}\n`);
            else print({ type: e.event, id: e.id, data: JSON.parse(e.data) }, Boolean(args.json));
          }
        });
        res.on('end', () => resolve({ status: 200 }));
        res.on('error', () => resolve({ status: 200 }));
      });
      req.on('error', (err) => resolve({ status: 0, message: err.message }));
      req.end();
    });
    // 429: too many streams open for now (events.streams_per_principal / _per_address); one may close, so try again later.
    if (outcome.status >= 400 && outcome.status < 500 && outcome.status !== 429) throw failure(`GET /v1/events/stream: HTTP ${outcome.status}: ${outcome.message}`);
    failures++;
    if (outcome.status !== 200) process.stderr.write(`hangar events: ${outcome.message ?? `HTTP ${outcome.status}`}; reconnecting\n`);
    await sleep(Math.min(30_000, 500 * 2 ** Math.min(failures, 6)));
  }
}

export const eventsCommand = runnerCommand<EventsArgs>({
  command: 'events',
  describe: 'Print the control plane’s recent live events (resource changes, node status and events, task states); --follow streams them',
  builder: (y) =>
    y
      .option('follow', { alias: 'f', type: 'boolean', describe: 'keep streaming new events until interrupted (reconnects by itself)' })
      .option('types', { type: 'string', describe: 'only these types, comma-separated: resource.changed, node.status, node.event, task.state' })
      .option('json', { type: 'boolean', describe: 'one JSON object per line' })
      .example('$0 events --follow', 'watch the fleet change')
      .example('$0 events -f --types node.status,node.event --json', 'node changes only, as JSON lines'),
  async run(args) {
    if (args.follow) await follow(args);
    const events = await apiClient().ok<Array<{ id: string; type: string; at: string; data: Record<string, unknown> }>>('GET', `/v1/events${args.types ? `?types=${encodeURIComponent(args.types)}` : ''}`);
    for (const e of events) print({ type: e.type, id: e.id, data: { ...e.data, at: e.at } }, Boolean(args.json));

  },
});
