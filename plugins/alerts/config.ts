import { Type, type TProperties } from '@sinclair/typebox';

export const SEVERITIES = ['info', 'warning', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];

const severity = (value: Severity) => Type.Union(SEVERITIES.map((s) => Type.Literal(s)), { default: value, description: 'info | warning | critical' });

/** One rule's settings: on or off, its severity, how long its condition must hold before it fires, and its own thresholds. */
function rule(defaults: { severity: Severity; for_seconds: number }, description: string, own: TProperties = {}) {
  return Type.Object(
    {
      enabled: Type.Boolean({ default: true }),
      severity: severity(defaults.severity),
      for_seconds: Type.Integer({ minimum: 0, default: defaults.for_seconds, description: 'the condition must hold this long before the alert fires' }),
      ...own,
    },
    { additionalProperties: false, default: {}, description },
  );
}

const percent = (value: number, what: string) => Type.Number({ exclusiveMinimum: 0, maximum: 100, default: value, description: `fires above this percentage of ${what} in use` });
const within_days = Type.Number({ exclusiveMinimum: 0, default: 21, description: 'fires when a certificate expires within this many days' });
const after_hours = Type.Number({ exclusiveMinimum: 0, default: 26, description: 'fires when a volume’s last successful backup is older than this' });

/** The rules judging resources that belong to a project, with the thresholds of their own (a project's overrides take these). */
const PROJECT_RULES: Record<string, TProperties> = {
  instance_not_running: {},
  service_not_running: {},
  rollout_halted: {},
  backup_stale: { after_hours: Type.Number({ exclusiveMinimum: 0, description: after_hours.description }) },
};

/** A project's override of one rule: any of its settings, the rest the installation's. */
function override(own: TProperties = {}) {
  return Type.Object(
    {
      enabled: Type.Optional(Type.Boolean()),
      severity: Type.Optional(Type.Union(SEVERITIES.map((s) => Type.Literal(s)))),
      for_seconds: Type.Optional(Type.Integer({ minimum: 0 })),
      ...Object.fromEntries(Object.entries(own).map(([k, t]) => [k, Type.Optional(t)])),
    },
    { additionalProperties: false },
  );
}

export const AlertsConfigSchema = Type.Object(
  {
    interval_seconds: Type.Integer({ minimum: 1, maximum: 3600, default: 30, description: 'how often the rules are checked (by one control plane at a time)' }),
    hold_down_seconds: Type.Integer({
      minimum: 0,
      default: 300,
      description: 'a firing alert resolves only once its condition has been clear this long: a flapping condition fires once and resolves once',
    }),
    retention_days: Type.Integer({ minimum: 0, maximum: 3650, default: 90, description: 'resolved alerts resolved longer ago than this are deleted; 0 keeps them for ever' }),
    rules: Type.Object(
      {
        node_offline: rule({ severity: 'critical', for_seconds: 300 }, 'a node whose agent has stopped heartbeating (status offline)'),
        node_disk: rule({ severity: 'warning', for_seconds: 300 }, 'a mounted filesystem of a node fuller than the threshold (one alert per mount)', { threshold_percent: percent(90, 'its space') }),
        node_memory: rule({ severity: 'warning', for_seconds: 300 }, 'a node’s memory in use above the threshold', { threshold_percent: percent(95, 'its memory') }),
        instance_not_running: rule({ severity: 'critical', for_seconds: 300 }, 'an instance meant to run that does not (stopped, failed, drifted, still deploying)'),
        service_not_running: rule({ severity: 'critical', for_seconds: 300 }, 'a service that failed, or runs fewer replicas than it wants'),
        certificate_expiry: rule({ severity: 'warning', for_seconds: 0 }, 'the server certificate, the CA or a node’s client certificate expiring soon', { within_days }),
        backup_stale: rule({ severity: 'warning', for_seconds: 0 }, 'a volume that has been backed up before with no successful backup for too long', { after_hours }),
        control_plane_backup_stale: rule({ severity: 'critical', for_seconds: 0 }, 'the control plane’s own scheduled backup (backups.control_plane.cron) with no success for too long (set after_hours above the schedule’s interval)', {
          after_hours: Type.Number({ exclusiveMinimum: 0, default: 26, description: 'fires when the control plane’s last successful backup (or, with none, its first failed one) is older than this' }),
        }),
        agent_outdated: rule({ severity: 'info', for_seconds: 0 }, 'a node whose agent is older than the control plane'),
        cluster_member_not_ready: rule({ severity: 'critical', for_seconds: 300 }, 'a member its cluster reports not ready (a kubelet NotReady, a swarm node down) while its agent heartbeats'),
        rollout_halted: rule({ severity: 'warning', for_seconds: 0 }, 'an instance or service whose rollout was rolled back or paused on a failure, until a later rollout succeeds'),
      },
      { additionalProperties: false, default: {} },
    ),
    projects: Type.Record(
      Type.String({ minLength: 1, maxLength: 100, description: 'a project, by id or name' }),
      Type.Object(
        {
          rules: Type.Object(
            Object.fromEntries(Object.entries(PROJECT_RULES).map(([name, r]) => [name, Type.Optional(override(r))])),
            { additionalProperties: false, default: {} },
          ),
        },
        { additionalProperties: false },
      ),
      {
        default: {},
        description:
          'per project (id or name): overrides of the rules on its resources (instance_not_running, service_not_running, rollout_halted, backup_stale) — enabled, severity, for_seconds, after_hours; unset ones are the installation’s',
      },
    ),
  },
  { additionalProperties: false, default: {} },
);

export interface RuleSettings {
  enabled: boolean;
  severity: Severity;
  for_seconds: number;
  threshold_percent?: number;
  within_days?: number;
  after_hours?: number;
}

export type RuleName =
  | 'node_offline'
  | 'node_disk'
  | 'node_memory'
  | 'instance_not_running'
  | 'service_not_running'
  | 'certificate_expiry'
  | 'backup_stale'
  | 'control_plane_backup_stale'
  | 'agent_outdated'
  | 'cluster_member_not_ready'
  | 'rollout_halted';
export const RULE_NAMES: readonly RuleName[] = ['node_offline', 'node_disk', 'node_memory', 'instance_not_running', 'service_not_running', 'certificate_expiry', 'backup_stale', 'control_plane_backup_stale', 'agent_outdated', 'cluster_member_not_ready', 'rollout_halted'];

/** The rules whose resources belong to projects: a project may override their settings (alerts.projects). */
export const PROJECT_RULE_NAMES = Object.keys(PROJECT_RULES) as RuleName[];

export interface AlertsConfig {
  interval_seconds: number;
  hold_down_seconds: number;
  retention_days: number;
  rules: Record<RuleName, RuleSettings>;
  /** Project (id or name) → its overrides of the rules on its resources. */
  projects: Record<string, { rules: Partial<Record<RuleName, Partial<RuleSettings>>> }>;
}
