import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { convertArg, PARAM_TYPES, type ParamType } from './args.js';
import type { RunnerContext } from './context.js';
import { usageError } from './errors.js';
import { arity, findMethod, parseParams, publicMethods, type AnyFunction, type ParamInfo } from './introspect.js';
import type { ClassRegistry } from './registry.js';
import { importFile } from '../../core/typescript.js';

/** `Class::method` or `path/to/module.js#Class::method`, taken apart. */
export interface MethodSpec {
  /** What the operator wrote before `::`. */
  owner: string;
  method: string;
  /** For operator code: the module path and the export (`default` for the default export). */
  module?: string;
  exportName?: string;
}

const IDENT = /^[A-Za-z_$][\w$]*$/;

export function parseSpec(spec: string): MethodSpec {
  const at = spec.lastIndexOf('::');
  if (at <= 0 || at === spec.length - 2) {
    throw usageError(`"${spec}" is not Class::method (or path/to/module.js#Class::method)`);
  }
  const owner = spec.slice(0, at);
  const method = spec.slice(at + 2);
  if (!IDENT.test(method)) throw usageError(`"${method}" is not a method name`);
  const hash = owner.lastIndexOf('#');
  if (hash >= 0) {
    const module = owner.slice(0, hash);
    const exportName = owner.slice(hash + 1);
    if (!module) throw usageError(`"${spec}": name the module before # (path/to/module.js#Class::method)`);
    if (!IDENT.test(exportName)) throw usageError(`"${spec}": "${exportName}" after # is not an export name`);
    return { owner, method, module, exportName };
  }
  if (!IDENT.test(owner)) {
    throw usageError(`"${owner}" is not a class name; for your own code name the export too: path/to/module.js#Class::${method}`);
  }
  return { owner, method };
}

/** A method ready to be called: its parameters, arity and argument types. */
export interface Target {
  label: string;
  params: ParamInfo[] | null;
  min: number;
  max: number;
  types: ParamType[];
  call(args: unknown[]): Promise<unknown>;
}

function validTypes(value: unknown, where: string): ParamType[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((t) => !PARAM_TYPES.includes(t as ParamType))) {
    throw usageError(`${where} must be an array of ${PARAM_TYPES.join(' | ')}`);
  }
  return value as ParamType[];
}

function target(label: string, fn: AnyFunction, types: ParamType[], thisArg: () => unknown): Target {
  const params = parseParams(fn);
  const { min, max } = arity(params, fn);
  return {
    label,
    params,
    min,
    max,
    types,
    async call(args) {
      return await fn.apply(thisArg(), args);
    },
  };
}

function unknownMethod(label: string, method: string, available: string[]): Error {
  return usageError(`${label} has no public method "${method}"; its methods: ${available.join(', ') || '(none)'}`);
}

/** A CommonJS module's namespace has only `default` (module.exports): spread it so its exports are named. */
function namedExports(mod: Record<string, unknown>): Record<string, unknown> {
  const def = mod.default;
  const onlyDefault = Object.keys(mod).every((k) => k === 'default' || k === 'module.exports');
  if (onlyDefault && def && typeof def === 'object') {
    const { __esModule: _marker, ...named } = def as Record<string, unknown>;
    return { ...named, default: named.default ?? def };
  }
  return mod;
}

/** Loads an operator module (relative paths against the working directory, i.e. --rootdir). */
export async function importOperatorModule(file: string, what: string): Promise<Record<string, unknown>> {
  const absolute = path.resolve(file);
  if (!existsSync(absolute)) throw usageError(`${what} ${file} does not exist (looked at ${absolute})`);
  try {
    return namedExports(await importFile(pathToFileURL(absolute).href));
  } catch (err) {
    throw usageError(`cannot load ${what} ${file}: ${(err as Error).message}`);
  }
}

/**
 * Finds the method a spec names. Registered classes are constructed with the runner context and
 * expose their documented methods. Operator exports: a static method is called on the class; else
 * an instance method on `new Class(context)`; a plain exported object has its methods called directly.
 */
