import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { configFromEnv, loadConfig } from '../../../core/config.js';
import { ConfigError } from '../../../core/errors.js';
import { CoreConfigSchema } from '../../../config/schema.js';

describe('configuration', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-config-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('starts from config/default.yaml: port 8443, SQLite, the system plugin', () => {
    const config = loadConfig({ env: {} });
    expect(config.api.port).to.equal(8443);
    expect(config.database.url).to.equal(null);
    expect(config.plugins).to.include('system');
    expect(path.isAbsolute(config.data_dir)).to.equal(true);
  });

  it('layers environment file, operator file, then HANGAR_* variables, then --data-dir', () => {
    const file = path.join(dir, 'op.yaml');
    writeFileSync(file, 'api:\n  port: 9000\n  server_names: [cp.example.test]\nlog:\n  level: warn\n');
    const config = loadConfig({
      file,
      dataDir: path.join(dir, 'data'),
      env: { NODE_ENV: 'test', HANGAR_API__PORT: '9443', HANGAR_DATABASE__URL: 'postgres://u:p@db/hangar', HANGAR_PLUGINS: 'system, iam' },
    });
    expect(config.env).to.equal('test');
    expect(config.api.port).to.equal(9443);
    expect(config.api.server_names).to.deep.equal(['cp.example.test']);
    expect(config.api.host, 'from config/test.yaml').to.equal('127.0.0.1');
    expect(config.log.level).to.equal('warn');
    expect(config.database.url).to.equal('postgres://u:p@db/hangar');
    expect(config.plugins).to.deep.equal(['system', 'iam']);
    expect(config.data_dir).to.equal(path.join(dir, 'data'));
  });

  it('parses JSON-looking environment values and leaves the rest as strings', () => {
    expect(configFromEnv({ HANGAR_A__B: '12', HANGAR_C: 'true', HANGAR_D: '[1,2]', HANGAR_E: 'plain text', OTHER: 'x' })).to.deep.equal({
      a: { b: 12 },
      c: true,
      d: [1, 2],
      e: 'plain text',
    });
  });

  it('refuses bad configuration with a message naming the key', () => {
    const bad = (env: Record<string, string>) => () => loadConfig({ env });
    expect(bad({ HANGAR_API__PORT: 'eighty' })).to.throw(ConfigError, 'api.port must be integer');
    expect(bad({ HANGAR_API__PORT: '70000' })).to.throw(ConfigError, 'api.port must be <= 65535');
    expect(bad({ HANGAR_LOG__LEVEL: 'chatty' })).to.throw(ConfigError, 'log.level');
    expect(bad({ HANGAR_TASKS__POLL_WAIT_SECONDS: '0' }), 'idle agents would poll without a pause').to.throw(ConfigError, 'tasks.poll_wait_seconds must be >= 1');
    expect(bad({ HANGAR_API__COLOUR: 'blue' })).to.throw(ConfigError, 'api.colour is not an allowed property');
    const file = path.join(dir, 'broken.yaml');
    writeFileSync(file, 'api: [oops');
    expect(() => loadConfig({ file, env: {} })).to.throw(ConfigError, 'cannot read configuration file');
    expect(() => loadConfig({ file: path.join(dir, 'missing.yaml'), env: {} })).to.throw(ConfigError, 'does not exist');
  });
});

describe('docs/configuration.md', () => {
  const docs = readFileSync('docs/configuration.md', 'utf8');
  /** Dotted paths of every leaf setting of a TypeBox object schema. */
  const leaves = (schema: { properties?: Record<string, any> }, prefix = ''): string[] =>
    Object.entries(schema.properties ?? {}).flatMap(([key, sub]) =>
      sub.type === 'object' && sub.properties ? leaves(sub, `${prefix}${key}.`) : [`${prefix}${key}`],
    );

  it('documents every core setting, and describes none as not applied', () => {
    const missing = leaves(CoreConfigSchema).filter((key) => !docs.includes(`\`${key}\``));
    expect(missing).to.deep.equal([]);
    expect(docs).not.to.match(/not applied/i);
  });
});
