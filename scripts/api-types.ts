/**
 * Writes web/src/api.gen.ts: the TypeScript types of the control API as the OpenAPI document
 * (core/openapi.ts) describes it, for the dashboard. The document is built from the route table of
 * every built-in plugin, assembled (not served) on a throw-away SQLite store: no network, nothing
 * fetched. Run by scripts/build-ui.mjs (npm run build, npm run typecheck); the output is not committed.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { assembleServices } from '../core/assembly.js';
import { loadConfig } from '../core/config.js';
import { openStore } from '../core/db/store.js';
import { createLogger } from '../core/log.js';
import { buildOpenApi } from '../core/openapi.js';
import { KINDS } from '../core/auth/permissions.js';
import { builtinCatalogue } from '../cli/catalogue.js';
import { versionInfo } from '../core/version.js';

type Schema = Record<string, any>;

const ident = (name: string) => (/^[A-Za-z_$][\w$]*$/.test(name) ? name : JSON.stringify(name));

/** A JSON Schema (as TypeBox emits it) as a TypeScript type. */
export function tsType(schema: Schema | undefined, indent = ''): string {
  if (!schema || Object.keys(schema).length === 0) return 'unknown';
  if ('const' in schema) return JSON.stringify(schema.const);
  if (Array.isArray(schema.enum)) return schema.enum.map((v: unknown) => JSON.stringify(v)).join(' | ');
  const union = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(union)) return union.map((s: Schema) => tsType(s, indent)).join(' | ');
  if (Array.isArray(schema.allOf)) return schema.allOf.map((s: Schema) => tsType(s, indent)).join(' & ');
  if (Array.isArray(schema.type)) return schema.type.map((type: string) => tsType({ ...schema, type }, indent)).join(' | ');
  switch (schema.type) {
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return `Array<${tsType(schema.items, indent)}>`;
    case 'object': {
      const props = Object.entries((schema.properties ?? {}) as Record<string, Schema>);
      const required = new Set<string>(schema.required ?? []);
      const inner = `${indent}  `;
      const lines = props.map(([k, v]) => `${inner}${ident(k)}${required.has(k) ? '' : '?'}: ${tsType(v, inner)};`);
      const extra = schema.patternProperties ? Object.values(schema.patternProperties as Record<string, Schema>)[0] : schema.additionalProperties;
      if (extra && typeof extra === 'object') lines.push(`${inner}[key: string]: ${tsType(extra, inner)};`);
      else if (!props.length && extra !== false) return 'Record<string, unknown>';
      return `{\n${lines.join('\n')}\n${indent}}`;
    }
    default:
      return 'unknown';
  }
}

async function main(out: string): Promise<void> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-api-types-'));
  const config = loadConfig({ env: { NODE_ENV: 'test' }, dataDir, overrides: { plugins: Object.keys(builtinCatalogue.plugins), log: { level: 'silent' } } });
  const store = await openStore(config);
  try {
    const assembly = await assembleServices(config, store, { log: createLogger('silent'), serving: false, catalogue: builtinCatalogue });
    const doc = buildOpenApi(assembly.routes, 'control', versionInfo.version) as { paths: Record<string, Record<string, Schema>> };
    await assembly.close();
    const entries: string[] = [];
    /** What the dashboard asks of an operation: its permission, and whether the project switcher narrows it (a list's `?project=`) or fills it in (a create's `project_id`). */
    const permissions: string[] = [];
    const projectLists: string[] = [];
    const projectCreates: string[] = [];
    for (const [p, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const route = JSON.stringify(`${method.toUpperCase()} ${p}`);
        const params = (op.parameters ?? []) as Array<{ name: string; in: string; required: boolean; schema: Schema }>;
        const group = (where: string) => {
          const list = params.filter((x) => x.in === where);
          return list.length ? `{ ${list.map((x) => `${ident(x.name)}${x.required ? '' : '?'}: ${tsType(x.schema, '    ')}`).join('; ')} }` : 'Record<string, never>';
        };
        const success = Object.entries(op.responses as Record<string, Schema>).find(([status]) => status !== 'default')!;
        const data = success[1].content?.['application/json']?.schema?.properties?.data;
        const body = op.requestBody?.content?.['application/json']?.schema;
        permissions.push(`  ${route}: ${JSON.stringify(op['x-hangar-permission'])},`);
        if (method === 'get' && params.some((x) => x.in === 'query' && x.name === 'project')) projectLists.push(route);
        if (body?.properties?.project_id) projectCreates.push(route);
        entries.push(
          [
            `  /** ${String(op.summary).replace(/\*\//g, '*∕')} */`,
            `  ${route}: {`,
            `    params: ${group('path')};`,
            `    query: ${group('query')};`,
            `    body: ${body ? tsType(body, '    ') : 'undefined'};`,
            `    data: ${tsType(data, '    ')};`,
            `    status: ${success[0]};`,
            `  };`,
          ].join('\n'),
        );
      }
    }
    writeFileSync(
      out,
      `// Generated by scripts/api-types.ts from the control API's OpenAPI document (${versionInfo.version}). Do not edit; not committed.\n` +
        `\nexport interface Api {\n${entries.join('\n')}\n}\n\nexport type Route = keyof Api;\n` +
        `\n/** The permission each operation needs (its x-hangar-permission): the dashboard shows what the caller's roles grant. */\n` +
        `export const PERMISSIONS: Readonly<Record<Route, string>> = {\n${permissions.join('\n')}\n};\n` +
        `\n/** The kinds whose resources live in projects (core/auth/permissions.ts): a member's role in the project decides. */\n` +
        `export const PROJECT_KINDS: ReadonlySet<string> = new Set(${JSON.stringify(Object.keys(KINDS).filter((k) => KINDS[k]!.scope === 'project'))});\n` +
        `\n/** Lists that take ?project=: the project switcher narrows them. */\n` +
        `export const PROJECT_LISTS: ReadonlySet<Route> = new Set<Route>([${projectLists.join(', ')}]);\n` +
        `\n/** Creates that take project_id: the project switcher's project is their default. */\n` +
        `export const PROJECT_CREATES: ReadonlySet<Route> = new Set<Route>([${projectCreates.join(', ')}]);\n`,
    );
    console.log(`api-types: ${entries.length} operations → ${path.relative(process.cwd(), out)}`);
  } finally {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main(path.resolve(process.argv[2] ?? 'web/src/api.gen.ts'));
