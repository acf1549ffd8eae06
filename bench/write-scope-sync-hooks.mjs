// Module hooks for bench/write-scope-als.ts (registered by write-scope-sync.mjs): core/db/write-scope.ts
// is loaded changed. `sync`: its AsyncLocalStorage replaced by a variable set around the handler, so
// that the process never enables async hooks; the scope is exact while writes run one at a time (as
// the benchmark sends them), and requests without a write scope (reads) are unaffected at any
// concurrency. `always-on`: the storage stays enabled once a write enabled it.
const SYNC = `
function syncScopes() {
  let current;
  return {
    run(store, fn) {
      const previous = current;
      current = store;
      const restore = () => { current = previous; };
      try {
        const result = fn();
        if (result && typeof result.then === 'function') return Promise.resolve(result).finally(restore);
        restore();
        return result;
      } catch (err) {
        restore();
        throw err;
      }
    },
    getStore: () => current,
    disable() {},
  };
}
`;

/**
 * HANGAR_BENCH_WRITE_SCOPE=sync (the default): no AsyncLocalStorage at all; `always-on`: the
 * AsyncLocalStorage is never disabled once enabled (as before the write scope disabled it when idle).
 */
const variant = process.env.HANGAR_BENCH_WRITE_SCOPE ?? 'sync';

export async function load(url, context, nextLoad) {
  const result = await nextLoad(url, context);
  if (!url.endsWith('/core/db/write-scope.ts')) return result;
  const source = String(result.source);
  const replaced =
    variant === 'always-on'
      ? source.replace(/\bscopes\.disable\(\);?/, 'void 0; /* kept enabled */')
      : source.replace(/new AsyncLocalStorage(<[^>()]*>)?\(\)/, 'syncScopes()') + `\n${SYNC}`;
  if (replaced === source) throw new Error(`bench: nothing to replace in core/db/write-scope.ts for ${variant}`);
  process.stderr.write(`bench: core/db/write-scope.ts loaded as ${variant}\n`);
  return { ...result, source: replaced };
}
