import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import workerThreads from 'node:worker_threads';

// Set up for every unit test file (vitest.config.ts): a unit test that starts a process or a worker
// fails here, naming the rule, instead of quietly making the unit suite slow and machine-dependent.
const refuse = (what: string) => (): never => {
  throw new Error(`${what}: unit tests spawn nothing; move this test to test/integration (mirror its path)`);
};

const mutable = childProcess as unknown as Record<string, unknown>;
for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
  mutable[name] = refuse(`child_process.${name}`);
}
(workerThreads as unknown as Record<string, unknown>).Worker = class {
  constructor() {
    refuse('new Worker')();
  }
};
syncBuiltinESMExports();
