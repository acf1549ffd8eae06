import { cloneElement, isValidElement, type ComponentChildren, type VNode } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { can } from './access';
import { ApiError, call, type Answer } from './api';
import type { Api, Route } from './api.gen';
import { useLive, type LiveEvent } from './live';
import { href } from './router';

// ——— notices ———

type Notice = { id: number; text: string; kind: 'ok' | 'error' };
const noticeListeners = new Set<(n: Notice[]) => void>();
let notices: Notice[] = [];
let nextNotice = 1;

/** A short message in the polite live region (screen readers announce it). */
export function notify(text: string, kind: Notice['kind'] = 'ok'): void {
  const notice = { id: nextNotice++, text, kind };
  notices = [...notices, notice].slice(-4);
  for (const l of noticeListeners) l(notices);
  setTimeout(() => {
    notices = notices.filter((n) => n !== notice);
    for (const l of noticeListeners) l(notices);
  }, kind === 'error' ? 12_000 : 5_000);
}

/** What a refusal says: its message, and the details its message does not already say (a 403 names there what the role lacks). */
export function refusal(err: unknown): string {
  if (!(err instanceof ApiError)) return String((err as Error).message ?? err);
  const more = err.details.map((d) => d.message ?? '').filter((m) => m && !err.message.includes(m));
  return `${[err.message, ...more].join(': ')} (HTTP ${err.status})`;
}

export const failed = (err: unknown) => notify(refusal(err), 'error');

export function Notices() {
  const [list, setList] = useState(notices);
  useEffect(() => {
    noticeListeners.add(setList);
    return () => void noticeListeners.delete(setList);
  }, []);
  return (
    <div class="notices" role="status" aria-live="polite">
      {list.map((n) => (
        <p key={n.id} class={`notice ${n.kind}`}>
          {n.text}
        </p>
      ))}
    </div>
  );
}

// ——— small pieces ———

export function Badge({ status }: { status: string | null | undefined }) {
  const s = status ?? 'unknown';
  const tone = /^(ready|running|active|online|ok|applied|completed|success)$/.test(s)
    ? 'good'
    : /^(failed|offline|error|drifted|removing|deleting|failure)$/.test(s)
      ? 'bad'
      : /^(cordoned|drained|stopped|needs_reboot|pending|paused|rolled_back)$/.test(s)
        ? 'warn'
        : 'busy';
  return <span class={`badge ${tone}`}>{s.replace(/_/g, ' ')}</span>;
}

/** "12 s ago", kept current. */
export function Ago({ at }: { at: string | null | undefined }) {
  const [, tick] = useState(0);
  useEffect(() => {
    const t = setInterval(() => tick((n) => n + 1), 5000);
    return () => clearInterval(t);
  }, []);
  if (!at) return <span class="muted">never</span>;
  const s = Math.max(0, Math.round((Date.now() - Date.parse(at)) / 1000));
  const text = s < 60 ? `${s} s ago` : s < 3600 ? `${Math.round(s / 60)} min ago` : s < 86400 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
  return <time dateTime={at} title={at}>{text}</time>;
}

// ——— clusters by name ———

type ClusterKind = 'swarm' | 'kubernetes';
/** Cluster names by `<kind>/<id>`, asked once per page load (a failed read is asked again next time). */
const clusterNames = new Map<string, Promise<string | null>>();

/** Remembers the names a list of clusters already gave (no read of each one then). */
export function knownClusters(kind: ClusterKind, clusters: Array<{ id: string; name: string }>): void {
  for (const c of clusters) clusterNames.set(`${kind}/${c.id}`, Promise.resolve(c.name));
}

function clusterName(kind: ClusterKind, id: string): Promise<string | null> {
  const key = `${kind}/${id}`;
  let name = clusterNames.get(key);
  if (!name) {
    const read = kind === 'swarm' ? call('GET /v1/swarms/{id}', { params: { id } }) : call('GET /v1/kubernetes/clusters/{id}', { params: { id } });
    name = read.then(
      (r) => (r.data as { name?: string }).name ?? null,
      () => {
        clusterNames.delete(key);
        return null;
      },
    );
    clusterNames.set(key, name);
  }
  return name;
}

/**
 * The swarm (`swarm_id`) or Kubernetes cluster (`cluster_id`) a record is on: its name, linked to
 * its page, with its id as the link's title (the id itself until the name is known, or when the
 * cluster is gone).
 */
