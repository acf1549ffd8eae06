import { expect } from 'chai';
import { Value } from '@sinclair/typebox/value';
import { agentTaskKinds, builtinExecutors } from '../../../agent/executors/index.js';
import { BUNDLE_PLACEMENT_VERSION, CreateObject, DeployBundle, DeployWorkload, InspectWorkloads, ORCHESTRATOR_CALLS } from '../../../core/orchestrator.js';
import { SwarmJoin } from '../../../drivers/swarm/membership-calls.js';
import { AgentLogs, HOST_KINDS, OsUpdate } from '../../../core/tasks/host-kinds.js';
import { cannotRun, defineTaskKind, isDriverCall, LANES, TaskKindRegistry } from '../../../core/tasks/kinds.js';
import { compareVersions, versionInfo } from '../../../core/version.js';
import { Type } from '@sinclair/typebox';

describe('typed task kinds (core/tasks/kinds.ts)', () => {
  const registry = agentTaskKinds();

  it('the agent has an executor for every kind it advertises, and every kind runs in a known lane', () => {
    const executors = builtinExecutors();
    for (const kind of registry.all()) {
      expect(executors.has(kind.name), `executor for ${kind.name}`).to.equal(true);
      expect(LANES).to.include(kind.lane);
    }
    expect([...executors.keys()].sort()).to.deep.equal(registry.names());
  });

  // That the agent runs the lanes side by side (an orchestrator call and a log read finish while an
  // OS package check holds its lane) is the agent's, tested with a real one in
  // test/integration/nodes/agents.test.ts ('runs lanes side by side').
  it('declares OS upgrades, orchestrator calls and observation reads in three different lanes', () => {
    expect(OsUpdate.lane).to.equal('maintenance');
    expect(DeployWorkload.lane).to.equal('orchestrator');
    expect(InspectWorkloads.lane, 'observation reads are not in the deploys’ lane').to.equal('reads');
    expect(new Set([OsUpdate.lane, DeployWorkload.lane, InspectWorkloads.lane]).size).to.equal(3);
  });

  it('checks a payload against its kind and says what is wrong, path by path', () => {
    expect(registry.checkPayload(AgentLogs, { lines: 5 })).to.equal(null);
    expect(registry.checkPayload(AgentLogs, { lines: 0 })).to.equal('payload.lines must be >= 1');
    expect(registry.checkPayload(DeployWorkload, { backend: 'swarm', spec: { name: 'x', role: 'instance', resource_id: 'inst-1', image: 'busybox' } })).to.equal(
      'payload.spec.replicas is required',
    );
    expect(registry.checkPayload(SwarmJoin, { backend: 'swarm', remote_addresses: [], token: 't', advertise_address: null })).to.equal(
      'payload.remote_addresses must NOT have fewer than 1 items',
    );
  });

  it('checks what an agent answers: the answer the control plane used to trip over is refused by name', () => {
    // Once surfaced as "Cannot read properties of undefined (reading 'reduce')" in the API.
    expect(registry.checkResult(InspectWorkloads, { workloads: [{ name: 'w' }] })).to.contain('result.workloads[0].tasks is required');
    expect(registry.checkResult(CreateObject, {})).to.equal('result.id is required');
    expect(registry.checkResult(CreateObject, { id: 'abc' })).to.equal(null);
  });

  it('the smallest answer each result schema accepts is valid (what test doubles answer by default)', () => {
    for (const kind of registry.all()) expect(registry.checkResult(kind, Value.Create(kind.result)), kind.name).to.equal(null);
  });

  it('driver calls carry the backend and their named input; their payload schema is both', () => {
    expect(isDriverCall(DeployWorkload)).to.equal(true);
    expect(isDriverCall(OsUpdate)).to.equal(false);
    expect(ORCHESTRATOR_CALLS.map((c) => c.method)).to.include.members(['deployWorkload', 'createObject', 'scanUnmanaged']);
    expect(registry.checkPayload(CreateObject, { kind: 'secret', name: 'n', data: 'eA==', labels: {} })).to.equal('payload.backend is required');
    expect(CreateObject.input.properties.data, 'secret values are marked for sealing and redaction').to.include({ sensitive: true });
  });

  it('refuses a second, different kind under a taken name; registering the same one twice is fine', () => {
    const r = new TaskKindRegistry([...HOST_KINDS]);
    expect(() => r.register(AgentLogs)).not.to.throw();
    const impostor = defineTaskKind({ name: 'agent.logs', description: 'x', lane: 'reads', minAgentVersion: '0.1.0', payload: Type.Object({}), result: Type.Object({}) });
    expect(() => r.register(impostor)).to.throw('task kind agent.logs is defined twice');
    expect(() => r.require('no.such-kind')).to.throw(/unknown task kind "no.such-kind"/);
  });

  describe('what an agent can run (cannotRun)', () => {
    it('an agent that never sent a heartbeat is judged by itself', () => {
      expect(cannotRun(DeployWorkload, null)).to.equal(null);
    });
    it('an agent older than typed tasks (no kinds list) can run the kinds it had, and is refused the new ones with how to go on', () => {
      const old = { version: '0.1.0', kinds: null, backends: [] };
      expect(cannotRun(OsUpdate, old)).to.equal(null);
      expect(cannotRun(DeployWorkload, old)).to.equal(`its agent (version 0.1.0) is older than workload.deploy needs (${DeployWorkload.minAgentVersion} or later): update the agent first`);
    });
    it('a field added after its kind is refused to an agent older than the field, and only when the task sets it', () => {
      const before = { version: '0.2.0', kinds: null, backends: ['k8s'] };
      expect(cannotRun(DeployBundle, before, { name: 'shop', namespace: 'hangar-project-blue', confined: true })).to.contain("would ignore bundle.deploy's namespace");
      expect(cannotRun(DeployBundle, before, { name: 'shop', confined: true })).to.contain("would ignore bundle.deploy's confined");
      expect(cannotRun(DeployBundle, before, { name: 'shop', confined: false })).to.equal(null);
      expect(cannotRun(DeployBundle, before, { name: 'shop' })).to.equal(null);
      expect(cannotRun(DeployBundle, { ...before, version: BUNDLE_PLACEMENT_VERSION }, { name: 'shop', namespace: 'n', confined: true })).to.equal(null);
      // An agent not heard from yet: judged by itself, but not with a field it may not know.
      expect(cannotRun(DeployBundle, null, { name: 'shop' })).to.equal(null);
      expect(cannotRun(DeployBundle, null, { name: 'shop', confined: true })).to.contain('has not reported its version yet');
    });
    it('a current agent that does not list a kind is refused it', () => {
      const current = { version: versionInfo.version, kinds: ['agent.logs'], backends: ['swarm'] };
      expect(cannotRun(AgentLogs, current)).to.equal(null);
      expect(cannotRun(DeployWorkload, current)).to.contain('does not run workload.deploy');
    });
  });

  it('compares versions part by part, a pre-release before its release', () => {
    expect(compareVersions('0.2.0', '0.1.9')).to.be.greaterThan(0);
    expect(compareVersions('0.10.0', '0.9.0')).to.be.greaterThan(0);
    expect(compareVersions('1.0', '1.0.0')).to.equal(0);
    expect(compareVersions('0.2.0-rc1', '0.2.0')).to.be.lessThan(0);
    expect(compareVersions('v0.2.0', '0.2.0')).to.equal(0);
    expect(compareVersions('0.0.0-fake', '0.1.0')).to.be.lessThan(0);
  });
});
