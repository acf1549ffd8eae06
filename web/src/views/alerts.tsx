import { call } from '../api';
import { Ago, ConfirmButton, Page, ResourceList } from '../ui';

type Alert = { id: string; rule: string; resource_type: string; resource_id: string; subject: string | null; severity: string; state: string; message: string; started_at: string | null; resolved_at: string | null; silenced: boolean; silenced_until: string | null };

const TONES: Record<string, string> = { firing: 'bad', resolved: 'good', pending: 'warn' };

const RULES = ['node_offline', 'node_disk', 'node_memory', 'instance_not_running', 'service_not_running', 'certificate_expiry', 'backup_stale', 'agent_outdated', 'cluster_member_not_ready', 'rollout_halted'];

/** Silence for an hour, or end a silence (admins; the API refuses others). */
function AlertActions({ alert, reload }: { alert: Alert; reload: () => void }) {
  if (alert.state === 'resolved') return null;
  const params = { id: alert.id };
  return alert.silenced ? (
    <ConfirmButton label="Unsilence" title="End the silence" confirm={<p>{alert.message}: its firing and resolution are announced again.</p>} onConfirm={() => call('DELETE /v1/alerts/{id}/silence', { params }).then(reload)} done="silence ended" />
  ) : (
    <ConfirmButton
      label="Silence 1 h"
      title="Silence the alert for an hour"
      confirm={<p>{alert.message}: nothing is announced about it for an hour, and it leaves hangar_alerts_firing.</p>}
      onConfirm={() => call('POST /v1/alerts/{id}/silence', { params, body: { minutes: 60 } }).then(reload)}
      done="alert silenced for an hour"
    />
  );
}

/** Alerts of the built-in rules (docs/alerts.md): firing first by filter, with their silences. */
export function Alerts({ admin }: { admin: boolean }) {
  return (
    <Page title="Alerts">
      <ResourceList
        route="GET /v1/alerts"
        label="Alerts"
        live={(e) => e.type === 'alert.firing' || e.type === 'alert.resolved' || (e.type === 'resource.changed' && e.data.type === 'alert')}
        empty="No alerts match."
        filters={[
          { name: 'state', label: 'State', options: [['firing', 'firing'], ['resolved', 'resolved'], ['pending', 'pending']] },
          { name: 'rule', label: 'Rule', options: RULES.map((r) => [r, r.replace(/_/g, ' ')]) },
          { name: 'resource_id', label: 'Resource', placeholder: 'resource id' },
        ]}
        columns={[
          { label: 'State', render: (a: Alert) => <span class={`badge ${TONES[a.state] ?? 'busy'}`}>{a.state}</span> },
          { label: 'Severity', render: (a: Alert) => a.severity },
          { label: 'Rule', render: (a: Alert) => a.rule.replace(/_/g, ' ') },
          { label: 'Message', render: (a: Alert) => a.message },
          { label: 'Since', render: (a: Alert) => (a.started_at ? <Ago at={a.started_at} /> : '–') },
          { label: 'Resolved', render: (a: Alert) => (a.resolved_at ? <Ago at={a.resolved_at} /> : '–') },
          { label: 'Silenced until', render: (a: Alert) => (a.silenced && a.silenced_until ? new Date(a.silenced_until).toLocaleString() : '–') },
        ]}
        actions={admin ? (a: Alert, reload) => <AlertActions alert={a} reload={reload} /> : undefined}
      />
    </Page>
  );
}
