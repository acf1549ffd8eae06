import { expect } from 'chai';
import { Hangar } from '../../../core/app.js';
import { builtinCatalogue } from '../../../cli/catalogue.js';
import { ConfigError } from '../../../core/errors.js';
import { defineDriverRef } from '../../../core/plugin.js';
import { httpRequest } from '../../../core/http/client.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar } from '../../support/hangar.js';

describeEachDialect('plugins and drivers from configuration', (dialect) => {
  it('serves a plugin loaded by module path, and nothing of it once it is disabled', async () => {
    const storage = dialect.freshStorage();
    const on = await startHangar(dialect, { storage, plugins: ['system', FIXTURE_PLUGIN] });
    try {
      const res = await on.request('GET', '/v1/probe/greeting');
      expect(res.status).to.equal(200);
      expect(res.json.data).to.deep.equal({ greeting: 'hello' });
      const doc = await on.request('GET', '/v1/openapi.json');
      expect(doc.json.paths).to.have.property('/v1/probe/greeting');
    } finally {
      await on.stop();
    }
    const off = await startHangar(dialect, { storage, plugins: ['system'] });
    try {
      const res = await off.request('GET', '/v1/probe/greeting');
      expect(res.status).to.equal(404);
      const doc = await off.request('GET', '/v1/openapi.json');
      expect(doc.json.paths).not.to.have.property('/v1/probe/greeting');
      expect(doc.json.paths).to.have.property('/healthz');
    } finally {
      await off.stop();
    }
  });

  it('hands a plugin its configuration section, defaults filled in and validated', async () => {
    const t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN], overrides: { probe: { greeting: 'ahoy' } } });
    try {
      expect((await t.request('GET', '/v1/probe/greeting')).json.data.greeting).to.equal('ahoy');
    } finally {
      await t.stop();
    }
    const config = dialect.config(undefined, { plugins: ['system', FIXTURE_PLUGIN], probe: { greeting: { text: 'hi' }, loud: true } });
    const err = await Hangar.start({ config, catalogue: builtinCatalogue }).catch((e: Error) => e);
    expect(err).to.be.instanceOf(ConfigError);
    expect((err as Error).message).to.contain('probe.greeting must be string');
    expect((err as Error).message).to.contain('probe.loud is not an allowed property');
  });

  it('refuses an unknown built-in plugin name and a module that is not there', async () => {
    const unknown = await Hangar.start({ config: dialect.config(undefined, { plugins: ['system', 'nosuchplugin'] }), catalogue: builtinCatalogue }).catch((e: Error) => e);
    expect(unknown).to.be.instanceOf(ConfigError);
    expect((unknown as Error).message).to.contain('"nosuchplugin" is neither built in');
    const missing = await Hangar.start({ config: dialect.config(undefined, { plugins: ['./no/such/module.js'] }), catalogue: builtinCatalogue }).catch((e: Error) => e);
    expect(missing).to.be.instanceOf(ConfigError);
    expect((missing as Error).message).to.contain('cannot load plugin module ./no/such/module.js');
  });

  it('sets plugins up after what they declare they need, whatever the order listed; a need no loaded plugin provides stops the start naming it', async () => {
    // Listed backwards: every plugin before the ones it builds on.
    const t = await startHangar(dialect, { plugins: ['cleanup', 'gateway', 's3', 'compute', 'volumes', 'swarms', 'agent-internal', 'nodes', 'iam', 'system'] });
    try {
      const order = t.hangar.services.plugins;
      for (const [user, provider] of [['cleanup', 'volumes'], ['swarms', 'nodes'], ['compute', 'nodes'], ['s3', 'volumes'], ['agent-internal', 'nodes']]) {
        expect(order.indexOf(provider), `${provider} before ${user}`).to.be.lessThan(order.indexOf(user));
      }
      expect((await t.request('GET', '/healthz')).status).to.equal(200);
    } finally {
      await t.stop();
    }
    const lacking = await Hangar.start({ config: dialect.config(undefined, { plugins: ['system', 'iam', 'nodes', 's3'] }), catalogue: builtinCatalogue }).catch((e: Error) => e);
    expect(lacking).to.be.instanceOf(ConfigError);
    expect((lacking as Error).message).to.match(/^plugin s3 needs .* \(volumes\), which no loaded plugin provides: add the plugin that provides it to plugins:$/);
  });

  it('loads a third-party driver by module path and gives it the services', async () => {
    const t = await startHangar(dialect, { plugins: ['system'], overrides: { drivers: ['test/support/fixtures/probe-driver.ts'] } });
    try {
      const driver = t.hangar.services.drivers.get(defineDriverRef<{ describe(): string }>('probe-driver'));
      expect(driver.describe()).to.equal(`probe driver on ${dialect.name}`);
      expect(t.hangar.services.drivers.names()).to.deep.equal(['probe-driver']);
      expect(() => t.hangar.services.drivers.get(defineDriverRef('swarm'))).to.throw('driver "swarm" is not loaded');
    } finally {
      await t.stop();
    }
  });

  it('runs migrations once: a restart on the same store applies nothing again and keeps the data', async () => {
    const storage = dialect.freshStorage();
    const first = await startHangar(dialect, { storage, plugins: ['system', FIXTURE_PLUGIN] });
    let migrations: unknown[];
    try {
      await first.request('POST', '/v1/probe/things', { body: { id: 'keep-me', label: 'x', active: true, created_at: new Date().toISOString() } });
      migrations = await first.hangar.store.knex('hangar_migrations').select('id', 'applied_at').orderBy('id');
      expect(migrations.map((m: any) => m.id)).to.deep.equal(['core/001_certificates', 'core/002_tasks', 'core/003_rate_limits', 'core/004_store_notices', 'core/005_keyring', 'core/006_leader_leases', 'core/007_agent_capabilities', 'core/008_clusters', 'core/009_store_probe', 'core/010_spec_revisions', 'core/011_cluster_projects', 'core/012_member_readiness', 'core/013_task_progress', 'core/014_reactions', 'core/015_reaction_attempts', 'probe/001_things']);
    } finally {
      await first.stop();
    }
    const second = await startHangar(dialect, { storage, plugins: ['system', FIXTURE_PLUGIN] });
    try {
      const again = await second.hangar.store.knex('hangar_migrations').select('id', 'applied_at').orderBy('id');
      expect(again).to.deep.equal(migrations);
      expect(second.logs.some((l) => l.includes('migrations applied'))).to.equal(false);
      const list = await second.request('GET', '/v1/probe/things');
      expect(list.json.data.map((d: { id: string }) => d.id)).to.deep.equal(['keep-me']);
    } finally {
      await second.stop();
    }
  });

  it('shuts down gracefully: a request in flight is answered before the listener closes', async () => {
    const t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN] });
    const url = t.url;
    const started = Date.now();
    const pending = t.request('GET', '/v1/probe/wait');
    await new Promise((r) => setTimeout(r, 100));
    await t.stop();
    const res = await pending;
    expect(res.status).to.equal(200);
    expect(res.json.data).to.deep.equal({ ended: 'shutdown' });
    expect(Date.now() - started, 'the held request ends with the shutdown, not its own 5 s timer').to.be.below(4000);
    const after = await httpRequest(`${url}/healthz`, { ca: t.caPem }).catch((e: Error) => e);
    expect(after).to.be.instanceOf(Error);
  });
});

describeEachDialect('health check', (dialect) => {
  it('answers 503 with the error body once the store is down (a round trip vouches for a second)', async () => {
    const t = await startHangar(dialect, { plugins: ['system'] });
    try {
      expect((await t.request('GET', '/healthz')).json.data.store).to.equal(dialect.name);
      await t.hangar.store.knex.destroy();
      const res = await waitFor(async () => {
        const r = await t.request('GET', '/healthz');
        return r.status === 200 ? null : r;
      }, { timeoutMs: 5000, intervalMs: 100, what: 'the health check to notice the store is down' });
      expect(res.status).to.equal(503);
      expect(res.json.error).to.equal('Service Unavailable');
      expect(res.json.message).to.equal('The store is not reachable');
    } finally {
      await t.stop().catch(() => undefined);
    }
  });
});