export function ClusterLink({ of }: { of: { swarm_id?: string | null; cluster_id?: string | null } }) {
  const [kind, id]: [ClusterKind | null, string] = of.swarm_id ? ['swarm', of.swarm_id] : of.cluster_id ? ['kubernetes', of.cluster_id] : [null, ''];
  const [known, setKnown] = useState<{ id: string; name: string | null } | null>(null);
  useEffect(() => {
    if (!kind) return;
    let current = true;
    void clusterName(kind, id).then((name) => current && setKnown({ id, name }));
    return () => void (current = false);
  }, [kind, id]);
  if (!kind) return <>–</>;
  return (
    <a href={href(kind === 'swarm' ? 'swarms' : 'kubernetes', id)} title={id} data-cluster-id={id}>
      {(known?.id === id && known.name) || id}
    </a>
  );
}

export const bytes = (n: unknown) => (typeof n === 'number' ? (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`) : '–');

let hintIds = 0;

/** A labelled control; its hint is outside the label (not part of the control's name) and linked as its description. */
export function Field({ label, hint, children }: { label: string; hint?: string; children: ComponentChildren }) {
  const [hintId] = useState(() => `hint-${++hintIds}`);
  const control = hint && isValidElement(children) ? cloneElement(children as VNode<any>, { 'aria-describedby': hintId }) : children;
  return (
    <div class="field">
      <label>
        <span>{label}</span>
        {control}
      </label>
      {hint && <small id={hintId}>{hint}</small>}
    </div>
  );
}

export function Page({ title, actions, children }: { title: string; actions?: ComponentChildren; children: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · hangar`;
  }, [title]);
  return (
    <section aria-labelledby="page-title">
      <header class="page-head">
        <h1 id="page-title" tabIndex={-1}>
          {title}
        </h1>
        <div class="toolbar">{actions}</div>
      </header>
      {children}
    </section>
  );
}

// ——— dialogs ———

let dialogIds = 0;

/** A modal dialog (the native <dialog>: focus moves in, Escape closes, focus returns). */
export function Modal({ title, onClose, children, wide }: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean }) {
  const ref = useRef<HTMLDialogElement>(null);
  const [id] = useState(() => `dialog-${++dialogIds}`);
  useEffect(() => {
    const opener = document.activeElement as HTMLElement | null;
    ref.current?.showModal();
    return () => opener?.focus?.();
  }, []);
  return (
    <dialog ref={ref} class={wide ? 'wide' : ''} aria-labelledby={id} onClose={onClose}>
      <h2 id={id}>{title}</h2>
      {children}
    </dialog>
  );
}

/**
 * Credentials hangar shows this once (an API key's secret, a webhook's signing secret): read-only
 * fields, selected on focus, and a button that says they were kept.
 */
export function ShownOnce({ title, about, fields, kept, onClose }: { title: string; about: ComponentChildren; fields: Array<{ label: string; value: string; testId?: string }>; kept: string; onClose: () => void }) {
  return (
    <Modal title={title} onClose={onClose}>
      <p>{about}</p>
      {fields.map((f) => (
        <Field key={f.label} label={f.label}>
          <input readOnly value={f.value} data-testid={f.testId} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
        </Field>
      ))}
      <div class="buttons">
        <button type="button" class="primary" onClick={onClose}>
          {kept}
        </button>
      </div>
    </Modal>
  );
}

/** Runs an action with a busy state and errors shown; answers whether it succeeded. */
export function useAction(): [boolean, (fn: () => Promise<unknown>) => Promise<boolean>] {
  const [busy, setBusy] = useState(false);
  const run = async (fn: () => Promise<unknown>) => {
    setBusy(true);
    try {
      await fn();
      return true;
    } catch (err) {
      failed(err);
      return false;
    } finally {
      setBusy(false);
    }
  };
  return [busy, run];
}

/**
 * What a button does, for showing it only to those whose roles grant it: the operation it calls,
 * and the project of the resource it acts on where the record says (else the header's project).
 */
export interface Needs {
  needs?: Route;
  project?: string | null;
}
const granted = (props: Needs) => !props.needs || can(props.needs, props.project);

