/** Reading a method's parameters and a class's public methods at run time. */

export interface ParamInfo {
  /** The parameter as written, without its default (`file`, `{a, b}`). */
  name: string;
  /** Has a default value, or is a rest parameter. */
  optional: boolean;
  rest: boolean;
}

export type AnyFunction = (...args: unknown[]) => unknown;

function paramName(text: string): string {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if ('([{'.includes(c)) depth++;
    else if (')]}'.includes(c)) depth--;
    else if (depth === 0 && c === '=') return text.slice(0, i).trim();
  }
  return text.trim();
}

/**
 * The parameter list of a function, read from its source text (what tsx/esbuild emits: TypeScript
 * types are gone, defaults and rest parameters stay). Null when the source is not available (native
 * or bound functions).
 */
export function parseParams(fn: AnyFunction): ParamInfo[] | null {
  let src: string;
  try {
    src = Function.prototype.toString.call(fn);
  } catch {
    return null;
  }
  if (/\{\s*\[native code\]\s*\}\s*$/.test(src)) return null;
  const arrow = /^\s*(?:async\s+)?([A-Za-z_$][\w$]*)\s*=>/.exec(src);
  if (arrow) return [{ name: arrow[1]!, optional: false, rest: false }];
  const open = src.indexOf('(');
  if (open < 0) return null;
  const params: ParamInfo[] = [];
  let depth = 0;
  let current = '';
  let optional = false;
  const flush = () => {
    const text = current.trim();
    if (text) {
      const rest = text.startsWith('...');
      params.push({ name: paramName(rest ? text.slice(3) : text), optional: optional || rest, rest });
    }
    current = '';
    optional = false;
  };
  for (let i = open; i < src.length; i++) {
    const c = src[i]!;
    if (c === '/' && src[i + 1] === '/') {
      const end = src.indexOf('\n', i);
      i = end < 0 ? src.length : end;
      continue;
    }
    if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      i = end < 0 ? src.length : end + 1;
      continue;
    }
    if (c === '"' || c === "'" || c === '`') {
      let j = i + 1;
      while (j < src.length && src[j] !== c) j += src[j] === '\\' ? 2 : 1;
      current += src.slice(i, j + 1);
      i = j;
      continue;
    }
    if (c === '(' || c === '[' || c === '{') {
      depth++;
      if (depth === 1) continue;
    } else if (c === ')' || c === ']' || c === '}') {
      depth--;
      if (depth === 0) {
        flush();
        return params;
      }
    } else if (depth === 1 && c === ',') {
      flush();
      continue;
    } else if (depth === 1 && c === '=' && src[i + 1] !== '>' && src[i + 1] !== '=' && !'=!<>'.includes(src[i - 1] ?? '')) {
      optional = true;
    }
    current += c;
  }
  return null;
}

/** Fewest and most arguments a parameter list accepts (Infinity with a rest parameter). */
export function arity(params: ParamInfo[] | null, fn: AnyFunction): { min: number; max: number } {
  if (!params) return { min: fn.length, max: Infinity };
  let min = 0;
  params.forEach((p, i) => {
    if (!p.optional) min = i + 1;
  });
  return { min, max: params.some((p) => p.rest) ? Infinity : params.length };
}

const HIDDEN = new Set(['constructor', 'caller', 'arguments']);

/** Public: not `constructor`, not starting with `_`, a plain function value (not a getter, not a class). */
function isPublicName(name: string): boolean {
  return !HIDDEN.has(name) && !name.startsWith('_');
}

function isClass(fn: unknown): boolean {
  return typeof fn === 'function' && /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

const STOP = new Set<unknown>([Object.prototype, Function.prototype, null]);

/** A public method `name` of `holder` or of its prototypes (never Object's or Function's own). */
export function findMethod(holder: object, name: string): AnyFunction | undefined {
  if (!isPublicName(name)) return undefined;
  for (let o: object | null = holder; !STOP.has(o); o = Object.getPrototypeOf(o)) {
    const d = Object.getOwnPropertyDescriptor(o, name);
    if (d) return typeof d.value === 'function' && !isClass(d.value) ? (d.value as AnyFunction) : undefined;
  }
  return undefined;
}

/** Names of the public methods of `holder` and its prototypes, sorted. */
export function publicMethods(holder: object): string[] {
  const names = new Set<string>();
  for (let o: object | null = holder; !STOP.has(o); o = Object.getPrototypeOf(o)) {
    for (const name of Object.getOwnPropertyNames(o)) if (findMethod(holder, name)) names.add(name);
  }
  return [...names].sort();
}
