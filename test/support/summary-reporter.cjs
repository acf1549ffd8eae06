'use strict';
// Mocha's spec reporter plus the closing lines CI reads (docs/development.md, "Running the tests"):
//
//   excluded: <case> because <why>             one line per case a target cannot run (declared, not run)
//   1203 tests: 1180 passed, 1 failed, 21 not run (a hook failed), 1 skipped; 1 hook failed; 2 excluded
//   1180 passed, 23 failed
//
// The last line is always exactly "N passed, N failed". Its failed count is every failed test, every
// failed hook and every test that did not run because a hook failed (or the run stopped early): a
// before hook that throws must not make its suite's tests vanish from both numbers.
//
// Skips: .mocharc.yml forbids pending tests (forbid-pending), so it.skip, xit and a bare
// this.skip() fail the run. The one way to skip is the loud helper of test/support/requirements.ts
// (requireService / skipLoudly), which prints a SKIPPED line and marks what it skips; this
// reporter lets exactly those through as skipped (counted above) instead of "Pending test forbidden".
const Mocha = require('mocha');

const { Spec } = Mocha.reporters;
const {
  EVENT_HOOK_BEGIN,
  EVENT_HOOK_END,
  EVENT_RUN_END,
  EVENT_SUITE_BEGIN,
  EVENT_SUITE_END,
  EVENT_TEST_END,
  EVENT_TEST_FAIL,
  EVENT_TEST_PENDING,
} = Mocha.Runner.constants;

/** How many of the slowest test files the closing lines name (the CI time budget is managed from them). */
const SLOWEST_FILES = 15;
/** How many of the slowest single tests (hooks not included) they name. */
const SLOWEST_TESTS = 15;

/** Where test/support/requirements.ts keeps what it skipped loudly and the declared exclusions. */
const REGISTRY = Symbol.for('hangar.test.registry');
/** The property requirements.ts sets on a test or suite it skipped loudly: why. */
const LOUD_SKIP = 'hangarLoudSkip';

function registry() {
  globalThis[REGISTRY] ??= { exclusions: [] };
  return globalThis[REGISTRY];
}

/** Why `test` (or a suite above it) was skipped by the loud helper, or undefined. */
function loudSkipOf(runnable) {
  for (let node = runnable; node; node = node.parent) if (node[LOUD_SKIP]) return node[LOUD_SKIP];
  return undefined;
}

/** The test file a runnable (test or hook) was declared in: its own, or its nearest suite's. */
function fileOf(runnable) {
  for (let node = runnable; node; node = node.parent) if (node.file) return node.file;
  return undefined;
}