/** A button that asks for confirmation in a dialog before it acts. */
export function ConfirmButton(props: { label: string; title: string; confirm: ComponentChildren; verb?: string; danger?: boolean; onConfirm: () => Promise<unknown>; done?: string } & Needs) {
  const [open, setOpen] = useState(false);
  const [busy, run] = useAction();
  if (!granted(props)) return null;
  return (
    <>
      <button type="button" class={props.danger ? 'danger small' : 'small'} onClick={() => setOpen(true)}>
        {props.label}
      </button>
      {open && (
        <Modal title={props.title} onClose={() => setOpen(false)}>
          <div class="confirm-text">{props.confirm}</div>
          <form
            method="dialog"
            class="buttons"
            onSubmit={async (e) => {
              e.preventDefault();
              if (await run(props.onConfirm)) {
                if (props.done) notify(props.done);
                setOpen(false);
              }
            }}
          >
            <button type="button" onClick={() => setOpen(false)}>
              Cancel
            </button>
            <button type="submit" class={props.danger ? 'danger' : 'primary'} disabled={busy}>
              {props.verb ?? props.label}
            </button>
          </form>
        </Modal>
      )}
    </>
  );
}

/** A button opening a form in a dialog; `submit` returns true to close it. */
export function FormButton(props: { label: string; title: string; primary?: boolean; small?: boolean; submitLabel: string; children: ComponentChildren; onSubmit: (form: FormData) => Promise<unknown>; done?: string; wide?: boolean } & Needs) {
  const [open, setOpen] = useState(false);
  const [busy, run] = useAction();
  if (!granted(props)) return null;
  return (
    <>
      <button type="button" class={[props.primary ? 'primary' : '', props.small ? 'small' : ''].join(' ')} onClick={() => setOpen(true)}>
        {props.label}
      </button>
      {open && (
        <Modal title={props.title} onClose={() => setOpen(false)} wide={props.wide}>
          <form
            onSubmit={async (e) => {
              e.preventDefault();
              const form = new FormData(e.currentTarget as HTMLFormElement);
              if (await run(() => props.onSubmit(form))) {
                if (props.done) notify(props.done);
                setOpen(false);
              }
            }}
          >
            {props.children}
            <div class="buttons">
              <button type="button" onClick={() => setOpen(false)}>
                Cancel
              </button>
              <button type="submit" class="primary" disabled={busy}>
                {busy ? 'Working…' : props.submitLabel}
              </button>
            </div>
          </form>
        </Modal>
      )}
    </>
  );
}

/** Log lines read through an agent (a queued read), shown in a dialog. */
export function LogsButton({ title, read, ...needs }: { title: string; read: () => Promise<unknown> } & Needs) {
  const [open, setOpen] = useState(false);
  const [text, setText] = useState<string | null>(null);
  const show = async () => {
    setOpen(true);
    setText(null);
    try {
      const result = (await read()) as { lines?: Array<string | { line?: string; text?: string }> } | string;
      const lines = typeof result === 'string' ? [result] : (result?.lines ?? []).map((l) => (typeof l === 'string' ? l : (l.line ?? l.text ?? JSON.stringify(l))));
      setText(lines.join('\n') || '(no lines)');
    } catch (err) {
      setText(`Could not read the logs: ${(err as Error).message}`);
    }
  };
  if (!granted(needs)) return null;
  return (
    <>
      <button type="button" class="small" onClick={show}>
        Logs
      </button>
      {open && (
        <Modal title={title} onClose={() => setOpen(false)} wide>
          <pre class="logs" tabIndex={0} aria-label="Log lines">
            {text ?? 'Reading the logs through the agent…'}
          </pre>
          <div class="buttons">
            <button type="button" onClick={() => setOpen(false)}>
              Close
            </button>
          </div>
        </Modal>
      )}
    </>
  );
}

// ——— lists: server-side pages and filters, reloaded by live events ———

export interface Column<T> {
  label: string;
  render: (row: T) => ComponentChildren;
}

export interface Filter {
  name: string;
  label: string;
  options?: Array<[string, string]>;
  placeholder?: string;
}

/** The filter every resource list built by the API's readRoutes takes (volumes, services, object stores, load balancers). */
export const NAME_FILTER: Filter = { name: 'name_prefix', label: 'Name starts with' };

type ListRoute = { [R in Route]: R extends `GET ${string}` ? R : never }[Route];

