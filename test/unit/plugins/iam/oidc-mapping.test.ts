import { expect } from 'chai';
import { groupsOf, mapGroups } from '../../../../plugins/iam/oidc/mapping.js';

describe('single sign-on: groups mapped to roles (plugins/iam/oidc/mapping.ts)', () => {
  const settings = {
    roles: [
      { group: 'readers', role: 'auditor' as const },
      { group: 'ops', role: 'admin' as const },
      { group: 'staff', role: 'user' as const },
    ],
    default_role: 'user' as const,
    projects: [
      { group: 'a-dev', project: 'team-a', role: 'deployer' },
      { group: 'a-lead', project: 'team-a', role: 'owner' },
      { group: 'a-view', project: 'team-a', role: 'viewer' },
      { group: 'a-oncall', project: 'team-a', role: 'oncall' },
      { group: 'b-oncall', project: 'team-b', role: 'oncall' },
      { group: 'b-dev', project: 'team-b', role: 'deployer' },
    ],
  };

  it('gives the widest installation role of the groups, else the default, else none', () => {
    expect(mapGroups(settings, ['staff', 'ops', 'readers']).role).to.equal('admin');
    expect(mapGroups(settings, ['staff', 'readers']).role).to.equal('auditor');
    expect(mapGroups(settings, ['unknown']).role).to.equal('user');
    expect(mapGroups({ ...settings, default_role: null }, ['unknown']).role).to.equal(null);
  });

  it('gives in each mapped project the widest built-in role, a custom one only when no built-in matches, and null where no group maps', () => {
    const access = mapGroups(settings, ['a-view', 'a-lead', 'a-dev', 'a-oncall', 'b-oncall']);
    expect(Object.fromEntries(access.projects)).to.deep.equal({ 'team-a': 'owner', 'team-b': 'oncall' });
    expect(Object.fromEntries(mapGroups(settings, ['b-oncall', 'b-dev']).projects)).to.deep.equal({ 'team-a': null, 'team-b': 'deployer' });
    expect(Object.fromEntries(mapGroups(settings, []).projects)).to.deep.equal({ 'team-a': null, 'team-b': null });
  });

  it('reads the groups claim as an array of strings (one string is one group; anything else none)', () => {
    expect(groupsOf({ groups: ['a', 1, 'b'] }, 'groups')).to.deep.equal(['a', 'b']);
    expect(groupsOf({ roles: 'ops' }, 'roles')).to.deep.equal(['ops']);
    expect(groupsOf({ groups: { ops: true } }, 'groups')).to.deep.equal([]);
    expect(groupsOf({}, 'groups')).to.deep.equal([]);
  });
});
