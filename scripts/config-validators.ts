// Build-time only (scripts/build.mjs bundles and runs it): the module that replaces
// core/precompiled-validators.ts in the production build — Ajv's standalone code for the core's
// configuration section and every built-in plugin's, each exported under its schema's key.
import { _ } from 'ajv/dist/2020.js';
import standaloneCodeModule from 'ajv/dist/standalone/index.js';
import { CoreConfigSchema } from '../config/schema.js';
import { configSchemaKey, createConfigAjv } from '../core/config.js';
import { builtinPlugins } from '../plugins/index.js';

// ajv's standalone module is CommonJS; its default export is the function under ESM interop.
const standaloneCode = ((standaloneCodeModule as unknown as { default?: unknown }).default ?? standaloneCodeModule) as (ajv: unknown, refs: Record<string, string>) => string;

export async function configValidatorsModule(): Promise<{ source: string; sections: number }> {
  const plugins = await Promise.all(Object.values(builtinPlugins).map(async (load) => (await load()).default));
  const schemas = [CoreConfigSchema, ...plugins.flatMap((p) => (p.configSchema ? [p.configSchema] : []))];
  // Formats come from ajv-formats at run time, as createAjv adds them.
  const ajv = createConfigAjv({ source: true, esm: true, formats: _`require("ajv-formats/dist/formats").fullFormats` });
  const exported: Record<string, string> = {};
  for (const schema of schemas) {
    const key = configSchemaKey(schema);
    if (exported[`v${key}`]) continue;
    ajv.addSchema(schema as object, key);
    exported[`v${key}`] = key;
  }
  const table = Object.entries(exported).map(([name, key]) => `  ${JSON.stringify(key)}: ${name},`).join('\n');
  return { source: `${standaloneCode(ajv, exported)}\nexport const precompiledConfigValidators = {\n${table}\n};\n`, sections: schemas.length };
}
