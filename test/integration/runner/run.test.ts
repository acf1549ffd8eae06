import { expect } from 'chai';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { hangarCli, storageEnv, TempDirs } from './support.js';

const PROBE_MJS = `
import { writeFileSync } from 'node:fs';
export class Probe {
  static record(file, ...args) {
    writeFileSync(file, JSON.stringify({ args, env: process.env.PROBE_ENV ?? null, cwd: process.cwd() }));
    return { recorded: args.length };
  }
  static async later(ms = 10) {
    await new Promise((r) => setTimeout(r, ms));
    return 'awaited';
  }
}
export class Counter {
  constructor() { this.base = 40; }
  plus(n) { return this.base + n; }
  _hidden() { return 'no'; }
}
export const tools = { shout: (text) => String(text).toUpperCase() };
export default class Greeter {
  static hello(name = 'world') { return 'hello ' + name; }
}
`;

// A TypeScript class in a directory without "type": "module" (CommonJS to tsx), with declared parameter types.
const TYPED_TS = `
export class Typed {
  static runnerParams = { pair: ['string', 'number'] };
  static pair(label: string, count: number) {
    return { label, label_type: typeof label, count, count_type: typeof count };
  }
}
`;

const BOOTSTRAP_MJS = `
export function register(registry) {
  registry.add('Billing', class Billing {
    static summary = 'registered by a bootstrap file';
    total(...amounts) { return amounts.reduce((a, b) => a + b, 0); }
  });
}
`;

