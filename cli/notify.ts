import type { Argv, CommandModule } from 'yargs';
import { apiClient } from './api-client.js';
import { keyValues, many, renderRecord, resourceCommand, table, usageExit, type Args, type Column, type Resource } from './resource-commands.js';
import { EXIT, runAndExit } from './runner/errors.js';

/**
 * `hangar notify …`: notification channels, subscriptions and deliveries (docs/notifications.md).
 * `channel create|list|get|delete|test`, `subscribe <channel> --event …`, `subscriptions`,
 * `unsubscribe <id>`, `deliveries [--redeliver ID]`.
 */

const CHANNELS: Resource = {
  noun: 'channel',
  plural: 'notification channels',
  describe: 'Notification channels: signed webhooks, email, Slack, Discord, Teams',
  base: '/v1/notifications/channels',
  columns: ['id', 'name', 'kind', 'url', 'recipients', 'signed', 'created_at'],
  verbs: [
    {
      command: 'create <name>',
      describe: 'Create a channel; a webhook’s signing secret is printed this once',
      method: 'POST',
      options: {
        kind: { type: 'string', demandOption: true, choices: ['webhook', 'email', 'slack', 'discord', 'teams'], describe: 'what receives it' },
        url: { type: 'string', describe: 'the receiver’s URL (webhook, slack, discord, teams)' },
        header: { type: 'string', describe: 'an extra request header NAME=VALUE (repeatable; e.g. Authorization=Bearer …)' },
        recipient: { type: 'string', describe: 'an email address (repeatable; email channels)' },
      },
      body: { name: 'name', kind: 'kind', url: 'url', headers: keyValues('header'), recipients: many('recipient') },
      output: (d: Record<string, any>) =>
        [
          `created notification channel ${d.name} (${d.id})`,
          ...(d.secret ? [`secret: ${d.secret}`, 'note: the signing secret is shown this once; hangar cannot show it again. Store it with the receiver now.'] : []),
        ].join('\n'),
    },
    { command: 'list', describe: 'List notification channels', method: 'GET', output: 'list' },
    { command: 'get <id>', describe: 'Show a notification channel (never its secret or header values)', method: 'GET', path: '/{id}', output: 'record' },
    { command: 'delete <id>', describe: 'Delete a channel with its subscriptions and deliveries', method: 'DELETE', path: '/{id}', output: 'done', says: ['deleted', 'deleting'], label: (a) => `notification channel ${a.id}` },
    {
      command: 'test <id>',
      describe: 'Send a test notification now and print what the receiver said (exit 1 when it refused)',
      method: 'POST',
      path: '/{id}/test',
      output: (d: { ok: boolean; status_code: number | null; latency_ms: number; error: string | null }) => {
        const line = `${d.ok ? 'ok' : 'failed'}: ${d.status_code ?? 'no HTTP status'} in ${d.latency_ms} ms${d.error ? `: ${d.error}` : ''}`;
        if (d.ok) return line;
        console.error(line);
        return EXIT.failed;
      },
    },
  ],
};

const SUBSCRIPTION_COLUMNS: Column[] = ['id', 'channel=channel_id', 'events=event_types', 'resources=resource_ids', 'tags', 'min_severity', 'created_at'];
const subscriptions = (noun: string, verb: Resource['verbs'][number]): Resource => ({
  noun,
  plural: 'subscriptions',
  describe: 'Subscriptions of channels to events',
  base: '/v1/notifications/subscriptions',
  columns: SUBSCRIPTION_COLUMNS,
  verbs: [verb],
});

const SUBSCRIBE = subscriptions('subscribe', {
  command: '<channel>',
  describe: 'Subscribe a channel to events (docs/notifications.md lists the types)',
  method: 'POST',
  positionals: { channel: { describe: 'the channel (id or name)' } },
  options: {
    event: { type: 'string', demandOption: true, describe: 'an event type, e.g. node.status_changed, alert.firing (repeatable)' },
    resource: { type: 'string', describe: 'only events about this resource id (repeatable)' },
    tag: { type: 'string', describe: 'only events whose resource carries this tag KEY=VALUE (repeatable)' },
    'min-severity': { type: 'string', choices: ['info', 'warning', 'critical'], describe: 'the least severe event delivered (default info)' },
  },
  body: { channel_id: 'channel', event_types: many('event'), resource_ids: many('resource'), tags: keyValues('tag'), min_severity: 'min-severity' },
  output: (d: Record<string, any>) => `subscribed channel ${d.channel_id} to ${d.event_types.join(', ')} (${d.id})`,
});
const SUBSCRIPTIONS = subscriptions('subscriptions', {
  command: '',
  describe: 'List subscriptions',
  method: 'GET',
  options: { channel: { type: 'string', describe: 'only this channel’s (its id)' } },
  query: { channel_id: 'channel' },
  output: 'list',
});
const UNSUBSCRIBE = subscriptions('unsubscribe', {
  command: '<id>',
  describe: 'Delete a subscription',
  method: 'DELETE',
  path: '/{id}',
  positionals: { id: { describe: 'the subscription (nsub-…)' } },
  output: (_d, a) => `deleted subscription ${a.id}`,
});

