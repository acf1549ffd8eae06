#!/usr/bin/env node
// The README's test command (`npm test`): every suite, in two lanes run side by side.
//
// The main lane runs the suites in mocha's order. Beside it, the waiting lane runs the suites that
// spend their time waiting on clocks (hold-downs, leases, backoffs) with little CPU and touch
// neither the host's Docker engine, the machine lab nor Kubernetes — so they cost the main lane
// almost nothing and the whole run is shorter by their length. Its output follows the main lane's,
// then one closing line sums both: "N passed, N failed" (the line CI reads).
//
// With arguments (`npm test -- <files or mocha options>`) it is plain mocha.
import { spawn } from 'node:child_process';

const SUITES = ['test/unit/**/*.test.ts', 'test/integration/**/*.test.ts', 'test/security/**/*.test.ts', 'test/contract/**/*.test.ts', 'test/e2e/**/*.test.ts'];

/** Suites that mostly wait (measured: CPU time a fraction of their wall time) and share nothing with the main lane. */
const WAITING = [
  // wall / CPU seconds measured alone on a busy machine (load 10-25)
  'test/integration/agent/executable.test.ts', //  168 / 29
  'test/integration/swarms/reactions-crash.test.ts', // 130 / 31
  'test/integration/notifications/crash.test.ts', // 109 / 17
  'test/integration/alerts/alerts.test.ts', // 95 / 15
  'test/integration/alerts/rules.test.ts', // 62 / 7
  'test/integration/nodes/agent-return.test.ts', // 61 / 6
  'test/integration/ha/operations-take-over.test.ts', // 50 / 8
  'test/integration/ha/two-control-planes.test.ts', // 36 / 9
  'test/integration/alerts/outbox.test.ts', // 31 / 5
  'test/integration/ha/ssh-job-take-over.test.ts', // 29 / 6
  'test/integration/core/leadership.test.ts', // 28 / 4
];

const mocha = (args, stdio) => spawn(process.execPath, ['node_modules/mocha/bin/mocha.js', ...args], { stdio, env: process.env });
/** A child's exit status, once its output streams are drained too ('close', not 'exit'). */
const statusOf = (child) => new Promise((resolve) => child.on('close', (code, signal) => resolve(code ?? (signal ? 1 : 0))));

if (process.argv.length > 2) process.exit(await statusOf(mocha(process.argv.slice(2), 'inherit')));

/** The counts of a lane's closing line "N passed, N failed", or null when it printed none (it died). */
function countsOf(output) {
  const lines = output.trimEnd().split('\n');
  const match = /^(\d+) passed, (\d+) failed$/.exec(lines.at(-1) ?? '');
  return match ? { passed: Number(match[1]), failed: Number(match[2]) } : null;
}

// The waiting lane's output is kept (stdout and stderr apart: its closing line is read from stdout)
// and printed once the main lane is done.
const waiting = mocha(WAITING, ['ignore', 'pipe', 'pipe']);
const waitingOut = { stdout: '', stderr: '' };
waiting.stdout.setEncoding('utf8').on('data', (chunk) => (waitingOut.stdout += chunk));
waiting.stderr.setEncoding('utf8').on('data', (chunk) => (waitingOut.stderr += chunk));
const waitingDone = statusOf(waiting);

let mainTail = '';
const main = mocha([...SUITES, ...WAITING.flatMap((file) => ['--ignore', file])], ['ignore', 'pipe', 'inherit']);
main.stdout.setEncoding('utf8').on('data', (chunk) => {
  process.stdout.write(chunk);
  mainTail = (mainTail + chunk).slice(-4096);
});
const mainStatus = await statusOf(main);

const waitingStatus = await waitingDone;
process.stdout.write(`\n=== the waiting lane (run beside the suites above: ${WAITING.join(', ')}) ===\n${waitingOut.stdout}`);
if (waitingOut.stderr) process.stdout.write(`--- its standard error ---\n${waitingOut.stderr}`);

const counts = [countsOf(mainTail), countsOf(waitingOut.stdout)];
const passed = counts.reduce((sum, c) => sum + (c?.passed ?? 0), 0);
// A lane that printed no closing line died: count it as one failure so the sum cannot read as green.
const failed = counts.reduce((sum, c) => sum + (c ? c.failed : 1), 0);
process.stdout.write(`\nboth lanes: ${passed} passed, ${failed} failed\n${passed} passed, ${failed} failed\n`);
process.exit(mainStatus || waitingStatus || (failed ? 1 : 0));
