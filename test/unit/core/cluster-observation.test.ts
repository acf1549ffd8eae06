import { expect } from 'chai';
import { ClusterObservation, ClusterObservers } from '../../../core/clusters/observation.js';
import { ServiceRegistry } from '../../../core/provided.js';

/**
 * The observation asks each observer for what it will judge before the cluster is asked: a record
 * an operation settles while the question is out is judged as it was read (its revision guards
 * the write), never by reading it after the answer and comparing two machines' clocks.
 */
describe('core/clusters observation: observers read before the cluster is asked', () => {
  it('reads, asks, then judges each cluster in turn; a failed question judges nothing and the next cluster goes on', async () => {
    const steps: string[] = [];
    const provided = new ServiceRegistry();
    provided.contribute(ClusterObservers, async (cluster) => {
      steps.push(`read ${cluster.id}`);
      return async (observed) => void steps.push(`judge ${observed.cluster.id}: ${observed.workloads.map((w) => w.name).join(',')}`);
    });
    const clusters = [{ id: 'swm-a' }, { id: 'swm-b' }, { id: 'swm-c' }];
    const observation = new ClusterObservation({
      clusters: { findAll: async () => clusters } as never,
      directory: { nodeIdsByRuntime: async () => new Map() } as never,
      calls: {
        callOn: async (cluster: { id: string }) => {
          steps.push(`ask ${cluster.id}`);
          if (cluster.id === 'swm-b') throw new Error('the manager is away');
          return { workloads: [{ name: `web-of-${cluster.id}` }] };
        },
      } as never,
      provided,
      log: { warn: (fields: { cluster_id: string }) => void steps.push(`warn ${fields.cluster_id}`) } as never,
      intervalMs: () => 5000,
    });
    await observation.observe(new AbortController().signal);
    expect(steps).to.deep.equal([
      'read swm-a',
      'ask swm-a',
      'judge swm-a: web-of-swm-a',
      'read swm-b',
      'ask swm-b',
      'warn swm-b',
      'read swm-c',
      'ask swm-c',
      'judge swm-c: web-of-swm-c',
    ]);
  });
});
