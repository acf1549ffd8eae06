import { expect } from 'chai';
import { rolloutOf } from '../../../drivers/swarm/state.js';

/**
 * A swarm's rollout as hangar reads it from `docker service inspect` (drivers/swarm/state.ts). The
 * engine stamps the service once more as it records a rollback's end: UpdatedAt a few ms after
 * UpdateStatus.CompletedAt (seen on a lab swarm: 3.5 ms). That is still the rollback — the instance
 * is rolled_back — while a change of the service later than that (an update of the same spec, which
 * leaves UpdateStatus as it was) ends what the status tells.
 */
describe('a swarm service’s rollout state', () => {
  const rolledBack = (updatedAt: string) => ({
    UpdatedAt: updatedAt,
    UpdateStatus: { State: 'rollback_completed', StartedAt: '2026-11-29T05:23:49.081052014Z', CompletedAt: '2026-11-29T05:23:53.083146629Z', Message: 'rollback completed' },
    Spec: { Labels: { 'io.hangar.revision': '2' } },
  });

  it('is the rollback when the engine stamped the service as it recorded the rollback’s end', () => {
    expect(rolloutOf(rolledBack('2026-11-29T05:23:53.086622209Z'))).to.deep.equal({ state: 'rollback_completed', message: 'rollback completed', revision: 2 });
  });

  it('is none once the service changed after the rollout ended (an update of the same spec)', () => {
    expect(rolloutOf(rolledBack('2026-11-29T05:24:20.000000000Z'))).to.equal(null);
  });

  it('is none before any rollout', () => {
    expect(rolloutOf({ UpdatedAt: '2026-11-29T05:24:20Z', Spec: {} })).to.equal(null);
  });

  // The engine sets UpdateStatus to updating a moment after a new spec is written: until then it
  // still tells the rollout before (seen by bench:rollout: `running` 0.1 s after an update).
  const v = (version: string) => ({ ContainerSpec: { Image: 'app:1', Env: [`VERSION=${version}`] } });
  const updated = { UpdatedAt: '2026-11-29T05:30:00Z', UpdateStatus: { State: 'completed', CompletedAt: '2026-11-29T05:29:00Z' }, Spec: { Labels: { 'io.hangar.revision': '3' }, TaskTemplate: v('v2') } };

  it('is updating once the spec changed while tasks of the spec before still run, before the engine says so', () => {
    const tasks = [{ DesiredState: 'running', Spec: v('v1') }, { DesiredState: 'running', Spec: v('v1') }];
    expect(rolloutOf(updated, tasks)).to.deep.equal({ state: 'updating', message: null, revision: 3 });
  });

  it('is none when every running task runs the spec (a change of the service alone, its labels)', () => {
    const tasks = [{ DesiredState: 'running', Spec: v('v2') }, { DesiredState: 'shutdown', Spec: v('v1') }];
    expect(rolloutOf(updated, tasks)).to.equal(null);
  });

  // A task's spec may carry fields its service's template does not (an engine's defaults): they
  // are no update, or the status would read rolling_out for ever.
  it('is none when the running tasks differ from the spec only by fields the engine added', () => {
    const engineAdded = { ContainerSpec: { Image: 'app:1', Env: ['VERSION=v2'], Isolation: 'default', Init: false, Mounts: [] } };
    const tasks = [{ DesiredState: 'running', Spec: engineAdded }, { DesiredState: 'running', Spec: { ContainerSpec: { Env: ['VERSION=v2'], Image: 'app:1', DNSConfig: {} } } }];
    expect(rolloutOf(updated, tasks)).to.equal(null);
  });

  it('is updating when a field the spec sets differs, one it sets is missing from a task, or one it dropped is still on one', () => {
    expect(rolloutOf(updated, [{ DesiredState: 'running', Spec: { ContainerSpec: { Image: 'app:1', Env: ['VERSION=v2', 'EXTRA=1'], Isolation: 'default' } } }])).to.deep.equal({ state: 'updating', message: null, revision: 3 });
    expect(rolloutOf(updated, [{ DesiredState: 'running', Spec: { ContainerSpec: { Image: 'app:1' } } }])).to.deep.equal({ state: 'updating', message: null, revision: 3 });
    // A field the new spec dropped (its command), still on a running task.
    expect(rolloutOf(updated, [{ DesiredState: 'running', Spec: { ContainerSpec: { Image: 'app:1', Env: ['VERSION=v2'], Command: ['sh', '-c', 'old'] } } }])).to.deep.equal({ state: 'updating', message: null, revision: 3 });
  });
});
