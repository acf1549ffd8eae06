/**
 * Operator code written in TypeScript (a plugin or driver named by path, a runner script, the
 * terminal's helpers) loads through tsx's loader, registered the first time such a file is
 * imported. The production build itself is JavaScript and never registers it; bin/hangar.mjs
 * registers the ES-module half when it runs hangar from its TypeScript sources.
 */
const REGISTERED = Symbol.for('hangar.tsx-registered');
const RUNNING_FROM = Symbol.for('hangar.running-from');

/** `build` when bin/hangar.mjs started the production build (dist/hangar), `sources` otherwise. */
export function runningFrom(): 'build' | 'sources' {
  return (globalThis as Record<symbol, unknown>)[RUNNING_FROM] === 'build' ? 'build' : 'sources';
}

type Flags = { esm?: Promise<void>; cjs?: Promise<void> };

function flags(): Flags {
  const holder = globalThis as unknown as Record<symbol, Flags | true | undefined>;
  // bin/hangar.mjs marks `true` when it registered the ES-module hook itself.
  if (holder[REGISTERED] === true) holder[REGISTERED] = { esm: Promise.resolve() };
  return (holder[REGISTERED] ??= {}) as Flags;
}

export function isTypeScriptFile(file: string): boolean {
  return /\.(c|m)?tsx?$/.test(file);
}

/**
 * Registers tsx for ES modules and CommonJS (a `.ts` file outside a `"type": "module"` package is
 * CommonJS to tsx), once per process.
 */
export async function enableTypeScript(): Promise<void> {
  const f = flags();
  f.esm ??= import('tsx/esm/api').then(({ register }) => void register());
  f.cjs ??= import('tsx/cjs/api').then(({ register }) => void register());
  await Promise.all([f.esm, f.cjs]);
}

/** `import()` of a file URL or path, with tsx first when the file is TypeScript. */
export async function importFile(url: string): Promise<Record<string, unknown>> {
  if (isTypeScriptFile(url)) await enableTypeScript();
  return (await import(url)) as Record<string, unknown>;
}
