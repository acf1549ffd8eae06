import type { ValidateFunction } from 'ajv';
import type { HttpResponse } from '../../core/http/client.js';
import { buildOpenApi } from '../../core/openapi.js';
import type { ListenerName, RegisteredRoute } from '../../core/plugin.js';
import { createAjv } from '../../core/validation.js';

type Json = Record<string, any>;

/** `/v1/nodes/{id}` → a pattern matching the concrete paths of that template. */
function templatePattern(template: string): RegExp {
  return new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{\w+\}/g, '[^/]+')}$`);
}

const pointer = (...tokens: string[]) => tokens.map((t) => encodeURIComponent(t.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/');

/**
 * Checks answers against the OpenAPI document the control plane serves: the status is one the
 * operation documents, the content type is the documented one, and the body validates against the
 * documented schema. Every request a test makes through `TestHangar.request` goes through it, so
 * the whole suite compares real answers with the document; what does not match is collected and
 * reported when the control plane stops.
 */
export class OpenApiConformance {
  /** What did not match, once per operation, status and kind of mismatch, with an example. */
  readonly violations = new Map<string, string>();
  private readonly ajv = createAjv();
  private readonly docs = new Map<ListenerName, Json>();
  private readonly validators = new Map<string, ValidateFunction | null>();

  constructor(private readonly routes: () => readonly RegisteredRoute[]) {}

  private doc(listener: ListenerName): Json {
    let doc = this.docs.get(listener);
    if (!doc) {
      doc = buildOpenApi(this.routes(), listener, '0.0.0');
      this.ajv.addSchema(doc, `openapi-${listener}`);
      this.docs.set(listener, doc);
    }
    return doc;
  }

  /** The operation a request reached: the matching template with the most literal segments. */
  private operation(doc: Json, method: string, path: string): { template: string; op: Json } | null {
    const candidates = Object.keys(doc.paths)
      .filter((template) => doc.paths[template][method] && templatePattern(template).test(path))
      .sort((a, b) => (b.match(/\/[^{/][^/]*/g)?.length ?? 0) - (a.match(/\/[^{/][^/]*/g)?.length ?? 0));
    return candidates.length ? { template: candidates[0]!, op: doc.paths[candidates[0]!][method] } : null;
  }

  private validator(listener: ListenerName, template: string, method: string, status: string, type: string): ValidateFunction | null {
    const key = `${listener} ${method} ${template} ${status} ${type}`;
    if (!this.validators.has(key)) {
      const ref = `openapi-${listener}#/${pointer('paths', template, method, 'responses', status, 'content', type, 'schema')}`;
      this.validators.set(key, this.ajv.getSchema(ref) ?? null);
    }
    return this.validators.get(key)!;
  }

  check(listener: ListenerName, requestMethod: string, pathAndQuery: string, res: HttpResponse): void {
    const method = (requestMethod === 'HEAD' ? 'GET' : requestMethod).toLowerCase();
    const path = pathAndQuery.split('?')[0]!;
    const doc = this.doc(listener);
    const found = this.operation(doc, method, path);
    // Unknown routes (404) and methods (405) are the router's answers, not an operation's.
    if (!found) return;
    const { template, op } = found;
    const where = `${listener} ${method.toUpperCase()} ${template}`;
    const note = (kind: string, message: string) => {
      const key = `${where} ${res.status} ${kind}`;
      if (!this.violations.has(key)) this.violations.set(key, `${where} (e.g. ${requestMethod} ${pathAndQuery}) ${message}`);
    };
    const documented = op.responses[String(res.status)];
    if (!documented) {
      note('status', `answered ${res.status}, which the document does not list (it lists ${Object.keys(op.responses).join(', ')}): ${res.text.slice(0, 160)}`);
      return;
    }
    if (requestMethod === 'HEAD') return;
    const content = documented.content as Json | undefined;
    const type = String(res.headers['content-type'] ?? '').split(';')[0]!.trim();
    if (!content) {
      if (res.raw.length) note('body', `answered ${res.status} with a body, documented without one`);
      return;
    }
    if (!content[type]) {
      note('type', `answered ${res.status} as ${type || 'no content type'}, documented as ${Object.keys(content).join(', ')}`);
      return;
    }
    if (type !== 'application/json') return;
    const validate = this.validator(listener, template, method, String(res.status), type);
    if (validate && !validate(res.json)) {
      const errors = (validate.errors ?? []).slice(0, 3).map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ');
      note('schema', `answered ${res.status} with a body the document does not describe: ${errors}: ${res.text.slice(0, 160)}`);
    }
  }

  /** Throws, listing every answer that did not match the document. */
  assertConforming(): void {
    if (!this.violations.size) return;
    const found = [...this.violations.values()];
    throw new Error(`${found.length} kind(s) of answer did not match the OpenAPI document:\n  ${found.join('\n  ')}`);
  }
}
