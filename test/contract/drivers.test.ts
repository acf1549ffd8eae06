import { orchestratorContract } from './orchestrator.contract.js';
import { TARGETS } from './targets.js';

// The same cases against every orchestrator driver (test/contract/targets.ts).
for (const target of TARGETS) orchestratorContract(target());
