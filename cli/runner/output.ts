import { inspect } from 'node:util';

/**
 * How `run` prints a return value: nothing for undefined, strings as they are, everything else as
 * pretty JSON (bigints as strings, Buffers as base64 strings, Maps and Sets as objects and arrays).
 */
export function formatResult(value: unknown): string | null {
  if (value === undefined) return null;
  if (typeof value === 'string') return value;
  return JSON.stringify(value, jsonReplacer, 2) ?? inspect(value);
}

export function jsonReplacer(this: unknown, key: string, value: unknown): unknown {
  const original = (this as Record<string, unknown> | undefined)?.[key];
  if (typeof value === 'bigint') return value.toString();
  if (Buffer.isBuffer(original)) return original.toString('base64');
  if (value instanceof Map) return Object.fromEntries(value);
  if (value instanceof Set) return [...value];
  return value;
}

/** One table cell: NULL for null, ISO for dates, hex for binary, JSON for objects. */
export function cellText(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (value instanceof Date) return value.toISOString();
  if (Buffer.isBuffer(value)) return `0x${value.toString('hex')}`;
  if (value instanceof Uint8Array) return `0x${Buffer.from(value).toString('hex')}`;
  if (typeof value === 'object') return JSON.stringify(value, jsonReplacer);
  return String(value).replace(/\r?\n/g, '\\n');
}

/** Rows as an aligned text table (columns in first-seen order), plus a row count line. */
export function renderTable(rows: Array<Record<string, unknown>>): string {
  const columns: string[] = [];
  for (const row of rows) for (const key of Object.keys(row)) if (!columns.includes(key)) columns.push(key);
  const count = `(${rows.length} row${rows.length === 1 ? '' : 's'})`;
  if (!columns.length) return count;
  const cells = rows.map((row) => columns.map((c) => cellText(row[c])));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join(' | ')
      .trimEnd();
  return [line(columns), widths.map((w) => '-'.repeat(w)).join('-+-'), ...cells.map(line), count].join('\n');
}
