import { Fragment, type ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { can } from '../access';
import { call } from '../api';
import { useLive } from '../live';
import { Ago, Badge, bytes, ConfirmButton, Facts, Field, FormButton, NAME_FILTER, Page, ResourceList, useRecord } from '../ui';

type Command = { workload: { type: string; name: string }; status: string; exit_code: number | null; error: string | null };
type Run = {
  id: string;
  status: string;
  snapshot_id: string | null;
  time: string | null;
  finished_at: string | null;
  size: number | null;
  files: number | null;
  error: string | null;
  verify?: boolean;
  verified?: boolean | null;
  verify_error?: string | null;
  phase?: string | null;
  bytes_done?: number | null;
  bytes_total?: number | null;
  pre?: Command | null;
  post?: Command | null;
};
type Volume = { id: string; name: string; status: string; node_id: string | null; project_id: string | null };
type Target = { id: string; name: string; kind: string; node_id: string | null; path: string | null; endpoint: string; bucket: string; prefix: string; project_id: string | null; checked_at: string };
type Schedule = { id: string; name: string; project_id: string | null; target_id: string; volume_ids: string[]; volume_tags: Record<string, string> | null; every_seconds: number | null; cron: string | null; retention: Record<string, unknown>; verify: boolean; next_run_at: string; last_run_at: string | null };

/** A change of a volume, a run, a target or a schedule (the live stream names the backups' tables as they are). */
const isBackupEvent = (e: { type: string; data?: any }) =>
  e.type.startsWith('volume.backup.') || e.type.startsWith('volume.restore.') || (e.type === 'resource.changed' && ['backup_runs', 'volume', 'backup_targets', 'backup_schedules'].includes(e.data?.type));

/** A drill's outcome as the CLI prints it: yes, no (why), pending, or – when none was asked. */
function verified(run: Run): string {
  if (!run.verify) return '–';
  if (run.verified === true) return 'yes';
  if (run.verified === false) return `no: ${run.verify_error ?? 'failed'}`;
  return 'pending';
}

/** Where a running backup or restore is: its pre or post command, or the share of the bytes restic has read or written (`45% · 460 MiB of 1.0 GiB`). */
function progress(run: Run): string {
  if (run.phase === 'pre' || run.phase === 'post') return `running the ${run.phase} command in ${run[run.phase]?.workload.type} ${run[run.phase]?.workload.name}`;
  if (!run.bytes_total) return run.phase ? 'scanning the folder' : 'reading the snapshot';
  return `${Math.floor((100 * (run.bytes_done ?? 0)) / run.bytes_total)}% · ${bytes(run.bytes_done ?? 0)} of ${bytes(run.bytes_total)}`;
}

/** A backup's commands and how they ended: `pre exit 0 · post exit 0`. */
const commands = (run: Run) =>
  (['pre', 'post'] as const)
    .flatMap((w) => (run[w] ? [`${w} ${run[w]!.exit_code !== null ? `exit ${run[w]!.exit_code}` : run[w]!.status}`] : []))
    .join(' · ');

/** A command for a backup from the form: run with sh -c in a container of the workload (none when the command is empty). */
function commandOf(f: FormData, when: 'pre' | 'post') {
  const text = String(f.get(`${when}_command`) ?? '').trim();
  return text ? { workload: String(f.get(`${when}_workload`) ?? '').trim(), command: ['sh', '-c', text] } : undefined;
}

type Operation = 'backups' | 'restores';

/** A volume's backups or restores, newest last (the API answers oldest first, a page at a time). */
async function readRuns(volumeId: string, operation: Operation): Promise<Run[]> {
  const runs: Run[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 10; page++) {
    const res = await call(`GET /v1/volumes/{id}/${operation}`, { params: { id: volumeId }, query: { limit: 200, cursor } });
    runs.push(...(res.data as Run[]));
    cursor = (res as { next_cursor?: string | null }).next_cursor ?? undefined;
    if (!cursor) break;
  }
  return runs;
}

/** One read of a volume's backups (or restores) for the cells of its row, until a backup event says they changed. */
const readings = new Map<string, Promise<Run[]>>();
const runsOf = (key: string, volumeId: string, operation: Operation) => readings.get(key) ?? readings.set(key, readRuns(volumeId, operation).catch(() => [])).get(key)!;

/** The newest backup (or restore) of the volume, and its newest backup that can be restored. */
function LastRun({ volume, operation = 'backups', render }: { volume: Volume; operation?: Operation; render: (last: Run | null, restorable: Run | null, reload: () => void) => any }) {
  const key = `${operation}:${volume.id}`;
  const [runs, setRuns] = useState<Run[] | null>(null);
  const load = () => void runsOf(key, volume.id, operation).then(setRuns);
  const reload = () => {
    readings.delete(key);
    load();
  };
  useEffect(load, [key]);
  // A running run's progress is read again every few seconds (it changes no record, so no event says so).
  const running = runs?.at(-1)?.status === 'running';
  useEffect(() => {
    if (!running) return undefined;
    const timer = setInterval(reload, 2000);
    return () => clearInterval(timer);
  }, [key, running]);
  useLive(
    (e) => {
      if (isBackupEvent(e)) readings.delete(key);
      return isBackupEvent(e);
    },
    load,
    [key],
  );
  if (!runs) return <span>…</span>;
  const restorable = [...runs].reverse().find((r) => r.status === 'succeeded' && r.snapshot_id) ?? null;
  return render(runs.at(-1) ?? null, restorable, reload);
}

/** A run's status, when, where it is while it runs, its commands and its error. */
const runCell = (last: Run | null) =>
  last ? (
    <span>
      <Badge status={last.status} /> <Ago at={last.finished_at ?? last.time} />
      {last.status === 'running' ? <span class="muted"> {progress(last)}</span> : null}
      {commands(last) ? <span class="muted"> {commands(last)}</span> : null}
      {last.error ? <span class="muted"> {last.error}</span> : null}
    </span>
  ) : (
    'never'
  );

/** The buttons follow the caller's role in each volume's project (docs/tenancy.md), as the API judges them. */
function VolumeBackups() {
  return (
    <ResourceList
      route="GET /v1/volumes"
      label="Volume backups"
      filters={[NAME_FILTER]}
      live={isBackupEvent}
      empty="No volumes."
      columns={[
        { label: 'Volume', render: (v: Volume) => v.name },
        { label: 'Status', render: (v: Volume) => <Badge status={v.status} /> },
        { label: 'Last backup', render: (v: Volume) => <LastRun volume={v} render={runCell} /> },
        { label: 'Size', render: (v: Volume) => <LastRun volume={v} render={(last) => (last?.size != null ? `${bytes(last.size)} · ${last.files ?? 0} files` : '–')} /> },
        { label: 'Verified', render: (v: Volume) => <LastRun volume={v} render={(last) => (last ? verified(last) : '–')} /> },
        { label: 'Last restore', render: (v: Volume) => <LastRun volume={v} operation="restores" render={runCell} /> },
      ]}
      actions={(v: Volume) =>
        can('POST /v1/volumes/{id}/backups', v.project_id) || can('POST /v1/volumes/{id}/restore', v.project_id) ? (
          <LastRun
            volume={v}
            render={(_last, restorable, reload) => (
              <span class="row-actions">
                {can('POST /v1/volumes/{id}/backups', v.project_id) ? (
                  <FormButton
                    label="Back up"
                    title={`Back volume ${v.name} up`}
                    small
                    submitLabel="Back up"
                    done={`backup of ${v.name} started`}
                    onSubmit={(f) =>
                      call('POST /v1/volumes/{id}/backups', {
                        params: { id: v.id },
                        body: { target_id: String(f.get('target_id')), verify: f.get('verify') === 'on', pre: commandOf(f, 'pre'), post: commandOf(f, 'post') },
                      }).then(reload)
                    }
                  >
                    <Field label="Target (id or name)">
                      <input name="target_id" required />
                    </Field>
                    <Field label="Verify" hint="a restore drill after the backup proves it restorable">
                      <input name="verify" type="checkbox" />
                    </Field>
                    {(['pre', 'post'] as const).map((when) => (
                      <Fragment key={when}>
                        <Field label={`${when === 'pre' ? 'Before' : 'After'}: workload`} hint="an instance or service (id or name) of the volume’s project, running">
                          <input name={`${when}_workload`} />
                        </Field>
                        <Field
                          label={`${when === 'pre' ? 'Before' : 'After'}: command`}
                          hint={when === 'pre' ? 'run with sh -c in its container before the snapshot (a dump); if it fails, nothing is backed up' : 'run with sh -c in its container after the backup, whatever its outcome'}
                        >
                          <input name={`${when}_command`} />
                        </Field>
                      </Fragment>
                    ))}
                  </FormButton>
                ) : null}
                {restorable && can('POST /v1/volumes/{id}/restore', v.project_id) ? (
                  <ConfirmButton
                    label="Restore"
                    title={`Restore volume ${v.name}`}
                    danger
                    verb="Restore"
                    confirm={
                      <p>
                        The folder of {v.name} is replaced by its backup {restorable.id} (snapshot {restorable.snapshot_id}) of {new Date(restorable.finished_at ?? restorable.time ?? '').toLocaleString()}: what was written since is lost.
                        The workloads using it are stopped first and started again after.
                      </p>
                    }
                    onConfirm={() => call('POST /v1/volumes/{id}/restore', { params: { id: v.id }, body: { snapshot_id: restorable.id, stop_workloads: true } })}
                    done={`restore of ${v.name} started`}
                  />
                ) : null}
              </span>
            )}
          />
        ) : null
      }
    />
  );
}

function Targets() {
  return (
    <ResourceList
      route="GET /v1/backups/targets"
      label="Backup targets"
      filters={[NAME_FILTER]}
      live={isBackupEvent}
      empty="No backup targets: hangar backup target create adds one (docs/backups.md)."
      columns={[
        { label: 'Name', render: (t: Target) => t.name },
        { label: 'Where', render: (t: Target) => (t.kind === 'local' ? `node ${t.node_id} · ${t.path}` : `${t.endpoint} · ${t.bucket}${t.prefix ? `/${t.prefix}` : ''}`) },
        { label: 'Checked', render: (t: Target) => <Ago at={t.checked_at} /> },
      ]}
      actions={(t: Target) =>
        can('DELETE /v1/backups/targets/{id}', t.project_id) ? (
          <ConfirmButton label="Delete" title="Delete backup target" danger confirm={<p>Target {t.name} is forgotten by hangar (the {t.kind === 'local' ? 'folder' : 'bucket'} and its snapshots stay).</p>} onConfirm={() => call('DELETE /v1/backups/targets/{id}', { params: { id: t.id } })} />
        ) : null
      }
    />
  );
}

function Schedules() {
  return (
    <ResourceList
      route="GET /v1/backups/schedules"
      label="Backup schedules"
      filters={[NAME_FILTER]}
      live={isBackupEvent}
      empty="No backup schedules."
      columns={[
        { label: 'Name', render: (s: Schedule) => s.name },
        { label: 'Target', render: (s: Schedule) => s.target_id },
        {
          label: 'Volumes',
          render: (s: Schedule) => [...s.volume_ids, ...Object.entries(s.volume_tags ?? {}).map(([k, v]) => `tag ${k}=${v}`)].join(', ') || '–',
        },
        { label: 'When', render: (s: Schedule) => (s.cron ? `cron ${s.cron} (UTC)` : `every ${s.every_seconds} s`) },
        { label: 'Keeps', render: (s: Schedule) => Object.entries(s.retention ?? {}).map(([k, v]) => `${k.replace('keep_', '')} ${v}`).join(', ') || 'all' },
        { label: 'Verify', render: (s: Schedule) => (s.verify ? 'yes' : 'no') },
        { label: 'Next', render: (s: Schedule) => <Ago at={s.next_run_at} /> },
      ]}
      actions={(s: Schedule) =>
        can('DELETE /v1/backups/schedules/{id}', s.project_id) ? (
          <ConfirmButton label="Delete" title="Delete backup schedule" danger confirm={<p>Schedule {s.name} makes no more backups (those made stay).</p>} onConfirm={() => call('DELETE /v1/backups/schedules/{id}', { params: { id: s.id } })} />
        ) : null
      }
    />
  );
}

type ControlPlaneState = { target_id: string | null; scheduled: boolean; last_success_at: string | null; consecutive_failures: number; last_failure_at: string | null; last_error: string | null; next_retry_at: string | null };

/** How the control plane's own backups stand (admins and auditors): its last success, the failures in a row since and why the last one failed. */
function ControlPlaneBackupState({ state, error }: { state: ControlPlaneState | null; error: string | null }) {
  if (error) return <p role="alert" class="error">{error}</p>;
  const s = state;
  if (!s) return <p>Loading…</p>;
  if (!s.target_id) return <p>The control plane is not backed up: set backups.control_plane.target (docs/backups.md).</p>;
  return (
    <Facts
      label="Control-plane backups"
      rows={[
        ['Target', s.target_id],
        ['Schedule', s.scheduled ? 'backups.control_plane.cron' : 'none (on request only)'],
        ['Last success', s.last_success_at ? <Ago at={s.last_success_at} /> : 'never'],
        ['Failures in a row', String(s.consecutive_failures)],
        ['Last error', s.last_error ? <>{s.last_error} {s.last_failure_at ? <>(<Ago at={s.last_failure_at} />)</> : null}</> : '–'],
        ...(s.next_retry_at ? ([['Next scheduled try', <time dateTime={s.next_retry_at}>{new Date(s.next_retry_at).toLocaleString()}</time>]] as Array<[string, ComponentChildren]>) : []),
      ]}
    />
  );
}

/** The control plane's own archives in backups.control_plane.target (admins and auditors). */
function ControlPlaneArchives({ admin, backedUp }: { admin: boolean; backedUp: () => void }) {
  return (
    <ResourceList
      route="GET /v1/backups/control-plane"
      label="Control-plane archives"
      paged={false}
      live={() => false}
      rowKey={(a: { key: string }) => a.key}
      empty="No control-plane archives yet."
      columns={[
        { label: 'Archive', render: (a: { key: string }) => a.key },
        { label: 'Size', render: (a: { bytes: number }) => bytes(a.bytes) },
        { label: 'Made', render: (a: { created_at: string }) => <Ago at={a.created_at} /> },
      ]}
      toolbar={
        admin
          ? (reload) => (
              <ConfirmButton
                label="Back up the control plane"
                title="Back the control plane up now"
                verb="Back up"
                confirm={<p>An encrypted archive of the store, the CA and keys and the configuration goes to backups.control_plane.target.</p>}
                onConfirm={() => call('POST /v1/backups/control-plane').finally(backedUp).then(reload)}
                done="control-plane archive uploaded"
              />
            )
          : undefined
      }
    />
  );
}

/**
 * Backups (docs/backups.md): the last backup of every volume with a restore, targets, schedules and
 * the control plane's archives; each button shown where the caller's roles grant it (a project's
 * rows by the role in its project).
 */
export function Backups() {
  return (
    <Page title="Backups">
      <h2>Volumes</h2>
      <VolumeBackups />
      <h2>Schedules</h2>
      <Schedules />
      <h2>Targets</h2>
      <Targets />
      {can('GET /v1/backups/control-plane') ? <ControlPlane /> : null}
    </Page>
  );
}

/** The control plane's own backups: how they stand, its archives and (admins) Back up the control plane, after which both are read again. */
function ControlPlane() {
  const [state, error, reload] = useRecord('GET /v1/backups/control-plane/state', {}, (e) => e.type.startsWith('control_plane.backup.'));
  return (
    <>
      <h2>The control plane</h2>
      <ControlPlaneBackupState state={state as ControlPlaneState | null} error={error} />
      <ControlPlaneArchives admin={can('POST /v1/backups/control-plane')} backedUp={reload} />
    </>
  );
}
