import { useState } from 'preact/hooks';
import { can } from '../access';
import { call } from '../api';
import { Ago, Badge, ConfirmButton, Field, FormButton, Modal, notify, Page, ResourceList, ShownOnce, useAction } from '../ui';

type Row = Record<string, any>;
type Attempt = { at: string; status_code: number | null; latency_ms: number; error: string | null };

const KINDS: Array<[string, string]> = [
  ['webhook', 'webhook (signed JSON)'],
  ['email', 'email'],
  ['slack', 'Slack'],
  ['discord', 'Discord'],
  ['teams', 'Microsoft Teams'],
];
const SEVERITIES = ['info', 'warning', 'critical'];
const nothingLive = () => false;
const listOf = (text: FormDataEntryValue | null) =>
  String(text ?? '')
    .split(/[\s,]+/)
    .filter(Boolean);

/** Sends notification.test to a channel and says what the receiver answered. */
function TestButton({ channel }: { channel: Row }) {
  const [busy, run] = useAction();
  const test = () =>
    run(async () => {
      const { data } = (await call('POST /v1/notifications/channels/{id}/test', { params: { id: channel.id } })) as { data: Row };
      const outcome = [data.status_code ? `HTTP ${data.status_code}` : null, typeof data.latency_ms === 'number' ? `${data.latency_ms} ms` : null, data.error].filter(Boolean).join(', ');
      notify(data.ok ? `test sent to ${channel.name}${outcome ? `: ${outcome}` : ''}` : `test to ${channel.name} failed: ${outcome}`, data.ok ? 'ok' : 'error');
    });
  return (
    <button type="button" class="small" disabled={busy} onClick={test}>
      {busy ? 'Sending…' : 'Test'}
    </button>
  );
}

function Channels() {
  const [secret, setSecret] = useState<string | null>(null);
  return (
    <>
      <ResourceList
        route="GET /v1/notifications/channels"
        label="Channels"
        live={nothingLive}
        empty="No channels: add one to be told of events and alerts."
        toolbar={(reload) => (
          <FormButton
            label="Add channel"
            title="Add a notification channel"
            needs="POST /v1/notifications/channels"
            primary
            submitLabel="Add"
            done="channel added"
            onSubmit={async (f) => {
              const kind = String(f.get('kind'));
              const body = kind === 'email' ? { name: String(f.get('name')), kind, recipients: listOf(f.get('recipients')) } : { name: String(f.get('name')), kind, url: String(f.get('url')) };
              const { data } = (await call('POST /v1/notifications/channels', { body: body as never })) as { data: Row };
              if (data.secret) setSecret(String(data.secret));
              reload();
            }}
          >
            <Field label="Name">
              <input name="name" required pattern="[a-zA-Z0-9][a-zA-Z0-9_.\-]{0,62}" />
            </Field>
            <Field label="Kind">
              <select name="kind">
                {KINDS.map(([value, label]) => (
                  <option value={value}>{label}</option>
                ))}
              </select>
            </Field>
            <Field label="URL" hint="the receiver (webhook, Slack, Discord, Teams); stored encrypted, only its origin is shown">
              <input name="url" type="url" autocomplete="off" />
            </Field>
            <Field label="Recipients" hint="email only: addresses separated by commas">
              <input name="recipients" autocomplete="off" />
            </Field>
          </FormButton>
        )}
        columns={[
          { label: 'Name', render: (c: Row) => c.name },
          { label: 'Kind', render: (c: Row) => c.kind },
          { label: 'Receiver', render: (c: Row) => c.url ?? (c.recipients ?? []).join(', ') },
          { label: 'Signed', render: (c: Row) => (c.signed ? 'yes' : 'no') },
          { label: 'Created', render: (c: Row) => <Ago at={c.created_at} /> },
        ]}
        actions={(c: Row, reload) => (
          <div class="row-actions" role="group" aria-label={`Actions for channel ${c.name}`}>
            {can('POST /v1/notifications/channels/{id}/test') && <TestButton channel={c} />}
            <ConfirmButton
              label="Delete"
              title="Delete the channel"
              needs="DELETE /v1/notifications/channels/{id}"
              danger
              confirm={<p>Channel {c.name}, its subscriptions and its deliveries are removed.</p>}
              onConfirm={() => call('DELETE /v1/notifications/channels/{id}', { params: { id: c.id } }).then(reload)}
              done="channel deleted"
            />
          </div>
        )}
      />
      {secret && (
        <ShownOnce
          title="The channel’s signing secret"
          about="Deliveries carry X-Hangar-Signature, an HMAC-SHA256 made with this secret (docs/notifications.md). It is shown this once."
          fields={[{ label: 'Signing secret', value: secret }]}
          kept="I have kept it"
          onClose={() => setSecret(null)}
        />
      )}
    </>
  );
}

