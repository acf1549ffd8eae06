import { useEffect, useState } from 'preact/hooks';
import { can } from '../access';
import { call } from '../api';
import type { Api } from '../api.gen';
import { changeLines, type DiffLine } from '../diff';
import { Ago, Badge, ConfirmButton } from '../ui';

type Revision = Api['GET /v1/compute/instances/{id}/revisions']['data'][number];

/** Lines of a diff, the added and removed ones marked (a service edit's review, a revision's changes). */
export function DiffLines({ lines, label }: { lines: DiffLine[]; label: string }) {
  return (
    <pre class="diff" tabIndex={0} aria-label={label}>
      {lines.map((d, i) => (
        <div key={i} class={d.op === '+' ? 'add' : d.op === '-' ? 'del' : 'same'}>
          {d.op} {d.text}
        </div>
      ))}
    </pre>
  );
}

/** What a workload's page knows of it: an instance or a service, as its record says now. */
export interface Workload {
  kind: 'instance' | 'service';
  id: string;
  name: string;
  status: string;
  /** Why it is in that status: an instance's reason, a service's error. */
  reason?: string | null;
  running?: number | null;
  desired?: number | null;
  updated_at: string;
}

const readRevisions = (w: Workload) =>
  w.kind === 'instance' ? call('GET /v1/compute/instances/{id}/revisions', { params: { id: w.id } }) : call('GET /v1/services/{id}/revisions', { params: { id: w.id } });
const rollBack = (w: Workload, revision: number) =>
  w.kind === 'instance' ? call('POST /v1/compute/instances/{id}/rollback', { params: { id: w.id }, body: { revision } }) : call('POST /v1/services/{id}/rollback', { params: { id: w.id }, body: { revision } });

/** What a rollback's revision rolled out again ('' for any other revision). */
const again = (r: Revision) => (r.rollback_of ? ` (the spec of revision ${r.rollback_of}, rolled out again)` : '');

/**
 * The rollout as the workload's status tells it — rolling out (how many run), running (which
 * revision), rolled back (why, and the revision that runs), paused — kept current by the page's
 * record, which reloads on the event stream. A running instance runs its newest revision (a
 * rollback by the cluster shows as rolled back); a service's status does not tell a rollback of
 * its stack by the swarm, so its page names its newest revision only.
 */
function Rollout({ workload, newest }: { workload: Workload; newest: Revision | undefined }) {
  const { status, reason, running, desired } = workload;
  const story = status === 'running' && newest ? (workload.kind === 'instance' ? `Revision ${newest.number} runs${again(newest)}.` : `Newest revision: ${newest.number}${again(newest)}.`) : (reason ?? '');
  const moving = (status === 'rolling_out' || status === 'deploying') && typeof desired === 'number' && desired > 0;
  return (
    <div class="rollout" role="status" aria-label="Rollout">
      <Badge status={status} /> <span>{story}</span>
      {moving && (
        <div>
          <progress max={desired} value={running ?? 0} aria-label="Replicas running" /> {running ?? 0} / {desired} running
        </div>
      )}
    </div>
  );
}

/** How many diff lines show at once; a longer diff (a first revision lists its whole spec) opens on demand. */
const SHOWN_LINES = 8;

/** A revision's changes as a diff; a long one folded under how many paths it changed. */
function Changes({ revision }: { revision: Revision }) {
  if (!revision.changes.length) return <span class="muted">the same spec</span>;
  const lines = changeLines(revision.changes);
  const diff = <DiffLines lines={lines} label={`Changes of revision ${revision.number}`} />;
  if (lines.length <= SHOWN_LINES) return diff;
  return (
    <details>
      <summary>
        {revision.changes.length} paths changed
      </summary>
      {diff}
    </details>
  );
}

/**
 * An instance's or a service's rollout and kept revisions: number, when, who, what changed (a
 * diff of the JSON paths), and "Roll back to this revision" (confirmed first) for the roles that may.
 * The list reloads whenever the record changes: a new revision comes with a change of the record
 * (its status), so the list and the status shown are of the same moment.
 */
export function Revisions({ workload }: { workload: Workload }) {
  // The API stays the judge (a refusal is shown); the button is offered where the caller's roles grant it.
  const mayRollBack = can(workload.kind === 'instance' ? 'POST /v1/compute/instances/{id}/rollback' : 'POST /v1/services/{id}/rollback');
  const [revisions, setRevisions] = useState<Revision[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = async () => {
    try {
      setRevisions((await readRevisions(workload)).data);
      setError(null);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  useEffect(() => void load(), [workload.id, workload.updated_at, workload.status]);
  const newest = revisions?.[0];
  return (
    <>
      <h2>Rollout</h2>
      <Rollout workload={workload} newest={newest} />
      <h2>Revisions</h2>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <table class="revisions" aria-label="Revisions">
        <thead>
          <tr>
            <th scope="col">Revision</th>
            <th scope="col">Made</th>
            <th scope="col">By</th>
            <th scope="col">What changed</th>
            {mayRollBack && <th scope="col">Actions</th>}
          </tr>
        </thead>
        <tbody>
          {(revisions ?? []).map((r) => (
            <tr key={r.number} data-revision={r.number}>
              <td data-label="Revision">
                {r.number}
                {r.rollback_of ? <small class="muted"> (rollback to {r.rollback_of})</small> : null}
              </td>
              <td data-label="Made">
                <Ago at={r.time} />
              </td>
              <td data-label="By">{r.who ? (r.who.name ?? r.who.id) : <span class="muted">before revisions were kept</span>}</td>
              <td data-label="What changed">
                <Changes revision={r} />
              </td>
              {mayRollBack && (
                <td class="actions">
                  {r.number !== newest?.number && (
                    <ConfirmButton
                      label="Roll back to this revision"
                      title={`Roll ${workload.name} back to revision ${r.number}`}
                      verb="Roll back"
                      confirm={<p>Revision {r.number}’s spec is rolled out again as a new revision, through the same checks and rolling update as any change.</p>}
                      done={`${workload.name}: rolling back to revision ${r.number}`}
                      onConfirm={() => rollBack(workload, r.number)}
                    />
                  )}
                </td>
              )}
            </tr>
          ))}
          {revisions && !revisions.length && (
            <tr>
              <td colSpan={mayRollBack ? 5 : 4} class="muted">
                No revisions kept.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </>
  );
}
