import { expect } from 'chai';
import { manifestFormat, readManifest, manifestPrivileges } from '../../../drivers/kubernetes/manifest-format.js';
import { projectNamespace } from '../../../drivers/kubernetes/names.js';

// A project's namespace on a Kubernetes cluster (docs/tenancy.md "Manifests inside their project"):
// its name, and hangar's check of a non-admin's manifest against it.

describe('Kubernetes project namespaces', () => {
  it('names a project namespace hangar-project-<name>; a name too long for a DNS label is cut and followed by a hash of it, so two long names never share one', () => {
    expect(projectNamespace('team-a')).to.equal('hangar-project-team-a');
    expect(manifestFormat.namespaceOf!({ id: 'prj-x', name: 'shop' })).to.equal('hangar-project-shop');
    const long = 'a'.repeat(60);
    const other = `${'a'.repeat(59)}b`;
    for (const name of [long, other]) {
      const ns = projectNamespace(name);
      expect(ns).to.have.length.at.most(63).and.match(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
      expect(ns).to.match(/^hangar-project-a+-[0-9a-f]{8}$/);
    }
    expect(projectNamespace(long)).to.not.equal(projectNamespace(other));
    expect(projectNamespace('system'), 'never hangar-system, where hangar’s ingress controller lives').to.equal('hangar-project-system');
  });

  it('confines a manifest to the service’s namespace: objects that name none go there, another one (default too) and an inventory’s name are refused', () => {
    const objects = readManifest(
      [
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n',
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: hangar-project-team-a}\n',
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\n',
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hangar-bundle-hangar-web}\n',
      ].join('---\n'),
    );
    expect(manifestPrivileges(objects, 'hangar-project-team-a')).to.deep.equal([
      "ConfigMap default/c metadata.namespace: namespace default is for installation admins (this service's objects go in hangar-project-team-a: name it or leave namespace out)",
      "ConfigMap hangar-project-team-a/hangar-bundle-hangar-web metadata.name: the names hangar-bundle-… are hangar's (the objects a service applied)",
    ]);
    expect(manifestPrivileges(objects.slice(2, 3)), 'a service made before: default').to.deep.equal([]);
  });
});
