import { expect } from 'chai';
import { ProjectGrantsRef, ScopeResolvers } from '../../../core/auth/scope.js';
import { ServiceRegistry } from '../../../core/provided.js';
import { Attributor, Viewer, type Audience } from '../../../plugins/events/audience.js';
import type { ScopeGate } from '../../../core/auth/scope.js';

/** Changes attributed to their project: once per record from the store, in the order they came. */
describe('plugins/events audience: the project of a change', () => {
  function setup(projects: Record<string, string>) {
    const provided = new ServiceRegistry();
    const asked: string[][] = [];
    provided.provide(ProjectGrantsRef, { grantsOf: async () => new Map(), find: async () => null });
    provided.contribute(ScopeResolvers, {
      kind: 'service',
      async projectsOf(refs) {
        asked.push([...refs]);
        // The first answer comes last: the order of delivery must not follow it.
        await new Promise((resolve) => setTimeout(resolve, refs.includes('svc-slow') ? 20 : 0));
        return new Map(refs.filter((r) => r in projects).map((r) => [r, projects[r]!]));
      },
      async projectOfRow(row) {
        return typeof row.project === 'string' ? row.project : undefined;
      },
    });
    const attributor = new Attributor(provided, () => {
      throw new Error('no store in this test');
    });
    const delivered: Array<[string, Audience]> = [];
    const change = (table: string, id: string, op: 'insert' | 'update' | 'delete', row?: Record<string, unknown>) =>
      attributor.attribute({ table, id, op, ...(row ? { row } : {}) }, (a) => delivered.push([`${id} ${op}`, a]));
    const settled = () => new Promise((resolve) => setTimeout(resolve, 50));
    return { asked, delivered, change, settled };
  }

  it('asks the store once per record, keeps the answer for its later changes and its deletion, and delivers in order', async () => {
    const { asked, delivered, change, settled } = setup({ 'svc-slow': 'prj-a', 'svc-fast': 'prj-b' });
    change('services', 'svc-slow', 'insert');
    change('nodes', 'node-1', 'update');
    change('services', 'svc-fast', 'insert');
    change('services', 'svc-slow', 'update');
    change('services', 'svc-slow', 'delete');
    await settled();
    expect(delivered).to.deep.equal([
      ['svc-slow insert', { permission: 'services:read', project: 'prj-a' }],
      ['node-1 update', { permission: 'nodes:read' }],
      ['svc-fast insert', { permission: 'services:read', project: 'prj-b' }],
      ['svc-slow update', { permission: 'services:read', project: 'prj-a' }],
      ['svc-slow delete', { permission: 'services:read', project: 'prj-a' }],
    ]);
    expect(asked).to.deep.equal([['svc-slow'], ['svc-fast']]);
  });

  it('attributes to no project what the store does not know (installation roles only), and asks again next time; other tables are for admins', async () => {
    const { asked, delivered, change, settled } = setup({});
    change('services', 'svc-gone', 'update');
    await settled();
    change('services', 'svc-gone', 'update');
    change('spec_revisions', 'rev-1', 'insert');
    await settled();
    expect(delivered.map(([, a]) => a)).to.deep.equal([{ permission: 'services:read', project: null }, { permission: 'services:read', project: null }, { adminOnly: true }]);
    expect(asked).to.have.length(2);
  });

  it('attributes a deletion by the row it removed: a record gone before its project was asked for still reaches its project', async () => {
    const { asked, delivered, change, settled } = setup({});
    // Its update's lookup finds nothing (the row is already gone); the delete says what the row was.
    change('services', 'svc-isob', 'update');
    change('services', 'svc-isob', 'delete', { id: 'svc-isob', project: 'prj-b' });
    await settled();
    expect(delivered).to.deep.equal([
      ['svc-isob update', { permission: 'services:read', project: null }],
      ['svc-isob delete', { permission: 'services:read', project: 'prj-b' }],
    ]);
    expect(asked).to.deep.equal([['svc-isob']]);
  });
});

describe('plugins/events audience: who sees admins\' events', () => {
  const beforeProjects = { active: false } as unknown as ScopeGate;
  const sees = async (principal: Record<string, unknown>) => (await Viewer.of(principal as never, beforeProjects, { permissions: new Set() } as never)).sees({ adminOnly: true });

  it('an admin and an auditor do; a user, a project key and an admin key narrowed to a permission list do not', async () => {
    expect(await sees({ role: 'admin' })).to.equal(true);
    expect(await sees({ role: 'auditor' })).to.equal(true);
    expect(await sees({ role: 'user' })).to.equal(false);
    expect(await sees({ role: 'admin', project_id: 'prj-a' })).to.equal(false);
    // A key made for reading events only: tasks, users and keys are nothing it was given.
    expect(await sees({ role: 'admin', permissions: ['events:read'] })).to.equal(false);
  });
});
