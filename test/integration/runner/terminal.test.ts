import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { BIN, hangarCli, storageEnv, TempDirs, waitFor, type CliResult } from './support.js';

const PRELOAD = `
export const answer = 42;
export default function (t) {
  return { twice: (x) => x * 2, dialectSeen: t.store.dialect };
}
`;

const HELPERS = `
export const fromHelpers = 'helpers ran';
export default (t) => ({ helperTables: async () => (await t.run('Store::tables')).length > 0 });
`;

describeEachDialect('hangar terminal (driven through stdin)', (dialect) => {
  const temp = new TempDirs();
  let env: Record<string, string | undefined>;
  let dir: string;

  const terminal = (lines: string[], args: string[] = [], extraEnv: Record<string, string | undefined> = {}): Promise<CliResult> =>
    hangarCli(['terminal', ...args], { env: { ...env, ...extraEnv }, input: `${lines.join('\n')}\n` });

  before(() => {
    env = storageEnv(dialect);
    dir = temp.make();
    writeFileSync(path.join(dir, 'preload.mjs'), PRELOAD);
    writeFileSync(path.join(dir, 'helpers.mjs'), HELPERS);
  });
  after(() => temp.cleanup());

  it('qq("select 1") prints the rows as a table; each line is awaited before the next', async () => {
    const res = await terminal([
      'qq("select 1 as one, null as empty")',
      'qq("select ? as said", ["hi"])',
      'const rows = await query("select 2 as two")',
      'rows[0].two * 10',
    ]);
    expect(res.stderr).to.equal('');
    expect(res.code).to.equal(0);
    expect(res.stdout).to.equal(
      ['one | empty', '----+------', '1   | NULL', '(1 row)', 'said', '----', 'hi', '(1 row)', '20', ''].join('\n'),
    );
  });

  it('preloads the executor, the store, the services and the runner classes', async () => {
    const res = await terminal([
      'store.dialect',
      'store.schema',
      '(await executor("hangar_migrations").where("id", "core/001_certificates").select("id"))[0].id',
      'services.plugins.includes("iam")',
      'typeof plugin("iam").login',
      '(await Store.tables()).includes("hangar_migrations")',
      'await run("Runner::add", 2, 3)',
      'bin_to_uuid(uuid_to_bin("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))',
      'uuid_to_bin("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").length',
      'dump({ a: { b: { c: { d: { e: 1 } } } } })',
    ]);
    expect(res.stderr).to.equal('');
    const schema = dialect.name === 'postgres' ? `'${env.HANGAR_DATABASE__SCHEMA}'` : 'null';
    expect(res.stdout.split('\n')).to.deep.equal([
      `'${dialect.name}'`,
      schema,
      "'core/001_certificates'",
      'true',
      "'function'",
      'true',
      '5',
      "'0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'",
      '16',
      '{',
      '  a: {',
      '    b: { c: { d: { e: 1 } } }',
      '  }',
      '}',
      '',
    ]);
  });

  it('runs --preload modules before the prompt: their exports and what their default function returns', async () => {
    const res = await terminal(['answer', 'twice(answer)', 'dialectSeen'], ['--preload', path.join(dir, 'preload.mjs')]);
    expect(res.stderr).to.equal('');
    expect(res.stdout).to.equal(`42\n84\n'${dialect.name}'\n`);
  });

  it('runs the project helper script first: config/terminal.ts by default, another by option or configuration, none with --no-helpers', async () => {
    const byDefault = await terminal(['typeof migrations', 'migrations()']);
    expect(byDefault.stdout).to.match(/^'function'\nid +\| applied_at\n-+\+-+\ncore\/001_certificates +\| \d{4}-/);
    const byOption = await terminal(['fromHelpers', 'await helperTables()', 'typeof migrations'], ['--helpers', path.join(dir, 'helpers.mjs')]);
    expect(byOption.stdout).to.equal("'helpers ran'\ntrue\n'undefined'\n");
    const byConfig = await terminal(['fromHelpers'], [], { HANGAR_TERMINAL__HELPERS: path.join(dir, 'helpers.mjs') });
    expect(byConfig.stdout).to.equal("'helpers ran'\n");
    const none = await terminal(['typeof migrations'], ['--no-helpers']);
    expect(none.stdout).to.equal("'undefined'\n");
    const missing = await terminal(['1'], ['--helpers', path.join(dir, 'missing.mjs')]);
    expect(missing.code).to.equal(2);
    expect(missing.stderr).to.contain('helper script').and.contain('does not exist');
  });

  it("loads an installed service's environment file (and its rootdir); --env wins over it", async () => {
    const root = temp.make('hangar-root-');
    const app = temp.make('hangar-app-');
    // The service's environment carries the database settings: the terminal finds the store through it alone.
    const serviceEnv = Object.entries({ ...env, GREETING: 'hello from the env file', SHADOWED: 'file' })
      .filter(([, v]) => v !== undefined)
      .flatMap(([k, v]) => ['--env', `${k}=${v}`]);
    const installed = await hangarCli(['install', '--template=systemd', 'report', '--class', 'Clock::now', '--rootdir', app, '--root-prefix', root, ...serviceEnv]);
    expect(installed.code, installed.stderr).to.equal(0);
    const res = await hangarCli(['terminal', 'report', '--root-prefix', root, '--env', 'SHADOWED=option'], {
      env: { HANGAR_DATA_DIR: undefined, HANGAR_DATABASE__URL: undefined, HANGAR_DATABASE__SCHEMA: undefined, NODE_ENV: undefined },
      input: 'process.env.GREETING\nprocess.env.SHADOWED\nprocess.cwd()\nstore.dialect\nqq("select 1 as ok")\n',
    });
    expect(res.stderr).to.equal('');
    expect(res.stdout).to.equal(`'hello from the env file'\n'option'\n'${app}'\n'${dialect.name}'\nok\n--\n1\n(1 row)\n`);
    const unknown = await hangarCli(['terminal', 'nope', '--root-prefix', root], { env });
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.contain('no service named nope is installed');
  });

  it('exit and quit leave the terminal: the lines after them do not run, the exit code is as before them', async function () {
    this.timeout(60_000);
    for (const leave of ['exit', 'quit()']) {
      const res = await terminal(['1 + 1', leave, '"not reached"']);
      expect(res.stderr, leave).to.equal('');
      expect(res.stdout, leave).to.equal('2\n');
      expect(res.code, leave).to.equal(0);
    }
    const failed = await terminal(['throw new Error("bad line")', 'quit', '"not reached"']);
    expect(failed.code).to.equal(1);
    expect(failed.stdout).to.contain('Uncaught Error: bad line').and.not.contain('not reached');
  });

  it('exit leaves the interactive terminal (on a terminal: a pty)', async function () {
    this.timeout(60_000);
    const home = temp.make('hangar-home-');
    // script(1) gives the terminal a pty; its stdin stays open, so nothing but `exit` can end it.
    const child = spawn('script', ['-q', '-e', '-c', `${process.execPath} ${BIN} terminal --no-helpers`, '/dev/null'], {
      env: { ...process.env, ...env, HOME: home, SHELL: '/bin/sh', TERM: 'dumb' } as NodeJS.ProcessEnv,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await waitFor(() => output.includes('hangar> '), 'the prompt', 45_000);
      expect(output).to.contain('hangar terminal —');
      child.stdin.write('exit\r');
      const code = await Promise.race([exited, new Promise<'still running'>((resolve) => setTimeout(() => resolve('still running'), 15_000))]);
      expect(code, `the terminal did not leave on exit:\n${output}`).to.equal(0);
      expect(output).not.to.contain('ReferenceError');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('exits 1 when a line threw (piped input), after running the rest', async () => {
    const res = await terminal(['throw new Error("bad line")', 'await Runner.fail("worse")', '"still here"']);
    expect(res.code).to.equal(1);
    expect(res.stdout).to.contain('Uncaught Error: bad line').and.contain('Uncaught Error: worse').and.contain("'still here'");
  });
});
