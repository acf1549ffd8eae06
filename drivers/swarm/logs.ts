import type { LogOptions } from '../../core/orchestrator.js';
import { SwarmDriverError, failure, type SwarmContext } from './client.js';

export const DEFAULT_LOG_LINES = 100;
const MAX_LOG_LINES = 10_000;

/** One log line: the engine's RFC 3339 timestamp, then the text. */
export interface LogLine {
  timestamp: string;
  text: string;
}

export function logLineCount(options: LogOptions | undefined): number {
  const lines = options?.lines ?? DEFAULT_LOG_LINES;
  if (!Number.isInteger(lines) || lines < 0) throw new SwarmDriverError(`invalid log line count ${JSON.stringify(lines)}: a whole number of lines, 0 or more`);
  return Math.min(lines, MAX_LOG_LINES);
}

/** `since` (RFC 3339) as the unix seconds the engine takes. */
export function sinceSeconds(since: string | undefined): number | undefined {
  if (since === undefined || since === null || since === '') return undefined;
  const ms = Date.parse(since);
  if (Number.isNaN(ms)) throw new SwarmDriverError(`invalid log start ${JSON.stringify(since)}: an RFC 3339 date-time, e.g. 2024-05-01T12:00:00Z`);
  return Math.floor(ms / 1000);
}

/**
 * The payload of a log stream. Without a TTY the engine multiplexes stdout and stderr in frames
 * of an 8-byte header (stream 0/1/2, three zero bytes, big-endian payload length) and the
 * payload; with a TTY the stream is raw text.
 */
export function demux(buffer: Buffer): string {
  const looksMultiplexed = (at: number) =>
    at + 8 <= buffer.length && buffer[at]! <= 2 && buffer[at + 1] === 0 && buffer[at + 2] === 0 && buffer[at + 3] === 0;
  if (buffer.length === 0) return '';
  if (!looksMultiplexed(0)) return buffer.toString('utf8');
  const parts: Buffer[] = [];
  let at = 0;
  while (at + 8 <= buffer.length) {
    const size = buffer.readUInt32BE(at + 4);
    parts.push(buffer.subarray(at + 8, Math.min(buffer.length, at + 8 + size)));
    at += 8 + size;
  }
  return Buffer.concat(parts).toString('utf8');
}

/** Splits `<timestamp> <text>` lines (the engine's `timestamps` option). */
export function parseLines(text: string): LogLine[] {
  const lines: LogLine[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (!line) continue;
    const space = line.indexOf(' ');
    const head = space > 0 ? line.slice(0, space) : line;
    if (/^\d{4}-\d\d-\d\dT/.test(head)) lines.push({ timestamp: head, text: space > 0 ? line.slice(space + 1) : '' });
    else lines.push({ timestamp: '', text: line });
  }
  return lines;
}

/** A sort key for RFC 3339 timestamps with nanoseconds (the engine drops trailing zeros, so plain string order is wrong). */
function timeKey(timestamp: string): string {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$/.exec(timestamp);
  if (!m) return timestamp;
  const zone = m[3] ?? 'Z';
  const fraction = (m[2] ?? '').padEnd(9, '0').slice(0, 9);
  if (zone === 'Z') return `${m[1]}.${fraction}`;
  const iso = new Date(Date.parse(`${m[1]}${zone}`)).toISOString().slice(0, 19);
  return `${iso}.${fraction}`;
}

/** The last `count` lines of several sources, in time order, each `<timestamp> <prefix><text>`. */
export function mergeLines(sources: { prefix: string; lines: LogLine[] }[], count: number): string[] {
  const all = sources.flatMap(({ prefix, lines }) => lines.map((line) => ({ key: timeKey(line.timestamp), prefix, line })));
  all.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const last = count === 0 ? [] : all.slice(-count);
  return last.map(({ prefix, line }) => `${prefix}${line.timestamp ? `${line.timestamp} ` : ''}${line.text}`);
}

/**
 * The last `lines` log lines of a service (every task of it), with timestamps. `tail` applies per
 * task on the engine's side, so the lines of all tasks are merged and cut here.
 */
export async function serviceLogLines(ctx: SwarmContext, serviceId: string, label: string, options: LogOptions | undefined): Promise<LogLine[]> {
  const count = logLineCount(options);
  const since = sinceSeconds(options?.since);
  const query: Record<string, unknown> = { stdout: true, stderr: true, timestamps: true, follow: false, tail: String(count) };
  if (since !== undefined) query.since = since;
  // Dialled directly as a stream: dockerode's buffered mode would try to parse the answer as JSON.
  const buffer = await new Promise<Buffer>((resolve, reject) => {
    ctx.docker.modem.dial(
      {
        path: `/services/${encodeURIComponent(serviceId)}/logs?`,
        method: 'GET',
        isStream: true,
        statusCodes: { 200: true, 404: 'no such service', 500: 'server error', 503: 'node is not part of a swarm' },
        options: query,
      },
      (err: unknown, result: unknown) => {
        const stream = result as NodeJS.ReadableStream | null;
        if (err) return reject(failure(`reading the logs of ${label}`, err));
        if (!stream) return resolve(Buffer.alloc(0));
        const chunks: Buffer[] = [];
        stream.on('data', (chunk: Buffer | string) => chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk)));
        stream.on('end', () => resolve(Buffer.concat(chunks)));
        stream.on('error', (e: unknown) => reject(failure(`reading the logs of ${label}`, e)));
      },
    );
  });
  const lines = parseLines(demux(buffer));
  return count === 0 ? [] : lines;
}
