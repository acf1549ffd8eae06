/**
 * The `hangar` command. `hangar serve` with only its own options, as a service manager runs it, starts
 * without yargs (loading it and rendering the help text yargs keeps for a running command were a
 * sixth of start-up); anything else, and a serve command line that does not parse, goes through the
 * yargs program (cli/program.ts), which also explains what is wrong with it.
 */
const argv = process.argv.slice(2);
const serve = argv[0] === 'serve' ? await import('./serve.js') : undefined;
const serveArgs = serve?.parseServeArgs(argv.slice(1));
if (serve && serveArgs) await serve.serve(serveArgs);
else await (await import('./program.js')).runCli(argv);