const DELIVERY_COLUMNS: Column[] = [
  'id',
  'status',
  'event=event_type',
  'channel=channel_id',
  ['attempts', (d) => d.attempts.length],
  ['last', (d) => (d.attempts.length ? `${d.attempts.at(-1).status_code ?? '-'} ${d.attempts.at(-1).latency_ms} ms` : null)],
  'next=next_attempt_at',
  'error=last_error',
  'created_at',
];

/** `hangar notify deliveries`: the list (all pages), one delivery with its attempts (--id), or a redelivery. */
const DELIVERIES: CommandModule<object, Args> = {
  command: 'deliveries',
  describe: 'List deliveries with their attempts, or send one again (--redeliver ID: the same idempotency key)',
  builder: (y) =>
    usageExit(
      (y as Argv<any>)
        .option('channel', { type: 'string', describe: 'only this channel’s (its id)' })
        .option('status', { type: 'string', choices: ['pending', 'sending', 'delivered', 'failed'], describe: 'only deliveries in this state' })
        .option('event', { type: 'string', describe: 'only deliveries of this event type' })
        .option('id', { type: 'string', describe: 'show one delivery with every attempt' })
        .option('redeliver', { type: 'string', describe: 'send this delivered or failed delivery again (ndl-…)' })
        .option('json', { type: 'boolean', describe: 'print the data the API answered, as JSON' }),
    ) as Argv<Args>,
  handler: (a) =>
    runAndExit('notify deliveries', false, async () => {
      const api = apiClient();
      if (a.redeliver) {
        const d = await api.ok<Record<string, any>>('POST', `/v1/notifications/deliveries/${encodeURIComponent(String(a.redeliver))}/redeliver`);
        console.log(a.json ? JSON.stringify(d, null, 2) : `redelivering ${d.id} (${d.event_type} to channel ${d.channel_id}); follow with: hangar notify deliveries --id ${d.id}`);
        return;
      }
      const query = new URLSearchParams({ limit: '1000' });
      if (a.channel) query.set('channel_id', String(a.channel));
      if (a.status) query.set('status', String(a.status));
      if (a.event) query.set('event_type', String(a.event));
      const items: Array<Record<string, any>> = [];
      for (let cursor: string | undefined; ; ) {
        if (cursor) query.set('cursor', cursor);
        const res = await api.send<Array<Record<string, any>>>('GET', `/v1/notifications/deliveries?${query.toString()}`);
        items.push(...(res.data ?? []));
        cursor = (res.envelope.next_cursor as string | null) ?? undefined;
        if (!cursor) break;
      }
      const shown = a.id ? items.filter((d) => d.id === a.id) : items;
      if (a.json) console.log(JSON.stringify(a.id ? (shown[0] ?? null) : shown, null, 2));
      else if (a.id) {
        if (!shown[0]) throw new Error(`no delivery ${a.id}`);
        const { event, ...rest } = shown[0];
        console.log(renderRecord({ ...rest, event: `${event.type} ${event.id}: ${event.message}` }));
      } else console.log(shown.length ? table(shown, DELIVERY_COLUMNS) : 'no deliveries');
    }),
};

export const notifyCommand: CommandModule<object, Args> = {
  command: 'notify <group>',
  describe: 'Notifications: channel create|list|get|delete|test, subscribe, subscriptions, unsubscribe, deliveries',
  builder: (y) =>
    usageExit(
      (y as Argv<any>)
        .command(resourceCommand(CHANNELS))
        .command(resourceCommand(SUBSCRIBE))
        .command(resourceCommand(SUBSCRIPTIONS))
        .command(resourceCommand(UNSUBSCRIBE))
        .command(DELIVERIES)
        .demandCommand(1),
    ) as Argv<Args>,
  handler: () => undefined,
};
