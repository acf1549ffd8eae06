import { expect } from 'chai';
import { versionInfo } from '../../../core/version.js';
import { TASKS } from '../../../core/tasks/migrations.js';
import { SERVICES } from '../../../plugins/services/migrations.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../../support/identity.js';

// What a bundle may ask of the machines (docs/tenancy.md): a project's deployer deploys workloads,
// not root on the project's nodes. The clusters here are records whose manager no agent answers for:
// an accepted service is a pending task, a refused one leaves no service and no task.
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const NOW = '2025-01-01T00:00:00.000Z';
const GOOD = 'services:\n  web: {image: busybox}\n';
const web = (fields: string, topLevel = '') => `services:\n  web: {image: busybox, ${fields}}\n${topLevel}`;
const ADMINS = 'is for installation admins';

/** A compose file of a deployer: each refused with a 400 naming the part. */
const COMPOSE_CASES: Array<[string, string]> = [
  [web('volumes: ["/:/host"]'), `services.web.volumes[0]: a bind mount of a host path (/) ${ADMINS}; use a hangar volume`],
  [web('volumes: [/var/run/docker.sock:/var/run/docker.sock]'), 'services.web.volumes[0]: a bind mount of a host path (/var/run/docker.sock)'],
  [web('volumes: [{type: bind, source: /etc, target: /etc}]'), 'services.web.volumes[0]: a bind mount of a host path (/etc)'],
  [web('privileged: true'), `services.web.privileged: a privileged container ${ADMINS}`],
  [web('cap_add: [SYS_ADMIN]'), `services.web.cap_add: adding capabilities (SYS_ADMIN) ${ADMINS}`],
  [web('devices: ["/dev/sda:/dev/sda"]'), 'services.web.devices: a device of the host (/dev/sda:/dev/sda)'],
  [web('network_mode: host'), `services.web.network_mode: sharing the network namespace of the host (host) ${ADMINS}`],
  [web('pid: host'), 'services.web.pid: sharing the pid namespace of the host'],
  [web('ipc: "container:other"'), 'services.web.ipc: sharing the ipc namespace of another container (container:other)'],
  [web('userns_mode: host'), 'services.web.userns_mode: sharing the userns_mode namespace of the host'],
  [web('security_opt: ["apparmor=unconfined", "no-new-privileges:true"]'), `services.web.security_opt: a security option (apparmor=unconfined) ${ADMINS}`],
  [web('cgroup_parent: /'), 'services.web.cgroup_parent: a cgroup of the host'],
  [web('volumes_from: ["container:db"]'), "services.web.volumes_from: another container's volumes"],
  [web('volumes: ["data:/data"]', 'volumes:\n  data: {driver_opts: {type: none, o: bind, device: /}}\n'), 'volumes.data.driver_opts: a volume with driver options'],
  [web('networks: [hostnet]', 'networks:\n  hostnet: {external: true, name: host}\n'), `networks.hostnet: the host's network ${ADMINS}`],
];

const manifest = (...docs: string[]) => docs.join('---\n');
const deployment = (pod: string, namespace = '') =>
  `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x${namespace ? `, namespace: ${namespace}` : ''}}\nspec: {template: {spec: ${pod}}}\n`;
const POD = '{containers: [{name: c, image: busybox}]}';
/** The namespace of project team-a's manifest services (docs/tenancy.md). */
const HOME = 'hangar-project-team-a';
/** A pod that meets Pod Security `restricted`, which a project's namespace enforces. */
const SAFE_POD =
  '{securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}, containers: [{name: c, image: busybox, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]}';

