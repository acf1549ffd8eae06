import { Type } from '@sinclair/typebox';
import { Ajv2020, type CodeOptions, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { badRequest, type ErrorDetail } from './errors.js';

// ajv-formats ships CommonJS; its default export is the function under ESM interop.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

export type JsonSchema = Record<string, unknown>;

/** A schema that also takes null (a TypeBox union with Type.Null()). */
export const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);

/**
 * An Ajv for hangar's schemas. They are built in code (TypeBox) and checked as a whole by the
 * OpenAPI document's test, so Ajv does not check each against the JSON Schema meta-schema: compiling
 * the 2020-12 meta-schema was a tenth of start-up. `oneOff` is for a schema validated once (a
 * configuration section): its code is not optimised, which halves the time to compile it.
 */
export function createAjv(options: { coerceTypes?: boolean | 'array'; useDefaults?: boolean; oneOff?: boolean; code?: CodeOptions } = {}): Ajv2020 {
  const ajv = new Ajv2020({
    allErrors: true,
    strict: false,
    validateSchema: false,
    coerceTypes: options.coerceTypes ?? false,
    useDefaults: options.useDefaults ?? false,
    code: { ...(options.oneOff ? { optimize: false } : {}), ...options.code },
  });
  addFormats(ajv);
  return ajv;
}

/** Turns ajv errors into `[{path, message}]`, with `where` as the root ("body", "query", "config"…). */
export function describeErrors(errors: ErrorObject[] | null | undefined, where: string): ErrorDetail[] {
  const details: ErrorDetail[] = [];
  const seen = new Set<string>();
  for (const error of errors ?? []) {
    let pointer = error.instancePath;
    let message = error.message ?? 'is invalid';
    if (error.keyword === 'required') {
      pointer += `/${(error.params as { missingProperty: string }).missingProperty}`;
      message = 'is required';
    } else if (error.keyword === 'additionalProperties') {
      pointer += `/${(error.params as { additionalProperty: string }).additionalProperty.replace(/~/g, '~0').replace(/\//g, '~1')}`;
      message = 'is not an allowed property';
    } else if (error.keyword === 'enum') {
      message = `must be one of: ${(error.params as { allowedValues: unknown[] }).allowedValues.map(String).join(', ')}`;
    } else if (error.keyword === 'const') {
      const allowed = (errors ?? [])
        .filter((e) => e.keyword === 'const' && e.instancePath === error.instancePath)
        .map((e) => String((e.params as { allowedValue: unknown }).allowedValue));
      message = allowed.length > 1 ? `must be one of: ${allowed.join(', ')}` : `must be ${allowed[0]}`;
    } else if (error.keyword === 'anyOf' || error.keyword === 'oneOf') {
      // The branch errors already say what is wrong; the summary adds nothing.
      if (details.some((d) => d.path.startsWith(dotted(where, pointer)))) continue;
    }
    const path = dotted(where, pointer);
    const key = `${path}|${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    details.push({ path, message, keyword: error.keyword });
  }
  // In a nullable union the null branch's "must be null" only restates that the value is not null.
  return details.filter(
    (d) => !(d.keyword === 'type' && d.message === 'must be null' && details.some((o) => o !== d && o.path === d.path)),
  );
}

/** A property name the client chose, as error messages may show it: a name (`ssh_key`, `x-y`), or `(a name not shown)`. */
const NAME = /^[A-Za-z_$@][\w$@-]{0,63}$/;

/**
 * A property name as an error path shows it. Names come from the client: a JSON body sent as a
 * form had its whole text (a password in it) taken for one name, which the 400 then repeated. An
 * error names the field and the rule, never a value: a name that does not look like one is not shown.
 */
export function namePart(name: string): string {
  return NAME.test(name) ? name : '(a name not shown)';
}

function dotted(where: string, pointer: string): string {
  const parts = pointer
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  let out = where;
  for (const part of parts) out += /^\d+$/.test(part) ? `[${part}]` : `${out ? '.' : ''}${namePart(part)}`;
  return out;
}

export function validationMessage(details: ErrorDetail[]): string {
  return `Validation failed: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`;
}

/** Throws the API's 400 when `validate` rejects `value`. */
export function assertValid(validate: ValidateFunction, value: unknown, where: string): void {
  if (validate(value)) return;
  const details = describeErrors(validate.errors, where);
  throw badRequest(validationMessage(details), details);
}

/** The parts of a JSON schema these walks read (any other keyword is carried along as it is). */
export interface JsonSchemaNode {
  type?: unknown;
  const?: unknown;
  enum?: unknown;
  anyOf?: JsonSchemaNode[];
  oneOf?: JsonSchemaNode[];
  allOf?: JsonSchemaNode[];
  items?: JsonSchemaNode;
  properties?: Record<string, JsonSchemaNode>;
  required?: string[];
  [keyword: string]: unknown;
}
type SchemaNode = JsonSchemaNode | undefined;

/** Whether a JSON schema accepts `null`. */
export function allowsNull(schema: SchemaNode): boolean {
  if (!schema) return false;
  if (schema.type === 'null' || (Array.isArray(schema.type) && schema.type.includes('null'))) return true;
  if (schema.const === null || (Array.isArray(schema.enum) && schema.enum.includes(null))) return true;
  return [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])].some((branch: SchemaNode) => allowsNull(branch));
}

/** The branch of a union that describes an object (or an array) value, for walking into it. */
function branchFor(schema: SchemaNode, value: object): SchemaNode {
  if (!schema?.anyOf && !schema?.oneOf) return schema;
  const want = Array.isArray(value) ? 'array' : 'object';
  return [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])].find((b: SchemaNode) => b?.type === want || (want === 'object' && b?.properties));
}

/**
 * Removes properties whose value is null, recursively through nested objects and the objects in
 * arrays (not array slots), except where the schema allows null for that property: there null is
 * a value (clear this field). Without a schema for a part, every null property in it goes.
 */
export function dropNulls(value: unknown, schema?: SchemaNode): unknown {
  if (Array.isArray(value)) {
    const items = branchFor(schema, value)?.items;
    return value.map((v) => dropNulls(v, items));
  }
  if (value && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const properties = branchFor(schema, value)?.properties;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      if (v === null) {
        if (allowsNull(properties?.[k])) out[k] = null;
      } else out[k] = dropNulls(v, properties?.[k]);
    }
    return out;
  }
  return value;
}

/**
 * A body schema as clients may use it when nulls are dropped: an optional property also accepts
 * null (it counts as absent). For the OpenAPI document; validation uses the schema as declared.
 */
export function nullableOptionals(schema: SchemaNode): SchemaNode {
  if (!schema || typeof schema !== 'object') return schema;
  const out: JsonSchemaNode = { ...schema };
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const branches = out[key];
    if (Array.isArray(branches)) out[key] = branches.map((b) => nullableOptionals(b) ?? b);
  }
  if (out.items) out.items = nullableOptionals(out.items);
  if (out.properties) {
    const required = new Set<string>(out.required ?? []);
    out.properties = Object.fromEntries(
      Object.entries(out.properties).map(([name, sub]) => {
        const walked = nullableOptionals(sub) ?? sub;
        return [name, required.has(name) || allowsNull(walked) ? walked : { anyOf: [walked, { type: 'null', description: 'the same as leaving the property out' }] }];
      }),
    );
  }
  return out;
}