describe('hangar run', () => {
  const temp = new TempDirs();
  let app: string;
  before(() => {
    app = temp.make();
    writeFileSync(path.join(app, 'probe.mjs'), PROBE_MJS);
    writeFileSync(path.join(app, 'typed.ts'), TYPED_TS);
    writeFileSync(path.join(app, 'bootstrap.mjs'), BOOTSTRAP_MJS);
  });
  after(() => temp.cleanup());

  it('converts each --arg by its shape: numbers, booleans, null, JSON, s: strings, the rest strings', async () => {
    const res = await hangarCli([
      'run', 'Runner::types',
      '--arg', '123', '--arg', '-1.5', '--arg=2e3', '--arg', 'true', '--arg', 'false', '--arg', 'null',
      '--arg', '{"a":[1,2]}', '--arg', '[1,"x"]', '--arg', 's:123', '--arg', 's:true', '--arg', 'hello', '--arg', '007',
      '--arg', '9007199254740993', '--arg=', '--arg=-x',
    ]);
    expect(res.stderr).to.equal('');
    expect(res.code).to.equal(0);
    expect(JSON.parse(res.stdout)).to.deep.equal([
      'number', 'number', 'number', 'boolean', 'boolean', 'null', 'object', 'array', 'string', 'string', 'string', 'string', 'string', 'string', 'string',
    ]);
  });

  it('prints strings as they are and everything else as JSON; values arrive converted', async () => {
    const [echo, text, sum] = await Promise.all([
      hangarCli(['run', 'Runner::echo', '--arg', '{"a":{"b":[1,true,null]}}', '--arg', '7']),
      hangarCli(['run', 'Runner::echo', '--arg', 'plain text']),
      hangarCli(['run', 'Runner::add', '--arg', '2', '--arg', '-0.5']),
    ]);
    expect(echo.code).to.equal(0);
    expect(echo.stdout).to.equal(`${JSON.stringify([{ a: { b: [1, true, null] } }, 7], null, 2)}\n`);
    expect(text.stdout).to.equal('plain text\n');
    expect(sum.stdout).to.equal('1.5\n');
  });

  it('converts by the declared parameter type where a class declares one (a string stays a string)', async () => {
    const file = path.join(temp.make(), 'out.txt');
    const res = await hangarCli(['run', 'Runner::write', '--arg', file, '--arg', '123']);
    expect(res.code).to.equal(0);
    expect(readFileSync(file, 'utf8')).to.equal('123');
    const bad = await hangarCli(['run', 'Runner::add', '--arg', 'two', '--arg', '1']);
    expect(bad.code).to.equal(2);
    expect(bad.stderr).to.contain('argument 1 (a) of Runner::add must be a number, got "two"');
  });

  it('refuses an unknown class, naming the registered ones', async () => {
    const res = await hangarCli(['run', 'Nope::thing']);
    expect(res.code).to.equal(2);
    expect(res.stdout).to.equal('');
    expect(res.stderr).to.match(/^hangar run: unknown class "Nope"; registered classes: Runner, Clock, Config, Store, Hangar/);
  });

  it('refuses an unknown or non-public method, naming the methods there are', async () => {
    const methods = ['nope', 'toString', 'constructor'];
    const results = await Promise.all(methods.map((method) => hangarCli(['run', `Runner::${method}`])));
    results.forEach((res, i) => {
      expect(res.code, methods[i]).to.equal(2);
      expect(res.stderr).to.contain(`Runner has no public method "${methods[i]}"; its methods: echo, types, add, sum`);
    });
    const hidden = await hangarCli(['run', 'probe.mjs#Counter::_hidden', '--rootdir', app]);
    expect(hidden.code).to.equal(2);
    expect(hidden.stderr).to.contain('Counter has no public method "_hidden"; its methods: plus');
  });

  it('refuses the wrong number of arguments, saying what the method takes', async () => {
    const [few, many, optional] = await Promise.all([
      hangarCli(['run', 'Runner::add', '--arg', '1']),
      hangarCli(['run', 'Clock::now', '--arg', '1']),
      hangarCli(['run', 'Runner::heartbeat']),
    ]);
    expect(few.code).to.equal(2);
    expect(few.stderr).to.contain('wrong number of arguments: Runner::add(a, b) takes 2 arguments, 1 given');
    expect(many.code).to.equal(2);
    expect(many.stderr).to.contain('Clock::now() takes no arguments, 1 given');
    expect(optional.code).to.equal(2);
    expect(optional.stderr).to.contain('Runner::heartbeat(file, interval_ms?) takes at least 1 argument, 0 given');
  });

  it('reports a thrown error with exit code 1 and no stack trace (the stack with --verbose)', async () => {
    const res = await hangarCli(['run', 'Runner::fail', '--arg', 'disk full']);
    expect(res.code).to.equal(1);
    expect(res.stdout).to.equal('');
    expect(res.stderr).to.equal('hangar run: Runner::fail threw Error: disk full\n');
    const verbose = await hangarCli(['run', 'Runner::fail', '--arg', 'disk full', '--verbose']);
    expect(verbose.code).to.equal(1);
    expect(verbose.stderr).to.match(/\n\s+at .*builtins\.ts/);
  });

  it('refuses an argument that starts like JSON but is not', async () => {
    const res = await hangarCli(['run', 'Runner::echo', '--arg', '{not json']);
    expect(res.code).to.equal(2);
    expect(res.stderr).to.contain('argument 1 (values) of Runner::echo is not valid JSON');
    expect(res.stderr).to.contain('prefix it with s:');
  });

  it("calls the operator's own code: static methods, instance methods, objects, default exports, awaited promises", async () => {
    const out = path.join(temp.make(), 'probe.json');
    const rec = await hangarCli(['run', 'probe.mjs#Probe::record', '--arg', out, '--arg', '1', '--arg', '{"k":"v"}', '--rootdir', app, '--env', 'PROBE_ENV=from --env']);
    expect(rec.stderr).to.equal('');
    expect(JSON.parse(rec.stdout)).to.deep.equal({ recorded: 2 });
    expect(JSON.parse(readFileSync(out, 'utf8'))).to.deep.equal({ args: [1, { k: 'v' }], env: 'from --env', cwd: app });
    const results = await Promise.all([
      hangarCli(['run', 'probe.mjs#Counter::plus', '--arg', '2', '--rootdir', app]),
      hangarCli(['run', 'probe.mjs#tools::shout', '--arg', 'hey', '--rootdir', app]),
      hangarCli(['run', 'probe.mjs#default::hello', '--rootdir', app]),
      hangarCli(['run', 'probe.mjs#Probe::later', '--rootdir', app]),
      hangarCli(['run', `${path.join(app, 'typed.ts')}#Typed::pair`, '--arg', '42', '--arg', '7']),
    ]);
    expect(results.map((r) => r.stdout)).to.deep.equal([
      '42\n',
      'HEY\n',
      'hello world\n',
      'awaited\n',
      `${JSON.stringify({ label: '42', label_type: 'string', count: 7, count_type: 'number' }, null, 2)}\n`,
    ]);
  });

  it('names what is missing in operator code: the module, the export', async () => {
    const noModule = await hangarCli(['run', 'missing.mjs#X::y', '--rootdir', app]);
    expect(noModule.code).to.equal(2);
    expect(noModule.stderr).to.contain(`module missing.mjs does not exist (looked at ${path.join(app, 'missing.mjs')})`);
    const noExport = await hangarCli(['run', 'probe.mjs#Nope::y', '--rootdir', app]);
    expect(noExport.code).to.equal(2);
    expect(noExport.stderr).to.contain('module probe.mjs has no export "Nope"; it exports: Counter, Probe, default, tools');
    const noHash = await hangarCli(['run', './probe.mjs::y', '--rootdir', app]);
    expect(noHash.code).to.equal(2);
    expect(noHash.stderr).to.contain('path/to/module.js#Class::y');
    const badRoot = await hangarCli(['run', 'Clock::now', '--rootdir', path.join(app, 'nowhere')]);
    expect(badRoot.code).to.equal(2);
    expect(badRoot.stderr).to.contain('is not a directory');
  });

  it('loads a --bootstrap file first, which may register classes by name', async () => {
    const res = await hangarCli(['run', 'Billing::total', '--arg', '1', '--arg', '2', '--arg', '3', '--bootstrap', 'bootstrap.mjs', '--rootdir', app]);
    expect(res.stderr).to.equal('');
    expect(res.stdout).to.equal('6\n');
    const list = await hangarCli(['run', '--list', '--bootstrap', path.join(app, 'bootstrap.mjs')]);
    expect(list.stdout).to.contain('Billing — registered by a bootstrap file (bootstrap)\n  Billing::total');
  });

  it('sets --env variables before the method runs', async () => {
    const res = await hangarCli(['run', 'Runner::env', '--arg', 'RUNNER_TEST', '--env', 'RUNNER_TEST=a=b c']);
    expect(res.stdout).to.equal('a=b c\n');
    const bad = await hangarCli(['run', 'Runner::env', '--arg', 'X', '--env', 'NOEQUALS']);
    expect(bad.code).to.equal(2);
    expect(bad.stderr).to.contain('--env "NOEQUALS" must be KEY=VALUE');
  });

  it('--list documents every registered class and method', async () => {
    const res = await hangarCli(['run', '--list']);
    expect(res.code).to.equal(0);
    for (const line of ['Runner::add(a: number, b: number)', 'Clock::now()', 'Config::get(key: string = "")', 'Store::query(sql: string, params: array = [])', 'Hangar::routes()']) {
      expect(res.stdout).to.contain(line);
    }
  });
});

