import { expect } from 'chai';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs, type CliResult } from '../runner/support.js';

/** `hangar project …` and `hangar configure --project` as an operator runs them: the real bin/hangar.mjs against a control plane in this process. */
describeEachDialect('hangar project, and the project new clusters go in', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let dana: Credentials;
  let env: Record<string, string | undefined>;
  let danaEnv: Record<string, string | undefined>;

  const cli = (args: string[], as = env): Promise<CliResult> => hangarCli(args, { env: as, timeoutMs: 60_000 });
  const ok = async (args: string[], as = env): Promise<string> => {
    const res = await cli(args, as);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(0);
    expect(res.stderr).to.equal('');
    return res.stdout;
  };
  const fails = async (args: string[], message: string, as = env): Promise<void> => {
    const res = await cli(args, as);
    expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(1);
    expect(res.stderr).to.contain(message);
  };

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'projects', 'nodes', 'swarms'] });
    admin = await bootstrapAdmin(t);
    dana = await createUser(t, admin, { username: 'dana', role: 'user' });
    const dir = temp.make('hangar-cli-projects-');
    const ca = path.join(dir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    danaEnv = { ...env, XDG_CONFIG_HOME: temp.make('hangar-cli-dana-'), HANGAR_ACCESS_KEY: dana.accessKeyId, HANGAR_SECRET_KEY: dana.secretAccessKey };
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  it('creates, lists, shows projects and manages their members; a removed member no longer sees it', async function () {
    this.timeout(120_000);
    expect(await ok(['project', 'create', 'web-team', '--description', 'the web team'])).to.match(/^created project web-team \(prj-[0-9a-z]+\)/);
    expect(await ok(['project', 'add-member', 'web-team', 'dana', '--role', 'deployer'])).to.equal('dana is deployer of project web-team\n');
    const members = await ok(['project', 'members', 'web-team']);
    expect(members).to.match(/^user_id\s*\|\s*username\s*\|\s*role/);
    expect(members).to.match(/\| dana\s*\| deployer\s*\|/);
    // dana lists the projects she is in, with her role; she manages no members.
    const list = await ok(['project', 'list'], danaEnv);
    expect(list).to.match(/\| web-team\s*\| deployer\s*\| the web team\s*\|/);
    expect(list).not.to.contain('default');
    expect(await ok(['project', 'show', 'web-team'], danaEnv)).to.match(/^role:\s+deployer$/m);
    await fails(['project', 'add-member', 'web-team', 'dana', '--role', 'owner'], 'HTTP 403: Insufficient permissions', danaEnv);
    await fails(['project', 'add-member', 'web-team', 'dana', '--role', 'king'], 'project web-team has no role king');

    expect(await ok(['project', 'remove-member', 'web-team', 'dana'])).to.equal('removed dana from project web-team\n');
    // A member of no project now: refused before the project is looked up (as one that does not exist would be).
    await fails(['project', 'show', 'web-team'], 'HTTP 403: Insufficient permissions: this needs projects:read, and role user does not grant it', danaEnv);
    expect(await ok(['project', 'list'], danaEnv)).to.equal('no projects (you are a member of none)\n');
  });

  it('configure --project names where new clusters go; --project on a create overrides it; lists narrow with --project', async function () {
    this.timeout(120_000);
    await ok(['configure', '--api-url', t.url, '--access-key', admin.accessKeyId, '--secret-key', admin.secretAccessKey]);
    expect(await ok(['configure', '--project', 'web-team'])).to.contain('project web-team saved to');
    expect(JSON.parse(readFileSync(path.join(env.XDG_CONFIG_HOME!, 'hangar', 'connection.json'), 'utf8')).project).to.equal('web-team');
    await ok(['swarm', 'create', 'web-swarm']);
    await ok(['swarm', 'create', 'other-swarm', '--project', 'default']);
    const web = (await t.request('GET', '/v1/projects/web-team', { headers: bearer(admin.token) })).json.data.id;
    const swarms = (await t.request('GET', '/v1/swarms', { headers: bearer(admin.token) })).json.data;
    expect(swarms.find((s: { name: string }) => s.name === 'web-swarm').project_id).to.equal(web);
    expect(swarms.find((s: { name: string }) => s.name === 'other-swarm').project_id).not.to.equal(web);
    const narrowed = await ok(['swarm', 'list', '--project', 'web-team']);
    expect(narrowed).to.contain('web-swarm');
    expect(narrowed).not.to.contain('other-swarm');
    await fails(['swarm', 'create', 'nowhere', '--project', 'no-such'], 'HTTP 400: Validation failed: body.project_id: no project no-such');

    await fails(['project', 'delete', 'web-team'], 'HTTP 409: Project web-team owns clusters: web-swarm');
    expect(await ok(['configure', '--project', ''])).to.contain('project forgotten');
    await ok(['swarm', 'delete', 'web-swarm']);
    expect(await ok(['project', 'delete', 'web-team'])).to.equal('deleted project web-team\n');
  });
});
