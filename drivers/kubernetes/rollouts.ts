import type { V1Deployment, V1DeploymentSpec, V1PodTemplateSpec, V1ReplicaSet } from '@kubernetes/client-node';
import { healthTimings, type HealthSpec, type RolloutSpec, type WorkloadState } from '../../core/orchestrator.js';
import { apply, attempt, selectorString, type KubeContext } from './client.js';

/**
 * Health-gated rollouts on Kubernetes. A declared rollout becomes the Deployment's RollingUpdate
 * strategy, minReadySeconds and progressDeadlineSeconds; Kubernetes then stops a rollout whose new
 * pods do not become ready (Progressing=False, ProgressDeadlineExceeded) but never returns to the
 * previous spec by itself. The driver does that when it observes the Deployment (what a swarm's
 * engine does with FailureAction rollback): it applies the previous ReplicaSet's pod template, or
 * pauses the Deployment, and notes the outcome on the Deployment, so whichever control plane
 * observes next reads it from the cluster (nothing is kept in memory). A manifest's Deployment takes
 * part by carrying the annotation itself (its strategy and progress deadline are its own).
 */

/** On the Deployment: the declared failure action (`rollback` | `pause`); present when a rollout is declared. */
export const ROLLOUT_ANNOTATION = 'io.hangar.rollout';
/** On the Deployment: what the driver did about a failed rollout (JSON {state, message, revision}); the next deploy clears it. */
export const OUTCOME_ANNOTATION = 'io.hangar.rollout-outcome';
/** On the pod template: hangar's revision of the spec it was made from. */
export const REVISION_ANNOTATION = 'io.hangar.revision';
/** Kubernetes' own: the Deployment's and each ReplicaSet's rollout number. */
const K8S_REVISION = 'deployment.kubernetes.io/revision';
/** Seconds the progress deadline allows beyond the declared monitor, delay and health timings (scheduling, a container start). */
export const PROGRESS_SLACK_S = 10;

type Outcome = { state: 'rollback_completed' | 'paused'; message: string; revision: number | null };

/**
 * A declared rollout as the Deployment's strategy: start-first surges `parallelism` new pods and
 * keeps every old one until they are available; stop-first removes `parallelism` old pods first.
 * A new pod counts as available once ready for monitor_s + delay_s (Kubernetes has no pause between
 * batches: the next batch waits for that); the rollout fails when no pod got there within that plus
 * the health check's own time to pass (start period, retries × interval, timeout) and a slack.
 */
export function rolloutStrategyOf(rollout: RolloutSpec, health: HealthSpec | undefined): Pick<V1DeploymentSpec, 'strategy' | 'minReadySeconds' | 'progressDeadlineSeconds'> {
  const parallelism = rollout.parallelism ?? 1;
  const startFirst = (rollout.order ?? 'start-first') === 'start-first';
  const minReadySeconds = (rollout.monitor_s ?? 5) + (rollout.delay_s ?? 0);
  const t = health ? healthTimings(health) : null;
  const healthWindow = t ? t.start_period_s + t.interval_s * t.retries + t.timeout_s : 0;
  return {
    strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: startFirst ? parallelism : 0, maxUnavailable: startFirst ? 0 : parallelism } },
    minReadySeconds,
    progressDeadlineSeconds: minReadySeconds + healthWindow + PROGRESS_SLACK_S,
  };
}

const revisionOf = (template: V1PodTemplateSpec | undefined): number | null => {
  const n = Number(template?.metadata?.annotations?.[REVISION_ANNOTATION]);
  return Number.isInteger(n) && n > 0 ? n : null;
};

function outcomeOf(deployment: V1Deployment): Outcome | null {
  const text = deployment.metadata?.annotations?.[OUTCOME_ANNOTATION];
  if (!text) return null;
  try {
    return JSON.parse(text) as Outcome;
  } catch {
    return null;
  }
}

/** Whether the Deployment's controller has rolled its current spec out to every replica. */
function complete(d: V1Deployment): boolean {
  const want = d.spec?.replicas ?? 1;
  const s = d.status ?? {};
  return (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) && (s.updatedReplicas ?? 0) === want && (s.availableReplicas ?? 0) >= want && (s.replicas ?? 0) === want;
}

