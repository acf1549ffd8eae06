/**
 * What the services plugin does with a bundle of any format before its backend's format reads it
 * (core/clusters/backend.ts BundleFormat): the request's base64 text decoded, and, once read, the
 * hangar secrets and configs it names looked up on its cluster.
 */
import type { ParsedBundle } from '../../core/clusters/backend.js';
import { badRequest } from '../../core/errors.js';
import type { ObjectKind, ResolvedObject } from '../secrets/api.js';

const CREATE_WITH: Record<ObjectKind, string> = { secret: 'POST /v1/secrets', config: 'POST /v1/configs' };

const invalid = (message: string, path: string) => badRequest(`Validation failed: ${message}`, [{ path, message }]);

/** A base64 field of the body (compose_file, manifest…: standard or URL-safe alphabet; line breaks allowed) as UTF-8 text; 400 naming the field when it is not. */
export function decodeBase64Text(base64: string, field: string): string {
  const fail = (message: string) => invalid(message, `body.${field}`);
  const compact = base64.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(compact) || compact.length % 4 === 1) throw fail(`${field} is not base64 (give the YAML file base64-encoded)`);
  const bytes = Buffer.from(compact, compact.includes('-') || compact.includes('_') ? 'base64url' : 'base64');
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw fail(`${field} does not decode to UTF-8 text`);
  }
  if (!text.trim()) throw fail(`${field} is empty`);
  return text;
}

/**
 * Looks up every secret and config the bundle names; one the cluster (its `noun`: swarm…) has no
 * hangar object for is a 400 on the bundle's `field`. Keyed `<kind>:<key in the bundle>`.
 */
export async function resolveObjects(
  parsed: Pick<ParsedBundle, 'objects'>,
  resolve: (kind: ObjectKind, name: string) => Promise<ResolvedObject | null>,
  where: { noun: string; field: string },
): Promise<Map<string, ResolvedObject>> {
  const resolved = new Map<string, ResolvedObject>();
  for (const entry of parsed.objects) {
    const found = await resolve(entry.kind, entry.name);
    if (!found) {
      throw invalid(`${entry.kind} ${entry.key} names no hangar ${entry.kind} ${JSON.stringify(entry.name)} on this ${where.noun}: create it with ${CREATE_WITH[entry.kind]} first`, `body.${where.field}`);
    }
    resolved.set(`${entry.kind}:${entry.key}`, found);
  }
  return resolved;
}
