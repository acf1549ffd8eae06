import type { ValidateFunction } from 'ajv/dist/2020.js';

/**
 * The configuration sections' validators, compiled ahead of time, by configSchemaKey(schema)
 * (core/config.ts). Run from the sources there are none and each section is compiled at start; the
 * production build (scripts/build.mjs) puts Ajv's standalone code for the core's and every built-in
 * plugin's section in place of this module, which takes ~70 ms off a start. A schema changed since
 * the build has another key and is compiled at start as before.
 */
export const precompiledConfigValidators: Record<string, ValidateFunction> = {};