/** A manifest of a deployer: each refused with a 400 naming the object and its field. */
const MANIFEST_CASES: Array<[string, string]> = [
  [manifest('apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: y}\nroleRef: {kind: ClusterRole, name: cluster-admin}\n'), 'ClusterRoleBinding y: cluster-scoped objects are for installation admins'],
  [manifest('apiVersion: v1\nkind: Namespace\nmetadata: {name: mine}\n'), 'Namespace mine: cluster-scoped objects are for installation admins'],
  [manifest('apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: rb}\nroleRef: {kind: ClusterRole, name: admin}\n'), `RoleBinding ${HOME}/rb: RBAC objects`],
  [manifest('apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n'), `Widget ${HOME}/w: kind Widget of example.com/v1 is for installation admins`],
  [deployment(POD, 'kube-system'), `Deployment kube-system/x metadata.namespace: namespace kube-system ${ADMINS} (this service's objects go in ${HOME}: name it or leave namespace out)`],
  [deployment(POD, 'default'), `Deployment default/x metadata.namespace: namespace default ${ADMINS}`],
  [manifest('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hangar-bundle-hangar-other}\n'), `ConfigMap ${HOME}/hangar-bundle-hangar-other metadata.name: the names hangar-bundle-… are hangar's`],
  [deployment('{containers: [{name: c, image: busybox}], volumes: [{name: root, hostPath: {path: /}}]}'), `Deployment ${HOME}/x spec.template.spec.volumes[0].hostPath: a path of the host (/) ${ADMINS}`],
  [deployment('{containers: [{name: c, image: busybox, securityContext: {privileged: true}}]}'), `Deployment ${HOME}/x spec.template.spec.containers[0].securityContext.privileged: a privileged container ${ADMINS}`],
  [deployment(`{hostNetwork: true, containers: [{name: c, image: busybox}]}`), `Deployment ${HOME}/x spec.template.spec.hostNetwork: the host's network ${ADMINS}`],
  [deployment('{initContainers: [{name: i, image: busybox, securityContext: {allowPrivilegeEscalation: true, capabilities: {add: [NET_ADMIN]}}}], containers: [{name: c, image: busybox}]}'), 'spec.template.spec.initContainers[0].securityContext.capabilities.add: adding capabilities (NET_ADMIN)'],
  [manifest('apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {hostPID: true, containers: [{name: c, image: busybox}]}\n'), `Pod ${HOME}/p spec.hostPID: the host's processes`],
  [manifest('apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nspec: {volumeName: admins-disk}\n'), `PersistentVolumeClaim ${HOME}/c spec.volumeName: binding a given PersistentVolume (admins-disk) ${ADMINS}`],
  [manifest('apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\n'), `Service ${HOME}/s spec.externalIPs: external IPs ${ADMINS}`],
  // No pod holds a credential it could call the API server with: no other ServiceAccount (hangar applies a project's manifests as a user, which has no token), no projected token.
  [deployment(SAFE_POD.replace('{securityContext', '{serviceAccountName: hangar-project, automountServiceAccountToken: true, securityContext')), `Deployment ${HOME}/x spec.template.spec.serviceAccountName: running as the ServiceAccount hangar-project ${ADMINS}; leave it out (the namespace's default account)`],
  [deployment(SAFE_POD.replace('containers: [{name: c,', 'volumes: [{name: t, projected: {sources: [{serviceAccountToken: {path: token}}]}}], containers: [{name: c,')), `Deployment ${HOME}/x spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken: a ServiceAccount token ${ADMINS}`],
  // Said up front: what Pod Security restricted, enforced in the project's namespace, would refuse.
  [deployment(POD), `Deployment ${HOME}/x spec.template.spec.securityContext.runAsNonRoot: ${HOME} enforces Pod Security restricted: set runAsNonRoot: true (the pod, or every container); Deployment ${HOME}/x spec.template.spec.securityContext.seccompProfile: ${HOME} enforces Pod Security restricted: set seccompProfile: {type: RuntimeDefault} (the pod, or every container); Deployment ${HOME}/x spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation: ${HOME} enforces Pod Security restricted: set allowPrivilegeEscalation: false; Deployment ${HOME}/x spec.template.spec.containers[0].securityContext.capabilities.drop: ${HOME} enforces Pod Security restricted: drop ALL capabilities (capabilities: {drop: [ALL]})`],
  [deployment(SAFE_POD.replace('containers: [{name: c,', 'volumes: [{name: v, nfs: {server: 10.0.0.1, path: /}}], containers: [{name: c, ports: [{containerPort: 80, hostPort: 80}],')), `Deployment ${HOME}/x spec.template.spec.containers[0].ports[0].hostPort: ${HOME} enforces Pod Security restricted: no port of the host (80); Deployment ${HOME}/x spec.template.spec.volumes[0].nfs: ${HOME} enforces Pod Security restricted: no nfs volume`],
];

