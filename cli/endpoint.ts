import { readFileSync } from 'node:fs';
import { STATUS_CODES } from 'node:http';
import { signRequest } from '../core/auth/hmac.js';
import { httpRequest, type HttpResponse } from '../core/http/client.js';
import { jsonSyntaxError } from '../core/json-syntax.js';
import { asList } from './runner/args.js';
import { CONNECTION_ENV, resolveConnection } from './runner/connection.js';
import { EXIT, runnerCommand, RunnerError, usageError } from './runner/errors.js';
import { jsonReplacer } from './runner/output.js';
import { CLI_USER_AGENT } from './api-client.js';

interface EndpointArgs {
  method: string;
  url: string;
  header?: string | string[];
  body?: string;
  raw?: boolean;
  include?: boolean;
  timeout: number;
  verbose?: boolean;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function parseHeaders(lines: string[]): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon).trim() : '';
    if (!name || !TOKEN.test(name)) throw usageError(`--header ${JSON.stringify(line)} must be "Name: value"`);
    const value = line.slice(colon + 1).trim();
    if (/[\r\n]/.test(value)) throw usageError(`--header ${name}: the value may not contain line breaks`);
    headers[name] = value;
  }
  return headers;
}

function readBody(spec: string | undefined): Buffer | undefined {
  if (spec === undefined) return undefined;
  if (!spec.startsWith('@')) return Buffer.from(spec);
  const file = spec.slice(1);
  try {
    return file === '-' ? readFileSync(0) : readFileSync(file);
  } catch (err) {
    throw usageError(`--body ${spec}: ${(err as Error).message}`);
  }
}

const isJsonType = (type: string) => /^application\/([\w.+-]+\+)?json\b/i.test(type.trim());

/**
 * A body sent as JSON (no Content-Type header, or a JSON one) must parse: otherwise the invocation
 * is wrong, and it says where before anything is sent.
 */
function checkJson(body: Buffer, spec: string): void {
  const text = body.toString('utf8');
  try {
    JSON.parse(text);
  } catch (err) {
    const what = spec.startsWith('@') ? `--body ${spec}` : '--body';
    // The operator's own text: the parser's reason is shown as it quotes it.
    const { line, column, ended, reason } = jsonSyntaxError(text, err);
    throw usageError(`${what} is not valid JSON (line ${line}, column ${column}: ${ended ? 'the JSON ends too early' : reason}); fix it, or send another type with --header "Content-Type: …"`);
  }
}

const has = (headers: Record<string, string>, name: string) => Object.keys(headers).some((h) => h.toLowerCase() === name);

function print(res: HttpResponse, raw: boolean, include: boolean): void {
  if (raw) {
    process.stdout.write(res.raw);
    return;
  }
  const lines = [`HTTP ${res.status} ${STATUS_CODES[res.status] ?? ''}`.trimEnd()];
  if (include) {
    for (const [name, value] of Object.entries(res.headers)) lines.push(`${name}: ${Array.isArray(value) ? value.join(', ') : value}`);
    lines.push('');
  }
  if (res.json !== undefined) lines.push(JSON.stringify(res.json, jsonReplacer, 2));
  else if (res.text) lines.push(res.text.replace(/\n$/, ''));
  process.stdout.write(`${lines.join('\n')}\n`);
}

export const endpointCommand = runnerCommand<EndpointArgs>({
  command: 'endpoint <method> <url>',
  describe: 'Call a REST endpoint; requests to the configured control plane are HMAC-signed with its API key',
  builder: (y) =>
    y
      .positional('method', { type: 'string', demandOption: true, describe: 'GET, POST, PUT, PATCH, DELETE…' })
      .positional('url', { type: 'string', demandOption: true, describe: 'a path on the control plane (/v1/iam/users) or a full URL' })
      .option('header', { type: 'string', describe: '"Name: value" (repeatable); an explicit Authorization header turns signing off' })
      .option('body', { type: 'string', describe: 'request body: the text itself, @file, or @- for stdin; JSON (checked before sending) unless a Content-Type header says otherwise' })
      .option('raw', { type: 'boolean', describe: 'print the response body exactly as received, nothing else' })
      .option('include', { alias: 'i', type: 'boolean', describe: 'print the response headers too' })
      .option('timeout', { type: 'number', default: 30, describe: 'seconds to wait for the answer' })
      .example('$0 endpoint GET /v1/iam/users', 'signed with the configured API key')
      .example('$0 endpoint POST /v1/iam/users --body @user.json', 'a body from a file')
      .example('$0 endpoint GET /v1/iam/users --header "Authorization: Bearer $TOKEN"', 'your own credentials instead'),
  async run(args) {
    const method = String(args.method).toUpperCase();
    if (!/^[A-Z]+$/.test(method)) throw usageError(`"${args.method}" is not an HTTP method`);
    const conn = resolveConnection();
    let target: URL;
    if (args.url.startsWith('/')) {
      if (!conn.api_url) {
        throw usageError(`no control plane configured for the path ${args.url}: run hangar configure --from <connection.json>, or set ${CONNECTION_ENV.api_url}`);
      }
      target = new URL(`${conn.api_url}${args.url}`);
    } else {
      try {
        target = new URL(args.url);
      } catch {
        throw usageError(`"${args.url}" is neither a path (/v1/…) nor a URL`);
      }
      if (target.protocol !== 'https:' && target.protocol !== 'http:') throw usageError(`"${args.url}" must be an http(s) URL`);
    }
    const controlPlane = Boolean(conn.api_url) && new URL(conn.api_url!).origin === target.origin;
    const headers = parseHeaders(asList(args.header));
    if (!has(headers, 'user-agent')) headers['User-Agent'] = CLI_USER_AGENT;
    const body = readBody(args.body);
    if (body) {
      const type = Object.entries(headers).find(([name]) => name.toLowerCase() === 'content-type')?.[1];
      if (type === undefined) headers['Content-Type'] = 'application/json';
      if (type === undefined || isJsonType(type)) checkJson(body, args.body!);
    }
    if (controlPlane && !has(headers, 'authorization') && !has(headers, 'x-signature')) {
      if (!conn.access_key_id || !conn.secret_access_key) {
        throw usageError(
          `no API key configured to sign the request: run hangar configure, or set ${CONNECTION_ENV.access_key_id} and ${CONNECTION_ENV.secret_access_key} (or pass --header "Authorization: …")`,
        );
      }
      Object.assign(
        headers,
        signRequest({ accessKeyId: conn.access_key_id, secretAccessKey: conn.secret_access_key }, { method, pathAndQuery: `${target.pathname}${target.search}`, body }),
      );
    }
    let res: HttpResponse;
    try {
      res = await httpRequest(target.href, {
        method,
        headers,
        body,
        ca: controlPlane ? (conn.ca_pem ?? undefined) : undefined,
        timeoutMs: Math.max(1, args.timeout) * 1000,
      });
    } catch (err) {
      throw new RunnerError(`cannot reach ${target.origin}: ${(err as Error).message}`, EXIT.network, err);
    }
    print(res, Boolean(args.raw), Boolean(args.include));
    return res.status >= 400 ? EXIT.failed : EXIT.ok;

  },
});