function Subscriptions() {
  return (
    <ResourceList
      route="GET /v1/notifications/subscriptions"
      label="Subscriptions"
      live={nothingLive}
      empty="No subscriptions: a channel hears nothing until it subscribes to events."
      toolbar={(reload) => (
        <FormButton
          label="Subscribe"
          title="Subscribe a channel to events"
          needs="POST /v1/notifications/subscriptions"
          submitLabel="Subscribe"
          done="subscription added"
          onSubmit={async (f) => {
            const resourceIds = listOf(f.get('resource_ids'));
            await call('POST /v1/notifications/subscriptions', {
              body: { channel_id: String(f.get('channel_id')), event_types: listOf(f.get('event_types')), min_severity: String(f.get('min_severity')), ...(resourceIds.length ? { resource_ids: resourceIds } : {}) } as never,
            });
            reload();
          }}
        >
          <Field label="Channel (id or name)">
            <input name="channel_id" required />
          </Field>
          <Field label="Event types" hint="separated by commas, e.g. alert.firing, alert.resolved, node.status_changed, task.failed (docs/notifications.md lists them)">
            <input name="event_types" required value="alert.firing, alert.resolved" />
          </Field>
          <Field label="Resources" hint="optional: only events about these ids">
            <input name="resource_ids" />
          </Field>
          <Field label="Least severity">
            <select name="min_severity">
              {SEVERITIES.map((s) => (
                <option value={s}>{s}</option>
              ))}
            </select>
          </Field>
        </FormButton>
      )}
      columns={[
        { label: 'Channel', render: (s: Row) => s.channel_id },
        { label: 'Events', render: (s: Row) => (s.event_types ?? []).join(', ') },
        { label: 'Resources', render: (s: Row) => (s.resource_ids ?? []).join(', ') || 'any' },
        { label: 'Least severity', render: (s: Row) => s.min_severity },
        { label: 'Created', render: (s: Row) => <Ago at={s.created_at} /> },
      ]}
      actions={(s: Row, reload) => (
        <ConfirmButton
          label="Unsubscribe"
          title="Delete the subscription"
          needs="DELETE /v1/notifications/subscriptions/{id}"
          danger
          confirm={<p>The channel hears no more of {(s.event_types ?? []).join(', ')}; deliveries already on their way are still made.</p>}
          onConfirm={() => call('DELETE /v1/notifications/subscriptions/{id}', { params: { id: s.id } }).then(reload)}
          done="subscription deleted"
        />
      )}
    />
  );
}

/** Every attempt of a delivery: when, the receiver's status, how long, what went wrong. */
function AttemptsButton({ delivery }: { delivery: Row }) {
  const [open, setOpen] = useState(false);
  const attempts = (delivery.attempts ?? []) as Attempt[];
  return (
    <>
      <button type="button" class="small" onClick={() => setOpen(true)}>
        Attempts ({attempts.length})
      </button>
      {open && (
        <Modal title={`Attempts of delivery ${delivery.id}`} onClose={() => setOpen(false)} wide>
          {attempts.length ? (
            <table>
              <caption>Attempts</caption>
              <thead>
                <tr>
                  <th>At</th>
                  <th>Status</th>
                  <th>Latency</th>
                  <th>Error</th>
                </tr>
              </thead>
              <tbody>
                {attempts.map((a) => (
                  <tr>
                    <td>{new Date(a.at).toLocaleString()}</td>
                    <td>{a.status_code ?? '–'}</td>
                    <td>{a.latency_ms} ms</td>
                    <td>{a.error ?? '–'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          ) : (
            <p>No attempt yet.</p>
          )}
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

function Deliveries() {
  return (
    <ResourceList
      route="GET /v1/notifications/deliveries"
      label="Deliveries"
      live={nothingLive}
      empty="No deliveries match."
      filters={[{ name: 'status', label: 'Status', options: ['pending', 'sending', 'delivered', 'failed'].map((s) => [s, s]) }]}
      columns={[
        { label: 'Event', render: (d: Row) => d.event_type },
        { label: 'Channel', render: (d: Row) => d.channel_id },
        { label: 'Status', render: (d: Row) => <Badge status={d.status} /> },
        { label: 'Last error', render: (d: Row) => d.last_error ?? '–' },
        { label: 'Created', render: (d: Row) => <Ago at={d.created_at} /> },
      ]}
      actions={(d: Row, reload) => (
        <div class="row-actions" role="group" aria-label={`Actions for delivery ${d.id}`}>
          <AttemptsButton delivery={d} />
          {(d.status === 'delivered' || d.status === 'failed') && (
            <ConfirmButton
              label="Redeliver"
              title="Send the delivery again"
              needs="POST /v1/notifications/deliveries/{id}/redeliver"
              confirm={<p>The {d.event_type} event is sent again with the same idempotency key, retried for a new period.</p>}
              onConfirm={() => call('POST /v1/notifications/deliveries/{id}/redeliver', { params: { id: d.id } }).then(reload)}
              done="delivery queued again"
            />
          )}
        </div>
      )}
    />
  );
}

/** Channels, what they subscribe to and what was delivered (docs/notifications.md); admins only. */
export function Notifications() {
  return (
    <Page title="Notifications">
      <h2>Channels</h2>
      <Channels />
      <h2>Subscriptions</h2>
      <Subscriptions />
      <h2>Deliveries</h2>
      <Deliveries />
    </Page>
  );
}