export function ResourceList<R extends ListRoute>(props: {
  route: R;
  label: string;
  columns: Column<any>[];
  live: (e: LiveEvent) => boolean;
  params?: Api[R]['params'];
  filters?: Filter[];
  fixedQuery?: Partial<Api[R]['query']>;
  paged?: boolean;
  empty: string;
  /** The rows of an answer whose data is not the list itself (GET /v1/gateway: `{routes, load_balancers}`). */
  rows?: (data: any) => any[];
  rowKey?: (row: any) => string;
  toolbar?: (reload: () => void) => ComponentChildren;
  actions?: (row: any, reload: () => void) => ComponentChildren;
}) {
  const paged = props.paged ?? true;
  const [query, setQuery] = useState<Record<string, string>>({});
  const [limit, setLimit] = useState(25);
  const [cursors, setCursors] = useState<Array<string | null>>([null]);
  const [answer, setAnswer] = useState<Answer<R> | null>(null);
  const [error, setError] = useState<string | null>(null);
  const cursor = cursors[cursors.length - 1];
  const load = async () => {
    try {
      const res = await call(props.route, {
        params: props.params,
        query: { ...props.fixedQuery, ...query, ...(paged ? { limit, cursor: cursor ?? undefined } : {}) },
      } as never);
      setAnswer(res);
      setError(null);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  useEffect(() => void load(), [JSON.stringify(query), limit, cursor, JSON.stringify(props.params)]);
  useLive(props.live, load, [JSON.stringify(query), limit, cursor, JSON.stringify(props.params)]);
  const rows = (answer ? (props.rows ? props.rows(answer.data) : answer.data) : []) as any[];
  return (
    <div class="list">
      <div class="list-bar">
        {props.filters?.length ? (
          <form
            class="filters"
            role="search"
            aria-label={`Filter ${props.label.toLowerCase()}`}
            onSubmit={(e) => {
              e.preventDefault();
              const data = Object.fromEntries([...new FormData(e.currentTarget as HTMLFormElement)].filter(([, v]) => v !== '')) as Record<string, string>;
              setCursors([null]);
              setQuery(data);
            }}
          >
            {props.filters.map((f) => (
              <Field key={f.name} label={f.label}>
                {f.options ? (
                  <select name={f.name}>
                    <option value="">any</option>
                    {f.options.map(([value, text]) => (
                      <option key={value} value={value}>
                        {text}
                      </option>
                    ))}
                  </select>
                ) : (
                  <input name={f.name} placeholder={f.placeholder} />
                )}
              </Field>
            ))}
            <button type="submit">Filter</button>
          </form>
        ) : (
          <span />
        )}
        <div class="toolbar">{props.toolbar?.(load)}</div>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <table aria-label={props.label}>
        <thead>
          <tr>
            {props.columns.map((c) => (
              <th key={c.label} scope="col">
                {c.label}
              </th>
            ))}
            {props.actions && <th scope="col">Actions</th>}
          </tr>
        </thead>
        <tbody>
          {rows.map((row, i) => (
            <tr key={props.rowKey?.(row) ?? row.id ?? i} data-id={props.rowKey?.(row) ?? row.id}>
              {props.columns.map((c) => (
                <td key={c.label} data-label={c.label}>
                  {c.render(row)}
                </td>
              ))}
              {props.actions && <td class="actions">{props.actions(row, load)}</td>}
            </tr>
          ))}
          {answer && !rows.length && (
            <tr>
              <td colSpan={props.columns.length + (props.actions ? 1 : 0)} class="muted">
                {props.empty}
              </td>
            </tr>
          )}
        </tbody>
      </table>
      {paged && (
        <nav class="pager" aria-label={`${props.label} pages`}>
          <button type="button" disabled={cursors.length < 2} onClick={() => setCursors(cursors.slice(0, -1))}>
            Previous page
          </button>
          <span>Page {cursors.length}</span>
          <button type="button" disabled={!answer?.next_cursor} onClick={() => setCursors([...cursors, answer!.next_cursor!])}>
            Next page
          </button>
          <Field label="Per page">
            <select
              value={String(limit)}
              onChange={(e) => {
                setCursors([null]);
                setLimit(Number((e.currentTarget as HTMLSelectElement).value));
              }}
            >
              {[25, 50, 100, 500].map((n) => (
                <option key={n} value={String(n)}>
                  {n}
                </option>
              ))}
            </select>
          </Field>
        </nav>
      )}
    </div>
  );
}

/** One record, reloaded when a live event concerns it. */
export function useRecord<R extends Route>(route: R, params: Api[R]['params'], live: (e: LiveEvent) => boolean): [Api[R]['data'] | null, string | null, () => void] {
  const [data, setData] = useState<Api[R]['data'] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = async () => {
    try {
      setData((await call(route, { params } as never)).data);
      setError(null);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  useEffect(() => void load(), [JSON.stringify(params)]);
  useLive(live, load, [JSON.stringify(params)]);
  return [data, error, load];
}

/** Field/value pairs of a record. */
export function Facts({ rows, label }: { rows: Array<[string, ComponentChildren]>; label: string }) {
  return (
    <dl class="facts" aria-label={label}>
      {rows.map(([k, v]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd>{v ?? '–'}</dd>
        </div>
      ))}
    </dl>
  );
}
