import { usageError } from './errors.js';

/**
 * How one `--arg` string becomes a value (docs/runner.md, "Argument conversion").
 * - `auto` (the default): by the shape of the text, see {@link convertAuto}.
 * - `string`: the text as it is. `number` / `integer` / `boolean` / `json`: must parse as such.
 */
export type ParamType = 'auto' | 'string' | 'number' | 'integer' | 'boolean' | 'json';
export const PARAM_TYPES: readonly ParamType[] = ['auto', 'string', 'number', 'integer', 'boolean', 'json'];

/** Prefix that forces the rest of the text to stay a string: `s:123` is the string "123". */
export const STRING_PREFIX = 's:';
const NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;
const INTEGER = /^-?(0|[1-9]\d*)$/;

function parseJson(text: string, label: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw usageError(`${label} is not valid JSON (${(err as Error).message}); prefix it with ${STRING_PREFIX} to pass it as a string`);
  }
}

/**
 * - `true` / `false` → boolean, `null` → null
 * - a JSON number (`123`, `-1.5`, `2e3`; not `007`, not `+1`) → number; an integer too large to be
 *   exact in a double stays a string
 * - text starting with `{` or `[` → parsed as JSON (an error when it is not valid JSON)
 * - `s:<text>` → `<text>` as a string; anything else → the string itself
 */
export function convertAuto(raw: string, label: string): unknown {
  if (raw.startsWith(STRING_PREFIX)) return raw.slice(STRING_PREFIX.length);
  if (raw === 'true') return true;
  if (raw === 'false') return false;
  if (raw === 'null') return null;
  if (NUMBER.test(raw)) {
    const n = Number(raw);
    if (INTEGER.test(raw) && !Number.isSafeInteger(n)) return raw;
    return n;
  }
  const first = raw.trimStart()[0];
  if (first === '{' || first === '[') return parseJson(raw, label);
  return raw;
}

/** Converts one argument for a parameter of the given type; `label` names it in errors. */
export function convertArg(raw: string, type: ParamType, label: string): unknown {
  const text = raw.startsWith(STRING_PREFIX) ? raw.slice(STRING_PREFIX.length) : raw;
  switch (type) {
    case 'auto':
      return convertAuto(raw, label);
    case 'string':
      return text;
    case 'number':
      if (!NUMBER.test(text)) throw usageError(`${label} must be a number, got ${JSON.stringify(raw)}`);
      return Number(text);
    case 'integer':
      if (!INTEGER.test(text) || !Number.isSafeInteger(Number(text))) throw usageError(`${label} must be an integer, got ${JSON.stringify(raw)}`);
      return Number(text);
    case 'boolean':
      if (text !== 'true' && text !== 'false') throw usageError(`${label} must be true or false, got ${JSON.stringify(raw)}`);
      return text === 'true';
    case 'json':
      return parseJson(text, label);
  }
}

/** yargs gives a repeated option as an array, a single one as a scalar, an absent one as undefined. */
export function asList(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  return (Array.isArray(value) ? value : [value]).map((v) => String(v));
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `--env KEY=VALUE` pairs → an object; refuses malformed names and values with line breaks. */
export function parseEnvPairs(pairs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw usageError(`--env ${JSON.stringify(pair)} must be KEY=VALUE`);
    const key = pair.slice(0, eq);
    const value = pair.slice(eq + 1);
    if (!ENV_NAME.test(key)) throw usageError(`--env ${JSON.stringify(key)} is not a valid variable name (letters, digits, _; not starting with a digit)`);
    if (/[\r\n\0]/.test(value)) throw usageError(`--env ${key}: the value may not contain line breaks or NUL`);
    out[key] = value;
  }
  return out;
}
