import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../../core/config.js';
import { DIALECTS, TestDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { postgresAvailable, requireService } from '../../support/requirements.js';

/** Where scripts/schemathesis.sh (run by .ci/run and scripts/services.sh) installs the pinned version. */
const ST = process.env.HANGAR_SCHEMATHESIS ?? '/var/cache/hangar-ci/schemathesis/bin/st';
/** The seed: the same cases every run. */
const SEED = Number(process.env.HANGAR_FUZZ_SEED ?? 20260115);
/**
 * What each caller gets. An admin reaches every handler: the coverage phase (boundary and invalid
 * values of every parameter and property) and random cases. A user mostly meets 403s: random cases.
 */
const PLAN = {
  admin: { phases: 'coverage,fuzzing', examples: Number(process.env.HANGAR_FUZZ_EXAMPLES ?? 5) },
  user: { phases: 'fuzzing', examples: Number(process.env.HANGAR_FUZZ_USER_EXAMPLES ?? 5) },
};

interface Outcome {
  requests: number;
  histogram: Record<string, number>;
  serverErrors: string[];
  code: number | null;
  output: string;
}

/** Runs schemathesis on one document as one caller; the statuses come from its HAR report. */
function runSchemathesis(args: { schema: string; base: string; token: string; ca?: string; dir: string; label: string; phases: string; examples: number }): Promise<Outcome> {
  const har = path.join(args.dir, `${args.label}.har`);
  const argv = [
    'run',
    args.schema,
    '--url',
    args.base,
    '--header',
    `Authorization: Bearer ${args.token}`,
    '--max-examples',
    String(args.examples),
    '--seed',
    String(SEED),
    '--phases',
    args.phases,
    // One worker: the same seed gives the same run (and hypothesis's code inspection is not
    // thread-safe on CPython 3.11: "AST constructor recursion depth mismatch").
    '--workers',
    '1',
    '--checks',
    'all',
    // A valid request may still be refused (an id that names nothing is a 404): not a defect.
    '--exclude-checks',
    'positive_data_acceptance,object_level_authorization',
    '--no-shrink',
    // An event stream never ends, so every case of it would wait for schemathesis to give up (about
    // 12 minutes of a run); test/integration/observability/events.test.ts drives it instead.
    '--exclude-path',
    '/v1/events/stream',
    // Creating a backup target sends S3 requests to the endpoint it names: generated host names would
    // be looked up and dialled off this machine. test/integration/backups drives it (bad input too).
    '--exclude-path',
    '/v1/backups/targets',
    // Creating a notification channel resolves the host of the URL it names (the address check against
    // server-side request forgery): generated host names would be looked up off this machine.
    // test/integration/notifications drives it (bad input too); with no channel the rest answer 404.
    '--exclude-path',
    '/v1/notifications/channels',
    '--request-timeout',
    '30',
    '--report',
    'har',
    '--report-har-path',
    har,
    '--output-truncate',
    'true',
    ...(args.ca ? ['--tls-verify', args.ca] : []),
  ];
  return new Promise((resolve, reject) => {
    // In the temporary dir: schemathesis keeps a cache (.schemathesis/) where it runs.
    const child = spawn(ST, argv, { cwd: args.dir, env: { ...process.env, NO_COLOR: '1', SCHEMATHESIS_HOOKS: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c) => (output += c));
    child.stderr.on('data', (c) => (output += c));
    child.on('error', reject);
    child.on('exit', (code) => {
      const histogram: Record<string, number> = {};
      const serverErrors: string[] = [];
      let requests = 0;
      if (existsSync(har)) {
        const entries = (JSON.parse(readFileSync(har, 'utf8')).log?.entries ?? []) as Array<{ request: { method: string; url: string }; response: { status: number } }>;
        for (const entry of entries) {
          requests++;
          const status = String(entry.response.status);
          histogram[status] = (histogram[status] ?? 0) + 1;
          if (entry.response.status >= 500) serverErrors.push(`${entry.response.status} ${entry.request.method} ${entry.request.url}`);
        }
      }
      resolve({ requests, histogram, serverErrors, code, output });
    });
  });
}

/** One dialect's control plane and callers, with its own folder (schemathesis's cache and reports). */
interface Side {
  dialect: TestDialect;
  t: TestHangar;
  admin: Credentials;
  user: Credentials;
  dir: string;
}

// Both dialects side by side, in one suite: each run is one schemathesis process (Python, one core,
// most of the time) driving a control plane that leaves the other core half idle, so the SQLite and
// the PostgreSQL run of each case go at once, against their own control planes, with the same seed
// and the same cases as one after the other (~3/4 of the time on two cores). Both must pass.
describe('schemathesis: the API against its OpenAPI documents [sqlite and postgres side by side]', () => {
  const sides: Side[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  before(async function () {
    this.timeout(120_000);
    requireService(this, existsSync(ST), `schemathesis at ${ST} (bash scripts/schemathesis.sh installs it)`);
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    for (const name of DIALECTS) {
      const dialect = new TestDialect(name);
      const dir = mkdtempSync(path.join(os.tmpdir(), `hangar-fuzz-${name}-`));
      const started: { t?: TestHangar } = {};
      cleanups.push(async () => {
        await started.t?.stop();
        await dialect.cleanup();
        rmSync(dir, { recursive: true, force: true });
      });
      // Every plugin a default configuration loads; no check here: schemathesis does it.
      const t = (started.t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, openApiCheck: false }));
      const admin = await bootstrapAdmin(t);
      const user = await createUser(t, admin, { username: 'fuzz-user', email: 'fuzz-user@example.test' });
      writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
      sides.push({ dialect, t, admin, user, dir });
    }
  });
  after(async function () {
    this.timeout(60_000);
    for (const cleanup of cleanups.splice(0)) await cleanup();
  });

  const documents = [
    { listener: 'control', path: '/v1/openapi.json' },
    { listener: 'login', path: '/openapi.json' },
  ] as const;
  // The user first: the admin's run deletes and changes what it finds (schemathesis reuses ids
  // from earlier answers), the fuzz user among them.
  for (const who of ['user', 'admin'] as const) {
    for (const doc of documents) {
      it(`${doc.listener} API as ${who}: no 5xx, every answer as documented`, async function () {
        this.timeout(1_200_000);
        const outcomes = await Promise.all(
          sides.map((side) => {
            const base = side.t.hangar.url(doc.listener);
            return runSchemathesis({
              schema: `${base}${doc.path}`,
              base,
              token: (who === 'admin' ? side.admin : side.user).token,
              ca: doc.listener === 'control' ? path.join(side.dir, 'ca.pem') : undefined,
              dir: side.dir,
              label: `${doc.listener}-${who}`,
              ...PLAN[who],
            });
          }),
        );
        for (const [i, outcome] of outcomes.entries()) {
          const dialect = sides[i]!.dialect.name;
          const histogram = Object.entries(outcome.histogram).sort().map(([s, n]) => `${s}×${n}`).join(' ');
          console.log(
            `      schemathesis ${doc.listener} API as ${who} [${dialect}] (seed ${SEED}, ${PLAN[who].phases}, ${PLAN[who].examples} examples): ` +
              `${outcome.requests} requests; statuses ${histogram}`,
          );
        }
        for (const [i, outcome] of outcomes.entries()) {
          const dialect = sides[i]!.dialect.name;
          expect(outcome.serverErrors, `[${dialect}] answers with a 5xx status`).to.deep.equal([]);
          expect(outcome.code, `[${dialect}] schemathesis found answers that do not match the document:\n${outcome.output.slice(-6000)}`).to.equal(0);
          expect(outcome.requests, `[${dialect}] requests`).to.be.greaterThan(30);
        }
      });
    }
  }
});