/** The last rollout as WorkloadState tells it: only for Deployments with a declared rollout. */
export function rolloutStateOf(d: V1Deployment): WorkloadState['rollout'] {
  if (!d.metadata?.annotations?.[ROLLOUT_ANNOTATION]) return null;
  const outcome = outcomeOf(d);
  if (outcome?.state === 'rollback_completed') return { state: complete(d) ? 'rollback_completed' : 'rollback_started', message: outcome.message, revision: outcome.revision };
  if (outcome) return outcome;
  // The first rollout of a Deployment is its creation, not an update: an update changes a spec the controller has seen.
  const seen = d.status?.observedGeneration ?? 0;
  const changed = seen > 0 && seen < (d.metadata.generation ?? 0);
  if (changed || (Number(d.metadata.annotations[K8S_REVISION] ?? 1) > 1 && !complete(d))) return { state: 'updating', message: null, revision: revisionOf(d.spec?.template) };
  return null;
}

/** The progress deadline passed: the condition Kubernetes sets then, or null. */
function stalled(d: V1Deployment): string | null {
  if ((d.status?.observedGeneration ?? 0) < (d.metadata?.generation ?? 0)) return null;
  const c = d.status?.conditions?.find((x) => x.type === 'Progressing');
  return c?.status === 'False' && c.reason === 'ProgressDeadlineExceeded' ? (c.message ?? 'progress deadline exceeded') : null;
}

/** The pod template of the ReplicaSet the Deployment ran before its current one, or null. */
async function previousTemplate(ctx: KubeContext, d: V1Deployment): Promise<V1PodTemplateSpec | null> {
  const namespace = d.metadata?.namespace ?? ctx.namespace;
  const current = Number(d.metadata?.annotations?.[K8S_REVISION] ?? 0);
  const sets = await attempt(`listing the replica sets of ${d.metadata?.name}`, () => ctx.apps.listNamespacedReplicaSet({ namespace, labelSelector: selectorString(d.spec?.selector) }));
  const owned = sets.items.filter((rs: V1ReplicaSet) => rs.metadata?.ownerReferences?.some((o) => o.uid === d.metadata?.uid));
  const before = owned
    .map((rs) => ({ rs, n: Number(rs.metadata?.annotations?.[K8S_REVISION] ?? 0) }))
    .filter((x) => x.n > 0 && x.n < current)
    .sort((a, b) => b.n - a.n)[0];
  const template = before?.rs.spec?.template;
  if (!template) return null;
  // The controller's own label (kubectl rollout undo drops it too): the Deployment's template never carries it.
  const labels = { ...(template.metadata?.labels ?? {}) };
  delete labels['pod-template-hash'];
  return { ...template, metadata: { ...template.metadata, labels } };
}

/**
 * The Deployment again as hangar applies it (its own fields only), with another pod template, a
 * pause, and the outcome noted: a server-side apply by hangar's field manager, so the next deploy
 * (which does not name the outcome nor the pause) takes both away.
 */
function reapplied(d: V1Deployment, changes: { template: V1PodTemplateSpec; paused?: boolean; outcome: Outcome }): V1Deployment {
  // Every annotation the Deployment was applied with (a manifest's own too), not those its controller or kubectl write.
  const own = Object.fromEntries(Object.entries(d.metadata?.annotations ?? {}).filter(([k]) => !k.startsWith('deployment.kubernetes.io/') && !k.startsWith('kubectl.kubernetes.io/')));
  const { paused: _paused, ...spec } = d.spec!;
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: d.metadata!.name, namespace: d.metadata!.namespace, labels: d.metadata?.labels, annotations: { ...own, [OUTCOME_ANNOTATION]: JSON.stringify(changes.outcome) } },
    spec: { ...spec, template: changes.template, ...(changes.paused ? { paused: true } : {}) },
  };
}

/**
 * Acts on a Deployment whose declared rollout failed (its progress deadline passed): with
 * on_failure rollback, applies the previous revision's pod template; with pause (or with no
 * previous revision), pauses it. Answers the Deployment as it is then.
 */
export async function settleRollout(ctx: KubeContext, d: V1Deployment): Promise<V1Deployment> {
  const action = d.metadata?.annotations?.[ROLLOUT_ANNOTATION];
  if (!action || d.spec?.paused || outcomeOf(d)) return d;
  const why = stalled(d);
  if (!why) return d;
  const failed = revisionOf(d.spec?.template);
  const what = `the new pods${failed ? ` of revision ${failed}` : ''} did not become available within ${d.spec?.progressDeadlineSeconds} s (${why})`;
  const previous = action === 'rollback' ? await previousTemplate(ctx, d) : null;
  const body = previous
    ? reapplied(d, { template: previous, outcome: { state: 'rollback_completed', message: what, revision: revisionOf(previous) } })
    : reapplied(d, {
        template: d.spec!.template,
        paused: true,
        outcome: { state: 'paused', message: action === 'rollback' ? `${what}; no previous revision to return to` : what, revision: failed },
      });
  return attempt(`${previous ? 'rolling back' : 'pausing'} ${d.metadata?.name}`, () => apply(ctx, body, { force: true }));
}
