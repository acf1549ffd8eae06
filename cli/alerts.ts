import type { Argv, CommandModule } from 'yargs';
import { resourceCommand, usageExit, type Args, type Resource, type Verb } from './resource-commands.js';

/**
 * `hangar alerts [--state firing]` lists alerts; `hangar alerts silence <id> --minutes N` and
 * `hangar alerts unsilence <id>` silence one or end its silence (docs/alerts.md).
 */
const COLUMNS = ['id', 'state', 'severity', 'rule', 'resource=resource_id', 'project=project_id', 'subject', 'started_at', 'resolved_at', 'silenced_until', 'message'];
const alertResource = (noun: string, verbs: Resource['verbs']): Resource => ({ noun, plural: 'alerts', describe: 'Alerts of the built-in rules', base: '/v1/alerts', columns: COLUMNS, verbs });

const LIST = alertResource('$0', [
  {
    command: '',
    describe: 'List alerts, oldest first: firing and resolved ones (--state pending: conditions not yet held long enough)',
    method: 'GET',
    output: 'list',
    options: {
      state: { type: 'string', choices: ['firing', 'resolved', 'pending'], describe: 'only alerts in this state' },
      rule: { type: 'string', describe: 'only alerts of this rule (node_offline, node_disk, certificate_expiry…)' },
      resource: { type: 'string', describe: 'only alerts on this resource (its id)' },
      project: { type: 'string', describe: 'only alerts on resources of this project (id or name)' },
    },
    query: { state: 'state', rule: 'rule', resource_id: 'resource', project: 'project' },
    empty: 'no alerts',
  },
]);
/** `silence <id>` and `unsilence <id>`: an alert's silence (`/v1/alerts/{id}/silence`) set or ended. */
const silenceCommand = (noun: 'silence' | 'unsilence', verb: Pick<Verb, 'describe' | 'method' | 'output'> & Partial<Verb>): Resource =>
  alertResource(noun, [{ command: '<id>', path: '/{id}/silence', positionals: { id: { describe: 'the alert’s id (alert-…)' } }, ...verb }]);
const SILENCE = silenceCommand('silence', {
  describe: 'Silence an alert for some minutes: it announces nothing meanwhile and leaves hangar_alerts_firing',
  method: 'POST',
  options: { minutes: { type: 'number', demandOption: true, describe: 'how long (1 to 525600)' } },
  body: { minutes: 'minutes' },
  output: (d) => `silenced alert ${d.id} until ${d.silenced_until}`,
});
const UNSILENCE = silenceCommand('unsilence', { describe: 'End an alert’s silence', method: 'DELETE', output: (d) => `unsilenced alert ${d.id}` });

export const alertsCommand: CommandModule<object, Args> = {
  command: 'alerts',
  describe: 'Alerts of the built-in rules: list (--state firing), silence <id> --minutes N, unsilence <id>',
  builder: (y) => usageExit((y as Argv<any>).command(resourceCommand(SILENCE)).command(resourceCommand(UNSILENCE)).command(resourceCommand(LIST))) as Argv<Args>,
  handler: () => undefined,
};
