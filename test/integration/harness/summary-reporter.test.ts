import { expect } from 'chai';
import path from 'node:path';
import { runProcess } from '../runner/support.js';

// The test run's own rules (.mocharc.yml and test/support/summary-reporter.cjs), driven the way CI
// drives them: mocha run on fixture files (test/support/fixtures/reporter, not part of the suite),
// reading the lines CI reads and the exit code.

const MOCHA = path.resolve('node_modules/mocha/bin/mocha.js');
const fixture = (name: string) => path.join('test/support/fixtures/reporter', `${name}.fixture.ts`);

async function mocha(file: string | string[], env: Record<string, string | undefined> = {}) {
  const res = await runProcess(process.execPath, [MOCHA, ...[file].flat()], { env: { HANGAR_REQUIRE_ALL: undefined, ...env }, timeoutMs: 60_000 });
  const lines = res.stdout.trimEnd().split('\n');
  return { ...res, lines, last: lines.at(-1), summary: lines.at(-2) };
}

describe('the test run’s summary and rules (.mocharc.yml, the summary reporter)', function () {
  this.timeout(120_000);

  it('counts the tests a failed before hook kept from running, and the last line counts them as failed', async () => {
    const run = await mocha(fixture('hook-failure'));
    expect(run.summary, run.stdout).to.equal('7 tests: 1 passed, 1 failed, 5 not run (a hook failed); 1 hook failed');
    expect(run.last).to.equal('1 passed, 7 failed');
    expect(run.code, 'the run fails').to.not.equal(0);
  });

  it('counts a loud skip (requireService, skipLoudly) as skipped; a bare this.skip() and it.skip fail the run; an exclusion is listed with its reason', async () => {
    const run = await mocha(fixture('skips'));
    expect(run.stdout).to.contain('SKIPPED: a suite without its service — needs the fixture service');
    expect(run.stdout).to.contain('SKIPPED: cases skips loudly — no external address on this machine');
    expect(run.stdout.match(/Pending test forbidden/g), 'the bare this.skip() and the it.skip').to.have.length(2);
    expect(run.lines).to.include('excluded: fixture target: reads a process’s output because the fixture target runs no process');
    expect(run.summary, run.stdout).to.equal('6 tests: 1 passed, 2 failed, 3 skipped (see the SKIPPED lines); 1 excluded (listed above)');
    expect(run.last).to.equal('1 passed, 2 failed');
    expect(run.code).to.not.equal(0);
  });

  it('with HANGAR_REQUIRE_ALL=1 a loud skip fails instead', async () => {
    const run = await mocha(fixture('skips'), { HANGAR_REQUIRE_ALL: '1' });
    expect(run.stdout).to.contain('HANGAR_REQUIRE_ALL=1 but the fixture service is not available (a suite without its service)');
    expect(run.stdout).to.contain('HANGAR_REQUIRE_ALL=1 but this cannot run: no external address on this machine (cases skips loudly)');
    expect(run.summary, run.stdout).to.equal('6 tests: 1 passed, 3 failed, 2 not run (a hook failed); 1 hook failed; 1 excluded (listed above)');
    expect(run.last).to.equal('1 passed, 6 failed');
  });

  it('names the slowest files with their time in hooks, and the slowest tests with their file', async () => {
    const run = await mocha([fixture('timing'), fixture('hook-failure')]);
    const files = run.lines.findIndex((line) => line.startsWith('slowest test files (of '));
    expect(files, run.stdout).to.be.greaterThan(-1);
    // At least the second each the fixture sleeps (lower bounds only).
    expect(run.lines[files + 1], run.stdout).to.match(/^ +[1-9]\d* s {2}test\/support\/fixtures\/reporter\/timing\.fixture\.ts {2}\(hooks [1-9]\d* s\)$/);
    expect(run.lines[files + 2], run.stdout).to.match(/^ +\d+ s {2}test\/support\/fixtures\/reporter\/hook-failure\.fixture\.ts {2}\(hooks \d+ s\)$/);
    const tests = run.lines.indexOf('slowest tests (hooks not included):');
    expect(tests, run.stdout).to.be.greaterThan(files);
    expect(run.lines[tests + 1], run.stdout).to.match(
      /^ +[1-9]\d*\.\d s {2}test\/support\/fixtures\/reporter\/timing\.fixture\.ts: a suite with a slow start a slow case$/,
    );
    expect(run.lines.slice(tests + 1), 'every test that ran is a candidate').to.satisfy((lines: string[]) =>
      lines.some((line) => line.endsWith('hook-failure.fixture.ts: a suite that runs passes')),
    );
    expect(run.last).to.equal('3 passed, 7 failed');
  });

  it('refuses a committed .only', async () => {
    const run = await mocha(fixture('only'));
    expect(run.stdout + run.stderr).to.contain('`.only` forbidden by --forbid-only');
    expect(run.code).to.not.equal(0);
  });
});
