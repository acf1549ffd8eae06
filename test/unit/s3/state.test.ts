import { expect } from 'chai';
import type { WorkloadState, WorkloadTask } from '../../../core/orchestrator.js';
import { observedState } from '../../../plugins/s3/state.js';

const task = (state: string, updated_at: string, extra: Partial<WorkloadTask> = {}): WorkloadTask => ({
  runtime_node_id: 'n1',
  state,
  desired_state: 'running',
  message: null,
  error: null,
  updated_at,
  ...extra,
});
const workload = (running: number, tasks: WorkloadTask[]): WorkloadState => ({
  name: 's3-photos',
  labels: {},
  image: 'minio/minio:latest',
  replicas: 1,
  running,
  tasks,
  ports: [],
  limits: { cpus: null, memoryMb: null },
  stack: null,
});

describe('s3: a store’s status from the swarm’s report', () => {
  it('is running while a task runs, whatever failed before', () => {
    expect(observedState(workload(1, [task('failed', '2024-05-01T10:00:00Z', { error: 'exit 1' }), task('running', '2024-05-01T10:00:05Z')]))).to.deep.equal({ status: 'running', error: null });
  });

  it('is failed with the latest task’s error (by time, nanoseconds and all), or its message', () => {
    const tasks = [
      task('failed', '2024-05-01T10:00:09.5Z', { error: 'task: non-zero exit (1)' }),
      task('rejected', '2024-05-01T10:00:10.123456789Z', { error: 'No such image: minio/minio:latest' }),
    ];
    expect(observedState(workload(0, tasks))).to.deep.equal({ status: 'failed', error: 'No such image: minio/minio:latest' });
    expect(observedState(workload(0, [task('failed', '2024-05-01T10:00:00Z', { message: 'started' })]))).to.deep.equal({ status: 'failed', error: 'started' });
  });

  it('says nothing while a task is still on its way up (the status stays as it was)', () => {
    expect(observedState(workload(0, []))).to.deep.equal({ status: null, error: null });
    expect(observedState(workload(0, [task('failed', '2024-05-01T10:00:00Z', { error: 'x' }), task('starting', '2024-05-01T10:00:04Z')]))).to.deep.equal({ status: null, error: null });
  });
});
