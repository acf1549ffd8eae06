export interface DiffLine {
  op: ' ' | '-' | '+';
  text: string;
}

/** A line diff (longest common subsequence), enough for a compose file before it is applied. */
export function lineDiff(before: string, after: string): DiffLine[] {
  const a = before.split('\n');
  const b = after.split('\n');
  const lcs = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--) lcs[i]![j] = a[i] === b[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push({ op: ' ', text: a[i]! });
      i++;
      j++;
    } else if (lcs[i + 1]![j]! >= lcs[i]![j + 1]!) out.push({ op: '-', text: a[i++]! });
    else out.push({ op: '+', text: b[j++]! });
  }
  while (i < a.length) out.push({ op: '-', text: a[i++]! });
  while (j < b.length) out.push({ op: '+', text: b[j++]! });
  return out;
}

/** One changed JSON path of a revision (GET …/revisions: `changes`). */
export interface SpecChange {
  path: string;
  old: unknown;
  new: unknown;
}

/** A revision's changes as diff lines: `- env.MODE: "a"`, `+ env.MODE: "b"` (a side that has none shows no line). */
export function changeLines(changes: SpecChange[]): DiffLine[] {
  return changes.flatMap((c) => [
    ...(c.old === null ? [] : [{ op: '-' as const, text: `${c.path}: ${JSON.stringify(c.old)}` }]),
    ...(c.new === null ? [] : [{ op: '+' as const, text: `${c.path}: ${JSON.stringify(c.new)}` }]),
  ]);
}
