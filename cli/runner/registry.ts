import { Clock, Config, Hangar, Runner, Store, type MethodDocs } from './builtins.js';
import { usageError } from './errors.js';
import type { RunnerContext } from './context.js';
import { publicMethods } from './introspect.js';

/** A class `hangar run` and `hangar terminal` expose by name. */
export interface ClassEntry {
  name: string;
  summary: string;
  /** Constructed with the runner context as its only argument. */
  cls: new (ctx: RunnerContext) => object;
  /** The exposed methods with their documentation; when absent, every public method is exposed. */
  methods?: MethodDocs;
  /** `builtin`, or where a `--bootstrap` module registered it. */
  origin: string;
}

interface Documented {
  summary?: string;
  methods?: MethodDocs;
}

const NAME = /^[A-Za-z_$][\w$]*$/;

/**
 * The classes the runner exposes by name (docs/runner.md, "Registry"). The built-ins are listed in
 * {@link builtinRegistry}; a `--bootstrap` module can add its own with `registry.add()`.
 */
export class ClassRegistry {
  private readonly entries = new Map<string, ClassEntry>();

  /** Registers a class; `summary` and `methods` default to the class's static fields of those names. */
  add(name: string, cls: new (ctx: RunnerContext) => object, summary?: string, origin = 'bootstrap'): this {
    if (!NAME.test(name)) throw usageError(`registry: "${name}" is not a valid class name (letters, digits, _ and $)`);
    if (typeof cls !== 'function') throw usageError(`registry: ${name} must be a class`);
    const documented = cls as unknown as Documented;
    this.entries.set(name, {
      name,
      cls,
      summary: summary ?? documented.summary ?? '',
      methods: origin === 'builtin' ? documented.methods : undefined,
      origin,
    });
    return this;
  }

  get(name: string): ClassEntry | undefined {
    return this.entries.get(name);
  }

  names(): string[] {
    return [...this.entries.keys()];
  }

  list(): ClassEntry[] {
    return [...this.entries.values()];
  }
}

/** Runner, Clock, Config, Store and Hangar (cli/runner/builtins.ts). */
export function builtinRegistry(): ClassRegistry {
  return new ClassRegistry()
    .add('Runner', Runner, undefined, 'builtin')
    .add('Clock', Clock, undefined, 'builtin')
    .add('Config', Config, undefined, 'builtin')
    .add('Store', Store, undefined, 'builtin')
    .add('Hangar', Hangar, undefined, 'builtin');
}

/** The registry as text (`hangar run --list`, `help()` in the terminal). */
export function describeRegistry(registry: ClassRegistry): string {
  const lines: string[] = [];
  for (const entry of registry.list()) {
    lines.push(`${entry.name}${entry.summary ? ` — ${entry.summary}` : ''}${entry.origin === 'builtin' ? '' : ` (${entry.origin})`}`);
    if (entry.methods) {
      for (const [name, doc] of Object.entries(entry.methods)) lines.push(`  ${entry.name}::${name}(${doc.signature})  ${doc.summary}`);
    } else {
      const names = [...publicMethods(entry.cls), ...publicMethods(entry.cls.prototype as object)];
      for (const name of names) lines.push(`  ${entry.name}::${name}`);
    }
  }
  return lines.join('\n');
}