describeEachDialect('services: what a bundle may ask of the machines (privileged parts are installation admins’)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let deployer: Credentials;
  let adminProjectKey: { accessKeyId: string; secretAccessKey: string };

  const as = (who: Credentials) => (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(who.token) });
  const counts = async () => ({
    services: Number((await t.hangar.store.knex(SERVICES).count({ n: '*' }).first())?.n ?? 0),
    tasks: Number((await t.hangar.store.knex(TASKS).count({ n: '*' }).first())?.n ?? 0),
  });

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'swarms', 'secrets', 'services'] });
    admin = await bootstrapAdmin(t);
    deployer = await createUser(t, admin, { username: 'dana', role: 'user' });
    const project = (await as(admin)('POST', '/v1/projects', { name: 'team-a' })).json.data.id;
    expect((await as(admin)('PUT', `/v1/projects/${project}/members/dana`, { role: 'deployer' })).status).to.equal(201);
    const clusters = [
      { id: 'swarm-privileges', name: 'lab', backend: 'swarm', runtime_id: 'c' },
      { id: 'cluster-privileges', name: 'kube', backend: 'k8s', runtime_id: null },
    ];
    for (const c of clusters) {
      await t.hangar.store.knex('clusters').insert({ ...c, project_id: project, status: 'active', manager_node_id: 'node-nobodyanswers', error: null, created_at: NOW, updated_at: NOW });
    }
    // The manager's agent as its last heartbeat told it (this release's): a bundle placed in a project's
    // namespace goes only to an agent known to honour the placement (core/tasks/kinds.ts fieldsSince).
    await t.hangar.services.tasks.recordCapabilities('node-nobodyanswers', { version: versionInfo.version, kinds: null, backends: ['swarm', 'k8s'] });
    const key = await as(admin)('POST', `/v1/iam/users/${admin.userId}/keys`, { description: 'team-a as owner', project: 'team-a', role: 'owner' });
    expect(key.status, key.text).to.equal(201);
    adminProjectKey = { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key };
  });
  after(() => t?.stop());

  it('compose: a deployer’s host mounts, privileges and host namespaces are 400s naming the part (also by PUT, rollback and an admin’s project key); an admin deploys them', async () => {
    const before = await counts();
    for (const [file, message] of COMPOSE_CASES) {
      const res = await as(deployer)('POST', '/v1/services', { name: 'shop', swarm_id: 'lab', compose_file: b64(file) });
      expect(res.status, `${message}: ${res.text}`).to.equal(400);
      expect(res.json.message, file).to.contain(message);
      expect(res.json.details.map((d: { path: string }) => d.path)).to.deep.equal(['body.compose_file']);
    }
    const byKey = await signed(t, adminProjectKey, 'POST', '/v1/services', { body: { name: 'shop', swarm_id: 'lab', compose_file: b64(COMPOSE_CASES[3]![0]) } });
    expect(byKey.status, `an admin's key limited to a project is no installation admin: ${byKey.text}`).to.equal(400);
    expect(await counts(), 'nothing deployed for a refused file').to.deep.equal(before);

    const clean = await as(deployer)('POST', '/v1/services', { name: 'shop', swarm_id: 'lab', compose_file: b64(GOOD) });
    expect(clean.status, clean.text).to.equal(202);
    for (const [i, [file]] of COMPOSE_CASES.entries()) {
      const res = await as(admin)('POST', '/v1/services', { name: `admins-${i}`, swarm_id: 'lab', compose_file: b64(file) });
      expect(res.status, `${file}: ${res.text}`).to.equal(202);
    }

    // An admin's privileged stack: a deployer may neither replace it with a privileged file nor roll it back to one.
    const id = (await as(admin)('GET', '/v1/services/admins-0')).json.data.id;
    await t.hangar.store.knex(SERVICES).whereIn('id', [id, clean.json.data.id]).update({ status: 'failed' });
    const put = await as(deployer)('PUT', `/v1/services/${clean.json.data.id}`, { compose_file: b64(COMPOSE_CASES[0]![0]) });
    expect(put.status, put.text).to.equal(400);
    expect(put.json.message).to.contain('services.web.volumes[0]: a bind mount of a host path (/)');
    const rollback = await as(deployer)('POST', `/v1/services/${id}/rollback`, { revision: 1 });
    expect(rollback.status, rollback.text).to.equal(400);
    expect(rollback.json.message).to.contain('services.web.volumes[0]: a bind mount of a host path (/)');
    expect((await as(deployer)('PUT', `/v1/services/${id}`, { compose_file: b64(GOOD) })).status, 'the same without it').to.equal(202);
  });

  it('manifests: a deployer’s cluster-scoped, RBAC, other-namespace, unknown-kind and privileged objects are 400s naming the object and field; an admin applies them', async () => {
    const before = await counts();
    for (const [text, message] of MANIFEST_CASES) {
      const res = await as(deployer)('POST', '/v1/services', { name: 'kshop', cluster_id: 'kube', manifest: b64(text) });
      expect(res.status, `${message}: ${res.text}`).to.equal(400);
      expect(res.json.message, text).to.contain(message);
    }
    expect(await counts(), 'nothing deployed for a refused manifest').to.deep.equal(before);
    const clean = manifest(deployment(SAFE_POD), `apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: ${HOME}}\nspec: {ports: [{port: 80}]}\n`);
    const shop = await as(deployer)('POST', '/v1/services', { name: 'kshop', cluster_id: 'kube', manifest: b64(clean) });
    expect(shop.status, shop.text).to.equal(202);
    expect(shop.json.data, 'in its project namespace, applied as the project account').to.deep.include({ namespace: HOME, confined: true });
    const res = await as(admin)('POST', '/v1/services', { name: 'kadmin', cluster_id: 'kube', manifest: b64(manifest(MANIFEST_CASES[0]![0], MANIFEST_CASES[8]![0])) });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data, 'an admin’s: in the project namespace, with the agent’s own credentials').to.deep.include({ namespace: HOME, confined: false });

    // What the agent is asked: the namespace, the project it is made for, and (a deployer's) to act as the project's account.
    // The deploy task is queued by the lifecycle after the 202 answered (both are asked for).
    const deployTasks = () => t.hangar.store.knex(TASKS).where({ kind: 'bundle.deploy', subject: 'cluster-privileges' }).orderBy('created_at');
    await waitFor(async () => (await deployTasks()).length === 2, { what: 'both deploy tasks queued', timeoutMs: 10_000 });
    const rows = await deployTasks();
    const deploys = await Promise.all(rows.map(async (row) => (await t.hangar.services.tasks.get(row.id))!.payload as Record<string, unknown>));
    const project = (await as(admin)('GET', '/v1/projects/team-a')).json.data.id;
    expect(deploys.map((p) => [p.name, p.namespace, p.confined, p.project])).to.deep.equal([
      ['hangar-kshop', HOME, true, { id: project, name: 'team-a' }],
      ['hangar-kadmin', HOME, false, { id: project, name: 'team-a' }],
    ]);

    // A service made before project namespaces (none recorded) stays in default: a deployer cannot change it (409 saying why), an admin can.
    await t.hangar.store.knex(SERVICES).where({ name: 'kshop' }).update({ namespace: null, confined: false, status: 'failed' });
    const legacy = await as(deployer)('PUT', '/v1/services/kshop', { manifest: b64(deployment(POD)) });
    expect(legacy.status, legacy.text).to.equal(409);
    expect(legacy.json.message).to.equal(
      `Service kshop was made before project namespaces and stays in namespace default, where only installation admins apply manifests: ask one to change it, or delete it and create it again to have it in ${HOME}`,
    );
    const byAdmin = await as(admin)('PUT', '/v1/services/kshop', { manifest: b64(deployment(POD)) });
    expect(byAdmin.status, byAdmin.text).to.equal(202);
    expect(byAdmin.json.data).to.deep.include({ namespace: null, confined: false });
  });
});