export async function resolveTarget(spec: string, registry: ClassRegistry, ctx: RunnerContext): Promise<Target> {
  const parsed = parseSpec(spec);
  const label = `${parsed.owner}::${parsed.method}`;
  if (!parsed.module) {
    const entry = registry.get(parsed.owner);
    if (!entry) {
      throw usageError(
        `unknown class "${parsed.owner}"; registered classes: ${registry.names().join(', ')} ` +
          `(hangar run --list shows their methods; for your own code use path/to/module.js#Class::method)`,
      );
    }
    if (entry.methods) {
      const doc = Object.hasOwn(entry.methods, parsed.method) ? entry.methods[parsed.method] : undefined;
      if (!doc) throw unknownMethod(entry.name, parsed.method, Object.keys(entry.methods));
      const fn = findMethod(entry.cls.prototype as object, parsed.method);
      if (!fn) throw unknownMethod(entry.name, parsed.method, Object.keys(entry.methods));
      let instance: object | undefined;
      return target(label, fn, doc.types ?? [], () => (instance ??= new entry.cls(ctx)));
    }
    return resolveExport(label, parsed.method, entry.cls, ctx);
  }
  const mod = await importOperatorModule(parsed.module, 'module');
  if (!(parsed.exportName! in mod)) {
    const exported = Object.keys(mod).filter((k) => k !== '__esModule');
    throw usageError(`module ${parsed.module} has no export "${parsed.exportName}"; it exports: ${exported.join(', ') || '(nothing)'}`);
  }
  return resolveExport(label, parsed.method, mod[parsed.exportName!], ctx);
}

function resolveExport(label: string, method: string, value: unknown, ctx: RunnerContext): Target {
  const owner = label.slice(0, label.lastIndexOf('::'));
  if (typeof value === 'function') {
    const cls = value as (new (ctx: RunnerContext) => object) & { runnerParams?: Record<string, unknown> };
    const types = validTypes(cls.runnerParams?.[method], `${owner}.runnerParams.${method}`);
    const staticFn = findMethod(cls, method);
    if (staticFn) return target(label, staticFn, types, () => cls);
    const proto = cls.prototype as object | undefined;
    const instanceFn = proto ? findMethod(proto, method) : undefined;
    if (instanceFn) {
      let instance: object | undefined;
      return target(label, instanceFn, types, () => (instance ??= new cls(ctx)));
    }
    throw unknownMethod(owner, method, [...publicMethods(cls), ...(proto ? publicMethods(proto) : [])]);
  }
  if (value && typeof value === 'object') {
    const holder = value as Record<string, unknown>;
    const types = validTypes((holder.runnerParams as Record<string, unknown> | undefined)?.[method], `${owner}.runnerParams.${method}`);
    const fn = findMethod(holder, method);
    if (fn) return target(label, fn, types, () => holder);
    throw unknownMethod(owner, method, publicMethods(holder));
  }
  throw usageError(`${owner} is not a class or an object (it is ${value === null ? 'null' : typeof value})`);
}

function describeParams(t: Target): string {
  return t.params ? t.params.map((p) => (p.rest ? `...${p.name}` : p.optional ? `${p.name}?` : p.name)).join(', ') : '';
}

/** Refuses too few or too many arguments, naming the parameters. */
export function checkArity(t: Target, given: number): void {
  if (given >= t.min && given <= t.max) return;
  const params = describeParams(t);
  const plural = (n: number) => `${n} argument${n === 1 ? '' : 's'}`;
  let expected: string;
  if (t.max === 0) expected = 'takes no arguments';
  else if (t.min === t.max) expected = `takes ${plural(t.min)}`;
  else if (given < t.min) expected = `takes at least ${plural(t.min)}`;
  else expected = `takes at most ${plural(t.max)}`;
  throw usageError(`wrong number of arguments: ${t.label}(${params}) ${expected}, ${given} given`);
}

/** Converts the raw `--arg` strings for the target's parameters (see args.ts). */
export function convertArgs(t: Target, raw: string[]): unknown[] {
  const restIndex = t.params?.findIndex((p) => p.rest) ?? -1;
  return raw.map((text, i) => {
    const type = t.types[i] ?? (restIndex >= 0 && i >= restIndex ? t.types[t.types.length - 1] : undefined) ?? 'auto';
    const param = t.params?.[restIndex >= 0 && i >= restIndex ? restIndex : i];
    return convertArg(text, type, `argument ${i + 1}${param ? ` (${param.name})` : ''} of ${t.label}`);
  });
}

/**
 * A `--bootstrap` module: imported before the class is looked up. When it exports `register`
 * (or a default function), that is called with the registry so it can add classes.
 */
export async function loadBootstrap(file: string, registry: ClassRegistry, ctx: RunnerContext): Promise<void> {
  const mod = await importOperatorModule(file, 'bootstrap file');
  const register = (mod.register ?? mod.default) as ((r: ClassRegistry, c: RunnerContext) => unknown) | undefined;
  if (typeof register === 'function') await register(registry, ctx);
}
