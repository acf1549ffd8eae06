import { expect } from 'chai';
import {
  defaultPermission, parsePermission, permitted, permissionsHeld, PROJECT_ROLE_PERMISSIONS, projectPermissionProblems, userGrantsOf, widenedRoutes, type PermissionRoute,
} from '../../../core/auth/permissions.js';

const routes: PermissionRoute[] = [
  { method: 'GET', path: '/v1/services', auth: 'authenticated' },
  { method: 'POST', path: '/v1/services', auth: { role: 'admin' } },
  { method: 'GET', path: '/v1/services/{id}/logs/{taskId}', auth: { role: 'admin' }, permission: 'services:logs' },
  { method: 'GET', path: '/v1/secrets', auth: 'authenticated' },
  { method: 'GET', path: '/metrics', auth: { role: 'metrics' } },
];
const grants = userGrantsOf(routes);

describe('permissions', () => {
  it('derives the default from path and method: kind from the first segment (renamed where the path says it otherwise), verb from the method', () => {
    expect(defaultPermission({ method: 'GET', path: '/v1/nodes/{id}', auth: 'authenticated' })).to.equal('nodes:read');
    expect(defaultPermission({ method: 'DELETE', path: '/v1/nodes/{id}', auth: { role: 'admin' } })).to.equal('nodes:write');
    expect(defaultPermission({ method: 'POST', path: '/v1/services/{id}/stop', auth: { role: 'admin' } })).to.equal('services:deploy');
    expect(defaultPermission({ method: 'GET', path: '/v1/secrets/{id}', auth: 'authenticated' })).to.equal('secrets:read-metadata');
    expect(defaultPermission({ method: 'POST', path: '/v1/swarms', auth: { role: 'admin' } })).to.equal('clusters:write');
    expect(defaultPermission({ method: 'GET', path: '/v1/kubernetes/clusters', auth: 'authenticated' })).to.equal('clusters:read');
    expect(defaultPermission({ method: 'POST', path: '/v1/compute/instances', auth: { role: 'admin' } })).to.equal('instances:deploy');
    expect(defaultPermission({ method: 'PATCH', path: '/v1/iam/users/{id}', auth: { role: 'admin', orSelf: 'id' } })).to.equal('iam:admin');
    expect(defaultPermission({ method: 'GET', path: '/metrics', auth: { role: 'metrics' } })).to.equal('metrics:read');
    expect(defaultPermission({ method: 'POST', path: '/v1/iam/login', auth: 'public' })).to.equal('public:call');
    expect(defaultPermission({ method: 'POST', path: '/v1/internal/heartbeat', auth: 'agent' })).to.equal('agent:call');
  });

  it('admin holds everything but the dedicated metrics:read and agent:call', () => {
    for (const p of ['services:deploy', 'iam:admin', 'nodes:write', 'volumes:restore', 'plugin-kind:write']) expect(permitted({ role: 'admin' }, p, grants), p).to.equal(true);
    expect(permitted({ role: 'admin' }, 'metrics:read', grants)).to.equal(false);
    expect(permitted({ role: 'admin' }, 'agent:call', grants)).to.equal(false);
  });

  it('auditor reads everything and changes nothing (its own account aside)', () => {
    for (const p of ['services:read', 'services:logs', 'secrets:read-metadata', 'iam:read', 'nodes:inspect', 'audit:read', 'account:write']) {
      expect(permitted({ role: 'auditor' }, p, grants), p).to.equal(true);
    }
    for (const p of ['services:deploy', 'iam:admin', 'nodes:write', 'volumes:restore', 'clusters:credentials', 'metrics:read']) {
      expect(permitted({ role: 'auditor' }, p, grants), p).to.equal(false);
    }
  });

  it('user, and roles hangar does not know, hold what routes open to any authenticated caller need', () => {
    for (const role of ['user', 'operator']) {
      expect(permitted({ role }, 'services:read', grants)).to.equal(true);
      expect(permitted({ role }, 'secrets:read-metadata', grants)).to.equal(true);
      expect(permitted({ role }, 'services:deploy', grants)).to.equal(false);
      expect(permitted({ role }, 'services:logs', grants)).to.equal(false);
      expect(permitted({ role }, 'account:read', grants)).to.equal(true);
    }
    expect(permitted({ role: 'metrics' }, 'metrics:read', grants)).to.equal(true);
  });

  it('a credential with its own list holds only what both it and its role grant', () => {
    const key = { role: 'admin', permissions: ['services:read', 'services:deploy'] };
    expect(permitted(key, 'services:deploy', grants)).to.equal(true);
    expect(permitted(key, 'nodes:write', grants)).to.equal(false);
    expect(permitted({ role: 'user', permissions: ['services:deploy'] }, 'services:deploy', grants)).to.equal(false);
  });

  it('lists what a principal holds', () => {
    // As before permissions: a role hangar does not know is a user's, and a route guarded by it is its own.
    expect(permissionsHeld({ role: 'metrics' }, routes, grants)).to.deep.equal(['account:read', 'account:write', 'metrics:read', 'secrets:read-metadata', 'services:read']);
    expect(permissionsHeld({ role: 'user' }, routes, grants)).to.deep.equal(['account:read', 'account:write', 'secrets:read-metadata', 'services:read']);
  });

  it('finds a role-guarded route whose permission an open route shares (it would let users in)', () => {
    expect(widenedRoutes(routes)).to.deep.equal([]);
    expect(widenedRoutes([...routes, { method: 'GET', path: '/v1/services/{id}/secret-thing', auth: { role: 'admin' } }])).to.deep.equal([
      'GET /v1/services/{id}/secret-thing (services:read)',
    ]);
  });

  it('has project roles that grow from viewer to owner', () => {
    const { viewer, deployer, maintainer, owner } = PROJECT_ROLE_PERMISSIONS;
    expect(viewer).to.include.members(['services:read', 'secrets:read-metadata', 'projects:read']).and.not.include('services:deploy');
    expect(deployer).to.include.members([...viewer, 'services:deploy', 'instances:logs']).and.not.include('secrets:write');
    expect(maintainer).to.include.members([...deployer, 'secrets:write', 'volumes:restore', 'clusters:write']).and.not.include('projects:members');
    expect(owner).to.include.members([...maintainer, 'projects:members']);
    expect(owner.filter((p) => p.startsWith('nodes:') || p.startsWith('iam:'))).to.deep.equal([]);
  });

  it('checks a custom role’s list, naming each bad entry', () => {
    expect(projectPermissionProblems(['services:deploy', 'volumes:restore', 'alerts:read'])).to.deep.equal([]);
    expect(projectPermissionProblems(['services', 'nodes:write', 'services:fly'])).to.deep.equal([
      '[0] "services" is not <kind>:<verb>',
      '[1] "nodes:write": nodes is not a project\'s kind (one of alerts, backups, clusters, configs, instances, loadbalancers, object-stores, projects, secrets, services, tags, volumes)',
      '[2] "services:fly": services has the verbs read, deploy, logs',
    ]);
    expect(parsePermission('Services:read')).to.equal(null);
  });
});
