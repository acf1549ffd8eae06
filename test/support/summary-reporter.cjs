'use strict';
// Mocha's spec reporter plus the closing line CI reads: "N passed, N failed" (pending tests, if
// any, are counted on the line before it).
const Mocha = require('mocha');

const { Spec } = Mocha.reporters;
const { EVENT_RUN_END } = Mocha.Runner.constants;

class SummaryReporter extends Spec {
  constructor(runner, options) {
    super(runner, options);
    runner.once(EVENT_RUN_END, () => {
      const { passes, failures, pending } = runner.stats;
      if (pending) process.stdout.write(`\n${pending} pending (cases a target cannot run, e.g. container output under kwok)`);
      process.stdout.write(`\n${passes} passed, ${failures} failed\n`);
    });
  }
}

module.exports = SummaryReporter;
