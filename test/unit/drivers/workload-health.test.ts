import { expect } from 'chai';
import type { KubeContext } from '../../../drivers/kubernetes/client.js';
import { deploymentOf, DRAIN_SECONDS } from '../../../drivers/kubernetes/workloads.js';
import type { SwarmContext } from '../../../drivers/swarm/client.js';
import { serviceSpecOf } from '../../../drivers/swarm/workloads.js';
import { healthFault, type WorkloadSpec } from '../../../core/orchestrator.js';
import { specDiff } from '../../../core/clusters/revisions.js';
import { renderCompose } from '../../../drivers/swarm/compose.js';
import { withReadiness } from '../../../drivers/kubernetes/manifests.js';
import { parse } from 'yaml';

const base: WorkloadSpec = { name: 'inst-web', role: 'instance', resource_id: 'inst-1', image: 'app:1', replicas: 1 };
const S = 1e9;

/** A declared health check as each backend's driver renders it (issue 29): Docker's healthcheck, Kubernetes' readinessProbe. */
describe('workload health checks in the drivers', () => {
  it('swarm: an HTTP check is the service’s Docker healthcheck (wget, else curl), timings in nanoseconds with defaults filled in', async () => {
    const spec = await serviceSpecOf({} as SwarmContext, { ...base, health: { http: { path: '/healthz?full=1', port: 8080 }, interval_s: 5, start_period_s: 30 } }, {});
    expect(spec.TaskTemplate.ContainerSpec.Healthcheck).to.deep.equal({
      Test: ['CMD-SHELL', "wget -q -O /dev/null 'http://127.0.0.1:8080/healthz?full=1' || curl -fsS -o /dev/null 'http://127.0.0.1:8080/healthz?full=1'"],
      Interval: 5 * S,
      Timeout: 5 * S,
      Retries: 3,
      StartPeriod: 30 * S,
    });
  });

  it('swarm: a TCP check connects with nc, a command runs as it is; none declared leaves the image’s own HEALTHCHECK', async () => {
    const tcp = await serviceSpecOf({} as SwarmContext, { ...base, health: { tcp: { port: 5432 }, retries: 5 } }, {});
    expect(tcp.TaskTemplate.ContainerSpec.Healthcheck).to.include({ Retries: 5 }).and.deep.include({ Test: ['CMD-SHELL', 'nc -z 127.0.0.1 5432'] });
    const command = await serviceSpecOf({} as SwarmContext, { ...base, health: { command: ['pg_isready', '-q'] } }, {});
    expect(command.TaskTemplate.ContainerSpec.Healthcheck.Test).to.deep.equal(['CMD', 'pg_isready', '-q']);
    const none = await serviceSpecOf({} as SwarmContext, base, {});
    expect(none.TaskTemplate.ContainerSpec).to.not.have.property('Healthcheck');
  });

  it('kubernetes: the Deployment’s container gets the check as its readinessProbe (httpGet, tcpSocket or exec)', () => {
    const ctx = { namespace: 'hangar' } as KubeContext;
    const container = (health: WorkloadSpec['health']) => deploymentOf(ctx, { ...base, health }, {}).spec!.template.spec!.containers[0]!;
    expect(container({ http: { path: '/ready', port: 8080 }, interval_s: 7, timeout_s: 2, retries: 4, start_period_s: 15 }).readinessProbe).to.deep.equal({
      httpGet: { path: '/ready', port: 8080 },
      periodSeconds: 7,
      timeoutSeconds: 2,
      failureThreshold: 4,
      initialDelaySeconds: 15,
    });
    expect(container({ tcp: { port: 6379 } }).readinessProbe).to.deep.equal({ tcpSocket: { port: 6379 }, periodSeconds: 10, timeoutSeconds: 5, failureThreshold: 3, initialDelaySeconds: 0 });
    expect(container({ command: ['cat', '/tmp/ready'] }).readinessProbe).to.include({ periodSeconds: 10 }).and.deep.include({ exec: { command: ['cat', '/tmp/ready'] } });
    expect(container(undefined)).to.not.have.property('readinessProbe');
  });

  it('a service’s checks by part: a compose service’s healthcheck (over the file’s own), a manifest Deployment’s first container’s readinessProbe', () => {
    const text = 'services:\n  web:\n    image: a\n    healthcheck: {test: [CMD, old]}\n  worker:\n    image: b\n';
    const rendered = parse(renderCompose(text, [], [], { web: { tcp: { port: 80 }, interval_s: 3 } }));
    expect(rendered.services.web.healthcheck).to.deep.equal({ test: ['CMD-SHELL', 'nc -z 127.0.0.1 80'], interval: '3s', timeout: '5s', retries: 3, start_period: '0s' });
    expect(rendered.services.worker).to.not.have.property('healthcheck');
    const deployment = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'web' }, spec: { template: { spec: { containers: [{ name: 'app', image: 'a' }, { name: 'side', image: 'b' }] } } } };
    const probed = withReadiness(deployment, { web: { http: { path: '/', port: 80 } } }) as any;
    expect(probed.spec.template.spec.containers[0].readinessProbe).to.deep.include({ httpGet: { path: '/', port: 80 } });
    expect(probed.spec.template.spec.containers[1]).to.not.have.property('readinessProbe');
    expect(deployment.spec.template.spec.containers[0], 'the manifest object itself is left as it was').to.not.have.property('readinessProbe');
    expect(withReadiness(deployment, { other: { tcp: { port: 1 } } })).to.equal(deployment);
  });

  it('swarm: a declared rollout is the service’s UpdateConfig (defaults start-first, roll back on failure); none keeps stop-first and pause', async () => {
    const rolled = await serviceSpecOf({} as SwarmContext, { ...base, rollout: { parallelism: 2, delay_s: 3, max_failure_ratio: 0.5 } }, {});
    expect(rolled.UpdateConfig).to.deep.equal({ Parallelism: 2, Delay: 3 * S, Order: 'start-first', FailureAction: 'rollback', Monitor: 5 * S, MaxFailureRatio: 0.5 });
    expect(rolled.RollbackConfig).to.deep.equal({ Parallelism: 2, Order: 'start-first', FailureAction: 'pause', Monitor: 5 * S });
    const paused = await serviceSpecOf({} as SwarmContext, { ...base, rollout: { order: 'stop-first', on_failure: 'pause', monitor_s: 30 } }, {});
    expect(paused.UpdateConfig).to.include({ Order: 'stop-first', FailureAction: 'pause', Monitor: 30 * S });
    const plain = await serviceSpecOf({} as SwarmContext, base, {});
    expect(plain.UpdateConfig).to.include({ Order: 'stop-first', FailureAction: 'pause' });
  });

  it('kubernetes: a pod reached through a Service drains before it stops (preStop sleep); one no Service reaches stops at once', () => {
    const ctx = { namespace: 'hangar' } as KubeContext;
    const container = (spec: WorkloadSpec) => deploymentOf(ctx, spec, {}).spec!.template.spec!.containers[0]!;
    const drain = { preStop: { sleep: { seconds: DRAIN_SECONDS } } };
    expect(container({ ...base, exposure: { routed: true, domain: 'web.example.test' } }).lifecycle).to.deep.equal(drain);
    expect(container({ ...base, exposure: { ports: [{ published: 8080, target: 80, protocol: 'tcp' }] } }).lifecycle).to.deep.equal(drain);
    expect(container(base)).to.not.have.property('lifecycle');
  });

  it('swarm: the service (not its tasks) carries hangar’s revision, which a rolled-back spec names', async () => {
    const spec = await serviceSpecOf({} as SwarmContext, { ...base, revision: 4 }, {});
    expect(spec.Labels).to.include({ 'io.hangar.revision': '4' });
    expect(spec.TaskTemplate.ContainerSpec.Labels).to.not.have.property('io.hangar.revision');
    expect((await serviceSpecOf({} as SwarmContext, base, {})).Labels).to.not.have.property('io.hangar.revision');
  });

  it('a check is one probe whose timeout fits its interval', () => {
    expect(healthFault({ tcp: { port: 1 } })).to.equal(null);
    expect(healthFault({ tcp: { port: 1 }, command: ['true'] })).to.deep.equal({ field: '', message: 'give exactly one of http, tcp and command (got tcp and command)' });
    expect(healthFault({ tcp: { port: 1 }, timeout_s: 11 })).to.deep.equal({ field: '.timeout_s', message: 'timeout_s (11) must not exceed interval_s (10)' });
  });
});

describe('spec revision diffs', () => {
  it('lists changed JSON paths with old and new values; hidden paths show (hidden), never their values', () => {
    const before = { image: 'a', env: { A: '1' }, ports: ['80:80/tcp'], manifest: [{ kind: 'Secret', data: { password: 'c2VjcmV0' } }] };
    const after = { image: 'b', env: { A: '1', B: '2' }, ports: ['80:80/tcp', '443:443/tcp'], manifest: [{ kind: 'Secret', data: { password: 'bmV3' } }] };
    const hide = (path: string[]) => path[0] === 'manifest' && path[2] === 'data';
    expect(specDiff(before, after, hide)).to.deep.equal([
      { path: 'env.B', old: null, new: '2' },
      { path: 'image', old: 'a', new: 'b' },
      { path: 'manifest[0].data.password', old: '(hidden)', new: '(hidden)' },
      { path: 'ports[1]', old: null, new: '443:443/tcp' },
    ]);
    expect(specDiff(before, before)).to.deep.equal([]);
    expect(specDiff({ 'odd key': { x: null } }, {})).to.deep.equal([]);
    expect(specDiff({}, { 'odd key': 1 })).to.deep.equal([{ path: '["odd key"]', old: null, new: 1 }]);
  });
});
