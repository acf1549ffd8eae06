import { expect } from 'chai';
import type { WorkloadState, WorkloadTask } from '../../../core/orchestrator.js';
import { judge } from '../../../plugins/compute/index.js';
import type { InstanceRecord } from '../../../plugins/compute/store.js';

const instance = (patch: Partial<InstanceRecord> = {}): InstanceRecord => ({
  id: 'inst-1',
  name: 'api',
  cluster_id: 'swarm-1',
  runtime_name: 'inst-api',
  image: 'nginx:1',
  type: 'small',
  replicas: 2,
  desired: 'running',
  status: 'running',
  reason: null,
  domain: null,
  http_port: null,
  ports: [],
  env: {},
  command: null,
  platform: null,
  gpu: 0,
  volumes: [],
  placement: null,
  running: null,
  observed_at: null,
  created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z',
  op: null,
  op_id: null,
  op_lease_until: null,
  op_rev: 0,
  ...patch,
});
const task = (state: string, updated_at: string, error: string | null = null): WorkloadTask => ({
  runtime_node_id: 'n1',
  state,
  desired_state: 'running',
  message: null,
  error,
  updated_at,
});
const workload = (patch: Partial<WorkloadState> = {}): WorkloadState => ({
  name: 'inst-api',
  labels: {},
  image: 'nginx:1@sha256:abc',
  replicas: 2,
  running: 2,
  tasks: [],
  ports: [],
  limits: { cpus: null, memoryMb: null },
  stack: null,
  ...patch,
});

describe('compute: judging an instance against what the swarm shows', () => {
  it('running when every replica runs (the image digest is ignored)', () => {
    expect(judge(instance(), workload())).to.deep.equal({ status: 'running', reason: null });
  });

  it('drifted when the swarm holds another replica count or image, naming both', () => {
    expect(judge(instance(), workload({ replicas: 3, image: 'nginx:2' }), 'swarm')).to.deep.equal({
      status: 'drifted',
      reason: 'the swarm runs replicas 3 (hangar set 2), image nginx:2 (hangar set nginx:1)',
    });
  });

  it('failed with the newest task error when short of replicas', () => {
    const w = workload({ running: 1, tasks: [task('running', '2026-01-01T00:00:01Z'), task('rejected', '2026-01-01T00:00:05Z', 'No such image'), task('failed', '2026-01-01T00:00:02Z', 'older')] });
    expect(judge(instance(), w)).to.deep.equal({ status: 'failed', reason: '1/2 running; latest task rejected: No such image' });
  });

  it('stopped once nothing runs for a stopped instance; deploying while tasks still stop', () => {
    expect(judge(instance({ desired: 'stopped' }), workload({ replicas: 0, running: 0 }))).to.deep.equal({ status: 'stopped', reason: null });
    expect(judge(instance({ desired: 'stopped' }), workload({ replicas: 0, running: 1 }))).to.deep.equal({ status: 'deploying', reason: 'stopping: 1 task(s) still running' });
  });

  it('a missing service: still deploying while the deploy runs, failed when it ran before', () => {
    expect(judge(instance({ status: 'deploying' }), undefined).status).to.equal('deploying');
    expect(judge(instance(), undefined, 'swarm')).to.deep.include({ status: 'failed' }).and.have.property('reason').that.matches(/missing from the swarm/);
  });

  it('a deploy that failed keeps its own reason when the service never appears', () => {
    const failed = instance({ status: 'failed', reason: 'deploying failed: No such image: nginx:none' });
    expect(judge(failed, undefined)).to.deep.equal({ status: 'failed', reason: 'deploying failed: No such image: nginx:none' });
  });

  it('a rollout: rolling_out while it goes, rolled_back naming the revision that runs (or the previous one when the runtime does not say), paused', () => {
    expect(judge(instance(), workload({ running: 1, rollout: { state: 'updating', message: null, revision: 3 } }), 'cluster')).to.deep.equal({ status: 'rolling_out', reason: '1/2 running, rolling out revision 3' });
    expect(judge(instance(), workload({ rollout: { state: 'rollback_completed', message: 'the new pods of revision 3 did not become available within 17 s', revision: 2 } }))).to.deep.equal({
      status: 'rolled_back',
      reason: 'the cluster rolled the update back: the new pods of revision 3 did not become available within 17 s; what runs is revision 2',
    });
    expect(judge(instance(), workload({ rollout: { state: 'rollback_started', message: null } }), 'swarm')).to.deep.equal({ status: 'rolled_back', reason: 'the swarm rolled the update back; what runs is the previous revision' });
    expect(judge(instance(), workload({ rollout: { state: 'paused', message: 'update paused', revision: 3 } }), 'swarm').status).to.equal('paused');
    expect(judge(instance({ desired: 'stopped' }), workload({ replicas: 0, running: 0, rollout: { state: 'updating', message: null } })).status, 'a stop is no rollout').to.equal('stopped');
  });

  it('terminating is left alone whatever the swarm shows', () => {
    expect(judge(instance({ status: 'terminating', reason: 'x' }), workload())).to.deep.equal({ status: 'terminating', reason: 'x' });
  });
});
