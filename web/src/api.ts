import { PROJECT_CREATES, PROJECT_LISTS, type Api, type Route } from './api.gen';

/** An answer the API refused: its status, message, details (what each field's problem is) and request id, as the error body says. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly requestId?: string,
    readonly details: Array<{ path?: string; message?: string }> = [],
  ) {
    super(message);
  }
}

let csrfToken: string | null = null;
/** Called when an answer says the session is gone (401): the app shows the login screen. */
let onSignedOut: () => void = () => undefined;

/** The project the header's switcher chose (null: every project the caller sees). */
let project: string | null = null;

/** Narrows every list that takes `?project=` to a project, and makes it the default `project_id` of creates (null: no narrowing). */
export function narrowToProject(id: string | null): void {
  project = id;
}

export function useCsrf(token: string | null): void {
  csrfToken = token;
}
export function whenSignedOut(fn: () => void): void {
  onSignedOut = fn;
}
/** The session is gone (the live stream ended for it): the app shows the login screen. */
export function sessionEnded(): void {
  onSignedOut();
}

type Input<R extends Route> = { params?: Api[R]['params']; query?: Partial<Api[R]['query']> } & (Api[R]['body'] extends undefined ? { body?: undefined } : { body: Api[R]['body'] });

export interface Answer<R extends Route> {
  status: number;
  data: Api[R]['data'];
  next_cursor?: string | null;
}

/**
 * One call of the control API, typed by its route (`'POST /v1/nodes/{id}/cordon'`, from the
 * OpenAPI document: web/src/api.gen.ts). Same origin, so the session cookie goes along; writes
 * carry the session's CSRF token. With a project chosen in the header (narrowToProject), a list that
 * takes `?project=` is narrowed to it and a create that takes `project_id` defaults to it, unless
 * the call names one itself.
 */
export async function call<R extends Route>(route: R, input: Input<R> = {} as Input<R>): Promise<Answer<R>> {
  const [method, template] = (route as string).split(' ') as [string, string];
  const params = (input.params ?? {}) as Record<string, string>;
  let path = template.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(params[name] ?? ''));
  const query = new URLSearchParams();
  const asked = { ...input.query } as Record<string, unknown>;
  let body = input.body as unknown as Record<string, unknown> | undefined;
  if (project && PROJECT_LISTS.has(route) && !('project' in asked)) asked.project = project;
  if (project && PROJECT_CREATES.has(route) && body && body.project_id === undefined) body = { ...body, project_id: project };
  for (const [k, v] of Object.entries(asked)) {
    if (v === undefined || v === null || v === '') continue;
    for (const item of Array.isArray(v) ? v : [v]) query.append(k, String(item));
  }
  if ([...query].length) path += `?${query}`;
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrfToken) headers['x-csrf-token'] = csrfToken;
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  const text = await res.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = { message: text };
  }
  if (!res.ok) {
    if (res.status === 401 && !template.startsWith('/v1/iam/session') && !template.startsWith('/v1/bootstrap')) onSignedOut();
    throw new ApiError(res.status, json.message ?? `HTTP ${res.status}`, json.request_id, Array.isArray(json.details) ? json.details : []);
  }
  return { status: res.status, data: json.data, next_cursor: json.next_cursor };
}

/**
 * Polls a queued read (logs) until its task completes; returns its result: the task's `result`
 * (node logs), or the completed read itself where the route hands the lines over directly
 * (`{status, lines}`: instance and service logs).
 */
export async function settle<R extends Route>(route: R, params: Api[R]['params'], timeoutMs = 60_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await call(route, { params } as Input<R>);
    const task = res.data as { status: string; result?: unknown; error?: string };
    if (task.status === 'completed') return task.result ?? task;
    if (task.status === 'failed') throw new ApiError(500, task.error ?? 'the task failed');
    if (Date.now() > deadline) throw new ApiError(504, 'no answer from the agent in time');
    await new Promise((r) => setTimeout(r, 700));
  }
}

export const b64encode = (text: string) => btoa(String.fromCharCode(...new TextEncoder().encode(text)));
export const b64decode = (b64: string) => new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
