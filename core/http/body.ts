import type { Context } from 'koa';
import { HttpError, badRequest } from '../errors.js';
import { isXmlContentType, XmlDocument } from './xml.js';

export function parseSize(size: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?$/i.exec(size.trim());
  if (!m) throw new Error(`bad size ${size}`);
  const unit = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 }[(m[2] ?? 'b').toLowerCase() as 'b'];
  return Math.floor(Number(m[1]) * unit);
}

/** Reads the request body as bytes, without judging it (parsing comes after authentication). */
export async function readRawBody(ctx: Context, limit: number): Promise<Buffer> {
  const declared = Number(ctx.get('content-length') || 0);
  if (declared > limit) throw new HttpError(413, `Request body is larger than the ${limit}-byte limit`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, `Request body is larger than the ${limit}-byte limit`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** Turns the raw body into what the handler gets: a plain value, an XmlDocument, or undefined when empty. */
export function parseBody(ctx: Context, raw: Buffer, acceptsXml: boolean): unknown {
  if (raw.length === 0) return undefined;
  const type = ctx.get('content-type');
  const text = raw.toString('utf8');
  if (!type || /^application\/([\w.+-]+\+)?json\b/i.test(type)) {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw badRequest(`Malformed JSON body: ${(err as Error).message}`);
    }
  }
  if (isXmlContentType(type)) {
    if (!acceptsXml) throw new HttpError(415, 'This endpoint does not accept XML; send application/json');
    return XmlDocument.parse(text);
  }
  if (/^application\/x-www-form-urlencoded\b/i.test(type)) {
    return Object.fromEntries(new URLSearchParams(text));
  }
  throw new HttpError(415, `Unsupported content type ${type.split(';')[0]}; send application/json`);
}
