import { expect } from 'chai';
import { ApiException, type V1Pod } from '@kubernetes/client-node';
import type { KubeContext } from '../../../drivers/kubernetes/client.js';
import { setNodeAvailability } from '../../../drivers/kubernetes/nodes.js';

/**
 * The Kubernetes driver's drain when a pod's namespace is being deleted. The API server forbids
 * evicting it (403, cause NamespaceTerminating) until the namespace controller marks it deleted; a
 * drain must wait for that, as kubectl drain does, not fail. The window is a race on a real cluster
 * (the namespace controller marks pods deleted within moments), so no cluster can hold it open on
 * demand: the API server here is a test double answering what the real one answers in it.
 */
describe('the Kubernetes driver’s drain and pods of a namespace being deleted', () => {
  const NODE = 'node-a';
  const terminating = () =>
    new ApiException(
      403,
      'Forbidden',
      {
        kind: 'Status',
        status: 'Failure',
        reason: 'Forbidden',
        message: 'pods "web-1" is forbidden: unable to create new content in namespace shop because it is being terminated',
        details: { name: 'web-1', kind: 'pods', causes: [{ reason: 'NamespaceTerminating', message: 'namespace shop is being terminated', field: 'metadata.namespace' }] },
        code: 403,
      },
      {},
    );

  /** An API server double: one pod on the node whose eviction is forbidden for `refusals` attempts, then marked deleted, then gone. */
  function cluster(refusals: number, forbidden: () => ApiException<unknown> = terminating, options: { stuck?: boolean } = {}) {
    let pod: V1Pod | null = { metadata: { name: 'web-1', namespace: 'shop' }, spec: { nodeName: NODE, containers: [] }, status: { phase: 'Running' } };
    const calls: string[] = [];
    const core = {
      readNode: async () => ({ metadata: { name: NODE }, spec: {} }),
      patchNode: async () => ({}),
      listPodForAllNamespaces: async () => {
        const items = pod ? [pod] : [];
        // Marked deleted, the pod goes at the next look.
        if (pod?.metadata?.deletionTimestamp && !options.stuck) pod = null;
        return { items };
      },
      createNamespacedPodEviction: async () => {
        calls.push('evict');
        if (calls.length <= refusals) throw forbidden();
        pod = { ...pod!, metadata: { ...pod!.metadata, deletionTimestamp: new Date() } };
        return {};
      },
    };
    return { ctx: { core, namespace: 'hangar' } as unknown as KubeContext, calls };
  }

  it('asks again while the namespace is being deleted, then waits for the pod to go: drained', async function () {
    this.timeout(20_000);
    const { ctx, calls } = cluster(2);
    expect(await setNodeAvailability(ctx, NODE, 'drained', 10_000)).to.deep.equal({ availability: 'drained' });
    expect(calls, 'asked again after each refusal').to.have.length(3);
  });

  it('a pod still not deleted when the drain’s time is up fails the drain naming the namespace', async function () {
    this.timeout(20_000);
    const { ctx } = cluster(Infinity);
    const err = await setNodeAvailability(ctx, NODE, 'drained', 1_500).then(
      () => null,
      (e: Error & { statusCode?: number }) => e,
    );
    expect(err?.message).to.match(/^draining node node-a: after 1\.5 s the eviction of shop\/web-1 \(its namespace shop is being deleted and the pod is not deleted yet\) is still refused; the node stays cordoned$/);
    expect(err?.statusCode).to.equal(409);
  });

  it('an evicted pod that never goes (a finalizer holds it) fails the drain when its time is up, not marked drained', async function () {
    this.timeout(20_000);
    const { ctx } = cluster(0, terminating, { stuck: true });
    const err = await setNodeAvailability(ctx, NODE, 'drained', 1_000).then(
      () => null,
      (e: Error & { statusCode?: number }) => e,
    );
    expect(err?.message).to.equal('draining node node-a: after 1 s shop/web-1 is still terminating; the node stays cordoned');
    expect(err?.statusCode).to.equal(409);
  });

  it('any other 403 fails the drain at once with the API server’s reason', async function () {
    const { ctx, calls } = cluster(Infinity, () => new ApiException(403, 'Forbidden', { kind: 'Status', reason: 'Forbidden', message: 'evictions are forbidden for this user', code: 403 }, {}));
    const err = await setNodeAvailability(ctx, NODE, 'drained', 10_000).then(
      () => null,
      (e: Error) => e,
    );
    expect(err?.message).to.equal('draining node node-a: evicting pod shop/web-1: evictions are forbidden for this user');
    expect(calls).to.have.length(1);
  });
});
