/**
 * Project helpers for `hangar terminal` (docs/runner.md, "Terminal").
 *
 * This script runs once, before the prompt appears. Its default export receives the terminal's
 * globals (executor, qq, services, …) and returns more of them; its other exports become globals as
 * they are. It is loaded once per terminal: after changing it, restart the terminal.
 *
 * Another script can be used instead: `terminal.helpers` in the configuration
 * (HANGAR_TERMINAL__HELPERS), or `hangar terminal --helpers FILE`; `--no-helpers` skips it.
 */
import type { TerminalGlobals } from '../cli/runner/terminal.js';

export default function helpers(t: TerminalGlobals) {
  return {
    /** Prints hangar's tables with their row counts. */
    async tables(): Promise<void> {
      const names = (await t.run('Store::tables')) as string[];
      const rows = [];
      for (const name of names) rows.push({ table: name, rows: await t.run('Store::count', name) });
      t.dump(rows);
    },
    /** Prints the applied migrations as a table. */
    migrations: () => t.qq('select id, applied_at from hangar_migrations order by applied_at, id'),
  };
}