function allTests(suite, out = []) {
  out.push(...suite.tests);
  for (const child of suite.suites) allTests(child, out);
  return out;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

class SummaryReporter extends Spec {
  constructor(runner, options) {
    super(runner, options);

    // forbid-pending fails every pending test; a loud skip is let through as what it is.
    const fail = runner.fail;
    runner.fail = function (test, err, force) {
      if (force === true && err && err.message === 'Pending test forbidden' && loudSkipOf(test)) {
        test.state = 'pending';
        this.emit(EVENT_TEST_PENDING, test);
        return;
      }
      return fail.call(this, test, err, force);
    };

    // Wall time per test file, hooks included (a lab's start-up is in its before hook).
    const fileStarted = new Map();
    const fileSeconds = new Map();
    runner.on(EVENT_SUITE_BEGIN, (suite) => {
      if (suite.file && !fileStarted.has(suite.file)) fileStarted.set(suite.file, { at: Date.now(), depth: 0 });
      if (suite.file) fileStarted.get(suite.file).depth++;
    });
    runner.on(EVENT_SUITE_END, (suite) => {
      const started = suite.file && fileStarted.get(suite.file);
      if (!started || --started.depth > 0) return;
      fileSeconds.set(suite.file, (fileSeconds.get(suite.file) ?? 0) + (Date.now() - started.at) / 1000);
      fileStarted.delete(suite.file);
    });

    // Time in before/after hooks per file (labs and control planes start there), and each test's own time.
    const hookSeconds = new Map();
    const hookStarted = new Map();
    const endHook = (hook) => {
      const at = hookStarted.get(hook);
      if (at === undefined) return;
      hookStarted.delete(hook);
      const file = fileOf(hook) ?? '(root hooks)';
      hookSeconds.set(file, (hookSeconds.get(file) ?? 0) + (Date.now() - at) / 1000);
    };
    runner.on(EVENT_HOOK_BEGIN, (hook) => hookStarted.set(hook, Date.now()));
    runner.on(EVENT_HOOK_END, endHook);
    const testSeconds = [];
    runner.on(EVENT_TEST_END, (test) => {
      if (typeof test.duration === 'number') testSeconds.push({ test, seconds: test.duration / 1000 });
    });

    let failedHooks = 0;
    runner.on(EVENT_TEST_FAIL, (runnable) => {
      if (runnable.type !== 'hook') return;
      failedHooks++;
      endHook(runnable); // a failed hook emits no "hook end"
    });

    runner.once(EVENT_RUN_END, () => {
      // What the run was asked for (-g / --fgrep / --invert), for tests and exclusions alike.
      const matches = (title) => {
        const grep = runner._grep;
        if (!grep) return true;
        const hit = grep.test(title);
        return runner._invert ? !hit : hit;
      };
      let expected = 0;
      let passed = 0;
      let failedTests = 0;
      let skipped = 0;
      let notRun = 0;
      for (const test of allTests(runner.suite)) {
        if (!matches(test.fullTitle())) continue;
        expected++;
        if (test.state === 'passed') passed++;
        else if (test.state === 'failed') failedTests++;
        else if (test.state === 'pending' || test.isPending()) skipped++;
        else notRun++;
      }
      const cwd = process.cwd() + '/';
      const relative = (file) => file.replace(cwd, '');
      const exclusions = registry().exclusions.filter((e) => matches(e.title));
      const out = [''];
      const slowest = [...fileSeconds].sort((a, b) => b[1] - a[1]).slice(0, SLOWEST_FILES);
      if (slowest.length > 1) {
        const total = [...fileSeconds.values()].reduce((sum, seconds) => sum + seconds, 0);
        out.push(`slowest test files (of ${Math.round(total)} s in ${fileSeconds.size} files):`);
        for (const [file, seconds] of slowest) {
          const hooks = hookSeconds.get(file) ?? 0;
          out.push(`  ${seconds.toFixed(0).padStart(5)} s  ${relative(file)}  (hooks ${hooks.toFixed(0)} s)`);
        }
      }
      const slowTests = testSeconds.sort((a, b) => b.seconds - a.seconds).slice(0, SLOWEST_TESTS);
      if (slowTests.length > 1) {
        out.push(`slowest tests (hooks not included):`);
        for (const { test, seconds } of slowTests) {
          const file = fileOf(test);
          out.push(`  ${seconds.toFixed(1).padStart(6)} s  ${file ? relative(file) : '?'}: ${test.fullTitle()}`);
        }
      }
      for (const e of exclusions) out.push(`excluded: ${e.title} because ${e.because}`);
      const parts = [`${passed} passed`, `${failedTests} failed`];
      if (notRun) parts.push(`${notRun} not run (${failedHooks ? 'a hook failed' : 'the run stopped early'})`);
      if (skipped) parts.push(`${skipped} skipped (see the SKIPPED lines)`);
      let line = `${plural(expected, 'test')}: ${parts.join(', ')}`;
      if (failedHooks) line += `; ${plural(failedHooks, 'hook')} failed`;
      if (exclusions.length) line += `; ${exclusions.length} excluded (listed above)`;
      out.push(line);
      // The line CI reads. Hooks that failed and the tests they kept from running are failures.
      out.push(`${passed} passed, ${failedTests + failedHooks + notRun} failed`);
      process.stdout.write(`${out.join('\n')}\n`);
    });
  }
}

module.exports = SummaryReporter;
