import { readFileSync } from 'node:fs';
import type { Argv, CommandModule } from 'yargs';
import { apiClient } from './api-client.js';
import { keyValues, many, renderRecord, resourceCommand, table, usageExit, type Args, type Column, type Resource } from './resource-commands.js';
import { EXIT, runAndExit, usageError } from './runner/errors.js';

/**
 * `hangar notify …`: notification channels, subscriptions and deliveries (docs/notifications.md).
 * `channel create|list|get|delete|test`, `subscribe <channel> --event …`, `subscriptions`,
 * `unsubscribe <id>`, `deliveries [--redeliver ID]`.
 */

/** A file's text (`-`: standard input), read for a secret kept out of the command line and the shell's history. */
function readSecretFile(file: string, flag: string): string {
  try {
    return readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (err) {
    throw usageError(`--${flag} ${file}: ${(err as Error).message}`);
  }
}

/** The receiver's URL: --url-file (its first line) or --url. */
function urlOf(a: Args): string | undefined {
  if (a['url-file'] !== undefined && a.url !== undefined) throw usageError('give --url or --url-file, not both');
  if (a['url-file'] === undefined) return a.url as string | undefined;
  const url = readSecretFile(String(a['url-file']), 'url-file').split(/\r?\n/)[0]!.trim();
  if (!url) throw usageError(`--url-file ${String(a['url-file'])} is empty`);
  return url;
}

/** Headers from --headers-file (a `NAME: VALUE` or `NAME=VALUE` line each; blank lines and `#` comments skipped), then --header. */
function headersOf(a: Args): Record<string, string> | undefined {
  const given = keyValues('header')(a);
  if (a['headers-file'] === undefined) return given;
  const out: Record<string, string> = {};
  readSecretFile(String(a['headers-file']), 'headers-file')
    .split(/\r?\n/)
    .forEach((line, i) => {
      if (!line.trim() || line.trimStart().startsWith('#')) return;
      const at = [line.indexOf(':'), line.indexOf('=')].filter((n) => n > 0).sort((x, y) => x - y)[0];
      if (at === undefined) throw usageError(`--headers-file ${String(a['headers-file'])}, line ${i + 1}: must be NAME: VALUE`);
      out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    });
  return { ...out, ...given };
}

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
        url: { type: 'string', describe: 'the receiver’s URL (webhook, slack, discord, teams); a chat webhook’s URL is its credential: prefer --url-file' },
        'url-file': { type: 'string', describe: 'read the URL from this file (its first line; - for standard input): kept out of the command line' },
        header: { type: 'string', describe: 'an extra request header NAME=VALUE (repeatable); a credential in it is seen by ps and kept in shell history: prefer --headers-file' },
        'headers-file': { type: 'string', describe: 'read extra request headers from this file (NAME: VALUE a line; - for standard input)' },
        recipient: { type: 'string', describe: 'an email address (repeatable; email channels)' },
      },
      body: { name: 'name', kind: 'kind', url: urlOf, headers: headersOf, recipients: many('recipient') },
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

const SUBSCRIPTION_COLUMNS: Column[] = ['id', 'channel=channel_id', 'events=event_types', 'resources=resource_ids', 'tags', 'min_severity', 'project=project_id', 'created_at'];
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
    project: { type: 'string', describe: 'only events about resources of this project (id or name)' },
  },
  body: { channel_id: 'channel', event_types: many('event'), resource_ids: many('resource'), tags: keyValues('tag'), min_severity: 'min-severity', project: 'project' },
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
      if (a.id) {
        const d = await api.ok<Record<string, any>>('GET', `/v1/notifications/deliveries/${encodeURIComponent(String(a.id))}`);
        if (a.json) console.log(JSON.stringify(d, null, 2));
        else {
          const { event, ...rest } = d;
          console.log(renderRecord({ ...rest, event: `${event.type} ${event.id}: ${event.message}` }));
        }
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
      if (a.json) console.log(JSON.stringify(items, null, 2));
      else console.log(items.length ? table(items, DELIVERY_COLUMNS) : 'no deliveries');
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
