import type { ValidateFunction } from 'ajv';
import { HttpError } from '../errors.js';
import type { RouteDef } from '../plugin.js';
import { createAjv, describeErrors } from '../validation.js';
import { Reply } from './reply.js';

/** Answers' validators: as declared (no coercion, no defaults, nothing removed: the answer is never changed). */
const ajv = createAjv();

/**
 * What an answer carries that its route's `schemas.response` describes — its `data`, or the whole
 * body for a route whose schema describes the body (the login API's `{token, data}`) — or
 * `unchecked` for an answer it does not (no content, a raw body, an error).
 */
function declaredPart(result: unknown): { data: unknown; body?: unknown } | 'unchecked' {
  if (!(result instanceof Reply)) return { data: result ?? null };
  if (result.type || result.status === 204 || result.status < 200 || result.status > 299) return 'unchecked';
  const body = result.body as { data?: unknown } | null;
  return body && typeof body === 'object' && 'data' in body ? { data: body.data, body } : 'unchecked';
}

/**
 * The check of a route's answers against its declared response schema (`schemas.response`), made
 * where the configuration's `env` is `test` (every test suite), never in production (the caller does
 * not make it there: no validator is compiled and nothing runs). An answer that does not match fails
 * loudly: a 500 naming the route and what does not match (paths and rules, never the values), so the
 * schema or the handler, whichever is wrong, gets fixed. A `{data}` answer's `data` is checked (a
 * page's items as the array); raw bodies and 204s are not.
 */
export function responseCheck(route: RouteDef): ((result: unknown) => void) | null {
  const schema = route.schemas?.response;
  if (!schema) return null;
  let validate: ValidateFunction | undefined;
  return (result) => {
    const part = declaredPart(result);
    if (part === 'unchecked') return;
    validate ??= ajv.compile(schema);
    if (validate(part.data)) return;
    const problemsOfData = validate.errors;
    if (part.body !== undefined && validate(part.body)) return;
    validate.errors = problemsOfData;
    const problems = describeErrors(validate.errors, 'data')
      .slice(0, 5)
      .map((d) => `${d.path} ${d.message}`)
      .join('; ');
    throw new HttpError(500, `The answer of ${route.method} ${route.path} does not match its declared response schema (checked in tests): ${problems}`);
  };
}