describeEachDialect('hangar run: Store, Hangar and Config against the configured database', (dialect) => {
  let env: Record<string, string | undefined>;
  before(() => {
    env = storageEnv(dialect);
  });

  it('migrates, lists tables and queries with parameters', async () => {
    const dialectRes = await hangarCli(['run', 'Store::dialect'], { env });
    expect(dialectRes.stdout).to.equal(`${dialect.name}\n`);
    const migrate = await hangarCli(['run', 'Hangar::migrate'], { env });
    expect(migrate.code, migrate.stderr).to.equal(0);
    expect(JSON.parse(migrate.stdout)).to.include('core/001_certificates');
    const [tables, query, again] = await Promise.all([
      hangarCli(['run', 'Store::tables'], { env }),
      hangarCli(['run', 'Store::query', '--arg', 'select count(*) as n from hangar_migrations where id like ?', '--arg', '["core/%"]'], { env }),
      hangarCli(['run', 'Hangar::migrate'], { env }),
    ]);
    expect(JSON.parse(tables.stdout)).to.include.members(['hangar_migrations', 'certificates', 'users']);
    expect(Number(JSON.parse(query.stdout)[0].n)).to.be.greaterThan(0);
    expect(JSON.parse(again.stdout)).to.deep.equal([]);
  });

  it('assembles the services without listening (Hangar::routes) and shows configuration with secrets redacted', async () => {
    const routes = await hangarCli(['run', 'Hangar::routes'], { env });
    expect(routes.code, routes.stderr).to.equal(0);
    const list = JSON.parse(routes.stdout) as Array<{ method: string; path: string }>;
    expect(list.map((r) => `${r.method} ${r.path}`)).to.include.members(['GET /healthz', 'POST /v1/bootstrap']);
    const config = await hangarCli(['run', 'Config::get', '--arg', 'database'], { env: { ...env, HANGAR_DATABASE__POOL_MAX: '3' } });
    expect(JSON.parse(config.stdout).pool_max).to.equal(3);
    if (dialect.name === 'postgres') expect(JSON.parse(config.stdout).url).to.match(/^postgres:\/\/[^:]+:\[redacted\]@/);
  });

  it('reports a failing query as an error of the method', async () => {
    const res = await hangarCli(['run', 'Store::query', '--arg', 'select * from no_such_table'], { env });
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^hangar run: Store::query threw \w+: .*no_such_table/);
  });
});
