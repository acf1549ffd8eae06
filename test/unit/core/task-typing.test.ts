import { expect } from 'chai';
import { executorFor } from '../../../core/clusters/backend.js';
import { DeployWorkload, ScanUnmanaged } from '../../../core/orchestrator.js';
import { AgentLogs, OsCheckUpdates, OsUpdate } from '../../../core/tasks/host-kinds.js';
import { callPayload } from '../../../core/tasks/kinds.js';
import { isTaskOf, resultOf, type Task, type TaskQueue } from '../../../core/tasks/queue.js';

const task = (kind: string, status: Task['status'], result: unknown) => ({ kind, status, result });

describe('task payloads and results typed by their kinds (core/tasks/queue.ts, core/clusters/backend.ts)', () => {
  it('resultOf answers a completed task’s result for its own kind only', () => {
    const packages = { pending_updates: 3, reboot_required: true };
    expect(resultOf(task(OsUpdate.name, 'completed', packages), OsUpdate)).to.deep.equal(packages);
    expect(resultOf(task(OsUpdate.name, 'completed', packages), OsCheckUpdates), 'another kind').to.equal(undefined);
    expect(resultOf(task(OsUpdate.name, 'failed', null), OsUpdate), 'not completed').to.equal(undefined);
    expect(resultOf(task(OsUpdate.name, 'leased', null), OsUpdate), 'not completed').to.equal(undefined);
    expect(isTaskOf(task(ScanUnmanaged.name, 'pending', null), ScanUnmanaged)).to.equal(true);
    expect(isTaskOf(task(ScanUnmanaged.name, 'pending', null), AgentLogs)).to.equal(false);
  });

  it('a driver call’s payload is its backend and its input; an executor is kept under its kind’s name', () => {
    const spec = { name: 'web', role: 'instance', resource_id: 'inst-1', image: 'busybox', replicas: 1 } as const;
    expect(callPayload(DeployWorkload, 'swarm', { spec })).to.deep.equal({ backend: 'swarm', spec });
    const [kind, run] = executorFor(AgentLogs, async ({ payload }) => ({ lines: [String(payload.lines ?? payload.since)] }));
    expect(kind.name).to.equal('agent.logs');
    expect(run).to.be.a('function');
  });

  // Never called: what the compiler must refuse (npm run typecheck fails when a line below compiles).
  function _mustNotCompile(tasks: TaskQueue) {
    // @ts-expect-error a payload field its kind does not declare the type of (lines is a number)
    void tasks.enqueue({ nodeId: 'node-1', kind: AgentLogs, payload: { lines: 'all' } });
    // @ts-expect-error a driver call's payload names its backend
    void tasks.enqueue({ nodeId: 'node-1', kind: DeployWorkload, payload: { spec: { name: 'web', role: 'instance', resource_id: 'inst-1', image: 'busybox', replicas: 1 } } });
    // @ts-expect-error a kind by name goes through enqueueNamed
    void tasks.enqueue({ nodeId: 'node-1', kind: 'agent.logs', payload: {} });
    // @ts-expect-error the result of os.update has no resources
    void resultOf(task(OsUpdate.name, 'completed', {}), OsUpdate)?.resources;
    executorFor(AgentLogs, async ({ payload }) => {
      // @ts-expect-error agent.logs has no payload field folder
      void payload.folder;
      return { lines: [] };
    });
  }
  void _mustNotCompile;
});
