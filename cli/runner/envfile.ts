import { readFileSync } from 'node:fs';

/**
 * Environment files (`/etc/hangar/<name>.env`): one `KEY="value"` per line, readable both by
 * systemd's EnvironmentFile= and by `set -a; . file` in sh. Inside the double quotes `\`, `"`, `$`
 * and `` ` `` are backslash-escaped, which both read back as the character itself.
 */
export function quoteEnvValue(value: string): string {
  return `"${value.replace(/[\\"$`]/g, (c) => `\\${c}`)}"`;
}

export function renderEnvFile(name: string, env: Record<string, string>): string {
  const lines = [
    `# hangar service ${name}: environment given at install time (hangar install --env KEY=VALUE).`,
    '# Loaded when the service starts. Edit it and restart the service to change it.',
    ...Object.entries(env).map(([k, v]) => `${k}=${quoteEnvValue(v)}`),
  ];
  return `${lines.join('\n')}\n`;
}

/** Reads an env file back (the format above, plus unquoted and single-quoted values and `export `). */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (!m) continue;
    const [, key, rest] = m as unknown as [string, string, string];
    let value = rest;
    if (rest.startsWith('"') && rest.endsWith('"') && rest.length >= 2) {
      value = rest.slice(1, -1).replace(/\\([\\"$`])/g, '$1');
    } else if (rest.startsWith("'") && rest.endsWith("'") && rest.length >= 2) {
      value = rest.slice(1, -1);
    }
    out[key] = value;
  }
  return out;
}

export function readEnvFile(file: string): Record<string, string> {
  return parseEnvFile(readFileSync(file, 'utf8'));
}
