/**
 * A process that starts a one-machine lab and then dies, for lab.test.ts's cleanup checks:
 *
 *   tsx test/e2e/lab/crash-fixture.ts <lab name> <subnet> throw|exit|wait
 *
 * Prints "started <container>" once the machine is up; then throws an uncaught error, calls
 * process.exit(3), or waits for a signal.
 */
import { Lab } from './lab.js';

const [name, subnet, how] = process.argv.slice(2);
const lab = new Lab({ name, subnet, log: () => undefined });
const [machine] = await lab.start({ machines: 1 });
console.log(`started ${machine.container}`);
if (how === 'throw') {
  setTimeout(() => {
    throw new Error('crash-fixture: an uncaught error');
  }, 10);
} else if (how === 'exit') {
  process.exit(3);
} else {
  setInterval(() => undefined, 60_000);
}
